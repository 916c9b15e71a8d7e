// Checkpoints: one directory per saved step (step_000123/) holding one
// safetensors shard per writing rank (parameters and AdamW state under global
// names, each with the slice of the global tensor it holds), metadata.json
// (resolved job spec, mesh, step, data position, scalars) and manifest.json
// (size and XXH3 of every file; its presence marks the checkpoint complete).
// Saves go to step_X.tmp-<pid>/, are fsynced, renamed, and `latest` is
// replaced last; see engine/checkpoint/README.md.
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/shard_contents.h"
#include "engine/checkpoint/slice.h"
#include "engine/config/job_spec.h"
#include "engine/json.h"
#include "engine/optimizer.h"
#include "kernels/memory.h"
#include "model/buffers.h"
#include "parallel/communicator.h"

namespace trainer::engine::checkpoint {

class BackgroundWrite;

constexpr int kFormatVersion = 1;

std::string step_dir_name(int step);  // "step_000123"
std::string shard_file_name(int rank);  // "rank_00000.safetensors"
// The step a directory name (or path) is named for: step_000123 -> 123; -1
// for anything else (temporary, renamed-aside and abandoned directories).
int parse_step_name(std::string name);
// checkpoint.dir with its default applied: <run.dir>/checkpoints.
std::string checkpoint_root(const JobSpec& spec);

// Checks a step directory completely: manifest present and valid JSON, every
// listed file present with its recorded size and XXH3, metadata.json valid,
// every shard's safetensors header valid. Throws InputError with one line
// naming the offending file. Returns the parsed metadata.json.
Json verify_checkpoint(const std::string& step_dir);

// The step directories directly under `root` (named step_N, complete or
// not), newest first, with their steps; none when root is not a directory.
std::vector<std::pair<int, std::string>> step_dirs(const std::string& root);

// The newest complete, verified checkpoint under `root` ("" when there is
// none); every skipped one (corrupt, partial, leftover .tmp) is reported on
// `warn` (one line each) when it is not null.
std::string find_latest_good(const std::string& root, FILE* warn);

// Resolves a user-given path: a step directory, or a checkpoint root / run
// directory (then its newest good checkpoint, looking in <path>/checkpoints
// too; without `fall_back`, as a resume asks, the newest complete one, which
// must verify). Every problem is an InputError naming the file.
std::string resolve_checkpoint(const std::string& path, FILE* warn, bool fall_back = true);

// True when `path` names one step directory (not a root or run directory).
bool is_step_dir(const std::string& path);
// True when `path` is a checkpoint of this trainer (a step directory, or a
// root or run directory holding one), not a Hugging Face model: how
// model.init_from tells its two kinds of source apart.
bool is_checkpoint_source(const std::string& path);
// Where a root or run directory may keep its step directories: itself,
// <path>/checkpoints, and checkpoint.dir of <path>/job.yaml.
std::vector<std::string> checkpoint_roots(const std::string& path);

// Reads tensors of one (already verified) step directory by global name,
// assembling any requested slice from whatever shards hold pieces of it.
class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& step_dir);
  ~CheckpointReader();

  const std::string& dir() const { return dir_; }
  const Json& metadata() const { return metadata_; }
  int step() const;
  JobSpec job_spec() const;  // the resolved spec stored in metadata.json
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  std::vector<std::string> names() const;  // every tensor the shards hold, sorted
  // The saved global shape of a tensor (InputError when absent).
  const Slice& any_slice(const std::string& name) const;
  // Fills `out` (row-major over dst.shape, zeroed first) with the part of
  // tensor `name` that `dst` describes; InputError naming the shard when the
  // tensor is missing, its global shape differs, or shards leave a gap.
  void read(const std::string& name, const Slice& dst, float* out) const;

 private:
  struct Piece {
    int file;
    Slice slice;
  };
  std::string dir_;
  Json metadata_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::vector<Piece>> index_;
};

// Saves and resumes the run's state (see README.md for the call sites).
class Checkpointer {
 public:
  // Collective over `world` (used for barriers and to agree on names and
  // status); `device` is where the model lives (for the few bytes those
  // collectives exchange).
  Checkpointer(const JobSpec& spec, parallel::Communicator& world, Device device = Device::cpu,
               ShardPosition position = {}, FILE* warn = stderr);
  ~Checkpointer();

  // checkpoint.resume: never -> 0; auto -> the newest good checkpoint under
  // checkpoint.dir (bad ones are warned about and skipped), 0 when none;
  // <path> -> that checkpoint or InputError. Loads parameters and AdamW state
  // into this rank's slices and returns the step it was saved after (training
  // continues at step + 1). `scalars`, when given, receives the saved scalars.
  // Call it right after allocation: alignment gaps of m and v are left as they
  // are (zero, as Arenas allocates them).
  int resume(model::Buffers& buffers, AdamW& optimizer,
             std::map<std::string, double>* scalars = nullptr);

  // model.init_from naming a checkpoint of this trainer (a step, checkpoint
  // root or run directory: then its newest complete checkpoint, which must
  // verify, as an explicit resume asks): its parameters, from
  // any layout, become this run's starting weights, and nothing else does:
  // the step, AdamW's moments, fp8 scales, the loss scale and the data start
  // afresh (Megatron's --finetune, torchtitan's initial_load_model_only).
  // The checkpoint's model must have this model's tensors; the settings a
  // new run may change without changing them (rope_theta, rope_scaling,
  // norm_eps, moe.top_k) are noted on the warning stream. InputError on
  // every rank, rank 0's naming the cause. Returns the step directory read.
  std::string init_weights(const std::string& source, model::Buffers& buffers, AdamW& optimizer);

  // Collective: writes step_X/ atomically, replaces `latest`, then deletes
  // complete checkpoints beyond checkpoint.keep. `scalars` are small named
  // values (loss scale, ...) stored in metadata.json. A save still in flight
  // is completed first. With `background`, each rank copies its shard to
  // host memory and a thread writes it while training goes on; poll() or
  // finish() completes the directory later. A rank that cannot write its
  // shard (or rank 0 its directory) makes every rank throw Error.
  void save(int step, const model::Buffers& buffers, const AdamW& optimizer,
            const std::map<std::string, double>& scalars = {}, bool background = false);
  // Collective, every rank at the same point (each step): while a background
  // save is in flight, agrees whether every rank's shard is written and, if
  // so, completes it. Returns the completed step directory, else "".
  std::string poll();
  // Collective: waits for the save in flight and completes it; its path, or
  // "" when none was in flight.
  std::string finish();
  bool in_flight() const { return pending_ != nullptr; }
  // Host bytes held by this rank's save in flight (its snapshot).
  size_t pending_bytes() const;
  // Seconds the last completed background save spent writing (0 for a
  // save written in the foreground).
  double last_write_seconds() const { return last_seconds_; }

  // checkpoint.every > 0 and step is a multiple of it.
  bool due(int step) const;
  const std::string& root() const { return root_; }
  // The step directory written or loaded last ("" if none).
  const std::string& last_path() const { return last_path_; }
  // After resume(): the training samples the checkpoint's run had consumed
  // (0 on a fresh start), where the data stream continues.
  int64_t resumed_samples() const { return resumed_samples_; }
  // After resume(): one line each for the data-stream settings that changed
  // since the checkpoint (data_stream_changes).
  const std::vector<std::string>& resume_notes() const { return resume_notes_; }

 private:
  enum class ShardStatus : int32_t { none = 0, written = 1, failed = 2 };
  struct Pending {  // a save begun and not yet completed
    int step = 0;
    std::map<std::string, double> scalars;
    std::filesystem::path tmp;
    std::unique_ptr<BackgroundWrite> write;  // background saves on writing ranks
    ShardStatus status = ShardStatus::none;
    FileDigest digest;
    std::string error;
  };
  std::unique_ptr<SafetensorsWriter> shard_writer(int step, const std::vector<ShardEntry>& entries,
                                                  HostStaging* snapshot) const;
  void complete(const Pending& p, const std::vector<int32_t>& got);
  int agree(int value_on_rank0);  // broadcast of one int from rank 0
  // Rank 0 runs `choose` (a step directory and its step; step -1: none; an
  // InputError refuses); the other ranks learn the step and find the same
  // directory with `locate(step)`, without re-reading every file. A refusal
  // throws on every rank, rank 0's naming the cause, the others `key`.
  struct Choice {
    std::string dir;
    int step = -1;
  };
  Choice agree_on_checkpoint(const char* key, const std::function<Choice()>& choose,
                             const std::function<std::string(int)>& locate);
  void load_fp8_state(const CheckpointReader& reader, model::Buffers& buffers) const;
  // This rank's slices of every parameter (its ZeRO-3 shard where the
  // optimizer shards them), with AdamW's moments when `moments`.
  void read_parameters(const CheckpointReader& reader, model::Buffers& buffers, AdamW& optimizer,
                       bool moments) const;
  static std::string step_dir_of(const std::string& source, int step);
  Json make_metadata(int step, const std::map<std::string, double>& scalars) const;
  void prune(int step) const;
  void abandon_newer(int step) const;

  JobSpec spec_;
  parallel::Communicator& world_;
  Device device_;
  ShardPosition position_;
  FILE* warn_;
  std::string root_;
  std::string last_path_;
  int resumed_step_ = 0;
  int64_t resumed_samples_ = 0;
  std::vector<std::string> resume_notes_;
  int run_id_ = 0;  // rank 0's pid: names the temporary directory on every rank
  void* scratch_ = nullptr;  // device bytes for the collectives
  // checkpoint.async's snapshot, page-locked on GPUs, kept from one save to the
  // next; declared before pending_ so a write in flight ends before it goes.
  HostStaging snapshot_;
  std::unique_ptr<Pending> pending_;
  double last_seconds_ = 0;
};

}  // namespace trainer::engine::checkpoint
