// Checkpoints of a real (tiny) training run: bit-identical resume, damaged and
// partial checkpoints detected and named, `auto` falling back to the previous
// good one, explicit paths refused, keep=K.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "parallel/communicator.h"
#include "test/checkpoint/checkpoint_helpers.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
using testing::fresh_temp_dir;
using testing::read_all;
using testing::resume;
using testing::save;
using testing::tiny_spec_in;
using testing::quiet_options;
using testing::train_losses;
namespace fs = std::filesystem;

namespace {

void flip_byte(const fs::path& p, size_t at) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
}

}  // namespace

TEST_CASE("checkpoint: resume continues with bit-identical losses", "[cpu][checkpoint]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    fs::path dir = fresh_temp_dir("resume");
    JobSpec spec = tiny_spec_in(dir, f);
    std::vector<double> uninterrupted;
    {
      Trainer a(spec, quiet_options());
      train_losses(a, 1, 3);
      save(a, spec, 3);
      uninterrupted = train_losses(a, 4, 6);
    }
    Trainer b(spec, quiet_options());
    std::vector<double> fresh = train_losses(b, 4, 4);
    CHECK(fresh[0] != uninterrupted[0]);  // without the checkpoint step 4 differs
    Trainer c(spec, quiet_options());
    REQUIRE(resume(c, spec) == 3);
    CHECK(train_losses(c, 4, 6) == uninterrupted);
    CHECK(read_all(dir / "checkpoints" / "latest") == "step_000003\n");
    fs::remove_all(dir);
  }
}

TEST_CASE("checkpoint: metadata holds the job, mesh, step and data position", "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("meta");
  JobSpec spec = tiny_spec_in(dir, Family::llama);
  Trainer a(spec, quiet_options());
  train_losses(a, 1, 2);
  save(a, spec, 2);
  fs::path step_dir = dir / "checkpoints" / "step_000002";
  Json meta = verify_checkpoint(step_dir.string());
  CHECK(meta.at("step").as_int() == 2);
  CHECK(meta.at("format_version").as_int() == kFormatVersion);
  CHECK(meta.at("data_position").at("samples_consumed").as_int() == 2 * spec.train.global_batch);
  CHECK(meta.at("mesh").at("world").as_int() == 1);
  CheckpointReader r(step_dir.string());
  CHECK(r.job_spec().model == spec.model);
  // Every parameter and its two moments, under global names with full slices.
  for (const auto& p : a.model().buffers().params()) {
    for (const char* suffix : {"", ".exp_avg", ".exp_avg_sq"}) {
      INFO(p.spec.name + suffix);
      CHECK(r.any_slice(p.spec.name + suffix).global_shape == p.spec.global_shape);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a flipped byte is detected and named; auto falls back", "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("flip");
  JobSpec spec = tiny_spec_in(dir, Family::gpt2);
  std::vector<double> after2;
  {
    Trainer a(spec, quiet_options());
    train_losses(a, 1, 2);
    save(a, spec, 2);
    after2 = train_losses(a, 3, 3);
    save(a, spec, 3);
  }
  fs::path shard = dir / "checkpoints" / "step_000003" / "rank_00000.safetensors";
  flip_byte(shard, fs::file_size(shard) - 100);
  CHECK_THROWS_WITH(verify_checkpoint((dir / "checkpoints" / "step_000003").string()),
                    Catch::Contains(shard.string()) && Catch::Contains("checksum mismatch"));

  Trainer b(spec, quiet_options());
  std::string warnings;
  CHECK(resume(b, spec, &warnings) == 2);
  CHECK_THAT(warnings, Catch::Contains(shard.string()) && Catch::Contains("checksum"));
  CHECK(train_losses(b, 3, 3) == after2);

  spec.checkpoint.resume = (dir / "checkpoints" / "step_000003").string();
  Trainer c(spec, quiet_options());
  CHECK_THROWS_AS(resume(c, spec), InputError);
  CHECK_THROWS_WITH(resume(c, spec), Catch::Contains(shard.string()));
  spec.checkpoint.resume = "never";
  CHECK(resume(c, spec) == 0);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: partial and truncated checkpoints are skipped by auto, refused by path",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("partial");
  JobSpec spec = tiny_spec_in(dir, Family::llama);
  {
    Trainer a(spec, quiet_options());
    train_losses(a, 1, 1);
    save(a, spec, 1);
    train_losses(a, 2, 2);
    save(a, spec, 2);
    train_losses(a, 3, 3);
    save(a, spec, 3);
  }
  fs::path root = dir / "checkpoints";
  // A save killed before its rename leaves only a temporary directory.
  fs::create_directories(root / "step_000004.tmp-99999");
  fs::copy_file(root / "step_000003" / "rank_00000.safetensors",
                root / "step_000004.tmp-99999" / "rank_00000.safetensors");
  fs::remove(root / "step_000003" / "manifest.json");
  fs::path shard2 = root / "step_000002" / "rank_00000.safetensors";
  fs::resize_file(shard2, fs::file_size(shard2) - 10);

  Trainer b(spec, quiet_options());
  std::string warnings;
  CHECK(resume(b, spec, &warnings) == 1);
  CHECK_THAT(warnings, Catch::Contains("step_000004.tmp-99999") && Catch::Contains("partial"));
  CHECK_THAT(warnings, Catch::Contains((root / "step_000003" / "manifest.json").string()));
  CHECK_THAT(warnings, Catch::Contains(shard2.string()) && Catch::Contains("truncated"));

  for (const char* bad : {"step_000003", "step_000004.tmp-99999", "step_000002"}) {
    spec.checkpoint.resume = (root / bad).string();
    Trainer c(spec, quiet_options());
    INFO(bad);
    CHECK_THROWS_AS(resume(c, spec), InputError);
  }
  spec.checkpoint.resume = (root / "step_000003").string();
  Trainer c(spec, quiet_options());
  CHECK_THROWS_WITH(resume(c, spec), Catch::Contains("manifest.json") && Catch::Contains("partial"));
  // An explicit run directory means its newest checkpoint: that one or exit 2,
  // never an older one (auto is the mode that falls back).
  spec.checkpoint.resume = dir.string();
  CHECK_THROWS_WITH(resume(c, spec), Catch::Contains((root / "step_000003" / "manifest.json").string()));
  fs::remove_all(root / "step_000003");
  CHECK_THROWS_WITH(resume(c, spec), Catch::Contains(shard2.string()) && Catch::Contains("truncated"));
  fs::remove_all(root / "step_000002");
  CHECK(resume(c, spec) == 1);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: keep deletes older ones only after the new one is complete",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("keep");
  JobSpec spec = tiny_spec_in(dir, Family::gpt2);
  spec.checkpoint.keep = 2;
  Trainer a(spec, quiet_options());
  fs::path root = dir / "checkpoints";
  fs::create_directories(root / "step_000001.tmp-424242");  // an old interrupted save
  for (int s = 1; s <= 4; ++s) {
    train_losses(a, s, s);
    save(a, spec, s);
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"latest", "step_000003", "step_000004"});
  CHECK(read_all(root / "latest") == "step_000004\n");
  // Saving a step that exists again (a resumed run's final save) replaces it intact.
  save(a, spec, 4);
  CHECK_NOTHROW(verify_checkpoint((root / "step_000004").string()));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a ZeRO shard of the optimizer loads its flat range of the state",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("zero");
  JobSpec spec = tiny_spec_in(dir, Family::llama);
  Trainer a(spec, quiet_options());
  train_losses(a, 1, 2);
  save(a, spec, 2);
  model::Buffers& buf = a.model().buffers();
  const int64_t total = static_cast<int64_t>(buf.category_bytes(model::Category::parameters) / 4);
  // A range that starts and ends inside parameters, as a dp shard does.
  AdamW shard(spec.optimizer, buf, total / 3 + 7, 2 * total / 3 + 5);
  std::vector<float> mem(shard.state_bytes() / 4, 0.0f);  // zeroed, as Arenas does
  shard.bind(mem.data(), Device::cpu);
  auto world = parallel::make_single_communicator("world");
  Checkpointer c(spec, *world, Device::cpu, {}, nullptr);
  CHECK(c.resume(buf, shard) == 2);
  const int64_t n = shard.end() - shard.begin();
  const float* full_m = a.optimizer().m().ptr<float>() + shard.begin();
  const float* full_v = a.optimizer().v().ptr<float>() + shard.begin();
  // Alignment gaps between parameters hold no state: zero in both.
  CHECK(std::vector<float>(full_m, full_m + n) ==
        std::vector<float>(shard.m().ptr<float>(), shard.m().ptr<float>() + n));
  CHECK(std::vector<float>(full_v, full_v + n) ==
        std::vector<float>(shard.v().ptr<float>(), shard.v().ptr<float>() + n));
  CHECK(*std::max_element(full_v, full_v + n) > 0.0f);
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a checkpoint of another model is refused naming the keys",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("other_model");
  JobSpec spec = tiny_spec_in(dir, Family::gpt2);
  testing::train_and_save(spec, {1});
  JobSpec wider = spec;
  wider.model.d_ff = 96;
  Trainer b(wider, quiet_options());
  CHECK_THROWS_WITH(resume(b, wider), Catch::Contains("step_000001: saved by another model: "
                                                      "model.d_ff is 64 in the checkpoint, 96"));
  JobSpec llama = tiny_spec_in(dir, Family::llama);
  Trainer c(llama, quiet_options());
  CHECK_THROWS_WITH(resume(c, llama), Catch::Contains("model.family is gpt2 in the checkpoint, llama"));
  // Below the job spec, the tensors are checked too (a checkpoint whose spec
  // matches but whose shard does not: the reader names the tensor).
  CheckpointReader reader((dir / "checkpoints" / "step_000001").string());
  Slice wrong = reader.any_slice("transformer.h.0.mlp.c_fc.weight");
  wrong.global_shape[0] += 1;
  std::vector<float> out(static_cast<size_t>(wrong.numel()));
  CHECK_THROWS_WITH(reader.read("transformer.h.0.mlp.c_fc.weight", wrong, out.data()),
                    Catch::Contains("rank_00000.safetensors") && Catch::Contains("global shape"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: SIGKILL during saves never leaves a bad complete checkpoint",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("kill");
  JobSpec spec = tiny_spec_in(dir, Family::gpt2);
  spec.checkpoint.keep = 2;
  Trainer a(spec, quiet_options());
  train_losses(a, 1, 1);
  save(a, spec, 1);
  fs::path root = dir / "checkpoints";
  for (int delay_ms : {3, 17, 41}) {
    pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // saves as fast as it can until killed (file I/O only: fork-safe)
      for (int s = 2;; s = s % 8 + 2) save(a, spec, s);  // steps 2..9 again and again: re-saves too
    }
    ::usleep(static_cast<useconds_t>(delay_ms) * 1000);
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
    // Every directory with a final name is complete and intact; auto finds one.
    for (const auto& e : fs::directory_iterator(root)) {
      std::string n = e.path().filename().string();
      if (e.is_directory() && n.find('.') == std::string::npos) {
        INFO(n);
        CHECK_NOTHROW(verify_checkpoint(e.path().string()));
      }
    }
    CHECK(!find_latest_good(root.string(), nullptr).empty());
  }
  Trainer b(spec, quiet_options());
  CHECK(resume(b, spec) >= 1);
  fs::remove_all(dir);
}
