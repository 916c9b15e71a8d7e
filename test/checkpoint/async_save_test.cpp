// checkpoint.async: a save whose shard is written by a background thread from
// a host snapshot. It must write what a foreground save writes, survive the
// model changing under it, leave only a partial save when the run ends first,
// and turn a failed write into an Error that keeps the previous checkpoint.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/shard_contents.h"
#include "engine/trainer.h"
#include "kernels/elementwise.h"
#include "parallel/communicator.h"
#include "test/checkpoint/checkpoint_helpers.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
using testing::fresh_temp_dir;
using testing::read_all;
using testing::tiny_spec_in;
using testing::quiet_options;
using testing::train_losses;
namespace fs = std::filesystem;

TEST_CASE("async checkpoint: the bytes of a foreground save, from the step's state",
          "[cpu][checkpoint]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    fs::path dir = fresh_temp_dir("async_same");
    JobSpec fg = tiny_spec_in(dir, f);
    fg.checkpoint.dir = (dir / "fg").string();
    JobSpec bg = fg;
    bg.checkpoint.dir = (dir / "bg").string();
    Trainer a(fg, quiet_options());
    train_losses(a, 1, 2);
    testing::save(a, fg, 2);
    auto world = parallel::make_single_communicator("world");
    Checkpointer c(bg, *world);
    c.save(2, a.model().buffers(), a.optimizer(), {}, /*background=*/true);
    REQUIRE(c.in_flight());
    CHECK(c.pending_bytes() > 0);
    // The model moves on while the shard is written: the file must still
    // hold step 2, so the writer reads the snapshot, never the live state.
    const model::Buffers& buf = a.model().buffers();
    for (int i = 0; i < static_cast<int>(buf.params().size()); ++i)
      fill(a.context(), buf.get(buf.params()[i].value), std::nanf(""));
    fill(a.context(), a.optimizer().m(), std::nanf(""));
    fill(a.context(), a.optimizer().v(), std::nanf(""));
    std::string done;
    for (int i = 0; i < 2000 && done.empty(); ++i) {
      done = c.poll();
      if (done.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    REQUIRE(done == (dir / "bg" / "step_000002").string());
    CHECK_FALSE(c.in_flight());
    CHECK(c.pending_bytes() == 0);
    CHECK(c.last_path() == done);
    CHECK_NOTHROW(verify_checkpoint(done));
    CHECK(read_all(dir / "bg" / "latest") == "step_000002\n");
    CHECK(read_all(dir / "bg" / "step_000002" / "rank_00000.safetensors") ==
          read_all(dir / "fg" / "step_000002" / "rank_00000.safetensors"));
    CHECK(c.finish().empty());  // nothing left in flight
    fs::remove_all(dir);
  }
}

TEST_CASE("async checkpoint: one host snapshot buffer serves save after save", "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("async_reuse");
  JobSpec fg = tiny_spec_in(dir, Family::gpt2);
  fg.checkpoint.dir = (dir / "fg").string();
  JobSpec bg = fg;
  bg.checkpoint.dir = (dir / "bg").string();
  Trainer a(fg, quiet_options());
  auto world = parallel::make_single_communicator("world");
  Checkpointer c(bg, *world);
  for (int step : {2, 3}) {
    train_losses(a, step == 2 ? 1 : 3, step);
    testing::save(a, fg, step);
    c.save(step, a.model().buffers(), a.optimizer(), {}, /*background=*/true);
    const std::string done = c.finish();
    REQUIRE(done == (dir / "bg" / fmt::format("step_{:06d}", step)).string());
    CHECK(read_all(fs::path(done) / "rank_00000.safetensors") ==
          read_all(dir / "fg" / fmt::format("step_{:06d}", step) / "rank_00000.safetensors"));
  }
  fs::remove_all(dir);
}

TEST_CASE("async checkpoint: a run that ends before completing it leaves a partial save",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("async_partial");
  JobSpec spec = tiny_spec_in(dir, Family::gpt2);
  Trainer a(spec, quiet_options());
  train_losses(a, 1, 1);
  testing::save(a, spec, 1);
  train_losses(a, 2, 2);
  {
    // As when the trainer throws (or is killed) with a save in flight: the
    // shard may be written, but the directory is never completed.
    auto world = parallel::make_single_communicator("world");
    Checkpointer c(spec, *world);
    c.save(2, a.model().buffers(), a.optimizer(), {}, true);
  }
  fs::path root = dir / "checkpoints";
  CHECK_FALSE(fs::exists(root / "step_000002"));
  bool partial = false;
  for (const auto& e : fs::directory_iterator(root))
    partial |= e.path().filename().string().rfind("step_000002.tmp-", 0) == 0;
  CHECK(partial);
  CHECK(read_all(root / "latest") == "step_000001\n");
  Trainer b(spec, quiet_options());
  std::string warnings;
  CHECK(testing::resume(b, spec, &warnings) == 1);
  CHECK_THAT(warnings, Catch::Contains("step_000002.tmp-"));
  fs::remove_all(dir);
}

TEST_CASE("checkpoint: a shard that cannot be written is an Error; the previous one stays",
          "[cpu][checkpoint]") {
  for (bool background : {false, true}) {
    INFO("background " << background);
    fs::path dir = fresh_temp_dir("save_fails");
    JobSpec spec = tiny_spec_in(dir, Family::llama);
    fs::path root = dir / "checkpoints";
    Trainer a(spec, quiet_options());
    train_losses(a, 1, 1);
    auto world = parallel::make_single_communicator("world");
    Checkpointer c(spec, *world);
    c.save(1, a.model().buffers(), a.optimizer(), {}, background);
    c.finish();
    train_losses(a, 2, 2);
    auto fails = [&] {
      testing::FileSizeLimit limit(512);  // the shard's header alone is larger
      c.save(2, a.model().buffers(), a.optimizer(), {}, background);
      c.finish();
    };
    try {
      fails();
      FAIL("the save did not fail");
    } catch (const InputError& e) {
      FAIL(std::string("a failed write is not bad input: ") + e.what());
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("checkpoint step_000002") &&
                           Catch::Contains("rank_00000.safetensors") &&
                           Catch::Contains("File too large") &&
                           Catch::Contains("the last good one is " + (root / "step_000001").string()));
    }
    CHECK_FALSE(c.in_flight());
    CHECK(read_all(root / "latest") == "step_000001\n");
    CHECK(testing::names_in(root) == std::vector<std::string>{"latest", "step_000001"});  // nothing half-written
    // Once the disk has room again, saving works.
    c.save(2, a.model().buffers(), a.optimizer(), {}, background);
    c.finish();
    CHECK(c.last_path() == (root / "step_000002").string());
    CHECK_NOTHROW(verify_checkpoint((root / "step_000002").string()));
    fs::remove_all(dir);
  }
}

TEST_CASE("async checkpoint: the snapshot is the size trainer plan gives it", "[cpu][checkpoint]") {
  for (ComputeDtype prec : {ComputeDtype::fp32, ComputeDtype::fp8}) {
    const bool fp8 = prec == ComputeDtype::fp8;
    INFO("fp8 " << fp8);
    fs::path dir = fresh_temp_dir("async_size");
    JobSpec spec = tiny_spec_in(dir, Family::llama);
    spec.precision.compute = prec;  // fp8: the scaling state is in the snapshot too
    spec.precision.fp8_first_last_bf16 = false;  // the tiny model has only a first and a last layer
    Trainer a(spec, quiet_options());
    train_losses(a, 1, 1);
    auto world = parallel::make_single_communicator("world");
    Checkpointer c(spec, *world);
    c.save(1, a.model().buffers(), a.optimizer(), {}, true);
    const std::vector<ShardEntry> entries = shard_entries(a.model().buffers(), a.optimizer(), {});
    CHECK(c.pending_bytes() == shard_bytes(entries));
    bool fp8_state = false;
    for (const ShardEntry& e : entries) fp8_state |= e.name.find(".fp8_state") != std::string::npos;
    CHECK(fp8_state == fp8);
    CHECK(c.finish() == (dir / "checkpoints" / "step_000001").string());
    fs::remove_all(dir);
  }
}
