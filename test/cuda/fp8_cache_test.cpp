// [cuda][fp8] The fp8 weight cache (ModelConfig::fp8_cache_weights): a
// weight's codes are cast once per step and reused by later micro-batches and
// by the backward. Within a step neither the weights nor the scales change, so
// the losses are bit-identical to re-quantising at every use; the cache is
// what later forwards read (poisoned weights do not reach them) until the
// weights change; the plan counts its memory.
#include <cmath>
#include <vector>

#include "engine/trainer.h"
#include "kernels/memory.h"
#include "test/common/tiny_job.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

namespace {

engine::JobSpec fp8_job(engine::Family family) {
  engine::JobSpec spec = testing::tiny_job(family, 3);  // 2 micro-batches per step
  spec.run.device = engine::DeviceKind::cuda;
  spec.precision.compute = engine::ComputeDtype::fp8;
  spec.precision.fp8_first_last_bf16 = false;  // both layers' GEMMs in fp8
  return spec;
}

double forward_loss(engine::Trainer& t) {
  t.model().forward(t.context());
  Tensor l = t.model().losses(t.context());
  std::vector<float> host(static_cast<size_t>(l.numel()));
  copy_to_host(host.data(), l);
  double sum = 0;
  for (float v : host) sum += v;
  return sum;
}

// NaN (all bits set, in bf16 as in fp32) into the compute copies of every
// weight an fp8 GEMM reads.
int poison_fp8_weights(engine::Trainer& t) {
  const model::Buffers& b = t.model().buffers();
  int n = 0;
  for (const model::Buffers::Param& p : b.params()) {
    bool fp8_weight = false;
    for (const std::string& name : b.fp8_names()) fp8_weight = fp8_weight || name == p.spec.name;
    if (!fp8_weight) continue;
    Tensor w = b.weight(model::ParamId{static_cast<int>(&p - b.params().data())});
    std::vector<unsigned char> ones(w.nbytes(), 0xFF);
    copy_from_host(w, ones.data());
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("fp8 weight cache: re-quantising's losses bit for bit, reused until the weights change",
          "[cuda][fp8]") {
  for (engine::Family family : {engine::Family::gpt2, engine::Family::llama}) {
    INFO(engine::to_string(family));
    engine::JobSpec off = fp8_job(family);
    off.precision.fp8_weight_cache = false;  // re-quantise at every use
    engine::Trainer cached(fp8_job(family), testing::quiet_options()),
        plain(off, testing::quiet_options());
    const model::Buffers& b = cached.model().buffers();
    int caches = 0;
    size_t cache_bytes = 0;
    for (int i = 0; i < b.fp8()->size(); ++i)
      if (b.fp8_weight_cache(i) >= 0) {
        ++caches;
        cache_bytes += b.buffers()[b.fp8_weight_cache(i)].bytes;
      }
    for (int i = 0; i < plain.model().buffers().fp8()->size(); ++i)
      CHECK(plain.model().buffers().fp8_weight_cache(i) < 0);
    CHECK(caches == b.fp8()->size() / 3);  // one per GEMM, on its weight operand
    CHECK(cached.allocated_bytes() == cached.plan().total());
    CHECK(cached.plan().total() > plain.plan().total());
    CHECK(cached.plan().total() - plain.plan().total() >= cache_bytes);

    const std::vector<double> a = testing::train_losses(cached, 1, 3);
    const std::vector<double> c = testing::train_losses(plain, 1, 3);
    for (size_t s = 0; s < a.size(); ++s) {
      INFO("step " << s + 1);
      CHECK(a[s] == c[s]);
    }
    // After the last update the cache is stale: the next forward fills it,
    // later ones read it even with the weights poisoned, until invalidated.
    const double first = forward_loss(cached);
    REQUIRE(std::isfinite(first));
    REQUIRE(poison_fp8_weights(cached) == caches);
    CHECK(forward_loss(cached) == first);
    b.invalidate_fp8_weights();
    CHECK(std::isnan(forward_loss(cached)));  // and the cache now holds the poison
    // Casting the compute copies from the master weights again invalidates it too.
    cached.model().refresh_compute_weights(cached.context());
    CHECK(forward_loss(cached) == first);
    // Without the cache the poison reaches the very next forward.
    REQUIRE(std::isfinite(forward_loss(plain)));
    poison_fp8_weights(plain);
    CHECK(std::isnan(forward_loss(plain)));
  }
}

}  // namespace trainer::cuda_test
