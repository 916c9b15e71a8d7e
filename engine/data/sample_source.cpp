// SampleSource over memory-mapped llm.c shards and Megatron datasets: file
// discovery and format detection, per-source sample windows, blending, shuffle.
#include "engine/data/sample_source.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "engine/data/llmc_format.h"
#include "engine/data/mapped_file.h"
#include "engine/data/megatron_format.h"
#include "engine/data/permutation.h"
#include "kernels/error.h"

namespace trainer::engine::data {

SampleSource::~SampleSource() = default;

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

std::vector<std::string> expand(const std::string& pattern) {
  if (pattern.find_first_of("*?[") == std::string::npos) {
    TRAINER_INPUT_CHECK(exists(pattern) || exists(pattern + ".idx"),
                        "data path '{}': no such file (nor a Megatron prefix with '{}.idx')", pattern,
                        pattern);
    return {pattern};
  }
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  TRAINER_INPUT_CHECK(!out.empty(), "data path '{}': no file matches the glob", pattern);
  std::sort(out.begin(), out.end());
  return out;
}

const char* format_name(DataFormat f) {
  return f == DataFormat::llmc ? "llmc" : f == DataFormat::megatron ? "megatron" : "auto";
}

struct File {
  std::string label;                   // the path (llm.c) or prefix (Megatron)
  std::unique_ptr<MappedFile> tokens;  // the shard, or PREFIX.bin
  std::unique_ptr<MappedFile> index;   // PREFIX.idx (Megatron only)
  TokenStream stream;
  DataFormat format = DataFormat::llmc;
  int64_t num_samples = 0;
};

struct Dataset {
  std::vector<File> files;
  std::vector<int64_t> first_sample;  // per file, prefix sums of num_samples
  int64_t num_samples = 0;            // of this split part (all files' without a split)
  int64_t offset = 0;                 // the part's first sample among the files'
  std::string part;                   // ", validation part [a, b) of n" (empty: no split)
  int64_t num_tokens = 0;
  double weight = 1.0;
  std::string name;
};

// Opens one matched path as a data file, detecting its format.
void open_path(const std::string& path, DataFormat format, int seq_len, Dataset& ds,
               std::set<std::string>& seen) {
  std::string prefix;
  if (ends_with(path, ".idx")) prefix = path.substr(0, path.size() - 4);
  else if (!exists(path) && exists(path + ".idx")) prefix = path;
  else if (ends_with(path, ".bin") && exists(path.substr(0, path.size() - 4) + ".idx")) {
    MappedFile probe(path);
    if (!has_llmc_magic(probe.data(), probe.size())) prefix = path.substr(0, path.size() - 4);
  }
  File f;
  if (!prefix.empty()) {
    if (!seen.insert(prefix).second) return;  // PREFIX.bin and PREFIX.idx both matched
    f.label = prefix;
    f.format = DataFormat::megatron;
    TRAINER_INPUT_CHECK(format != DataFormat::llmc,
                        "{}: data.format is llmc but this is a Megatron dataset ({}.idx beside it)", path,
                        prefix);
    f.index = std::make_unique<MappedFile>(prefix + ".idx");
    f.tokens = std::make_unique<MappedFile>(prefix + ".bin");
    MegatronIndex index;
    f.stream = open_megatron(*f.index, *f.tokens, &index);
  } else {
    if (!seen.insert(path).second) return;
    f.label = path;
    f.tokens = std::make_unique<MappedFile>(path);
    const bool llmc = has_llmc_magic(f.tokens->data(), f.tokens->size());
    if (format == DataFormat::megatron)
      TRAINER_INPUT_CHECK(false, "{}: data.format is megatron but there is no {}.idx (Megatron datasets are PREFIX.bin + PREFIX.idx){}",
                          path, ends_with(path, ".bin") ? path.substr(0, path.size() - 4) : path,
                          llmc ? "; this file is an llm.c shard" : "");
    if (format == DataFormat::auto_ && !llmc) {
      int32_t magic = 0;
      if (f.tokens->size() >= 4) std::memcpy(&magic, f.tokens->data(), 4);
      TRAINER_INPUT_CHECK(false, "{}: byte offset 0: unknown data format (found {}, expected the llm.c magic number {} or a Megatron index PREFIX.idx beside PREFIX.bin)",
                          path, f.tokens->size() >= 4 ? std::to_string(magic) : "fewer than 4 bytes", kLlmcMagic);
    }
    f.stream = open_llmc_shard(*f.tokens);  // with format llmc: reports a wrong magic number
    f.format = DataFormat::llmc;
  }
  f.stream.path = &f.tokens->path();
  f.num_samples = f.stream.num_tokens > seq_len ? (f.stream.num_tokens - 1) / seq_len : 0;
  ds.num_tokens += f.stream.num_tokens;
  ds.files.push_back(std::move(f));
}

class MappedSampleSource final : public SampleSource {
 public:
  MappedSampleSource(const std::vector<DataSource>& sources, DataFormat format, int seq_len,
                     int vocab_size, uint64_t seed, bool shuffle, const SplitPart& split)
      : seq_len_(seq_len), vocab_size_(vocab_size), seed_(seed), shuffle_(shuffle) {
    TRAINER_INPUT_CHECK(!sources.empty(), "data: no data source given");
    TRAINER_INPUT_CHECK(seq_len >= 1, "data: seq_len must be >= 1, got {}", seq_len);
    TRAINER_INPUT_CHECK(vocab_size >= 1, "data: vocab_size must be >= 1, got {}", vocab_size);
    bool equal_weights = true;
    for (const auto& s : sources) {
      TRAINER_INPUT_CHECK(s.weight > 0 && std::isfinite(s.weight), "data path '{}': weight {} must be > 0",
                          s.path, s.weight);
      equal_weights &= s.weight == sources[0].weight;
    }
    std::set<std::string> seen;
    if (equal_weights) datasets_.resize(1);
    for (const auto& s : sources) {
      if (!equal_weights) datasets_.emplace_back();
      Dataset& ds = datasets_.back();
      ds.weight = s.weight;
      ds.name = ds.name.empty() ? s.path : ds.name + "," + s.path;
      for (const auto& path : expand(s.path)) open_path(path, format, seq_len, ds, seen);
    }
    for (Dataset& ds : datasets_) {
      for (const File& f : ds.files) {
        ds.first_sample.push_back(ds.num_samples);
        ds.num_samples += f.num_samples;
      }
      TRAINER_INPUT_CHECK(ds.num_samples > 0,
                          "data path '{}': {} tokens in {} file(s), not enough for one sample of seq_len+1 = {} tokens",
                          ds.name, ds.num_tokens, ds.files.size(), seq_len + 1);
      if (!split.shares.empty()) take_part(ds, split);
    }
    TRAINER_INPUT_CHECK(datasets_.size() <= 255, "data: at most 255 blended sources, got {}", datasets_.size());
    if (datasets_.size() == 1) {
      num_samples_ = datasets_[0].num_samples;
    } else {
      build_blend();
    }
  }

  int64_t samples_per_epoch() const override { return num_samples_; }

  void get(int64_t index, int32_t* out) const override {
    TRAINER_CHECK(index >= 0, "sample index {} < 0", index);
    const int64_t epoch = index / num_samples_;
    const int64_t j = index % num_samples_;
    if (datasets_.size() == 1) {
      int64_t p = shuffle_ ? int64_t(Permutation(num_samples_, mix64(seed_) ^ mix64(~uint64_t(epoch)))(j)) : j;
      read(datasets_[0], p, out);
      return;
    }
    const int d = blend_dataset_[j];
    const int64_t block = j / kBlendBlock;
    int64_t inner = blend_counts_[block * datasets_.size() + d];
    for (int64_t k = block * kBlendBlock; k < j; ++k) inner += blend_dataset_[k] == d;
    const Dataset& ds = datasets_[d];
    // Past the first epoch a source continues where it stopped, so every one of
    // its samples is drawn before any repeats, in a fresh order per pass.
    const int64_t g = epoch * blend_per_epoch_[d] + inner;
    const int64_t pass = g / ds.num_samples, k = g % ds.num_samples;
    int64_t p = shuffle_ ? int64_t(Permutation(ds.num_samples, mix64(seed_ + 0x1000193ull * (d + 1)) ^
                                                                   mix64(~uint64_t(pass)))(k))
                         : k;
    read(ds, p, out);
  }

  std::string describe() const override {
    int64_t files = 0, tokens = 0;
    std::set<std::string> formats;
    for (const Dataset& ds : datasets_) {
      files += ds.files.size();
      tokens += ds.num_tokens;
      for (const File& f : ds.files) formats.insert(format_name(f.format));
    }
    std::string fmts;
    for (const auto& f : formats) fmts += (fmts.empty() ? "" : "+") + f;
    std::string line = fmt::format("{} file(s) ({}), {} tokens, {} samples of {} tokens per epoch{}{}", files,
                                   fmts, tokens, num_samples_, seq_len_ + 1, shuffle_ ? ", shuffled" : "",
                                   datasets_.size() == 1 ? datasets_[0].part : std::string());
    if (datasets_.size() > 1) {
      double total = 0;
      for (const Dataset& ds : datasets_) total += ds.weight;
      line += ", blend:";
      for (const Dataset& ds : datasets_) line += fmt::format(" {} {:.3f}", ds.name, ds.weight / total);
    }
    return line;
  }

 private:
  static constexpr int64_t kBlendBlock = 1024;

  // Keeps only this part of the split of ds's samples, in file order.
  void take_part(Dataset& ds, const SplitPart& split) const {
    static const char* const kParts[] = {"train", "validation", "test"};
    TRAINER_CHECK(split.part >= 0 && split.part < int(split.shares.size()) && split.part < 3,
                  "split part {} of {} shares", split.part, split.shares.size());
    const std::vector<int64_t> b = split_bounds(ds.num_samples, split.shares);
    const int64_t begin = b[split.part], end = b[split.part + 1];
    TRAINER_INPUT_CHECK(end > begin, "data path '{}': data.split gives its {} part none of its {} samples "
                        "of seq_len+1 = {} tokens (more data or a larger share is needed)", ds.name,
                        kParts[split.part], ds.num_samples, seq_len_ + 1);
    ds.part = fmt::format(", {} part of data.split: samples [{}, {}) of {}", kParts[split.part], begin, end,
                          ds.num_samples);
    ds.offset = begin;
    ds.num_samples = end - begin;
  }

  void read(const Dataset& ds, int64_t part_sample, int32_t* out) const {
    const int64_t sample = part_sample + ds.offset;
    size_t f = std::upper_bound(ds.first_sample.begin(), ds.first_sample.end(), sample) - ds.first_sample.begin() - 1;
    const File& file = ds.files[f];
    read_tokens(file.stream, (sample - ds.first_sample[f]) * seq_len_, seq_len_ + 1, vocab_size_, out);
  }

  // Megatron's blending: sample i goes to the source furthest behind its share,
  // argmax_d(weight_d * max(i, 1) - drawn_d), the first such source on ties.
  // The epoch has as many samples as all sources together.
  void build_blend() {
    const size_t n = datasets_.size();
    double total = 0;
    for (const Dataset& ds : datasets_) {
      total += ds.weight;
      num_samples_ += ds.num_samples;
    }
    std::vector<double> w(n);
    for (size_t d = 0; d < n; ++d) w[d] = datasets_[d].weight / total;
    blend_dataset_.resize(num_samples_);
    blend_counts_.assign(((num_samples_ + kBlendBlock - 1) / kBlendBlock) * n, 0);
    std::vector<int64_t> drawn(n, 0);
    for (int64_t i = 0; i < num_samples_; ++i) {
      if (i % kBlendBlock == 0)
        std::copy(drawn.begin(), drawn.end(), blend_counts_.begin() + (i / kBlendBlock) * n);
      const double x = std::max<double>(double(i), 1.0);
      size_t best = 0;
      double best_err = w[0] * x - double(drawn[0]);
      for (size_t d = 1; d < n; ++d) {
        double err = w[d] * x - double(drawn[d]);
        if (err > best_err) { best = d; best_err = err; }
      }
      blend_dataset_[i] = static_cast<uint8_t>(best);
      ++drawn[best];
    }
    blend_per_epoch_ = drawn;
  }

  int seq_len_;
  int vocab_size_;
  uint64_t seed_;
  bool shuffle_;
  std::vector<Dataset> datasets_;
  int64_t num_samples_ = 0;
  std::vector<uint8_t> blend_dataset_;   // per sample of an epoch: its source
  std::vector<int64_t> blend_counts_;    // per block of kBlendBlock: samples of each source before it
  std::vector<int64_t> blend_per_epoch_; // samples of each source per epoch
};

}  // namespace

std::vector<int64_t> split_bounds(int64_t n, const std::vector<double>& shares) {
  // Megatron's get_train_valid_test_split_: normalised shares, each part's
  // end rounded (half to even, as Python's round), the rounding error taken
  // back from every end.
  double total = 0;
  for (double s : shares) total += s;
  TRAINER_CHECK(!shares.empty() && total > 0, "data.split needs a positive share");
  std::vector<int64_t> b{0};
  for (double s : shares) b.push_back(b.back() + static_cast<int64_t>(std::nearbyint(s / total * double(n))));
  const int64_t diff = b.back() - n;
  for (size_t i = 1; i < b.size(); ++i) b[i] = std::clamp<int64_t>(b[i] - diff, 0, n);
  return b;
}

std::unique_ptr<SampleSource> SampleSource::open(const std::vector<DataSource>& sources, DataFormat format,
                                                 int seq_len, int vocab_size, uint64_t seed, bool shuffle,
                                                 const SplitPart& split) {
  return std::make_unique<MappedSampleSource>(sources, format, seq_len, vocab_size, seed, shuffle, split);
}

}  // namespace trainer::engine::data
