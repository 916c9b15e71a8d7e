// engine/checkpoint: a step directory whose checksums are right but whose
// metadata.json and shard are crafted (a hand edit, another version's writer)
// is refused with one line, or read: its step, job spec, and every tensor by
// the slice it says it holds.
//
// Input: bytes 0-1 = metadata.json's length, then metadata.json, then the
// shard rank_00000.safetensors. The harness writes manifest.json with the
// files' true sizes and digests, as a save does.
#include <filesystem>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/slice.h"
#include "engine/json.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;
using namespace trainer::engine::checkpoint;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t meta_len = std::min<size_t>(data[0] | data[1] << 8, size - 2);
  const std::string meta(fuzz::as_text(data + 2, meta_len));
  const std::string shard(fuzz::as_text(data + 2 + meta_len, size - 2 - meta_len));
  const fs::path dir = fuzz::write_input_file("ckpt", nullptr, 0) + ".d";
  fs::remove_all(dir);  // a save never overwrites: write_file_durably refuses existing files
  fs::create_directories(dir);
  write_file_durably((dir / "metadata.json").string(), meta);
  write_file_durably((dir / "rank_00000.safetensors").string(), shard);
  int64_t step = 1;
  try {
    step = engine::parse_json(meta, "m").at("step").as_int();
  } catch (const std::exception&) {
  }
  engine::Json files = engine::Json::object();
  for (const char* name : {"metadata.json", "rank_00000.safetensors"}) {
    FileDigest d = digest_file((dir / name).string());
    engine::Json e = engine::Json::object();
    e.set("bytes", engine::Json(d.bytes));
    e.set("xxh3", engine::Json(hex64(d.xxh3)));
    files.set(name, std::move(e));
  }
  engine::Json manifest = engine::Json::object();
  manifest.set("format_version", engine::Json(kFormatVersion));
  manifest.set("step", engine::Json(step));
  manifest.set("files", std::move(files));
  write_file_durably((dir / "manifest.json").string(), manifest.dump());

  fuzz::expect_only_input_errors([&] {
    (void)verify_checkpoint(dir.string());
    CheckpointReader reader(dir.string());
    (void)reader.step();
    (void)reader.job_spec();
    for (const std::string& name : reader.names()) {
      const Slice& saved = reader.any_slice(name);
      Slice whole = Slice::whole(saved.global_shape, saved.tp_dim, saved.valid_rows);
      if (whole.numel() > (1 << 20)) continue;
      std::vector<float> out(static_cast<size_t>(whole.numel()));
      reader.read(name, whole, out.data());
    }
  });
  return 0;
}
