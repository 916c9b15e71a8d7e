// Checkpointer: the collective save (every writing rank its shard, rank 0 the
// metadata, manifest, rename and `latest`) and resume.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/background_write.h"
#include "engine/checkpoint/resume_check.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/shard_contents.h"
#include "engine/checkpoint/state_range.h"
#include "kernels/error.h"
#include "kernels/memory.h"
#include "parallel/grad_sync.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

namespace {

constexpr int kDigestInts = 5;  // writes, xxh3 lo, xxh3 hi, bytes lo, bytes hi

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

// Deleting a directory file by file is not atomic: rename it out of the
// step_N namespace first, so a kill midway never leaves a final-named
// directory with files missing.
void discard(const fs::path& dir, int run_id) {
  fs::path doomed = dir;
  doomed += fmt::format(".del-{}", run_id);
  std::error_code ec;
  fs::rename(dir, doomed, ec);
  remove_quietly(ec ? dir : doomed);
}

// The metadata fields resume() reads after every rank has agreed to go on,
// checked first on rank 0: a hand-edited metadata.json is refused there, in
// one line naming it, instead of escaping as a bare JSON error (found by
// test/fuzz/fuzz_resume).
void check_resume_fields(const CheckpointReader& saved) {
  const std::string meta = (fs::path(saved.dir()) / "metadata.json").string();
  try {
    if (const Json* position = saved.metadata().find("data_position"))
      if (const Json* consumed = position->find("samples_consumed"))
        TRAINER_INPUT_CHECK(consumed->as_int() >= 0, "{}: data_position.samples_consumed is {}",
                            meta, consumed->as_int());
    for (const auto& [key, value] : saved.metadata().at("scalars").members())
      TRAINER_INPUT_CHECK(std::isfinite(value.as_number()) && std::fabs(value.as_number()) < 0x1p62,
                          "{}: scalars.{} is {}", meta, key, value.as_number());
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw InputError(fmt::format("{}: {}", meta, e.what()));
  }
}

}  // namespace

Checkpointer::Checkpointer(const JobSpec& spec, parallel::Communicator& world, Device device,
                           ShardPosition position, FILE* warn)
    : spec_(spec), world_(world), device_(device), position_(position), warn_(warn),
      snapshot_(device) {
  root_ = checkpoint_root(spec);
  size_t bytes = static_cast<size_t>(world_.size()) * kDigestInts * 4 + 64;
  scratch_ = device_alloc(device_, bytes);
  run_id_ = agree(static_cast<int>(::getpid()));
}

// A save still in flight is waited for (its thread must not outlive the
// process's state) but not completed: completing is collective, and a
// destructor may run on one rank's error. Its directory stays a partial
// save, which the next start skips and the next save deletes.
Checkpointer::~Checkpointer() {
  pending_.reset();
  device_free(device_, scratch_);
}

int Checkpointer::agree(int value_on_rank0) {
  if (world_.size() == 1) return value_on_rank0;
  Tensor t(scratch_, {1}, DType::i32, device_);
  int32_t v = value_on_rank0;
  copy_from_host(t, &v);
  world_.broadcast(t, 0);
  world_.synchronize();
  copy_to_host(&v, t);
  return v;
}

bool Checkpointer::due(int step) const {
  return spec_.checkpoint.every > 0 && step % spec_.checkpoint.every == 0;
}

Json Checkpointer::make_metadata(int step, const std::map<std::string, double>& scalars) const {
  const ParallelSpec& p = spec_.parallel;
  int world = world_.size();
  Json mesh = Json::object();
  mesh.set("world", Json(world));
  mesh.set("tp", Json(p.tp));
  mesh.set("pp", Json(p.pp));
  mesh.set("cp", Json(p.cp));
  mesh.set("dp", Json(p.dp > 0 ? p.dp : world / std::max(1, p.tp * p.pp * p.cp)));
  mesh.set("ep", Json(p.ep));
  mesh.set("zero", Json(p.zero));
  Json data = Json::object();
  // Sample order is a pure function of the seed; the position is the count of
  // samples consumed (the steps since a resume times their global batch).
  data.set("next_step", Json(step + 1));
  data.set("samples_consumed", Json(samples_consumed_after(step, resumed_step_, resumed_samples_,
                                                          BatchSchedule(spec_.train))));
  data.set("global_batch", Json(spec_.train.global_batch));
  data.set("seed", Json(std::to_string(spec_.run.seed)));
  Json rng = Json::object();
  rng.set("kind", Json("counter-based: (seed, parameter name, element index) and (seed, sample, position)"));
  rng.set("seed", Json(std::to_string(spec_.run.seed)));
  Json sc = Json::object();
  for (const auto& [k, v] : scalars) sc.set(k, Json(v));
  Json m = Json::object();
  m.set("format", Json("trainer-checkpoint"));
  m.set("format_version", Json(kFormatVersion));
  m.set("step", Json(step));
  m.set("mesh", std::move(mesh));
  m.set("data_position", std::move(data));
  m.set("rng", std::move(rng));
  m.set("scalars", std::move(sc));
  m.set("shards", Json::array());
  m.set("job_spec", Json(job_spec_to_yaml(spec_)));
  return m;
}

// A checkpoint without an operand's entry (saved in another precision, or a
// layer that was bf16 then) leaves that operand's scaling fresh.
void Checkpointer::load_fp8_state(const CheckpointReader& reader, model::Buffers& buffers) const {
  Fp8Scaling* f = buffers.fp8();
  if (!f) return;
  for (int i = 0; i < f->size(); ++i) {
    const std::string name = buffers.fp8_names()[i] + kFp8StateSuffix;
    if (!reader.has(name)) continue;
    Slice s = Slice::whole(reader.any_slice(name).global_shape);
    std::vector<float> state(static_cast<size_t>(s.numel()));
    reader.read(name, s, state.data());
    f->set_tensor_state(i, state, reader.dir() + ": " + name);
  }
}

// The shard this rank writes (shard_contents.h). Without `snapshot` the
// tensors stream from the device as the file is written; with it they are
// copied into it now (the step's state, while training goes on) and the
// writer reads that copy.
std::unique_ptr<SafetensorsWriter> Checkpointer::shard_writer(int step,
                                                              const std::vector<ShardEntry>& entries,
                                                              HostStaging* snapshot) const {
  auto w = std::make_unique<SafetensorsWriter>();
  w->set_metadata("format", "trainer-shard");
  w->set_metadata("format_version", std::to_string(kFormatVersion));
  w->set_metadata("rank", std::to_string(world_.rank()));
  w->set_metadata("step", std::to_string(step));
  // Every byte of the snapshot is filled below, entry after entry.
  float* const copy = snapshot ? static_cast<float*>(snapshot->reserve(shard_bytes(entries))) : nullptr;
  int64_t at = 0;
  for (const ShardEntry& e : entries) {
    // The entry's bytes into dst: host state copied now (it is small and may
    // change before a lazy write), device tensors when called.
    std::function<void(void*)> fill;
    if (e.host) {
      auto values = std::make_shared<std::vector<float>>(e.host());
      TRAINER_CHECK(static_cast<int64_t>(values->size()) == e.numel, "{}: {} elements, listed {}",
                    e.name, values->size(), e.numel);
      fill = [values](void* dst) { std::memcpy(dst, values->data(), values->size() * sizeof(float)); };
    } else {
      Tensor t = e.device();
      TRAINER_CHECK(t.numel() == e.numel, "{}: {} elements, listed {}", e.name, t.numel(), e.numel);
      fill = [t](void* dst) { copy_to_host(dst, t); };
    }
    if (snapshot) {
      float* dst = copy + at;
      fill(dst);
      w->add(e.name, "F32", e.shape, dst, static_cast<size_t>(e.numel) * sizeof(float));
      at += e.numel;
    } else {
      w->add_lazy(e.name, "F32", e.shape, std::move(fill));
    }
    w->set_metadata("slice." + e.name, e.slice);
  }
  return w;
}

void Checkpointer::save(int step, const model::Buffers& buffers, const AdamW& optimizer,
                        const std::map<std::string, double>& scalars, bool background) {
  finish();  // one save in flight at most: the one before completes first
  const int rank = world_.rank();
  const fs::path root(root_);
  const std::string name = step_dir_name(step);
  auto p = std::make_unique<Pending>();
  p->step = step;
  p->scalars = scalars;
  p->tmp = root / fmt::format("{}.tmp-{}", name, run_id_);
  if (rank == 0) {
    fs::create_directories(root);
    remove_quietly(p->tmp);
    fs::create_directory(p->tmp);
  }
  world_.barrier();

  const std::string shard = (p->tmp / shard_file_name(rank)).string();
  // A rank that cannot take its snapshot or write its shard (no host memory,
  // a full disk) records the failure instead of throwing alone: finish(),
  // which every rank reaches, turns it into an Error on all of them.
  if (!position_.writes_anything()) {
    p->status = ShardStatus::none;
  } else {
    try {
      const std::vector<ShardEntry> entries = shard_entries(buffers, optimizer, position_);
      if (background) {
        p->write = std::make_unique<BackgroundWrite>(shard_writer(step, entries, &snapshot_),
                                                     shard_bytes(entries), shard);
      } else {
        p->digest = shard_writer(step, entries, nullptr)->write(shard);
        p->status = ShardStatus::written;
      }
    } catch (const std::exception& e) {
      p->status = ShardStatus::failed;
      const std::string what = e.what();  // a write error names the file already
      p->error = what.find(shard) != std::string::npos ? what : fmt::format("{}: {}", shard, what);
    }
  }
  pending_ = std::move(p);
  if (!background) finish();
}

size_t Checkpointer::pending_bytes() const {
  return pending_ && pending_->write ? pending_->write->bytes() : 0;
}

std::string Checkpointer::poll() {
  if (!pending_) return "";
  const int mine = !pending_->write || pending_->write->done() ? 1 : 0;
  const int ready = world_.size() > 1 ? static_cast<int>(parallel::group_sum(world_, mine)) : mine;
  return ready == world_.size() ? finish() : std::string();
}

// Collective: every rank's shard status and digest go to every rank; rank 0
// writes metadata.json and manifest.json, renames the directory into place
// and replaces `latest`; all ranks learn the outcome, so a failure on any of
// them ends every rank with an error instead of leaving some waiting.
std::string Checkpointer::finish() {
  if (!pending_) return "";
  std::unique_ptr<Pending> p = std::move(pending_);
  double seconds = 0;  // a foreground save's write is not timed
  if (p->write) {
    p->write->wait();
    seconds = p->write->seconds();
    if (p->write->error().empty()) {
      p->status = ShardStatus::written;
      p->digest = p->write->digest();
    } else {
      p->status = ShardStatus::failed;
      p->error = p->write->error();
    }
    p->write.reset();  // the snapshot (snapshot_) is free for the next save
  }
  const int rank = world_.rank();
  const int n = world_.size();
  const FileDigest& digest = p->digest;
  int32_t host[kDigestInts] = {static_cast<int32_t>(p->status),
                               static_cast<int32_t>(digest.xxh3 & 0xffffffffu),
                               static_cast<int32_t>(digest.xxh3 >> 32),
                               static_cast<int32_t>(digest.bytes & 0xffffffffu),
                               static_cast<int32_t>(digest.bytes >> 32)};
  std::vector<int32_t> got(host, host + kDigestInts);
  if (n > 1) {  // one rank needs no collective (and no device copy)
    Tensor mine(scratch_, {kDigestInts}, DType::i32, device_);
    Tensor all(static_cast<int32_t*>(scratch_) + kDigestInts, {int64_t(n) * kDigestInts},
               DType::i32, device_);
    copy_from_host(mine, host);
    world_.all_gather(mine, all);
    world_.synchronize();
    got.resize(static_cast<size_t>(n) * kDigestInts);
    copy_to_host(got.data(), all);
  }
  const std::string name = step_dir_name(p->step);
  int failed_rank = -1;
  for (int r = 0; r < n && failed_rank < 0; ++r)
    if (got[static_cast<size_t>(r) * kDigestInts] == static_cast<int32_t>(ShardStatus::failed))
      failed_rank = r;
  std::string error;
  if (failed_rank >= 0) {
    if (rank == 0) discard(p->tmp, run_id_);
    error = rank == failed_rank
                ? fmt::format("checkpoint {}: writing this rank's shard failed: {}", name, p->error)
                : fmt::format("checkpoint {}: rank {} could not write its shard (its message names "
                              "the cause)", name, failed_rank);
  } else if (rank == 0) {
    try {
      complete(*p, got);
    } catch (const std::exception& e) {
      error = fmt::format("checkpoint {}: completing {} failed: {}", name, p->tmp.string(), e.what());
    }
  }
  // Rank 0 may have failed to complete the directory: everyone learns it.
  if (failed_rank < 0 && agree(error.empty() ? 1 : 0) == 0 && error.empty())
    error = fmt::format("checkpoint {}: rank 0 could not complete it (its message names the cause)",
                        name);
  if (!error.empty()) {
    const std::string previous = last_path_.empty() ? "there is no earlier checkpoint"
                                                    : "the last good one is " + last_path_;
    throw Error(fmt::format("{}; {}", error, previous));
  }
  last_path_ = (fs::path(root_) / name).string();
  last_seconds_ = seconds;
  world_.barrier();
  return last_path_;
}

void Checkpointer::complete(const Pending& p, const std::vector<int32_t>& got) {
  const fs::path root(root_);
  const std::string name = step_dir_name(p.step);
  const fs::path final_dir = root / name;
  Json meta = make_metadata(p.step, p.scalars);
  Json files = Json::object();
  Json shards = Json::array();
  for (int r = 0; r < world_.size(); ++r) {
    const int32_t* g = &got[static_cast<size_t>(r) * kDigestInts];
    if (g[0] != static_cast<int32_t>(ShardStatus::written)) continue;
    auto lo = [](int32_t x) { return static_cast<uint64_t>(static_cast<uint32_t>(x)); };
    Json f = Json::object();
    f.set("bytes", Json(lo(g[3]) | lo(g[4]) << 32));
    f.set("xxh3", Json(hex64(lo(g[1]) | lo(g[2]) << 32)));
    files.set(shard_file_name(r), std::move(f));
    shards.push(Json(shard_file_name(r)));
  }
  meta.set("shards", std::move(shards));
  FileDigest md = write_file_durably((p.tmp / "metadata.json").string(), meta.dump(2) + "\n");
  Json mf = Json::object();
  mf.set("bytes", Json(md.bytes));
  mf.set("xxh3", Json(hex64(md.xxh3)));
  files.set("metadata.json", std::move(mf));
  Json manifest = Json::object();
  manifest.set("format_version", Json(kFormatVersion));
  manifest.set("step", Json(p.step));
  manifest.set("files", std::move(files));
  // The manifest is written last: a directory without one is a partial save.
  write_file_durably((p.tmp / "manifest.json").string(), manifest.dump(2) + "\n");
  fsync_directory(p.tmp.string());
  // Saving a step that already exists (resumed and saved again): move the old one aside
  // and delete it only once the new one is in place.
  fs::path aside;
  if (fs::exists(final_dir)) {
    aside = root / fmt::format("{}.old-{}", name, run_id_);
    remove_quietly(aside);
    fs::rename(final_dir, aside);
  }
  fs::rename(p.tmp, final_dir);
  fsync_directory(root.string());
  replace_file_atomically((root / "latest").string(), name + "\n");
  if (!aside.empty()) remove_quietly(aside);  // already out of the step_N namespace
  abandon_newer(p.step);
  prune(p.step);
}

void Checkpointer::prune(int step) const {
  static const std::regex partial("step_([0-9]{1,9})\\.tmp-[0-9]+"),
      dead("step_[0-9]{1,9}\\.(old|del)-[0-9]+");
  std::vector<std::pair<int, fs::path>> done;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_, ec)) {
    std::string n = e.path().filename().string();
    std::smatch m;
    const int done_step = parse_step_name(n);
    if (done_step >= 0 && fs::exists(e.path() / "manifest.json")) {
      done.emplace_back(done_step, e.path());
    } else if (std::regex_match(n, m, partial) && std::stoi(m[1].str()) <= step) {
      remove_quietly(e.path());  // a save that died: never loadable, only wasting space
    } else if (std::regex_match(n, dead)) {
      remove_quietly(e.path());  // a deletion or replacement that was cut short
    }
  }
  std::sort(done.rbegin(), done.rend());
  for (size_t i = static_cast<size_t>(spec_.checkpoint.keep); i < done.size(); ++i)
    discard(done[i].second, run_id_);
}

// Checkpoints of later steps than the one just saved were left by a run this
// one resumed before (auto falling back past a corrupt one, or an explicit
// older path): another trajectory. Left as step_N they would be resumed by
// the next auto start and, being newest, would push this run's saves out of
// checkpoint.keep. They are renamed out of the step_N namespace (kept, never
// resumed or pruned; delete them by hand) and named on the warning stream.
void Checkpointer::abandon_newer(int step) const {
  std::error_code ec;
  std::vector<fs::path> newer;
  for (const auto& e : fs::directory_iterator(root_, ec))
    if (parse_step_name(e.path().filename().string()) > step) newer.push_back(e.path());
  for (const fs::path& p : newer) {
    const fs::path to = p.parent_path() / fmt::format("{}.abandoned-{}", p.filename().string(), run_id_);
    fs::rename(p, to, ec);
    if (warn_)
      fmt::print(warn_, "trainer: warning: {} is newer than this run's step {} (left by the run it "
                 "resumed before); {}\n", p.string(), step,
                 ec ? fmt::format("could not rename it: {}", ec.message())
                    : fmt::format("renamed {} so no later start resumes it", to.filename().string()));
  }
  if (!newer.empty()) fsync_directory(root_);
}

int Checkpointer::resume(model::Buffers& buffers, AdamW& optimizer,
                         std::map<std::string, double>* scalars) {
  const std::string& mode = spec_.checkpoint.resume;
  if (mode == "never") return 0;
  const bool automatic = mode == "auto";
  const Choice choice = agree_on_checkpoint(
      "checkpoint.resume",
      [&]() -> Choice {
        const std::string chosen = automatic ? find_latest_good(root_, warn_)
                                             : resolve_checkpoint(mode, warn_, /*fall_back=*/false);
        if (chosen.empty()) return {};
        const CheckpointReader saved_by(chosen);
        int saved = saved_by.step();
        TRAINER_INPUT_CHECK(saved >= 0 && saved <= spec_.train.steps,
                            "{}: saved after step {}, outside train.steps ({})", chosen, saved,
                            spec_.train.steps);
        const std::vector<std::string> diff = model_differences(saved_by.job_spec().model, spec_.model);
        TRAINER_INPUT_CHECK(diff.empty(),
                            "{}: saved by another model: {} (to start a new run from its weights, "
                            "give it as model.init_from instead)",
                            chosen, fmt::join(diff, "; "));
        check_resume_fields(saved_by);
        return {chosen, saved};
      },
      [&](int step) {
        return automatic ? (fs::path(root_) / step_dir_name(step)).string() : step_dir_of(mode, step);
      });
  if (choice.step < 0) return 0;
  const int step = choice.step;
  const std::string& chosen = choice.dir;

  CheckpointReader reader(chosen);
  read_parameters(reader, buffers, optimizer, /*moments=*/true);
  load_fp8_state(reader, buffers);
  resumed_step_ = step;
  const JobSpec saved_spec = reader.job_spec();
  const Json* position = reader.metadata().find("data_position");
  const Json* consumed = position ? position->find("samples_consumed") : nullptr;
  // Without the field (a checkpoint from before it was written), the saving
  // run's own batch says how far its data went.
  resumed_samples_ = consumed ? consumed->as_int()
                              : samples_consumed_after(step, 0, 0, BatchSchedule(saved_spec.train));
  resume_notes_ = data_stream_changes(saved_spec, spec_);
  if (scalars) {
    scalars->clear();
    for (const auto& [k, val] : reader.metadata().at("scalars").members()) (*scalars)[k] = val.as_number();
  }
  last_path_ = chosen;
  world_.barrier();
  return step;
}

Checkpointer::Choice Checkpointer::agree_on_checkpoint(
    const char* key, const std::function<Choice()>& choose,
    const std::function<std::string(int)>& locate) {
  // One code carries the outcome: -1 refused, 0 none, k + 1 the checkpoint
  // saved after step k.
  Choice choice;
  std::string error;
  int code = 0;
  if (world_.rank() == 0) {
    try {
      choice = choose();
      code = choice.step + 1;
    } catch (const InputError& e) {
      error = e.what();
      code = -1;
    }
  }
  code = agree(code);
  if (code < 0) {
    if (world_.rank() == 0) throw InputError(error);
    throw InputError(fmt::format("{}: the checkpoint was refused (see rank 0's message)", key));
  }
  if (world_.rank() != 0 && code > 0) choice = {locate(code - 1), code - 1};
  return choice;
}

// The step directory rank 0 chose under a user-given source (a step
// directory, or a root / run directory holding step_<step>), found again
// without re-reading every file.
std::string Checkpointer::step_dir_of(const std::string& source, int step) {
  if (is_step_dir(source)) return source;
  for (const std::string& root : checkpoint_roots(source))
    if (fs::exists(fs::path(root) / step_dir_name(step)))
      return (fs::path(root) / step_dir_name(step)).string();
  return source;  // gone since rank 0 looked: the reader names it
}

void Checkpointer::read_parameters(const CheckpointReader& reader, model::Buffers& buffers,
                                   AdamW& optimizer, bool moments) const {
  std::vector<float> host;
  Tensor m = optimizer.m(), v = optimizer.v();
  const bool sharded = optimizer.layout().shards_parameters();
  for (int i = 0; i < static_cast<int>(buffers.params().size()); ++i) {
    const model::Buffers::Param& p = buffers.params()[i];
    const model::BufferInfo& info = buffers.buffers()[p.value];
    Slice slice = local_slice(p.spec, info.shape, position_);
    StateRange st = state_range(slice, i, optimizer);
    if (!sharded) {
      host.resize(static_cast<size_t>(slice.numel()));
      reader.read(p.spec.name, slice, host.data());
      copy_from_host(buffers.get(p.value), host.data());
    }
    if (st.empty()) continue;
    if (sharded) {  // ZeRO-3: only this rank's shard of the values
      host.resize(static_cast<size_t>(st.slice.numel()));
      reader.read(p.spec.name, st.slice, host.data());
      copy_from_host(st.view(optimizer.param_shards()), host.data());
    }
    if (!moments) continue;
    host.resize(static_cast<size_t>(st.slice.numel()));
    reader.read(p.spec.name + kExpAvgSuffix, st.slice, host.data());
    copy_from_host(st.view(m), host.data());
    reader.read(p.spec.name + kExpAvgSqSuffix, st.slice, host.data());
    copy_from_host(st.view(v), host.data());
  }
}

std::string Checkpointer::init_weights(const std::string& source, model::Buffers& buffers,
                                       AdamW& optimizer) {
  // Rank 0 chooses, verifies and compares the models, as a resume does.
  const Choice choice = agree_on_checkpoint(
      "model.init_from",
      [&]() -> Choice {
        const std::string chosen = resolve_checkpoint(source, warn_, /*fall_back=*/false);
        const CheckpointReader saved_by(chosen);
        const ModelSpec saved = saved_by.job_spec().model;
        const std::vector<std::string> tensors = model_differences(saved, spec_.model, true);
        TRAINER_INPUT_CHECK(tensors.empty(),
                            "model.init_from: {} was saved by a model with other tensors: {}",
                            chosen, fmt::join(tensors, "; "));
        // What a new run from these weights may change (context extension's
        // RoPE, epsilon, top-k): said, not refused.
        if (warn_)
          for (const std::string& d : model_differences(saved, spec_.model))
            fmt::print(warn_, "trainer: note: model.init_from: {}\n", d);
        return {chosen, saved_by.step()};
      },
      [&](int step) { return step_dir_of(source, step); });
  const std::string& chosen = choice.dir;
  const CheckpointReader reader(chosen);
  read_parameters(reader, buffers, optimizer, /*moments=*/false);
  world_.barrier();
  return chosen;
}

}  // namespace trainer::engine::checkpoint
