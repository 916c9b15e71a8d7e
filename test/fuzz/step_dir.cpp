#include "test/fuzz/step_dir.h"

#include <filesystem>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/json.h"
#include "test/fuzz/fuzz_target.h"

namespace trainer::fuzz {

namespace fs = std::filesystem;
using namespace engine::checkpoint;

std::string write_step_dir(const uint8_t* data, size_t size) {
  if (size < 2) return "";
  InputCursor in(data, size);
  const std::string meta(in.take_prefixed());
  const std::string shard(in.rest());
  const fs::path dir = write_input_file("ckpt", nullptr, 0) + ".d";
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
  return dir.string();
}

}  // namespace trainer::fuzz
