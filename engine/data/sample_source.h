// SampleSource: the training loop's view of a tokenized corpus. Files are
// memory-mapped llm.c shards or Megatron datasets; a sample is seq_len+1
// consecutive tokens; global sample indices map to the same tokens on any
// number of ranks (shuffle and blend depend only on the seed and the index).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/job_spec.h"

namespace trainer::engine::data {

// One part of data.split (Megatron's --split): each source's samples are cut
// in order into shares[0] : shares[1] : ... (rounded as Megatron rounds its
// split indices) and only part `part` (0 train, 1 validation, 2 test) is used.
// Empty shares: the whole of every source.
struct SplitPart {
  std::vector<double> shares;
  int part = 0;
};
// The [begin, end) sample bounds of every part of n samples cut by `shares`.
std::vector<int64_t> split_bounds(int64_t n, const std::vector<double>& shares);

// Samples for training: sample i is seq_len+1 consecutive int32 tokens (inputs = first seq_len, targets = last seq_len).
class SampleSource {
 public:
  // Expands globs (sorted), detects the format by magic number (data.format
  // auto|llmc|megatron; a mismatch with an explicit format is an InputError),
  // memory-maps every file, validates headers/sizes/index (InputError naming
  // file and offset), and builds the sample order: windows of seq_len+1 tokens
  // at stride seq_len over each file's (or each Megatron dataset's) token
  // stream. Sources that all have the same weight are pooled into one corpus;
  // sources of different weights are blended Megatron-style (deterministic
  // greedy interleave, each source's share = its normalised weight). shuffle:
  // a new permutation per epoch derived from (seed, epoch); false = file order.
  // split: only that part of every source (after blending weights are
  // applied to the parts' sizes); shuffling permutes within the part.
  static std::unique_ptr<SampleSource> open(const std::vector<DataSource>& sources, DataFormat format,
                                            int seq_len, int vocab_size, uint64_t seed, bool shuffle,
                                            const SplitPart& split = {});
  virtual ~SampleSource();
  virtual int64_t samples_per_epoch() const = 0;
  // Writes global sample `index` (any index >= 0; epochs wrap) into
  // out[0..seq_len]. A token id >= vocab_size is an InputError naming file and
  // byte offset. Thread-safe (const), allocation-free.
  virtual void get(int64_t index, int32_t* out) const = 0;
  virtual std::string describe() const = 0;  // one line: files, format, tokens, samples per epoch
};

}  // namespace trainer::engine::data
