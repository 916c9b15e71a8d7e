// Reading side of the checkpoint format: naming, verification, choosing the
// newest good checkpoint, and assembling tensors from shards.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/safetensors.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

std::string step_dir_name(int step) { return fmt::format("step_{:06d}", step); }
std::string shard_file_name(int rank) { return fmt::format("rank_{:05d}.safetensors", rank); }

int parse_step_name(std::string name) {
  while (name.size() > 1 && name.back() == '/') name.pop_back();
  name = fs::path(name).filename().string();
  static const std::regex re("step_([0-9]{1,9})");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return -1;
  return std::stoi(m[1].str());
}

std::string checkpoint_root(const JobSpec& spec) {
  if (!spec.checkpoint.dir.empty()) return spec.checkpoint.dir;
  return (fs::path(spec.run.dir) / "checkpoints").string();
}

namespace {

Json parse_json_file(const std::string& path) {
  TRAINER_INPUT_CHECK(fs::exists(path), "{}: missing: partial checkpoint (the save never completed)",
                      path);
  return parse_json(read_text_file(path), path);
}

// Wraps a structural error in metadata/manifest into one line naming the file.
template <class F>
auto with_file(const std::string& path, F&& f) {
  try {
    return f();
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
}

// The highest-numbered step directory under root ("" when none), complete or not.
std::string newest_step_dir(const std::string& root) {
  const std::vector<std::pair<int, std::string>> dirs = step_dirs(root);
  return dirs.empty() ? std::string() : dirs.front().second;
}

}  // namespace

Json verify_checkpoint(const std::string& step_dir) {
  TRAINER_INPUT_CHECK(fs::is_directory(step_dir), "{}: not a checkpoint directory", step_dir);
  std::string manifest_path = (fs::path(step_dir) / "manifest.json").string();
  Json manifest = parse_json_file(manifest_path);
  with_file(manifest_path, [&] {
    if (manifest.at("format_version").as_int() != kFormatVersion)
      throw std::runtime_error(fmt::format("format_version {} (this build reads {})",
                                           manifest.at("format_version").as_int(), kFormatVersion));
    const Json& files = manifest.at("files");
    if (files.members().empty()) throw std::runtime_error("lists no files");
    for (const auto& [name, entry] : files.members()) {
      if (name.find('/') != std::string::npos || name == ".." || name == ".")
        throw std::runtime_error(fmt::format("bad file name \"{}\"", name));
      (void)entry.at("bytes").as_int();
      (void)entry.at("xxh3").as_string();
    }
    return 0;
  });
  for (const auto& [name, entry] : manifest.at("files").members()) {
    std::string path = (fs::path(step_dir) / name).string();
    TRAINER_INPUT_CHECK(fs::exists(path), "{}: missing (listed in manifest.json)", path);
    FileDigest d = digest_file(path);
    auto want_bytes = static_cast<uint64_t>(entry.at("bytes").as_int());
    TRAINER_INPUT_CHECK(d.bytes == want_bytes, "{}: truncated or extended: {} bytes, manifest says {}",
                        path, d.bytes, want_bytes);
    const std::string& want = entry.at("xxh3").as_string();
    TRAINER_INPUT_CHECK(hex64(d.xxh3) == want,
                        "{}: checksum mismatch (xxh3 {}, manifest says {}): file is corrupt", path,
                        hex64(d.xxh3), want);
  }
  std::string meta_path = (fs::path(step_dir) / "metadata.json").string();
  TRAINER_INPUT_CHECK(manifest.at("files").find("metadata.json"),
                      "{}: does not list metadata.json", manifest_path);
  Json meta = parse_json_file(meta_path);
  with_file(meta_path, [&] {
    if (meta.at("format").as_string() != "trainer-checkpoint")
      throw std::runtime_error("format is not \"trainer-checkpoint\"");
    if (meta.at("format_version").as_int() != kFormatVersion)
      throw std::runtime_error(fmt::format("format_version {} (this build reads {})",
                                           meta.at("format_version").as_int(), kFormatVersion));
    const int64_t step = meta.at("step").as_int();
    if (step != manifest.at("step").as_int())
      throw std::runtime_error(fmt::format("step {}, but manifest.json says {}", step,
                                           manifest.at("step").as_int()));
    const int named = parse_step_name(fs::path(step_dir).lexically_normal().string());
    if (named >= 0 && named != step)
      throw std::runtime_error(fmt::format("step {}, but its directory is named for step {}", step, named));
    (void)meta.at("job_spec").as_string();
    for (const Json& s : meta.at("shards").items())
      if (!manifest.at("files").find(s.as_string()))
        throw std::runtime_error(fmt::format("shard {} is not in manifest.json", s.as_string()));
    return 0;
  });
  for (const Json& s : meta.at("shards").items())
    SafetensorsFile((fs::path(step_dir) / s.as_string()).string());  // header check
  return meta;
}

std::vector<std::pair<int, std::string>> step_dirs(const std::string& root) {
  std::error_code ec;
  std::vector<std::pair<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int step = entry.is_directory() ? parse_step_name(entry.path().filename().string()) : -1;
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  return found;
}

std::string find_latest_good(const std::string& root, FILE* warn) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return "";
  std::vector<std::pair<int, std::string>> found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (!entry.is_directory()) continue;
    std::string name = entry.path().filename().string();
    int step = parse_step_name(name);
    if (step >= 0) {
      found.emplace_back(step, entry.path().string());
    } else if (warn && name.rfind("step_", 0) == 0 && name.find(".tmp-") != std::string::npos) {
      fmt::print(warn, "trainer: warning: {}: partial checkpoint (an interrupted save), ignored\n",
                 entry.path().string());
    }
  }
  std::sort(found.rbegin(), found.rend());
  for (const auto& [step, path] : found) {
    try {
      verify_checkpoint(path);
      return path;
    } catch (const InputError& e) {
      if (warn)
        fmt::print(warn, "trainer: warning: skipping checkpoint: {}; trying an older one\n", e.what());
    }
  }
  return "";
}

bool is_step_dir(const std::string& path) {
  return fs::exists(fs::path(path) / "manifest.json") || fs::exists(fs::path(path) / "metadata.json") ||
         parse_step_name(fs::path(path).lexically_normal().string()) >= 0 ||
         fs::path(path).filename().string().find(".tmp-") != std::string::npos;
}

bool is_checkpoint_source(const std::string& path) {
  if (is_step_dir(path)) return true;
  for (const std::string& root : checkpoint_roots(path))
    if (!step_dirs(root).empty()) return true;
  return false;
}

std::vector<std::string> checkpoint_roots(const std::string& path) {
  std::vector<std::string> roots = {path, (fs::path(path) / "checkpoints").string()};
  // A run directory whose job put its checkpoints elsewhere (checkpoint.dir).
  fs::path job = fs::path(path) / "job.yaml";
  if (fs::exists(job)) {
    try {
      roots.push_back(checkpoint_root(load_job_spec(job.string())));
    } catch (const InputError&) {
      // Not a job this build reads: the other candidates still apply.
    }
  }
  return roots;
}

std::string resolve_checkpoint(const std::string& path, FILE* warn, bool fall_back) {
  TRAINER_INPUT_CHECK(fs::exists(path), "{}: no such checkpoint", path);
  if (is_step_dir(path)) {
    verify_checkpoint(path);
    return path;
  }
  for (const std::string& root : checkpoint_roots(path)) {
    std::string latest = (fs::path(root) / "latest").string();
    if (!fall_back) {
      // The path means its newest checkpoint: that one or an error, never an older one.
      const std::string newest = newest_step_dir(root);
      if (newest.empty()) continue;
      verify_checkpoint(newest);
      return newest;
    }
    std::string best = find_latest_good(root, warn);
    if (!best.empty()) {
      std::error_code ec;
      const fs::path home = fs::path(best).parent_path();
      const bool own = fs::equivalent(home, path, ec) ||
                       fs::equivalent(home, fs::path(path) / "checkpoints", ec);
      if (warn && !own)  // a copied run directory would otherwise read the original's silently
        fmt::print(warn, "trainer: note: {} holds no checkpoint of its own; using {} (checkpoint.dir "
                   "of its job.yaml)\n", path, best);
      return best;
    }
    TRAINER_INPUT_CHECK(!fs::exists(latest),
                        "{}: names a checkpoint but none under {} is complete and intact", latest,
                        root);
  }
  throw InputError(fmt::format("{}: no checkpoint found (expected step_*/ with manifest.json, or "
                               "checkpoints/ below a run directory)",
                               path));
}

CheckpointReader::CheckpointReader(const std::string& step_dir) : dir_(step_dir) {
  std::string meta_path = (fs::path(step_dir) / "metadata.json").string();
  metadata_ = parse_json_file(meta_path);
  with_file(meta_path, [&] {
    for (const Json& s : metadata_.at("shards").items()) {
      std::string path = (fs::path(step_dir) / s.as_string()).string();
      files_.push_back(std::make_unique<SafetensorsFile>(path));
      const SafetensorsFile& f = *files_.back();
      for (const auto& [name, view] : f.tensors()) {
        auto it = f.metadata().find("slice." + name);
        TRAINER_INPUT_CHECK(it != f.metadata().end(), "{}: tensor \"{}\" has no slice metadata",
                            path, name);
        std::string where = fmt::format("{}: tensor \"{}\"", path, name);
        Slice slice = Slice::from_json(parse_json(it->second, where), where);
        TRAINER_INPUT_CHECK(view.dtype == "F32" && view.numel() == slice.numel(),
                            "{}: stored as {} [{}] but its slice says F32 of {} elements", where,
                            view.dtype, fmt::join(view.shape, ", "), slice.numel());
        index_[name].push_back({static_cast<int>(files_.size()) - 1, std::move(slice)});
      }
    }
    return 0;
  });
}

CheckpointReader::~CheckpointReader() = default;

int CheckpointReader::step() const { return static_cast<int>(metadata_.at("step").as_int()); }

JobSpec CheckpointReader::job_spec() const {
  return parse_job_spec(metadata_.at("job_spec").as_string(),
                        (fs::path(dir_) / "metadata.json").string() + " (job_spec)");
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& entry : index_) out.push_back(entry.first);  // a std::map: sorted
  return out;
}

const Slice& CheckpointReader::any_slice(const std::string& name) const {
  auto it = index_.find(name);
  TRAINER_INPUT_CHECK(it != index_.end(), "{}: checkpoint holds no tensor \"{}\"", dir_, name);
  return it->second.front().slice;
}

void CheckpointReader::read(const std::string& name, const Slice& dst, float* out) const {
  auto it = index_.find(name);
  TRAINER_INPUT_CHECK(it != index_.end(), "{}: checkpoint holds no tensor \"{}\" (saved from a "
                      "different model?)", dir_, name);
  std::fill(out, out + dst.numel(), 0.0f);
  int64_t copied = 0;
  for (const Piece& p : it->second) {
    const Slice& src = p.slice;
    const std::string& file = files_[p.file]->path();
    bool same = src.global_shape.size() == dst.global_shape.size();
    for (size_t d = 0; same && d < dst.global_shape.size(); ++d)
      same = src.global_shape[d] == dst.global_shape[d] || (d == 0 && dst.valid_rows >= 0 &&
                                                            src.valid_rows == dst.valid_rows);
    TRAINER_INPUT_CHECK(same, "{}: tensor \"{}\" has global shape [{}], the model expects [{}]", file,
                        name, fmt::join(src.global_shape, ", "), fmt::join(dst.global_shape, ", "));
    const TensorView& v = files_[p.file]->tensor(name);
    // Our writer keeps the data section 8-byte aligned, so F32 views are aligned.
    copied += copy_overlap(src, reinterpret_cast<const float*>(v.data), dst, out);
  }
  TRAINER_INPUT_CHECK(copied == required_elements(dst),
                      "{}: tensor \"{}\": shards cover {} of the {} elements this rank needs", dir_,
                      name, copied, required_elements(dst));
}

}  // namespace trainer::engine::checkpoint
