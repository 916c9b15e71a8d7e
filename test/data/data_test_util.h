// Helpers for the data tests: scratch directories, fixture paths, files, and
// an InputError check on the message.
#pragma once

#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/data/tokenizer.h"
#include "kernels/error.h"

namespace data_test {

inline std::string fixture(const std::string& name) {
  return std::string(TRAINER_SOURCE_DIR) + "/test/data/fixtures/" + name;
}

inline const trainer::engine::data::Tokenizer& tiny_tokenizer() {
  static auto tok = trainer::engine::data::Tokenizer::load(fixture("tiny_vocab.json"), fixture("tiny_merges.txt"));
  return tok;
}

// A fresh directory under the build tree, removed with the object.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::path(TRAINER_BINARY_DIR) / "test_data_tmp" /
           (std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class T>
void append_le(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// An llm.c shard laid out by hand (independent of the writer under test).
inline std::string llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = 20240520, int32_t version = 1,
                              int64_t count = -1) {
  std::string out;
  int32_t header[256] = {magic, version, static_cast<int32_t>(count < 0 ? tokens.size() : count)};
  out.append(reinterpret_cast<const char*>(header), sizeof(header));
  for (uint16_t t : tokens) append_le(out, t);
  return out;
}

// The numbers of a fixture field written "1 22 333" (ids, offsets).
template <class T = int32_t>
std::vector<T> parse_numbers(const std::string& s) {
  std::vector<T> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t sp = s.find(' ', pos);
    if (sp == std::string::npos) sp = s.size();
    out.push_back(static_cast<T>(std::stoll(s.substr(pos, sp - pos))));
    pos = sp + 1;
  }
  return out;
}

// Runs f and checks it throws InputError whose message contains every part.
template <class F>
void require_input_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("expected an InputError containing '" << parts.front() << "'");
  } catch (const trainer::InputError& e) {
    std::string msg = e.what();
    INFO("message: " << msg);
    for (const auto& p : parts) CHECK(msg.find(p) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);  // one line
  }
}

}  // namespace data_test
