// `trainer tokenize`: text files or JSONL -> llm.c shards or a Megatron dataset,
// streaming with bounded memory, parallel over threads, output independent of
// the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/tokenizer.h"

namespace trainer::engine::data {

enum class OutputFormat { llmc, megatron };
enum class InputKind { auto_, text, jsonl };

struct TokenizeOptions {
  std::vector<std::string> inputs;   // files, in order; each text file is one document
  std::string out_prefix;            // see split_prefix and README for the file names
  OutputFormat format = OutputFormat::llmc;
  InputKind input_kind = InputKind::auto_;  // auto: .jsonl / .ndjson are JSONL, anything else text
  std::string jsonl_field = "text";
  double val_fraction = 0.0;         // [0, 1): every document i with floor((i+1)f) > floor(if) goes to val
  int64_t shard_tokens = 100000000;  // llm.c: tokens per shard
  int threads = 0;                   // 0 = all hardware threads
  bool progress = false;             // a \r progress line on stderr
  size_t item_bytes = size_t(1) << 20;  // read size and text per work item (tests use small ones)
};

struct TokenizeResult {
  int64_t bytes = 0;                 // input bytes read
  int64_t documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;
  std::vector<std::string> files;    // written, final names
  double seconds = 0;                // reading, encoding and writing (wall clock)
  double cpu_seconds = 0;            // CPU time of all threads over the same span
  double sync_seconds = 0;           // then fsync and rename of the outputs
  int threads = 1;
};

// Runs the whole job; every output keeps a temp name until all of them are
// complete. InputError for an unreadable or empty input, a bad JSONL line, a
// vocabulary without <|endoftext|>, ids that do not fit the format.
TokenizeResult tokenize_corpus(const TokenizeOptions& opt, const Tokenizer& tok);

// Output names: split_prefix("out/brown", "train") = "out/brown_train"; a prefix
// that ends in '/' names a directory: split_prefix("data/brown/", "train") =
// "data/brown/train". llm.c shards are split_prefix + "_000000.bin", ...
std::string split_prefix(const std::string& prefix, const std::string& split);
std::string llmc_shard_name(const std::string& prefix, const std::string& split, int index);

}  // namespace trainer::engine::data
