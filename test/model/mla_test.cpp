// Multi-head latent attention (model/mla_layer.h) through the whole model:
// the per-token losses equal an independent double-precision forward written
// here from DeepSeek-V3's equations (RMSNorm, the q and kv latents, RoPE on
// the rope parts with one shared key part, softmax over q.k / sqrt(qk head),
// SwiGLU MLP, LM head), with and without a q latent; the gradients match
// finite differences, also under YaRN with DeepSeek's mscale pair (its softmax
// multiplier); the FLOPs count its projections and its value heads.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/model.h"
#include "test/common/model_run.h"

using namespace trainer;
using namespace trainer::model;

namespace {

ModelConfig mla_config(int64_t q_lora) {
  ModelConfig cfg = testing::whole_model_config(Family::llama);
  cfg.n_kv_head = cfg.n_head;
  cfg.mla = {.enabled = true, .q_lora_rank = q_lora, .kv_lora_rank = 10, .qk_nope = 6, .qk_rope = 4,
             .v_dim = 5};
  cfg.head_size = 10;
  return cfg;
}

std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % 50);
  return v;
}

using Mat = std::vector<double>;  // row-major

// The model's parameters by name, as doubles.
struct Params {
  std::map<std::string, Mat> by_name;
  std::map<std::string, std::vector<int64_t>> shape;
  explicit Params(const Model& m) {
    for (const auto& p : m.buffers().params()) {
      Tensor t = m.buffers().get(p.value);
      by_name[p.spec.name] = Mat(t.ptr<float>(), t.ptr<float>() + t.numel());
      shape[p.spec.name] = p.spec.global_shape;
    }
  }
  const Mat& operator[](const std::string& name) const {
    auto it = by_name.find(name);
    INFO("parameter " << name);
    REQUIRE(it != by_name.end());
    return it->second;
  }
};

// y (N, out) = x (N, in) @ W^T, W (out, in).
Mat linear(const Mat& x, const Mat& w, int64_t N, int64_t in, int64_t out) {
  Mat y(N * out, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * w[o * in + i];
      y[n * out + o] = s;
    }
  return y;
}

Mat rmsnorm(const Mat& x, const Mat& w, int64_t N, int64_t C, double eps) {
  Mat y(N * C);
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c];
    const double r = 1.0 / std::sqrt(ss / C + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * r * w[c];
  }
  return y;
}

// Hugging Face's rotate-half RoPE on d values at position pos, with the
// config's scaling (YaRN's frequencies, and its attention factor on cos and sin).
void rope(double* v, int64_t d, int64_t pos, double theta, const RopeScaling& rs) {
  const double mag = rs.active() ? rs.attention_factor : 1.0;
  for (int64_t i = 0; i < d / 2; ++i) {
    const double a = pos * scaled_inv_freq(std::pow(theta, -2.0 * i / d), i, rs);
    const double c = mag * std::cos(a), s = mag * std::sin(a);
    const double x1 = v[i], x2 = v[i + d / 2];
    v[i] = x1 * c - x2 * s;
    v[i + d / 2] = x2 * c + x1 * s;
  }
}

// Per-token losses of one sequence of T tokens.
std::vector<double> reference_losses(const ModelConfig& cfg, const Params& P,
                                     const std::vector<int32_t>& ids,
                                     const std::vector<int32_t>& targets) {
  const int64_t T = static_cast<int64_t>(ids.size()), C = cfg.d_model, H = cfg.n_head,
                F = cfg.d_ff, V = cfg.vocab_size;
  const MlaConfig& m = cfg.mla;
  const int64_t dn = m.qk_nope, dr = m.qk_rope, dv = m.v_dim, D = dn + dr, Lq = m.q_lora_rank,
                Lkv = m.kv_lora_rank;
  const double eps = cfg.norm_eps, theta = cfg.rope_theta;
  // DeepseekV3Attention: scaling = qk_head_dim^-0.5 x yarn_get_mscale(factor, mscale_all_dim)^2.
  const RopeScaling& rs = cfg.rope_scaling;
  const double mscale = rs.active() && rs.mscale_all_dim > 0
                            ? 0.1 * rs.mscale_all_dim * std::log(rs.factor) + 1.0 : 1.0;
  const double softmax_scale = mscale * mscale / std::sqrt(double(D));
  Mat h(T * C);
  const Mat& emb = P["model.embed_tokens.weight"];
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) h[t * C + c] = emb[ids[t] * C + c];
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const Mat x = rmsnorm(h, P[p + "input_layernorm.weight"], T, C, eps);
    Mat q = Lq > 0 ? linear(rmsnorm(linear(x, P[p + "self_attn.q_a_proj.weight"], T, C, Lq),
                                    P[p + "self_attn.q_a_layernorm.weight"], T, Lq, eps),
                             P[p + "self_attn.q_b_proj.weight"], T, Lq, H * D)
                   : linear(x, P[p + "self_attn.q_proj.weight"], T, C, H * D);
    Mat lat = linear(x, P[p + "self_attn.kv_a_proj_with_mqa.weight"], T, C, Lkv + dr);
    Mat ckv(T * Lkv), kr(T * dr);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < Lkv; ++i) ckv[t * Lkv + i] = lat[t * (Lkv + dr) + i];
      for (int64_t i = 0; i < dr; ++i) kr[t * dr + i] = lat[t * (Lkv + dr) + Lkv + i];
      rope(&kr[t * dr], dr, t, theta, rs);
      for (int64_t hh = 0; hh < H; ++hh) rope(&q[(t * H + hh) * D + dn], dr, t, theta, rs);
    }
    const Mat kv = linear(rmsnorm(ckv, P[p + "self_attn.kv_a_layernorm.weight"], T, Lkv, eps),
                          P[p + "self_attn.kv_b_proj.weight"], T, Lkv, H * (dn + dv));
    Mat att(T * H * dv, 0.0);
    for (int64_t hh = 0; hh < H; ++hh)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t i = 0; i < dn; ++i)
            dot += q[(t * H + hh) * D + i] * kv[(u * H + hh) * (dn + dv) + i];
          for (int64_t i = 0; i < dr; ++i) dot += q[(t * H + hh) * D + dn + i] * kr[u * dr + i];
          s[u] = dot * softmax_scale;
          mx = std::max(mx, s[u]);
        }
        double z = 0;
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < dv; ++i)
            att[(t * H + hh) * dv + i] += s[u] / z * kv[(u * H + hh) * (dn + dv) + dn + i];
      }
    const Mat o = linear(att, P[p + "self_attn.o_proj.weight"], T, H * dv, C);
    for (int64_t i = 0; i < T * C; ++i) h[i] += o[i];
    const Mat y = rmsnorm(h, P[p + "post_attention_layernorm.weight"], T, C, eps);
    const Mat g = linear(y, P[p + "mlp.gate_proj.weight"], T, C, F),
              u = linear(y, P[p + "mlp.up_proj.weight"], T, C, F);
    Mat a(T * F);
    for (int64_t i = 0; i < T * F; ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const Mat d = linear(a, P[p + "mlp.down_proj.weight"], T, F, C);
    for (int64_t i = 0; i < T * C; ++i) h[i] += d[i];
  }
  const Mat logits = linear(rmsnorm(h, P["model.norm.weight"], T, C, eps), P["lm_head.weight"], T, C, V);
  std::vector<double> losses(T);
  for (int64_t t = 0; t < T; ++t) {
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[t * V + v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(logits[t * V + v] - mx);
    losses[t] = std::log(z) + mx - logits[t * V + targets[t]];
  }
  return losses;
}

}  // namespace

TEST_CASE("MLA's losses equal DeepSeek-V3's equations computed in double", "[cpu][model][mla]") {
  for (int64_t q_lora : {int64_t(8), int64_t(0)}) {
    INFO("q_lora_rank " << q_lora);
    const ModelConfig cfg = mla_config(q_lora);
    const int64_t T = 12;
    testing::ModelRun run(cfg, 1, T);
    const std::vector<int32_t> ids = random_ids(T, 3), targets = random_ids(T, 4);
    run.set_tokens(ids, targets);
    const std::vector<float> got = run.losses();
    const std::vector<double> want = reference_losses(cfg, Params(run.model), ids, targets);
    for (int64_t t = 0; t < T; ++t) {
      INFO("position " << t);
      CHECK(got[t] == Approx(want[t]).epsilon(1e-5));
    }
  }
}

TEST_CASE("MLA model gradients match finite differences", "[cpu][model][mla]") {
  for (int64_t q_lora : {int64_t(8), int64_t(0)}) {
    INFO("q_lora_rank " << q_lora);
    testing::ModelRun run(mla_config(q_lora), 2, 6);
    run.set_tokens(random_ids(12, 5), random_ids(12, 6));
    testing::check_sampled_gradients(run, 17);
  }
}

// DeepSeek's YaRN: the mscale pair sets the attention factor on cos and sin
// (m(1) / m(0.6)) and multiplies the softmax scale by m(0.6)^2, m(x) = 0.1 x ln 4 + 1.
static ModelConfig mla_yarn_config() {
  ModelConfig cfg = mla_config(8);
  cfg.rope_scaling = yarn_scaling(4.0, 8.0, 32.0, 1.0, 0.0, cfg.mla.qk_rope, cfg.rope_theta, 1.0, 0.6);
  return cfg;
}

TEST_CASE("MLA under YaRN with DeepSeek's mscale pair: losses equal the equations, gradients finite "
          "differences", "[cpu][model][mla]") {
  const ModelConfig cfg = mla_yarn_config();
  REQUIRE(cfg.rope_scaling.attention_factor == Approx((0.1 * std::log(4.0) + 1) / (0.06 * std::log(4.0) + 1)));
  const int64_t T = 12;
  testing::ModelRun run(cfg, 1, T);
  const std::vector<int32_t> ids = random_ids(T, 7), targets = random_ids(T, 8);
  run.set_tokens(ids, targets);
  const std::vector<float> got = run.losses();
  const Params params(run.model);
  const std::vector<double> want = reference_losses(cfg, params, ids, targets);
  // The softmax multiplier matters: without it the equations give other losses.
  ModelConfig plain_softmax = cfg;
  plain_softmax.rope_scaling.mscale_all_dim = 0;
  const std::vector<double> other = reference_losses(plain_softmax, params, ids, targets);
  double moved = 0;
  for (int64_t t = 0; t < T; ++t) {
    INFO("position " << t);
    CHECK(got[t] == Approx(want[t]).epsilon(1e-5));
    moved = std::max(moved, std::fabs(other[t] - want[t]));
  }
  CHECK(moved > 1e-3);
  testing::ModelRun grads(cfg, 2, 6);
  grads.set_tokens(random_ids(12, 9), random_ids(12, 10));
  testing::check_sampled_gradients(grads, 17);
}

TEST_CASE("MLA counts its projections and value heads in the FLOPs", "[cpu][model][mla]") {
  const ModelConfig cfg = mla_config(8);
  const int64_t T = 12;
  Model mla(cfg, BatchShape{1, T});
  ModelConfig plain = testing::whole_model_config(Family::llama);
  plain.n_kv_head = plain.n_head;
  plain.head_size = 10;
  Model gqa(plain, BatchShape{1, T});
  // Per layer, forward multiply-adds x 2 x 3 (forward and backward): q_a, q_b,
  // kv_a, kv_b, o_proj and the attention core with value heads of 5, against
  // q, k, v, o projections of 4 heads of 10 and value heads of 10.
  const double C = 16, H = 4, D = 10;
  const double mla_layer = C * 8 + 8 * H * D + C * (10 + 4) + 10 * H * (6 + 5) + H * 5 * C + T * H * (D + 5);
  const double gqa_layer = 4 * C * H * D + T * H * (D + D);
  CHECK(mla.flops_per_token() - gqa.flops_per_token() ==
        Approx(cfg.n_layer * 3.0 * 2.0 * (mla_layer - gqa_layer)).epsilon(1e-12));
}
