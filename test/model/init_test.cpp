// Initialisation: values depend only on (seed, name, index), padding rows are
// zero, norms start at one, biases at zero, and the normal samples have the
// requested moments.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "model/model.h"
#include "model/rng.h"
#include "test/common/host_arenas.h"

using namespace trainer;
using namespace trainer::model;

TEST_CASE("counter-based normals are deterministic and standard", "[cpu][model]") {
  uint64_t key = hash_name("transformer.h.0.attn.q_proj.weight");
  CHECK(normal_at(1, key, 12345) == normal_at(1, key, 12345));
  CHECK(normal_at(1, key, 12345) != normal_at(2, key, 12345));
  CHECK(normal_at(1, key, 12345) != normal_at(1, hash_name("other"), 12345));
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double z = normal_at(42, key, i);
    sum += z;
    sq += z * z;
  }
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(std::fabs(sq / n - 1.0) < 0.02);
}

TEST_CASE("parameter init follows the specs", "[cpu][model]") {
  ModelConfig cfg;
  cfg.n_layer = 2;
  cfg.d_model = 16;
  cfg.n_head = 2;
  cfg.n_kv_head = 2;
  cfg.d_ff = 32;
  cfg.vocab_size = 100;  // padded to 128
  cfg.max_seq_len = 8;
  Model m(cfg, BatchShape{1, 4});
  Buffers& b = m.buffers();
  testing::HostArenas arenas(b);
  Context ctx;
  m.init_parameters(ctx);
  for (const auto& p : b.params()) {
    Tensor t = b.get(p.value);
    const float* x = t.ptr<float>();
    INFO(p.spec.name);
    if (p.spec.init == Init::ones) CHECK(x[0] == 1.0f);
    if (p.spec.init == Init::zeros) CHECK(x[t.numel() - 1] == 0.0f);
    if (p.spec.name == "transformer.wte.weight") {
      REQUIRE(t.size(0) == 128);
      CHECK(x[99 * 16] != 0.0f);
      CHECK(x[100 * 16] == 0.0f);  // padding row
      CHECK(x[5] == cfg.init_std * normal_at(cfg.seed, hash_name(p.spec.name), 5));
    }
    if (p.spec.name == "transformer.h.1.mlp.c_proj.weight") {
      double sq = 0;
      for (int64_t i = 0; i < t.numel(); ++i) sq += double(x[i]) * x[i];
      double std = std::sqrt(sq / t.numel());
      CHECK(std == Approx(cfg.init_std / std::sqrt(2.0 * cfg.n_layer)).epsilon(0.15));
    }
  }
}
