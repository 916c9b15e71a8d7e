// llm.c shard and Megatron indexed dataset round trips, byte layouts checked
// against layouts written independently here, and every malformed-file case.
#include <cstring>

#include "data_test_util.h"
#include "engine/data/llmc_format.h"
#include "engine/data/megatron_format.h"

using namespace trainer::engine::data;
using data_test::append_le;
using data_test::read_file;
using data_test::require_input_error;
using data_test::write_file;

TEST_CASE("llm.c shard round trip", "[cpu]") {
  data_test::TempDir dir;
  const std::string path = dir / "s_000000.bin";
  std::vector<int32_t> ids = {50256, 0, 1, 65535, 42, 7};
  {
    LlmcShardWriter w(path);
    w.append(ids.data(), 2);
    w.append(ids.data() + 2, ids.size() - 2);
    w.finish();
    CHECK_FALSE(std::filesystem::exists(path));  // not visible before commit
    w.commit();
  }
  CHECK(read_file(path) == data_test::llmc_bytes({50256, 0, 1, 65535, 42, 7}));
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  MappedFile f(path);
  TokenStream s = open_llmc_shard(f);
  REQUIRE(s.num_tokens == 6);
  std::vector<int32_t> back(6);
  read_tokens(s, 0, 6, 65536, back.data());
  CHECK(back == ids);
}

TEST_CASE("llm.c writer without commit leaves nothing", "[cpu]") {
  data_test::TempDir dir;
  {
    LlmcShardWriter w(dir / "x.bin");
    int32_t t = 3;
    w.append(&t, 1);
  }
  CHECK(std::filesystem::is_empty(dir.path));
  LlmcShardWriter w(dir / "y.bin");
  int32_t big = 70000;
  require_input_error([&] { w.append(&big, 1); }, {"y.bin", "70000", "uint16"});
}

TEST_CASE("llm.c malformed shards", "[cpu]") {
  data_test::TempDir dir;
  auto open = [](const std::string& p) {
    MappedFile f(p);
    open_llmc_shard(f);
  };
  write_file(dir / "magic.bin", data_test::llmc_bytes({1, 2}, 12345));
  require_input_error([&] { open(dir / "magic.bin"); }, {"magic.bin", "byte offset 0", "20240520", "12345"});
  write_file(dir / "version.bin", data_test::llmc_bytes({1, 2}, 20240520, 2));
  require_input_error([&] { open(dir / "version.bin"); }, {"version.bin", "byte offset 4", "version"});
  std::string truncated = data_test::llmc_bytes({1, 2, 3, 4});
  truncated.resize(truncated.size() - 3);
  write_file(dir / "trunc.bin", truncated);
  require_input_error([&] { open(dir / "trunc.bin"); }, {"trunc.bin", "1029", "byte offset 8", "1032", "truncated"});
  write_file(dir / "long.bin", data_test::llmc_bytes({1, 2, 3}, 20240520, 1, 2));
  require_input_error([&] { open(dir / "long.bin"); }, {"long.bin", "1030", "token count 2", "1028"});
  write_file(dir / "short.bin", "abc");
  require_input_error([&] { open(dir / "short.bin"); }, {"short.bin", "3 bytes", "1024-byte header"});
  require_input_error([&] { MappedFile f(dir / "absent.bin"); }, {"absent.bin", "cannot open"});
}

namespace {

// PREFIX.idx exactly as Megatron-LM's IndexedDatasetBuilder writes it, built by hand.
std::string megatron_idx_bytes(uint8_t code, const std::vector<int32_t>& lengths, int item) {
  std::string out("MMIDIDX\0\0", 9);
  append_le<uint64_t>(out, 1);
  out.push_back(static_cast<char>(code));
  append_le<uint64_t>(out, lengths.size());
  append_le<uint64_t>(out, lengths.size() + 1);
  for (int32_t len : lengths) append_le<int32_t>(out, len);
  int64_t ptr = 0;
  for (int32_t len : lengths) {
    append_le<int64_t>(out, ptr);
    ptr += int64_t(len) * item;
  }
  for (size_t d = 0; d <= lengths.size(); ++d) append_le<int64_t>(out, static_cast<int64_t>(d));
  return out;
}

}  // namespace

TEST_CASE("Megatron .idx/.bin round trip, uint16 and int32", "[cpu]") {
  data_test::TempDir dir;
  const std::vector<std::vector<int32_t>> docs = {{5, 6, 7}, {50256}, {1, 2, 3, 4, 65535}};
  for (TokenType type : {TokenType::u16, TokenType::i32}) {
    const int item = type == TokenType::u16 ? 2 : 4;
    const std::string prefix = dir / (type == TokenType::u16 ? "m16" : "m32");
    {
      MegatronWriter w(prefix, type);
      for (const auto& d : docs) w.add_document(d.data(), d.size());
      w.finish();
      CHECK_FALSE(std::filesystem::exists(prefix + ".idx"));
      w.commit();
    }
    CHECK(read_file(prefix + ".idx") == megatron_idx_bytes(type == TokenType::u16 ? 8 : 4, {3, 1, 5}, item));
    std::string bin;
    for (const auto& d : docs)
      for (int32_t t : d) {
        if (item == 2) append_le<uint16_t>(bin, static_cast<uint16_t>(t));
        else append_le<int32_t>(bin, t);
      }
    CHECK(read_file(prefix + ".bin") == bin);
    MappedFile idx(prefix + ".idx"), b(prefix + ".bin");
    MegatronIndex index;
    TokenStream s = open_megatron(idx, b, &index);
    CHECK(index.type == type);
    CHECK(index.num_sequences == 3);
    CHECK(index.num_documents == 3);
    CHECK(index.sequence_lengths == std::vector<int32_t>{3, 1, 5});
    CHECK(index.document_index == std::vector<int64_t>{0, 1, 2, 3});
    REQUIRE(s.num_tokens == 9);
    std::vector<int32_t> back(9);
    read_tokens(s, 0, 9, 65536, back.data());
    CHECK(back == std::vector<int32_t>{5, 6, 7, 50256, 1, 2, 3, 4, 65535});
  }
  CHECK(megatron_type_for_vocab(50257) == TokenType::u16);
  CHECK(megatron_type_for_vocab(65500) == TokenType::i32);
}

TEST_CASE("Megatron malformed datasets", "[cpu]") {
  data_test::TempDir dir;
  auto open = [&](const std::string& name) {
    MappedFile idx(dir / (name + ".idx")), bin(dir / (name + ".bin"));
    MegatronIndex index;
    open_megatron(idx, bin, &index);
  };
  const std::string good = megatron_idx_bytes(8, {2, 3}, 2);
  const std::string bin(10, '\0');
  auto make = [&](const std::string& name, std::string idx, std::string b) {
    write_file(dir / (name + ".idx"), idx);
    write_file(dir / (name + ".bin"), b);
  };
  std::string magic = good;
  magic[0] = 'X';
  make("magic", magic, bin);
  require_input_error([&] { open("magic"); }, {"magic.idx", "byte offset 0", "MMIDIDX"});
  std::string version = good;
  version[9] = 2;
  make("version", version, bin);
  require_input_error([&] { open("version"); }, {"version.idx", "byte offset 9", "version 1"});
  std::string dtype = good;
  dtype[17] = 6;
  make("dtype", dtype, bin);
  require_input_error([&] { open("dtype"); }, {"dtype.idx", "byte offset 17", "dtype code 6"});
  make("trunc", good.substr(0, good.size() - 5), bin);
  require_input_error([&] { open("trunc"); }, {"trunc.idx", "truncated", std::to_string(good.size() - 5)});
  make("binsize", good, std::string(8, '\0'));
  require_input_error([&] { open("binsize"); }, {"binsize.bin", "size 8", "binsize.idx", "10 bytes", "truncated"});
  std::string pointer = good;
  int64_t wrong = 6;
  std::memcpy(pointer.data() + 34 + 8 + 8, &wrong, 8);  // second sequence pointer
  make("pointer", pointer, bin);
  require_input_error([&] { open("pointer"); }, {"pointer.idx", "byte offset 50", "expected 4"});
  std::string docs = good;
  int64_t bad_doc = 5;
  std::memcpy(docs.data() + docs.size() - 8, &bad_doc, 8);
  make("docs", docs, bin);
  require_input_error([&] { open("docs"); }, {"docs.idx", "byte offset " + std::to_string(good.size() - 8)});
}

TEST_CASE("token ids beyond the vocabulary name file and byte offset", "[cpu]") {
  data_test::TempDir dir;
  write_file(dir / "v.bin", data_test::llmc_bytes({1, 2, 3, 900, 4}));
  MappedFile f(dir / "v.bin");
  TokenStream s = open_llmc_shard(f);
  std::vector<int32_t> out(5);
  read_tokens(s, 0, 3, 500, out.data());  // the bad id is outside this range
  require_input_error([&] { read_tokens(s, 1, 4, 500, out.data()); },
                      {"v.bin", "byte offset 1030", "token id 900", "vocab_size 500"});
}
