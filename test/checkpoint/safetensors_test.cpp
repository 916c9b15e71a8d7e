// Safetensors writer/reader and the strict JSON parser: round trip, the exact
// byte layout against a hand-built encoding, dtype conversion, damage detection.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/json.h"
#include "kernels/error.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ckpt_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("safetensors: byte layout matches an independent encoding", "[cpu][checkpoint]") {
  fs::path d = fresh_dir("layout");
  std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};  // (2, 3)
  std::vector<uint16_t> b = {0x3F80, 0xC000, 0x7F80};               // (3) bf16
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.add_f32("a.weight", {2, 3}, a.data());
  w.add("b", "BF16", {3}, b.data(), 6);
  FileDigest dg = w.write((d / "x.safetensors").string());

  // Hand-built: 8-byte LE header length, space-padded header, raw LE data.
  std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]}}";
  while (header.size() % 8) header += ' ';
  std::string expect(8, '\0');
  for (int i = 0; i < 8; ++i) expect[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  expect += header;
  expect.append(reinterpret_cast<const char*>(a.data()), 24);
  for (uint16_t v : b) {
    expect += static_cast<char>(v & 0xff);
    expect += static_cast<char>(v >> 8);
  }
  std::string got = slurp(d / "x.safetensors");
  REQUIRE(got.size() == expect.size());
  CHECK(got == expect);
  CHECK(dg.bytes == expect.size());
  CHECK(dg.xxh3 == xxh3(expect.data(), expect.size()));
  CHECK(digest_file((d / "x.safetensors").string()).xxh3 == dg.xxh3);
  fs::remove_all(d);
}

TEST_CASE("safetensors: round trip and dtype conversion", "[cpu][checkpoint]") {
  fs::path d = fresh_dir("roundtrip");
  std::vector<float> a(35);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.37f * static_cast<float>(i) - 3.0f;
  // bf16 is the top half of an f32; f16 values chosen with known exact values.
  std::vector<uint16_t> bf = {0x3F80, 0xC000, 0x4049};  // 1, -2, 3.140625
  std::vector<uint16_t> hf = {0x3C00, 0x0001, 0x7BFF, 0xC400, 0x3555};  // 1, 2^-24, 65504, -4, 0.333251953125
  SafetensorsWriter w;
  w.add_f32("a", {5, 7}, a.data());
  w.add("bf", "BF16", {3}, bf.data(), 6);
  w.add("hf", "F16", {5}, hf.data(), 10);
  w.add_lazy("lazy", "F32", {2}, [](void* dst) {
    float v[2] = {4.5f, -1.0f};
    std::memcpy(dst, v, 8);
  });
  w.set_metadata("k", "v \"quoted\"");
  w.write((d / "y.safetensors").string());

  SafetensorsFile f((d / "y.safetensors").string());
  CHECK(f.metadata().at("k") == "v \"quoted\"");
  CHECK(f.tensor("a").shape == std::vector<int64_t>{5, 7});
  CHECK(f.read_f32("a") == a);
  CHECK(f.read_f32("bf") == std::vector<float>{1.0f, -2.0f, 3.140625f});
  CHECK(f.read_f32("hf") == std::vector<float>{1.0f, 0x1p-24f, 65504.0f, -4.0f, 0.333251953125f});
  CHECK(f.read_f32("lazy") == std::vector<float>{4.5f, -1.0f});
  CHECK_THROWS_AS(f.tensor("missing"), InputError);
  fs::remove_all(d);
}

TEST_CASE("safetensors: truncation and a bad header are refused naming the file",
          "[cpu][checkpoint]") {
  fs::path d = fresh_dir("damage");
  std::vector<float> a(16, 1.0f);
  SafetensorsWriter w;
  w.add_f32("a", {16}, a.data());
  std::string path = (d / "z.safetensors").string();
  w.write(path);
  std::string good = slurp(path);

  spit(path, good.substr(0, good.size() - 4));
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("truncated"));
  spit(path, good.substr(0, 5));
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("truncated"));
  std::string bad = good;
  bad[8] = '[';  // the header is no longer an object
  spit(path, bad);
  CHECK_THROWS_WITH(SafetensorsFile(path), Catch::Contains(path) && Catch::Contains("bad JSON"));
  fs::remove_all(d);
}

TEST_CASE("json: strict parse, escapes and errors with offsets", "[cpu][checkpoint]") {
  Json j = parse_json(R"({"a": [1, -2.5e3, true, null], "s": "x\"\u00e9\ud83d\ude00\n", "o": {}})", "t");
  CHECK(j.at("a").items()[1].as_number() == -2500.0);
  CHECK(j.at("a").items()[2].as_bool());
  CHECK(j.at("s").as_string() == "x\"\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(parse_json(j.dump(), "t").dump() == j.dump());
  CHECK(parse_json(j.dump(2), "t").dump() == j.dump());
  // Whole numbers print as integers, unless written as reals (Python floats).
  CHECK(Json(4.0).dump() == "4");
  CHECK(Json::real(4.0).dump() == "4.0");
  CHECK(Json::real(-0.0).dump() == "0.0");
  CHECK(Json::real(2.5).dump() == "2.5");
  CHECK(parse_json(Json::real(500000.0).dump(), "t").as_number() == 500000.0);
  for (const char* bad : {"{", "{\"a\":1,}", "[1 2]", "01", "\"\\x\"", "{\"a\":1}x", "{\"a\":1,\"a\":2}",
                          "tru", "\"\\ud800\"", "1."}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_json(bad, "f.json"), Catch::StartsWith("f.json: bad JSON at byte"));
  }
}
