// What a resume accepts: the same model only (each differing key named), the
// data continuing after the samples the checkpoint consumed even when the
// global batch changed, and no newer checkpoint of an abandoned trajectory
// surviving the next save as the newest one.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/files.h"
#include "engine/checkpoint/resume_check.h"
#include "engine/json.h"
#include "engine/trainer.h"
#include "parallel/communicator.h"
#include "test/checkpoint/checkpoint_helpers.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::engine::checkpoint;
using testing::names_in;
using testing::fresh_temp_dir;
using testing::read_all;
using testing::resume;
using testing::save;
using testing::tiny_spec_in;
using testing::train_and_save;
using testing::quiet_options;
using testing::train_losses;
namespace fs = std::filesystem;

namespace {


}  // namespace

TEST_CASE("resume: a checkpoint of a differently configured model is refused naming each key",
          "[cpu][checkpoint]") {
  for (Family f : {Family::gpt2, Family::llama}) {
    fs::path dir = fresh_temp_dir("other_config");
    JobSpec spec = tiny_spec_in(dir, f);
    train_and_save(spec, {1});
    // Same tensor names and shapes, another function: a shape check lets all of these through.
    JobSpec fewer = spec;
    fewer.model.n_layer = 1;
    Trainer b(fewer, quiet_options());
    CHECK_THROWS_WITH(resume(b, fewer),
                      Catch::Contains("saved by another model: model.n_layer is 2 in the "
                                      "checkpoint, 1 in this job"));
    JobSpec changed = spec;
    changed.model.n_head = 8;
    changed.model.n_kv_head = f == Family::llama ? 2 : 8;
    changed.model.norm_eps = 1e-6;
    Trainer c(changed, quiet_options());
    CHECK_THROWS_WITH(resume(c, changed),
                      Catch::Contains("model.n_head is 4 in the checkpoint, 8 in this job") &&
                          Catch::Contains("model.norm_eps is 1e-05 in the checkpoint, 1e-06") &&
                          Catch::Contains("model.init_from"));
    // Settings read only before step 1, or not part of the function, may differ.
    JobSpec same = spec;
    same.model.init_std = 0.5;
    if (f == Family::llama) same.model.max_seq_len = 64;
    Trainer d(same, quiet_options());
    CHECK(resume(d, same) == 1);
    fs::remove_all(dir);
  }
}

TEST_CASE("resume: model_differences names MoE structure, not its training settings",
          "[cpu][checkpoint]") {
  ModelSpec a;
  a.family = Family::llama;
  a.moe.enabled = true;
  ModelSpec b = a;
  b.moe.aux_loss_coeff = 0.1;
  b.moe.capacity_factor = 1.25;
  b.moe.bias_update_rate = 0.01;
  CHECK(model_differences(a, b).empty());
  b.moe.top_k = 1;
  b.moe.balance = Balance::aux_free;
  const std::vector<std::string> d = model_differences(a, b);
  REQUIRE(d.size() == 2);
  CHECK(d[0] == "model.moe.top_k is 2 in the checkpoint, 1 in this job");
  CHECK_THAT(d[1], Catch::StartsWith("model.moe.balance"));
  ModelSpec dense = a;
  dense.moe.enabled = false;
  CHECK(model_differences(a, dense) ==
        std::vector<std::string>{"model.moe is set in the checkpoint, absent in this job"});
  // Qwen2's q, k and v biases are tensors a bias-free checkpoint has not.
  ModelSpec biased = a;
  biased.qkv_bias = true;
  CHECK(model_differences(a, biased, true) ==
        std::vector<std::string>{"model.qkv_bias is false in the checkpoint, true in this job"});
  ModelSpec normed = a;
  normed.qk_norm = true;
  CHECK(model_differences(a, normed, true) ==
        std::vector<std::string>{"model.qk_norm is false in the checkpoint, true in this job"});
  // A sliding window changes the function, not a tensor: refused on resume,
  // noted by a new run from the weights.
  ModelSpec windowed = a;
  windowed.sliding_window = 4096;
  CHECK(model_differences(a, windowed) ==
        std::vector<std::string>{"model.sliding_window is null in the checkpoint, 4096 in this job"});
  CHECK(model_differences(a, windowed, true).empty());
  ModelSpec patterned = windowed;
  patterned.full_attention_every = 2;
  CHECK(model_differences(windowed, patterned) ==
        std::vector<std::string>{"model.full_attention_every is null in the checkpoint, 2 in this job"});
  // The router's scores and weighting change the function, not a tensor:
  // refused on resume, not by a new run from the weights (tensors_only).
  ModelSpec routed = a;
  routed.moe.score = RouterScore::sigmoid;
  routed.moe.normalize_topk = false;
  routed.moe.n_groups = 2;
  CHECK(model_differences(a, routed) ==
        std::vector<std::string>{"model.moe.score is softmax in the checkpoint, sigmoid in this job",
                                 "model.moe.normalize_topk is true in the checkpoint, false in this job",
                                 "model.moe.n_groups is 1 in the checkpoint, 2 in this job"});
  CHECK(model_differences(a, routed, true).empty());
  // A RoPE scaling of another type is named with its own keys.
  ModelSpec yarn = a;
  yarn.rope_scaling.enabled = true;
  yarn.rope_scaling.type = RopeType::yarn;
  yarn.rope_scaling.factor = 4;
  CHECK(model_differences(a, yarn) ==
        std::vector<std::string>{"model.rope_scaling is null in the checkpoint, {type yarn, factor 4, "
                                 "original_max_position_embeddings 8192, beta_fast 32, beta_slow 1, "
                                 "attention_factor null} in this job"});
  // DeepSeek's mscale pair is named when set.
  ModelSpec deepseek_yarn = yarn;
  deepseek_yarn.rope_scaling.mscale = 1.0, deepseek_yarn.rope_scaling.mscale_all_dim = 0.5;
  CHECK(model_differences(yarn, deepseek_yarn) ==
        std::vector<std::string>{"model.rope_scaling is {type yarn, factor 4, original_max_position_embeddings "
                                 "8192, beta_fast 32, beta_slow 1, attention_factor null} in the checkpoint, "
                                 "{type yarn, factor 4, original_max_position_embeddings 8192, beta_fast 32, "
                                 "beta_slow 1, attention_factor null, mscale 1, mscale_all_dim 0.5} in this job"});
}

TEST_CASE("resume: the data continues after the samples the checkpoint consumed",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("data_position");
  JobSpec spec = tiny_spec_in(dir);
  spec.train.steps = 2;
  TrainerOptions writing = quiet_options();
  writing.write_run_dir = true;
  {
    Trainer a(spec, writing);
    a.run();  // steps 1-2 of global batch 4 and the final save: 8 samples consumed
  }
  JobSpec doubled = spec;
  doubled.train.global_batch = 8;
  doubled.train.steps = 3;
  FILE* log = std::tmpfile();
  TrainerOptions logged = writing;
  logged.log = log;
  Trainer b(doubled, logged);
  REQUIRE(b.start_step() == 2);
  const double resumed = b.train_step(3).loss;
  // The same weights on samples 8..15: a trainer that loaded them without the
  // trainer's own resume draws those samples at its step 2 (the loss is taken
  // before the update, so only the weights and samples matter). At step x
  // batch the resumed step would have read samples 16..23.
  JobSpec ref_spec = doubled;
  ref_spec.checkpoint.resume = (dir / "checkpoints" / "step_000002").string();
  Trainer ref(ref_spec, quiet_options());
  REQUIRE(resume(ref, ref_spec) == 2);
  Trainer ref3(ref_spec, quiet_options());
  REQUIRE(resume(ref3, ref_spec) == 2);
  CHECK(resumed == ref.train_step(2).loss);
  CHECK(resumed != ref3.train_step(3).loss);
  std::rewind(log);
  std::string text;
  char buf[1024];
  while (std::fgets(buf, sizeof buf, log)) text += buf;
  std::fclose(log);
  CHECK_THAT(text, Catch::Contains("after step 2 (8 samples consumed)") &&
                       Catch::Contains("note: train.global_batch was 4 in the checkpoint, 8 now"));
  // The next save counts from there: 8 + 8, not 3 x 8. A step 3 the first
  // run logged after its checkpoint (then killed) is dropped from
  // metrics.jsonl by the resume, which logs its own once.
  {
    std::ofstream(dir / "metrics.jsonl", std::ios::app) << "{\"step\": 3, \"loss\": 99}\n";
    Trainer b2(doubled, writing);
    b2.run();
  }
  CHECK_THAT(read_all(dir / "checkpoints" / "step_000003" / "metadata.json"),
             Catch::Contains("\"samples_consumed\": 16"));
  const std::string metrics = read_all(dir / "metrics.jsonl");
  CHECK(metrics.find("\"loss\": 99") == std::string::npos);
  size_t step3 = 0;
  for (size_t at = metrics.find("{\"step\": 3,"); at != std::string::npos;
       at = metrics.find("{\"step\": 3,", at + 1))
    ++step3;
  CHECK(step3 == 1);
  CHECK(metrics.find("{\"step\": 1,") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("resume: checkpoints newer than the resumed one are renamed aside at the next save",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("abandon");
  JobSpec spec = tiny_spec_in(dir);
  fs::path root = dir / "checkpoints";
  train_and_save(spec, {1, 2, 3});
  // Back to step 1 on purpose, keeping one checkpoint: the old step 3 must
  // neither delete the new step 2 (it is the newer number) nor be resumed next.
  JobSpec back = spec;
  back.checkpoint.resume = (root / "step_000001").string();
  back.checkpoint.keep = 1;
  Trainer b(back, quiet_options());
  REQUIRE(resume(b, back) == 1);
  train_losses(b, 2, 2);
  std::string warnings;
  save(b, back, 2, &warnings);
  std::vector<std::string> names = names_in(root);
  REQUIRE(names.size() == 3);
  CHECK(names[0] == "latest");
  CHECK(names[1] == "step_000002");
  CHECK_THAT(names[2], Catch::StartsWith("step_000003.abandoned-"));
  CHECK_THAT(warnings, Catch::Contains("step_000003 is newer than this run's step 2"));
  CHECK(read_all(root / "latest") == "step_000002\n");
  JobSpec again = spec;  // auto
  Trainer d(again, quiet_options());
  CHECK(resume(d, again) == 2);
  fs::remove_all(dir);
}

TEST_CASE("resume: a step directory whose name disagrees with its step is refused",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("misnamed");
  JobSpec spec = tiny_spec_in(dir);
  fs::path root = dir / "checkpoints";
  train_and_save(spec, {2, 4});
  fs::rename(root / "step_000002", root / "step_000009");
  CHECK_THROWS_WITH(verify_checkpoint((root / "step_000009").string()),
                    Catch::Contains("step 2, but its directory is named for step 9"));
  std::string warnings;
  Trainer b(spec, quiet_options());
  CHECK(resume(b, spec, &warnings) == 4);  // auto skips it instead of rolling back to step 2
  CHECK_THAT(warnings, Catch::Contains("step_000009"));
  fs::remove_all(dir);
}

// metadata.json edited by hand (the manifest's digest updated to match, as a
// careful editor would): each field resume() reads is refused by name in one
// line, not a bare JSON error with exit 1 (found by test/fuzz/fuzz_resume).
TEST_CASE("resume: a hand-edited metadata.json is refused naming the file and field",
          "[cpu][checkpoint]") {
  fs::path dir = fresh_temp_dir("edited_meta");
  JobSpec spec = tiny_spec_in(dir);
  const fs::path step = dir / "checkpoints" / "step_000002";
  train_and_save(spec, {2});
  const std::string original = read_all(step / "metadata.json");
  auto edit = [&](const std::string& from, const std::string& to) {
    std::string text = original;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    std::ofstream(step / "metadata.json", std::ios::binary | std::ios::trunc) << text;
    Json manifest = parse_json(read_all(step / "manifest.json"), "manifest.json");
    const FileDigest d = digest_file((step / "metadata.json").string());
    Json entry = Json::object();
    entry.set("bytes", Json(d.bytes));
    entry.set("xxh3", Json(hex64(d.xxh3)));
    Json files = manifest.at("files");
    files.set("metadata.json", std::move(entry));
    manifest.set("files", std::move(files));
    std::ofstream(step / "manifest.json", std::ios::binary | std::ios::trunc) << manifest.dump(2);
  };
  const std::string meta = (step / "metadata.json").string();
  const std::string consumed = "\"samples_consumed\": 8";
  REQUIRE(original.find(consumed) != std::string::npos);
  const std::vector<std::pair<std::pair<std::string, std::string>, std::string>> cases = {
      {{consumed, "\"samples_consumed\": \"8\""}, meta + ": expected a number, found a string"},
      {{consumed, "\"samples_consumed\": -8"}, meta + ": data_position.samples_consumed is -8"},
      {{"\"scalars\": {}", "\"scalarz\": {}"}, meta + ": missing key \"scalars\""},
      {{"\"scalars\": {}", "\"scalars\": {\"loss_scale\": 1e300}"}, meta + ": scalars.loss_scale is 1e+300"},
  };
  for (const auto& [change, message] : cases) {
    INFO(change.second);
    edit(change.first, change.second);
    REQUIRE_NOTHROW(verify_checkpoint(step.string()));  // the checksums agree: only the content is wrong
    Trainer b(spec, quiet_options());
    CHECK_THROWS_MATCHES(resume(b, spec), InputError, Catch::Message(message));
  }
  fs::remove_all(dir);
}

TEST_CASE("resume: a changed data.split is noted", "[cpu][checkpoint]") {
  JobSpec saved, job;
  job.data.split = {949, 50, 1};
  const std::vector<std::string> notes = checkpoint::data_stream_changes(saved, job);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "data.split was null in the checkpoint, [949, 50, 1] now: the training part is another, "
                    "its samples counted from the checkpoint's sample count");
  CHECK(checkpoint::data_stream_changes(job, job).empty());
}

TEST_CASE("resume: a changed train.rampup_batch_size is noted", "[cpu][checkpoint]") {
  JobSpec saved, job;
  job.train.rampup_batch_size = TrainSpec::Rampup{4, 4, 1000};
  const std::vector<std::string> notes = checkpoint::data_stream_changes(saved, job);
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == "train.rampup_batch_size was null in the checkpoint, [4, 4, 1000] now: each step's "
                    "batch follows the new ramp from the samples the checkpoint consumed");
  CHECK(checkpoint::data_stream_changes(job, job).empty());
}
