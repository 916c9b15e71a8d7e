// `trainer tokenize` end to end: outputs equal the tokenizer's ids with the
// format's document separators, independent of threads and chunking; bad
// inputs leave nothing behind; the CLI exits 2 on bad input.
#include <fmt/format.h>

#include <cstdlib>
#include <random>

#include "data_test_util.h"
#include "engine/data/llmc_format.h"
#include "engine/data/megatron_format.h"
#include "engine/data/tokenize_corpus.h"

using namespace trainer::engine::data;
using data_test::require_input_error;
using data_test::tiny_tokenizer;
using data_test::write_file;

namespace {

std::vector<int32_t> llmc_tokens(const std::string& path) {
  MappedFile f(path);
  TokenStream s = open_llmc_shard(f);
  std::vector<int32_t> out(s.num_tokens);
  if (s.num_tokens) read_tokens(s, 0, static_cast<int>(s.num_tokens), 1 << 30, out.data());
  return out;
}

std::string random_text(std::mt19937& rng, size_t bytes) {
  static const char* words[] = {"the", "world", "hello", "aaaa", "ab", "x", "don't", "\xC3\xA9t\xC3\xA9", "42"};
  std::string s;
  while (s.size() < bytes) {
    s += words[rng() % 9];
    s += " \n  \t"[rng() % 5 == 0 ? 1 + rng() % 3 : 0];
  }
  return s;
}

}  // namespace

TEST_CASE("tokenize: llm.c shards with a validation split", "[cpu]") {
  data_test::TempDir dir;
  const Tokenizer& tok = tiny_tokenizer();
  std::vector<std::string> docs;
  std::mt19937 rng(1);
  TokenizeOptions opt;
  for (int i = 0; i < 10; ++i) {
    docs.push_back(random_text(rng, 50 + rng() % 100));
    opt.inputs.push_back(dir / ("doc" + std::to_string(i) + ".txt"));
    write_file(opt.inputs.back(), docs.back());
  }
  opt.out_prefix = dir / "out/c";
  opt.val_fraction = 0.25;  // documents 3 and 7
  opt.shard_tokens = 100;
  opt.threads = 2;
  TokenizeResult r = tokenize_corpus(opt, tok);
  CHECK(r.documents == 10);
  CHECK(r.val_documents == 2);
  std::vector<int32_t> train, val;
  for (int i = 0; i < 10; ++i) {
    auto& dst = (i == 3 || i == 7) ? val : train;
    dst.push_back(tok.eot_id());  // llm.c: <|endoftext|> before each document
    auto ids = tok.encode(docs[i]);
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  size_t files = 0;
  for (const auto& [split, expected] : {std::pair{"train", train}, std::pair{"val", val}}) {
    std::vector<int32_t> got;
    size_t shards = 0;
    for (; std::filesystem::exists(llmc_shard_name(opt.out_prefix, split, shards)); ++shards) {
      auto t = llmc_tokens(llmc_shard_name(opt.out_prefix, split, shards));
      CHECK(t.size() <= 100);
      got.insert(got.end(), t.begin(), t.end());
    }
    CHECK(shards == (expected.size() + 99) / 100);
    CHECK(got == expected);
    files += shards;
  }
  CHECK(std::filesystem::exists(dir / "out/c_val_000000.bin"));
  CHECK(r.train_tokens == int64_t(train.size()));
  CHECK(r.val_tokens == int64_t(val.size()));
  CHECK(r.files.size() == files);
  for (const auto& e : std::filesystem::directory_iterator(dir / "out"))
    CHECK(e.path().extension() == ".bin");  // no temp file left

  // A smaller re-run removes the old run's later shards.
  opt.shard_tokens = 100000;
  tokenize_corpus(opt, tok);
  CHECK(std::filesystem::exists(llmc_shard_name(opt.out_prefix, "train", 0)));
  CHECK_FALSE(std::filesystem::exists(llmc_shard_name(opt.out_prefix, "train", 1)));
}

TEST_CASE("tokenize: Megatron dataset from JSONL, directory prefix", "[cpu]") {
  data_test::TempDir dir;
  const Tokenizer& tok = tiny_tokenizer();
  write_file(dir / "in.jsonl", "{\"text\": \"hello world\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"aaaaa\\n\\u00e9\"}\n");
  TokenizeOptions opt;
  opt.inputs = {dir / "in.jsonl"};
  opt.out_prefix = dir / "meg/";
  opt.format = OutputFormat::megatron;
  opt.threads = 1;
  TokenizeResult r = tokenize_corpus(opt, tok);
  CHECK(r.documents == 2);
  MappedFile idx(dir / "meg/train.idx"), bin(dir / "meg/train.bin");
  MegatronIndex index;
  TokenStream s = open_megatron(idx, bin, &index);
  auto d1 = tok.encode("hello world"), d2 = tok.encode("aaaaa\n\xC3\xA9");
  d1.push_back(tok.eot_id());  // Megatron: <|endoftext|> after each document
  d2.push_back(tok.eot_id());
  CHECK(index.sequence_lengths == std::vector<int32_t>{int32_t(d1.size()), int32_t(d2.size())});
  std::vector<int32_t> all(s.num_tokens);
  read_tokens(s, 0, static_cast<int>(all.size()), 1000, all.data());
  d1.insert(d1.end(), d2.begin(), d2.end());
  CHECK(all == d1);
}

TEST_CASE("tokenize: output independent of threads and chunking", "[cpu]") {
  data_test::TempDir dir;
  const Tokenizer& tok = tiny_tokenizer();
  std::mt19937 rng(2);
  // One 2.5 MB document (read and cut into several work items) and a small one.
  const std::string big = random_text(rng, 2500000), small = random_text(rng, 1000);
  write_file(dir / "big.txt", big);
  write_file(dir / "small.txt", small);
  std::vector<int32_t> expected = {tok.eot_id()};
  auto ids = tok.encode(big);
  expected.insert(expected.end(), ids.begin(), ids.end());
  expected.push_back(tok.eot_id());
  ids = tok.encode(small);
  expected.insert(expected.end(), ids.begin(), ids.end());
  // 1 MiB items: a few per batch; 4 KiB items: hundreds of batches in flight
  // one after another, and a cut every few KiB.
  for (size_t item_bytes : {size_t(1) << 20, size_t(4096)})
    for (int threads : {1, 3}) {
      TokenizeOptions opt;
      opt.inputs = {dir / "big.txt", dir / "small.txt"};
      opt.out_prefix = dir / ("t" + std::to_string(threads) + "_" + std::to_string(item_bytes));
      opt.threads = threads;
      opt.item_bytes = item_bytes;
      tokenize_corpus(opt, tok);
      REQUIRE(llmc_tokens(llmc_shard_name(opt.out_prefix, "train", 0)) == expected);
    }
}

TEST_CASE("tokenize: bad inputs name the file and leave nothing behind", "[cpu]") {
  data_test::TempDir dir;
  const Tokenizer& tok = tiny_tokenizer();
  write_file(dir / "a.txt", "hello world");
  write_file(dir / "empty.txt", "");
  write_file(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"body\": \"no text\"}\n");
  write_file(dir / "broken.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  auto run = [&](std::vector<std::string> inputs, double val = 0) {
    TokenizeOptions opt;
    opt.inputs = std::move(inputs);
    opt.out_prefix = dir / "out/x";
    opt.val_fraction = val;
    tokenize_corpus(opt, tok);
  };
  require_input_error([&] { run({dir / "a.txt", dir / "empty.txt"}); }, {"empty.txt", "empty input"});
  require_input_error([&] { run({dir / "a.txt", dir / "missing.txt"}); }, {"missing.txt", "cannot read"});
  require_input_error([&] { run({dir / "bad.jsonl"}); }, {"bad.jsonl", "line 2", "byte offset 15", "\"text\""});
  require_input_error([&] { run({dir / "broken.jsonl"}); }, {"broken.jsonl", "line 2", "closing quote"});
  require_input_error([&] { run({dir / "a.txt"}, 0.5); }, {"--val-fraction", "no document"});
  std::filesystem::create_directories(dir / "folder");
  require_input_error([&] { run({dir / "folder"}); }, {"folder", "is a directory"});
  // Nothing that looks like output, and no temp files.
  CHECK(std::filesystem::is_empty(dir / "out"));
  std::string vocab = data_test::read_file(data_test::fixture("tiny_vocab.json"));
  const std::string eot = ", \"<|endoftext|>\": 272";
  REQUIRE(vocab.find(eot) != std::string::npos);
  vocab.erase(vocab.find(eot), eot.size());
  auto no_eot = Tokenizer::from_text(vocab, data_test::read_file(data_test::fixture("tiny_merges.txt")), "v.json", "m.txt");
  TokenizeOptions opt;
  opt.inputs = {dir / "a.txt"};
  opt.out_prefix = dir / "out/y";
  require_input_error([&] { tokenize_corpus(opt, no_eot); }, {"<|endoftext|>"});
}

TEST_CASE("trainer tokenize exits 2 with one line on bad input", "[cpu]") {
  const std::string bin = std::string(TRAINER_BINARY_DIR) + "/trainer";
  if (!std::filesystem::exists(bin) || std::system((bin + " tokenize --help >/dev/null 2>&1").c_str()) != 0) {
    WARN("skipped: " << bin << " (with the tokenize subcommand) is not built");
    return;
  }
  data_test::TempDir dir;
  write_file(dir / "a.txt", "hello");
  const std::string base = bin + " tokenize " + (dir / "a.txt") + " --out " + (dir / "o") + " ";
  auto status = [](const std::string& cmd) {
    int rc = std::system((cmd + " 2>/dev/null >/dev/null").c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  CHECK(status(base + "--vocab " + data_test::fixture("tiny_vocab.json") + " --merges " +
               data_test::fixture("tiny_merges.txt")) == 0);
  CHECK(std::filesystem::exists(dir / "o_train_000000.bin"));
  CHECK(status(base + "--vocab " + (dir / "nope.json") + " --merges " + data_test::fixture("tiny_merges.txt")) == 2);
  CHECK(status(base + "--vocab " + data_test::fixture("tiny_vocab.json") + " --merges " +
               data_test::fixture("tiny_vocab.json")) == 2);
  CHECK(status(base + "--format parquet --vocab x --merges y") == 2);
  // One tokenizer: --vocab with --merges, or a tokenizer.json.
  const std::string vocab = data_test::fixture("tiny_vocab.json"), merges = data_test::fixture("tiny_merges.txt");
  CHECK(status(fmt::format("{}--vocab {}", base, vocab)) == 2);
  CHECK(status(fmt::format("{}--tokenizer {}", base, dir / "nope.json")) == 2);
  CHECK(status(fmt::format("{}--tokenizer {} --vocab {} --merges {}", base, vocab, vocab, merges)) == 2);
  CHECK(status(fmt::format("{}--tokenizer {}", base, vocab)) == 2);  // not a tokenizer.json
  // Llama 2's SentencePiece-style tokenizer.json; one without byte_fallback is refused.
  const std::string spm = data_test::fixture("spm_llama2_tokenizer.json");
  CHECK(status(fmt::format("{}--tokenizer {}", base, spm)) == 0);
  const std::string json = data_test::read_file(spm), on = "\"byte_fallback\":true";
  const size_t at = json.find(on);
  REQUIRE(at != std::string::npos);
  write_file(dir / "no_fallback.json", json.substr(0, at) + "\"byte_fallback\":false" + json.substr(at + on.size()));
  CHECK(status(fmt::format("{}--tokenizer {}", base, dir / "no_fallback.json")) == 2);
  // An empty merges file (a wrong path, a failed download) is not a tokenizer.
  write_file(dir / "empty_merges.txt", "");
  CHECK(status(fmt::format("{}--vocab {} --merges {}", base, vocab, dir / "empty_merges.txt")) == 2);
  // Threads hold ~1 MB each: a typo of a count is refused, not allocated.
  CHECK(status(fmt::format("{}--vocab {} --merges {} --threads 100000", base, vocab, merges)) == 2);
  CHECK(status(fmt::format("{}--vocab {} --merges {} --threads -1", base, vocab, merges)) == 2);
}
