// KV heads replicated over tp ranks (n_kv_head < tp): each rank's K/V shard is
// the rows of the KV head its query heads read, initialised like the
// single-rank model's rows, declared with its replica count, and placed in a
// checkpoint at that head's rows.
#include <catch2/catch.hpp>

#include <vector>

#include "engine/checkpoint/slice.h"
#include "model/model.h"
#include "test/common/host_arenas.h"

using namespace trainer;
using namespace trainer::model;

namespace {

ModelConfig llama(int n_head, int n_kv_head, int tp, int tp_rank) {
  ModelConfig cfg;
  cfg.family = Family::llama;
  cfg.n_layer = 1;
  cfg.d_model = 8 * n_head;  // head_dim 8
  cfg.n_head = n_head;
  cfg.n_kv_head = n_kv_head;
  cfg.d_ff = 32;
  cfg.vocab_size = 100;
  cfg.max_seq_len = 8;
  cfg.tie_embeddings = false;
  cfg.tp = tp;
  cfg.tp_rank = tp_rank;
  return cfg;
}

// Name -> (spec, host values) of every parameter of a freshly initialised model.
struct Params {
  explicit Params(const ModelConfig& cfg) : model(cfg, BatchShape{1, 4}), arenas(model.buffers()) {
    Context ctx;
    model.init_parameters(ctx);
  }
  const Buffers::Param& param(const std::string& name) const {
    for (const auto& p : model.buffers().params())
      if (p.spec.name == name) return p;
    FAIL("no parameter " << name);
    throw;
  }
  std::vector<float> values(const std::string& name) const {
    Tensor t = model.buffers().get(param(name).value);
    return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  Model model;
  testing::HostArenas arenas;
};

}  // namespace

TEST_CASE("replicated KV heads: each tp rank holds its query heads' KV head", "[cpu][model]") {
  // (n_head, n_kv_head, tp): GQA over pairs of ranks, MQA over all of them,
  // and the split case (one KV head per rank) for contrast.
  const int cases[][3] = {{4, 2, 4}, {4, 1, 2}, {8, 2, 8}, {4, 4, 4}};
  for (const auto& c : cases) {
    const int H = c[0], Hkv = c[1], tp = c[2], D = 8, C = 8 * H;
    INFO("n_head " << H << " n_kv_head " << Hkv << " tp " << tp);
    const Params whole(llama(H, Hkv, 1, 0));
    const int replicas = Hkv < tp ? tp / Hkv : 1;
    for (int r = 0; r < tp; ++r) {
      const ModelConfig cfg = llama(H, Hkv, tp, r);
      REQUIRE(cfg.kv_replicas() == replicas);
      REQUIRE(cfg.local_kv_heads() == (Hkv < tp ? 1 : Hkv / tp));
      const Params shard(cfg);
      // The query heads of rank r read (kernels/attention.h: q head h uses
      // KV head h / (H / Hkv)) exactly the KV head(s) rank r holds.
      const int kv_first = r / replicas * cfg.local_kv_heads();
      for (int i = 0; i < cfg.local_heads(); ++i) {
        const int h = r * cfg.local_heads() + i;
        const int kv = h / (H / Hkv);
        CHECK(kv >= kv_first);
        CHECK(kv < kv_first + cfg.local_kv_heads());
        // Locally, the kernel maps query head i to KV head i / (H_local / Hkv_local).
        CHECK(kv - kv_first == i / (cfg.local_heads() / cfg.local_kv_heads()));
      }
      for (const char* proj : {"k_proj", "v_proj"}) {
        const std::string name = std::string("model.layers.0.self_attn.") + proj + ".weight";
        const Buffers::Param& p = shard.param(name);
        CHECK(p.spec.tp_replicas == replicas);
        CHECK(p.spec.tp_dim == 0);
        const int64_t rows = int64_t(cfg.local_kv_heads()) * D;
        // Values: the single-rank model's rows of the held KV head(s).
        std::vector<float> want = whole.values(name);
        want = std::vector<float>(want.begin() + kv_first * D * C,
                                  want.begin() + kv_first * D * C + rows * C);
        CHECK(shard.values(name) == want);
        // Checkpoint slice: those same rows of the global tensor.
        const auto& info = shard.model.buffers().buffers()[p.value];
        engine::checkpoint::ShardPosition pos;
        pos.tp_rank = r;
        engine::checkpoint::Slice s = engine::checkpoint::local_slice(p.spec, info.shape, pos);
        CHECK(s.offset == std::vector<int64_t>{kv_first * D, 0});
        CHECK(s.shape == std::vector<int64_t>{rows, C});
      }
      // Query heads are never replicated.
      CHECK(shard.param("model.layers.0.self_attn.q_proj.weight").spec.tp_replicas == 1);
    }
  }
}
