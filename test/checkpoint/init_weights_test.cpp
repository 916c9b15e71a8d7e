// model.init_from naming one of this trainer's checkpoints: a new run starts
// from its parameters exactly and from nothing else (fresh moments, step 0);
// a model with other tensors is refused naming the keys, and a changed
// setting that changes no tensor is noted.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/trainer.h"
#include "kernels/memory.h"
#include "test/checkpoint/checkpoint_helpers.h"
#include "test/common/tiny_job.h"

using namespace trainer;
using namespace trainer::engine;
using testing::fresh_temp_dir;
using testing::quiet_options;
using testing::tiny_spec_in;
using testing::train_losses;
namespace fs = std::filesystem;

namespace {

std::vector<float> host(Tensor t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  copy_to_host(out.data(), t);
  return out;
}

std::string init_weights(Trainer& t, const JobSpec& spec, const std::string& source,
                         std::string* notes = nullptr) {
  std::string from;
  testing::with_checkpointer(spec, notes, [&](checkpoint::Checkpointer& c) {
    from = c.init_weights(source, t.model().buffers(), t.optimizer());
  });
  return from;
}

JobSpec moe_aux_free(const fs::path& dir) {
  JobSpec s = tiny_spec_in(dir, Family::llama);
  s.model.moe.enabled = true;
  s.model.moe.n_experts = 4;
  s.model.moe.d_ff_expert = 16;
  s.model.moe.n_shared_experts = 1;
  s.model.moe.balance = Balance::aux_free;  // its expert bias is a parameter too
  return s;
}

}  // namespace

TEST_CASE("init_from a checkpoint: its parameters exactly, fresh moments", "[cpu][checkpoint]") {
  const fs::path src = fresh_temp_dir("init_src"), dst = fresh_temp_dir("init_dst");
  for (const JobSpec& saved : {tiny_spec_in(src, Family::gpt2), tiny_spec_in(src, Family::llama),
                               moe_aux_free(src)}) {
    fs::remove_all(src);
    Trainer a(saved, quiet_options());
    train_losses(a, 1, 3);
    testing::save(a, saved, 3);

    JobSpec spec = saved;
    spec.run.dir = dst.string();
    Trainer b(spec, quiet_options());
    const model::Buffers& ba = a.model().buffers();
    const model::Buffers& bb = b.model().buffers();
    REQUIRE(ba.params().size() == bb.params().size());
    CHECK(host(bb.get(bb.params()[0].value)) != host(ba.get(ba.params()[0].value)));
    // A run directory, as users give it: its newest checkpoint.
    CHECK(init_weights(b, spec, src.string()) == (src / "checkpoints" / "step_000003").string());
    for (size_t i = 0; i < ba.params().size(); ++i) {
      INFO(ba.params()[i].spec.name);
      CHECK(host(bb.get(bb.params()[i].value)) == host(ba.get(ba.params()[i].value)));
    }
    // The moments start at zero: a's are not (it trained three steps).
    for (Tensor m : {b.optimizer().m(), b.optimizer().v()})
      for (float x : host(m)) REQUIRE(x == 0.0f);
    bool trained = false;
    for (float x : host(a.optimizer().v())) trained = trained || x != 0.0f;
    CHECK(trained);
  }
  fs::remove_all(src);
  fs::remove_all(dst);
}

TEST_CASE("init_from a checkpoint: other tensors refused, other RoPE noted", "[cpu][checkpoint]") {
  const fs::path src = fresh_temp_dir("init_refuse"), dst = fresh_temp_dir("init_refuse_dst");
  JobSpec saved = tiny_spec_in(src, Family::llama);
  testing::train_and_save(saved, {2});
  const std::string step = (src / "checkpoints" / "step_000002").string();

  JobSpec wider = saved;
  wider.run.dir = dst.string();
  wider.model.d_ff = 96;
  wider.model.rope_theta = 20000;
  Trainer w(wider, quiet_options());
  // Only the tensor key is named: the RoPE base alone would be accepted.
  CHECK_THROWS_WITH(init_weights(w, wider, step),
                    Catch::Equals("model.init_from: " + step + " was saved by a model with other "
                                  "tensors: model.d_ff is 64 in the checkpoint, 96 in this job"));

  JobSpec longer = saved;
  longer.run.dir = dst.string();
  longer.model.rope_theta = 20000;
  longer.model.norm_eps = 1e-6;
  Trainer l(longer, quiet_options());
  std::string notes;
  CHECK(init_weights(l, longer, step, &notes) == step);
  CHECK(notes ==
        "trainer: note: model.init_from: model.rope_theta is 10000 in the checkpoint, 20000 in this job\n"
        "trainer: note: model.init_from: model.norm_eps is 1e-05 in the checkpoint, 1e-06 in this job\n");

  CHECK_FALSE(checkpoint::is_checkpoint_source((src / "nothing").string()));
  CHECK(checkpoint::is_checkpoint_source(src.string()));
  CHECK(checkpoint::is_checkpoint_source(step));
  fs::remove_all(src);
  fs::remove_all(dst);
}
