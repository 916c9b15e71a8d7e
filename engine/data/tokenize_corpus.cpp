// The tokenize pipeline: a reader cuts documents into work items at safe
// points, threads encode a batch of items, the writer appends them in order.
#include "engine/data/tokenize_corpus.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "engine/data/json_text.h"
#include "engine/data/llmc_format.h"
#include "engine/data/megatron_format.h"
#include "engine/data/pretokenize.h"
#include "kernels/error.h"

namespace trainer::engine::data {
namespace {

constexpr size_t kMaxCarry = size_t(16) << 20;   // text without a safe cut point before we force one
constexpr int kItemsPerThread = 4;               // items per batch = threads * this

struct Segment {
  size_t begin, end;  // bytes of the item's text
  bool doc_first, doc_last, val;
};

// Over-aligned so threads encoding neighbouring items never share a cache line.
struct alignas(128) Item {
  std::string text;
  std::vector<Segment> segs;
  std::vector<int32_t> ids;
  std::vector<size_t> seg_end;  // ids of segment s end at seg_end[s]
};

// Routes each document's tokens to the llm.c shards or Megatron dataset of one split.
class SplitWriter {
 public:
  SplitWriter(const TokenizeOptions& opt, std::string split, int vocab_size)
      : opt_(opt), split_(std::move(split)), vocab_size_(vocab_size) {}

  void add(const int32_t* ids, size_t n, bool doc_last) {
    if (opt_.format == OutputFormat::megatron) {
      doc_.insert(doc_.end(), ids, ids + n);
      if (doc_last) {
        if (!mega_) mega_ = std::make_unique<MegatronWriter>(megatron_prefix(), megatron_type_for_vocab(vocab_size_));
        mega_->add_document(doc_.data(), doc_.size());
        tokens_ += static_cast<int64_t>(doc_.size());
        doc_.clear();
      }
      return;
    }
    while (n > 0) {
      if (!shard_ || shard_->num_tokens() == opt_.shard_tokens) next_shard();
      size_t take = std::min<size_t>(n, opt_.shard_tokens - shard_->num_tokens());
      shard_->append(ids, take);
      tokens_ += static_cast<int64_t>(take);
      ids += take;
      n -= take;
    }
  }

  // Finishes every file (still under temp names) and lists their final names.
  void finish(std::vector<std::string>& names) {
    if (shard_) done_.push_back(std::move(shard_));
    for (auto& s : done_) {
      s->finish();
      names.push_back(s->path());
    }
    if (mega_) {
      mega_->finish();
      names.push_back(megatron_prefix() + ".bin");
      names.push_back(megatron_prefix() + ".idx");
    }
  }
  void commit() {
    for (auto& s : done_) s->commit();
    if (mega_) mega_->commit();
    // A smaller re-run must not leave an old run's later shards in the glob.
    if (opt_.format == OutputFormat::llmc)
      for (int i = static_cast<int>(done_.size());; ++i)
        if (::unlink(llmc_shard_name(opt_.out_prefix, split_, i).c_str()) != 0) break;
  }
  int64_t tokens() const { return tokens_; }

 private:
  std::string megatron_prefix() const {
    const std::string& p = opt_.out_prefix;
    return opt_.val_fraction > 0 || p.ends_with('/') ? split_prefix(p, split_) : p;
  }
  void next_shard() {
    if (shard_) done_.push_back(std::move(shard_));
    shard_ = std::make_unique<LlmcShardWriter>(
        llmc_shard_name(opt_.out_prefix, split_, static_cast<int>(done_.size())));
  }

  const TokenizeOptions& opt_;
  std::string split_;
  int vocab_size_;
  std::unique_ptr<LlmcShardWriter> shard_;
  std::vector<std::unique_ptr<LlmcShardWriter>> done_;
  std::unique_ptr<MegatronWriter> mega_;
  std::vector<int32_t> doc_;
  int64_t tokens_ = 0;
};

class Pipeline {
 public:
  Pipeline(const TokenizeOptions& opt, const Tokenizer& tok)
      : opt_(opt), tok_(tok),
        threads_(opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency())),
        caches_(threads_), train_(opt, "train", tok.vocab_size()), val_(opt, "val", tok.vocab_size()) {
    start_ = std::chrono::steady_clock::now();
    cpu_start_ = cpu_seconds();
    items_.emplace_back();
  }

  ~Pipeline() {
    for (auto& th : pool_) th.join();  // an error while reading: let the workers finish first
  }

  TokenizeResult run() {
    for (const std::string& path : opt_.inputs) {
      InputKind kind = opt_.input_kind;
      if (kind == InputKind::auto_) {
        bool jsonl = path.size() >= 6 && (path.ends_with(".jsonl") || path.ends_with(".ndjson"));
        kind = jsonl ? InputKind::jsonl : InputKind::text;
      }
      std::error_code ec;
      TRAINER_INPUT_CHECK(!std::filesystem::is_directory(path, ec),
                          "{}: is a directory (expected a text or JSONL file)", path);
      if (kind == InputKind::jsonl) read_jsonl(path);
      else read_text(path);
    }
    flush_batch(true);
    TRAINER_INPUT_CHECK(result_.documents > 0, "{}: no text to tokenize (every document is empty)",
                        opt_.inputs.empty() ? std::string("input") : opt_.inputs[0]);
    TRAINER_INPUT_CHECK(opt_.val_fraction == 0 || result_.val_documents > 0,
                        "--val-fraction {}: no document goes to validation ({} document(s) in all; split "
                        "the text into more files or JSONL records)",
                        opt_.val_fraction, result_.documents);
    result_.seconds = seconds();
    result_.cpu_seconds = cpu_seconds() - cpu_start_;
    train_.finish(result_.files);
    val_.finish(result_.files);
    train_.commit();
    val_.commit();
    if (opt_.progress) std::fputc('\n', stderr);
    result_.train_tokens = train_.tokens();
    result_.val_tokens = val_.tokens();
    result_.sync_seconds = seconds() - result_.seconds;
    result_.threads = threads_;
    return result_;
  }

 private:
  static double cpu_seconds() {
    struct rusage ru;
    ::getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  void read_text(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw InputError(fmt::format("{}: cannot read input ({})", path, std::strerror(errno)));
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> guard(f, &std::fclose);
    std::string buf(opt_.item_bytes, '\0');
    int64_t total = 0;
    begin_document();
    while (true) {
      size_t n = std::fread(buf.data(), 1, buf.size(), f);
      if (n == 0) {
        TRAINER_INPUT_CHECK(!std::ferror(f), "{}: byte offset {}: read error", path, total);
        break;
      }
      total += static_cast<int64_t>(n);
      result_.bytes += static_cast<int64_t>(n);
      feed(std::string_view(buf.data(), n), false);
    }
    TRAINER_INPUT_CHECK(total > 0, "{}: empty input (0 bytes)", path);
    feed({}, true);
  }

  void read_jsonl(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(fmt::format("{}: cannot read input ({})", path, std::strerror(errno)));
    std::string line, text;
    int64_t line_no = 0, offset = 0, records = 0;
    while (std::getline(in, line)) {
      ++line_no;
      const int64_t line_offset = offset;
      offset += static_cast<int64_t>(line.size()) + 1;
      result_.bytes += static_cast<int64_t>(line.size()) + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}: line {} (byte offset {})", path, line_no, line_offset);
      TRAINER_INPUT_CHECK(extract_string_field(line, opt_.jsonl_field, text, where),
                          "{}: no \"{}\" field (set the field name with --jsonl-field)", where,
                          opt_.jsonl_field);
      ++records;
      begin_document();
      feed(text, true);
    }
    TRAINER_INPUT_CHECK(records > 0, "{}: empty input (no JSONL records)", path);
  }

  void begin_document() {
    doc_first_ = true;
    doc_bytes_ = 0;
  }

  // Adds text of the current document; cuts it into segments at safe points.
  void feed(std::string_view text, bool last) {
    carry_.append(text);
    doc_bytes_ += text.size();
    if (!last) {
      if (carry_.size() < opt_.item_bytes) return;
      size_t cut = tok_.safe_cut(carry_);
      if (cut == 0) {
        if (carry_.size() < kMaxCarry) return;
        // No word boundary in 16 MB of text: cut at a UTF-8 character boundary
        // (the only place output can differ from tokenizing the text whole).
        cut = carry_.size();
        while (cut > 0 && (static_cast<unsigned char>(carry_[cut - 1]) & 0xC0) == 0x80) --cut;
        if (cut > 0) --cut;
        if (cut == 0) cut = carry_.size();
      }
      emit(std::string_view(carry_).substr(0, cut), false);
      carry_.erase(0, cut);
      return;
    }
    if (doc_bytes_ == 0) return;  // an empty document adds nothing
    emit(carry_, true);
    carry_.clear();
  }

  void emit(std::string_view text, bool doc_last) {
    if (doc_first_) {
      const int64_t i = result_.documents++;
      const double f = opt_.val_fraction;
      doc_val_ = f > 0 && std::floor(double(i + 1) * f) > std::floor(double(i) * f);
      result_.val_documents += doc_val_;
    }
    Item& item = items_.back();
    size_t begin = item.text.size();
    item.text.append(text);
    item.segs.push_back({begin, item.text.size(), doc_first_, doc_last, doc_val_});
    doc_first_ = false;
    if (item.text.size() >= opt_.item_bytes) {
      if (items_.size() == static_cast<size_t>(threads_ * kItemsPerThread)) flush_batch(false);
      else items_.emplace_back();
    }
  }

  void encode_item(Item& item, WordCache& cache) const {
    item.ids.clear();
    item.seg_end.clear();
    const int eot = tok_.eot_id();
    for (const Segment& s : item.segs) {
      // llm.c puts <|endoftext|> before each document, Megatron after each
      // (and, for a vocabulary whose documents start with a token, as Llama
      // 3's <|begin_of_text|> or SentencePiece's <s>, that one before:
      // Megatron's HF tokenizer adds it). A document's later segments are not
      // its start: SentencePiece puts no "▁" before them.
      if (s.doc_first && opt_.format == OutputFormat::llmc) item.ids.push_back(eot);
      if (s.doc_first && opt_.format == OutputFormat::megatron && tok_.bos_id() >= 0)
        item.ids.push_back(tok_.bos_id());
      tok_.encode(std::string_view(item.text).substr(s.begin, s.end - s.begin), item.ids, &cache, s.doc_first);
      if (s.doc_last && opt_.format == OutputFormat::megatron) item.ids.push_back(eot);
      item.seg_end.push_back(item.ids.size());
    }
  }

  // Hands the batch just read to the workers, then writes the batch they had
  // encoded, then (back in the reader) reads the next: reading and writing
  // overlap encoding, and batches (and the items in them) are written in
  // input order.
  void flush_batch(bool final) {
    join_workers();
    std::swap(done_, inflight_);  // encoded, to be written
    std::swap(inflight_, items_);
    items_.clear();
    items_.emplace_back();
    next_ = 0;
    errors_.assign(threads_, nullptr);
    const int workers = std::min<int>(threads_, static_cast<int>(inflight_.size()));
    for (int t = 0; t < workers; ++t)
      pool_.emplace_back([this, t] {
        try {
          for (size_t i; (i = next_.fetch_add(1)) < inflight_.size();) encode_item(inflight_[i], caches_[t].cache);
        } catch (...) {
          errors_[t] = std::current_exception();
        }
      });
    write_done();
    if (final) {
      join_workers();
      std::swap(done_, inflight_);
      write_done();
    }
  }

  void join_workers() {
    for (auto& th : pool_) th.join();
    pool_.clear();
    for (auto& e : errors_)
      if (e) std::rethrow_exception(e);
    errors_.clear();
  }

  void write_done() {
    for (Item& item : done_) {
      size_t start = 0;
      for (size_t s = 0; s < item.segs.size(); ++s) {
        const Segment& seg = item.segs[s];
        (seg.val ? val_ : train_).add(item.ids.data() + start, item.seg_end[s] - start, seg.doc_last);
        start = item.seg_end[s];
      }
    }
    const bool wrote = !done_.empty();
    done_.clear();
    if (opt_.progress && wrote) {
      double t = seconds();
      std::fprintf(stderr, "\rtokenize: %.1f MB, %.1f MB/s, %lld tokens", result_.bytes / 1e6,
                   result_.bytes / 1e6 / std::max(t, 1e-9), static_cast<long long>(train_.tokens() + val_.tokens()));
      std::fflush(stderr);
    }
  }

  const TokenizeOptions& opt_;
  const Tokenizer& tok_;
  int threads_;
  struct alignas(128) ThreadCache {
    WordCache cache;
  };
  std::vector<ThreadCache> caches_;
  SplitWriter train_, val_;
  std::vector<Item> items_;     // the batch being read
  std::vector<Item> inflight_;  // the batch the workers are encoding
  std::vector<Item> done_;      // the batch encoded before it, being written
  std::vector<std::thread> pool_;
  std::vector<std::exception_ptr> errors_;
  std::atomic<size_t> next_{0};
  std::string carry_;
  bool doc_first_ = true, doc_val_ = false;
  size_t doc_bytes_ = 0;
  TokenizeResult result_;
  std::chrono::steady_clock::time_point start_;
  double cpu_start_ = 0;
};

}  // namespace

std::string split_prefix(const std::string& prefix, const std::string& split) {
  return prefix.ends_with('/') ? prefix + split : prefix + "_" + split;
}

std::string llmc_shard_name(const std::string& prefix, const std::string& split, int index) {
  return fmt::format("{}_{:06d}.bin", split_prefix(prefix, split), index);
}

TokenizeResult tokenize_corpus(const TokenizeOptions& opt, const Tokenizer& tok) {
  TRAINER_INPUT_CHECK(!opt.inputs.empty(), "tokenize: no input files");
  TRAINER_INPUT_CHECK(!opt.out_prefix.empty(), "tokenize: --out PREFIX is required");
  TRAINER_INPUT_CHECK(opt.val_fraction >= 0 && opt.val_fraction < 1, "--val-fraction {}: expected 0 <= F < 1",
                      opt.val_fraction);
  TRAINER_CHECK(opt.item_bytes >= 1, "item_bytes must be >= 1");
  TRAINER_INPUT_CHECK(opt.shard_tokens >= 1 && opt.shard_tokens <= INT32_MAX,
                      "--shard-tokens {}: expected 1..2147483647", opt.shard_tokens);
  TRAINER_INPUT_CHECK(tok.eot_id() >= 0,
                      "the vocabulary has no <|endoftext|> (or <|end_of_text|>, </s>) token, which separates documents");
  TRAINER_INPUT_CHECK(opt.format == OutputFormat::megatron || tok.vocab_size() <= 65536,
                      "a vocabulary of {} tokens does not fit llm.c's uint16 shards; use --format megatron",
                      tok.vocab_size());
  const std::filesystem::path dir = std::filesystem::path(opt.out_prefix).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  TRAINER_INPUT_CHECK(!ec, "--out {}: cannot create directory {} ({})", opt.out_prefix, dir.string(), ec.message());
  return Pipeline(opt, tok).run();
}

}  // namespace trainer::engine::data
