// SampleSource: windows, shuffle determinism and coverage, blend proportions,
// format detection and bad-input messages.
#include <set>

#include "data_test_util.h"
#include "engine/data/megatron_format.h"
#include "engine/data/sample_source.h"

using namespace trainer::engine;
using namespace trainer::engine::data;
using data_test::require_input_error;
using data_test::write_file;

namespace {

// A shard whose token at stream position p is (base + p) % 65536.
void write_counting_shard(const std::string& path, int n, int base) {
  std::vector<uint16_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<uint16_t>((base + i) % 65536);
  write_file(path, data_test::llmc_bytes(t));
}

void write_constant_shard(const std::string& path, int n, uint16_t value) {
  write_file(path, data_test::llmc_bytes(std::vector<uint16_t>(n, value)));
}

}  // namespace

TEST_CASE("samples are seq_len+1 windows at stride seq_len, in file order", "[cpu]") {
  data_test::TempDir dir;
  write_counting_shard(dir / "a_000001.bin", 41, 500);  // 41 tokens: (41-1)/8 = 5 samples, sorts second
  write_counting_shard(dir / "a_000000.bin", 20, 0);    // (20-1)/8 = 2 samples
  auto src = SampleSource::open({{dir / "a_*.bin", 1.0}}, DataFormat::auto_, 8, 1000, 1, false);
  REQUIRE(src->samples_per_epoch() == 7);
  std::vector<int32_t> out(9);
  for (int64_t i = 0; i < 14; ++i) {  // two epochs
    src->get(i, out.data());
    const int64_t k = i % 7;
    const int base = k < 2 ? int(k) * 8 : 500 + int(k - 2) * 8;
    for (int j = 0; j < 9; ++j) REQUIRE(out[j] == base + j);
  }
  CHECK(src->describe().find("2 file(s) (llmc)") != std::string::npos);
}

TEST_CASE("shuffle: deterministic, each epoch a permutation, new order per epoch", "[cpu]") {
  data_test::TempDir dir;
  write_counting_shard(dir / "s.bin", 4 * 997 + 1, 0);  // sample k = tokens 4k .. 4k+4
  auto a = SampleSource::open({{dir / "s.bin", 1.0}}, DataFormat::llmc, 4, 65536, 42, true);
  auto b = SampleSource::open({{dir / "s.bin", 1.0}}, DataFormat::llmc, 4, 65536, 42, true);
  auto c = SampleSource::open({{dir / "s.bin", 1.0}}, DataFormat::llmc, 4, 65536, 43, true);
  const int64_t n = a->samples_per_epoch();
  REQUIRE(n == 997);
  std::vector<int32_t> out(5), other(5);
  std::vector<int64_t> first_epoch(n);
  int in_place = 0, differ_seed = 0, differ_epoch = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t g = epoch * n + i;
      a->get(g, out.data());
      b->get(g, other.data());
      REQUIRE(out == other);
      const int64_t k = out[0] / 4;
      for (int j = 0; j < 5; ++j) REQUIRE(out[j] == 4 * k + j);
      seen.insert(k);
      c->get(g, other.data());
      differ_seed += other[0] != out[0];
      if (epoch == 0) {
        first_epoch[i] = k;
        in_place += k == i;
      } else {
        differ_epoch += first_epoch[i] != k;
      }
    }
    REQUIRE(seen.size() == size_t(n));  // every sample exactly once per epoch
  }
  CHECK(in_place < 20);
  CHECK(differ_seed > 1900);
  CHECK(differ_epoch > 950);
}

TEST_CASE("shuffle covers an epoch exactly once, split across ranks", "[cpu]") {
  data_test::TempDir dir;
  // Sample k of this shard starts with token k (seq_len 1: tokens 0..N).
  write_counting_shard(dir / "u.bin", 601, 0);
  auto src = SampleSource::open({{dir / "u.bin", 1.0}}, DataFormat::auto_, 1, 1000, 9, true);
  REQUIRE(src->samples_per_epoch() == 600);
  // Four "ranks" each take a quarter of every global batch of 20.
  std::vector<int> hits(600, 0);
  int32_t out[2];
  for (int rank = 0; rank < 4; ++rank)
    for (int64_t step = 0; step < 30; ++step)
      for (int j = 0; j < 5; ++j) {
        src->get(step * 20 + rank * 5 + j, out);
        hits[out[0]]++;
      }
  for (int h : hits) REQUIRE(h == 1);
}

TEST_CASE("blend: Megatron-style proportions, deterministic", "[cpu]") {
  data_test::TempDir dir;
  write_constant_shard(dir / "a.bin", 4 * 300 + 1, 1);   // 300 samples of 1s
  write_constant_shard(dir / "b.bin", 4 * 2000 + 1, 2);  // 2000 samples of 2s
  std::vector<DataSource> blend = {{dir / "a.bin", 0.7}, {dir / "b.bin", 0.3}};
  auto src = SampleSource::open(blend, DataFormat::auto_, 4, 1000, 3, true);
  REQUIRE(src->samples_per_epoch() == 2300);
  int32_t out[5];
  int64_t count_a = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    src->get(i, out);
    REQUIRE((out[0] == 1 || out[0] == 2));
    count_a += out[0] == 1;
    // The greedy interleave keeps every prefix within a sample or two of its share.
    if (i >= 100 && i % 97 == 0) REQUIRE(std::abs(double(count_a) - 0.7 * double(i + 1)) <= 2.0);
  }
  CHECK(std::abs(double(count_a) / 10000 - 0.7) < 0.005);
  CHECK(src->describe().find("blend") != std::string::npos);
}

TEST_CASE("blend: an oversampled source repeats only after all its samples", "[cpu]") {
  data_test::TempDir dir;
  write_counting_shard(dir / "a.bin", 50 + 1, 0);          // 50 samples (seq_len 1), token = index
  write_constant_shard(dir / "b.bin", 1000 + 1, 999);      // 1000 samples
  auto src = SampleSource::open({{dir / "a.bin", 0.6}, {dir / "b.bin", 0.4}}, DataFormat::auto_, 1, 1000, 5, true);
  std::vector<int> hits(50, 0);
  int32_t out[2];
  int drawn = 0;
  for (int64_t i = 0; drawn < 150; ++i) {
    src->get(i, out);
    if (out[0] == 999) continue;
    hits[out[0]]++;
    ++drawn;
    if (drawn % 50 == 0)
      for (int h : hits) REQUIRE(h == drawn / 50);
  }
}

TEST_CASE("Megatron datasets by prefix, .idx or glob; token check on draw", "[cpu]") {
  data_test::TempDir dir;
  {
    MegatronWriter w(dir / "m", TokenType::u16);
    std::vector<int32_t> d1 = {1, 2, 3, 4, 5}, d2 = {6, 7, 8, 9, 700};
    w.add_document(d1.data(), d1.size());
    w.add_document(d2.data(), d2.size());
    w.finish();
    w.commit();
  }
  for (const std::string& path : {dir / "m", dir / "m.idx", dir / "m.bin", dir / "m.*"}) {
    auto src = SampleSource::open({{path, 1.0}}, DataFormat::auto_, 3, 1000, 0, false);
    REQUIRE(src->samples_per_epoch() == 3);  // 10 tokens: (10-1)/3
    int32_t out[4];
    src->get(1, out);
    CHECK(std::vector<int32_t>(out, out + 4) == std::vector<int32_t>{4, 5, 6, 7});
    CHECK(src->describe().find("megatron") != std::string::npos);
  }
  auto src = SampleSource::open({{dir / "m", 1.0}}, DataFormat::megatron, 3, 500, 0, false);
  int32_t out[4];
  src->get(1, out);
  require_input_error([&] { src->get(2, out); }, {"m.bin", "byte offset 18", "token id 700", "vocab_size 500"});
}

TEST_CASE("SampleSource bad inputs", "[cpu]") {
  data_test::TempDir dir;
  write_counting_shard(dir / "ok.bin", 100, 0);
  {
    MegatronWriter w(dir / "meg", TokenType::u16);
    std::vector<int32_t> d = {1, 2, 3, 4, 5, 6};
    w.add_document(d.data(), d.size());
    w.finish();
    w.commit();
  }
  auto open = [&](const std::string& path, DataFormat f) {
    SampleSource::open({{path, 1.0}}, f, 4, 1000, 0, true);
  };
  require_input_error([&] { open(dir / "none_*.bin", DataFormat::auto_); }, {"none_*.bin", "no file matches"});
  require_input_error([&] { open(dir / "absent.bin", DataFormat::auto_); }, {"absent.bin", "no such file"});
  require_input_error([&] { open(dir / "ok.bin", DataFormat::megatron); }, {"ok.bin", "data.format is megatron", "llm.c shard"});
  require_input_error([&] { open(dir / "meg", DataFormat::llmc); }, {"meg", "data.format is llmc", "Megatron"});
  write_file(dir / "junk.bin", std::string(2000, 'x'));
  require_input_error([&] { open(dir / "junk.bin", DataFormat::auto_); }, {"junk.bin", "byte offset 0", "unknown data format"});
  require_input_error([&] { open(dir / "junk.bin", DataFormat::llmc); }, {"junk.bin", "byte offset 0", "20240520"});
  write_file(dir / "empty.bin", "");
  require_input_error([&] { open(dir / "empty.bin", DataFormat::auto_); }, {"empty.bin", "unknown data format"});
  write_counting_shard(dir / "tiny.bin", 4, 0);
  require_input_error([&] { open(dir / "tiny.bin", DataFormat::auto_); }, {"tiny.bin", "4 tokens", "seq_len+1 = 5"});
  std::string trunc = data_test::llmc_bytes({1, 2, 3, 4, 5, 6});
  trunc.resize(trunc.size() - 2);
  write_file(dir / "trunc.bin", trunc);
  require_input_error([&] { open(dir / "trunc.bin", DataFormat::auto_); }, {"trunc.bin", "truncated"});
}

TEST_CASE("split: Megatron's rounding of the parts' bounds", "[cpu]") {
  // [949, 50, 1] of 1000: 949 | 50 | 1; of 7: 6.643 -> 7, 0.35 -> 0, 0.007 -> 0
  // (nothing held out: the parts' own checks refuse an empty one).
  CHECK(split_bounds(1000, {949, 50, 1}) == std::vector<int64_t>{0, 949, 999, 1000});
  CHECK(split_bounds(7, {949, 50, 1}) == std::vector<int64_t>{0, 7, 7, 7});
  CHECK(split_bounds(10, {0.8, 0.2}) == std::vector<int64_t>{0, 8, 10});
  // 2.5 rounds half to even (Python's round) twice: ends 2, 4, then the one
  // short added back to every end.
  CHECK(split_bounds(5, {1, 1}) == std::vector<int64_t>{0, 3, 5});
}

TEST_CASE("split: the parts partition each source's samples in order, shuffled within", "[cpu]") {
  data_test::TempDir dir;
  write_counting_shard(dir / "s_000000.bin", 4 * 60 + 1, 0);        // samples 0..59: tokens 4k..
  write_counting_shard(dir / "s_000001.bin", 4 * 40 + 1, 20000);    // samples 60..99
  const std::vector<DataSource> src = {{dir / "s_*.bin", 1.0}};
  auto whole = SampleSource::open(src, DataFormat::llmc, 4, 65536, 5, false);
  auto train = SampleSource::open(src, DataFormat::llmc, 4, 65536, 5, true, {{90, 8, 2}, 0});
  auto val = SampleSource::open(src, DataFormat::llmc, 4, 65536, 5, false, {{90, 8, 2}, 1});
  auto test = SampleSource::open(src, DataFormat::llmc, 4, 65536, 5, false, {{90, 8, 2}, 2});
  REQUIRE(whole->samples_per_epoch() == 100);
  CHECK(train->samples_per_epoch() == 90);
  CHECK(val->samples_per_epoch() == 8);
  CHECK(test->samples_per_epoch() == 2);
  CHECK(val->describe().find("validation part of data.split: samples [90, 98) of 100") != std::string::npos);
  auto first_token = [](const SampleSource& s, int64_t i) {
    std::vector<int32_t> out(5);
    s.get(i, out.data());
    return out[0];
  };
  std::vector<int32_t> order;
  for (int64_t i = 0; i < 100; ++i) order.push_back(first_token(*whole, i));
  // Validation and test: the whole source's samples 90..97 and 98..99, in order.
  for (int64_t i = 0; i < 8; ++i) CHECK(first_token(*val, i) == order[90 + i]);
  for (int64_t i = 0; i < 2; ++i) CHECK(first_token(*test, i) == order[98 + i]);
  // Training: samples 0..89 exactly once per epoch (shuffled), never a held-out one.
  std::multiset<int32_t> seen, want(order.begin(), order.begin() + 90);
  for (int64_t i = 0; i < 90; ++i) seen.insert(first_token(*train, i));
  CHECK(seen == want);
  bool shuffled = false;
  for (int64_t i = 0; i < 90; ++i) shuffled |= first_token(*train, i) != order[i];
  CHECK(shuffled);
}

TEST_CASE("split: each blended source is split on its own", "[cpu]") {
  // (Sources of equal weight are one pooled corpus, split as one.)
  data_test::TempDir dir;
  write_constant_shard(dir / "a.bin", 4 * 100 + 1, 1);
  write_counting_shard(dir / "b.bin", 4 * 300 + 1, 0);
  const std::vector<DataSource> blend = {{dir / "a.bin", 0.6}, {dir / "b.bin", 0.4}};
  auto val = SampleSource::open(blend, DataFormat::llmc, 4, 65536, 5, false, {{80, 20}, 1});
  CHECK(val->samples_per_epoch() == 20 + 60);  // a's last 20 samples, b's last 60
  std::vector<int32_t> out(5);
  for (int64_t i = 0; i < val->samples_per_epoch(); ++i) {
    val->get(i, out.data());
    if (out[0] != 1) CHECK(out[0] >= 4 * 240);  // b's samples 240..299
  }
  // A part with no sample is refused, naming the source.
  require_input_error([&] { SampleSource::open({{dir / "a.bin", 1.0}}, DataFormat::llmc, 4, 65536, 5, false,
                                               {{999, 1}, 1}); },
                      {"a.bin", "data.split gives its validation part none of its 100 samples"});
}
