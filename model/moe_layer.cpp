// Mixture-of-experts layer over kernels/moe_routing.h and kernels/linear.h.
#include "model/moe_layer.h"

#include <algorithm>
#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/memory.h"
#include "kernels/moe_capacity.h"
#include "kernels/moe_routing.h"
#include "kernels/moe_seq_aux.h"
#include "kernels/moe_stats.h"
#include "kernels/op_scratch.h"
#include "kernels/sigmoid_gate.h"
#include "kernels/swiglu.h"
#include "model/fp8_gemm.h"
#include "model/moe_capacity.h"
#include "parallel/expert_dispatch.h"

namespace trainer::model {

MoePlanSize moe_plan_size(const ModelConfig& cfg, const MoeConfig& moe, const BatchShape& batch) {
  const int64_t N = residual_rows(cfg, batch), Ng = batch.tokens() * cfg.cp;
  const int64_t E = moe.n_experts, K = moe.top_k, El = moe.local_experts(), S = N * K;
  MoePlanSize size;
  // Capacity is the whole micro-batch's (as on one rank), shared in token
  // order by the ranks splitting its tokens (model/moe_capacity.h).
  size.capacity = moe.capacity_factor > 0
                      ? static_cast<int64_t>(std::ceil(moe.capacity_factor * Ng * K / double(E)))
                      : 0;
  // Rows this rank's experts may receive: each peer keeps at most
  // min(K, El) of a token's assignments for them (top-k picks distinct
  // experts), or at most `capacity` per expert. Dropless, that worst case
  // grows with ep (every peer's tokens on one rank), so the plan takes
  // ep_recv_headroom times the balanced load (S) when that is smaller, and
  // a micro-batch routed more unevenly is refused (see Moe::forward).
  int64_t per_peer = N * std::min(K, El);
  if (size.capacity > 0) per_peer = std::min(per_peer, El * size.capacity);
  size.rows = moe.ep == 1 ? S : moe.ep * per_peer;
  if (size.capacity == 0)
    size.rows = std::min(size.rows, static_cast<int64_t>(std::ceil(moe.ep_recv_headroom * S)));
  return size;
}

void Moe::declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
                  const MoeConfig& moe, const BatchShape& batch) {
  // With tp the layer is replicated: every tp rank holds the whole residual
  // stream, routes all its tokens and computes the same outputs and
  // gradients, so nothing crosses the tp group. Under sequence parallelism
  // each tp rank routes only its block of tokens (MoE is per token): the
  // weights' gradients are then partial sums over tp (sp_partial), and the
  // balance statistics, z-loss and counters are summed over tp so every rank
  // sees the whole micro-batch's, as one rank would. Context parallelism is
  // the same over cp: each cp rank routes its chunks of the sequences, and the
  // statistics are summed over cp too (its gradients are summed over dp x cp
  // with every replicated parameter's).
  TRAINER_CHECK(moe.n_experts >= 1 && moe.top_k >= 1 && moe.top_k <= moe.n_experts &&
                    moe.d_ff_expert >= 1 && moe.n_shared_experts >= 0,
                "{}: bad MoE shape: {} experts, top_k {}, d_ff_expert {}, {} shared", prefix,
                moe.n_experts, moe.top_k, moe.d_ff_expert, moe.n_shared_experts);
  TRAINER_CHECK(moe.ep >= 1 && moe.n_experts % moe.ep == 0 && moe.ep_rank >= 0 &&
                    moe.ep_rank < moe.ep,
                "{}: {} experts do not split over ep {} (rank {})", prefix, moe.n_experts, moe.ep,
                moe.ep_rank);
  moe_ = moe;
  swiglu_ = cfg.is_llama();
  sp_ = cfg.sequence_parallel && cfg.tp > 1;
  tp_ = cfg.tp, tp_rank_ = cfg.tp_rank;
  cp_ = cfg.cp;
  Ng_ = batch.tokens() * cp_, N_ = residual_rows(cfg, batch);
  C_ = cfg.d_model, E_ = moe.n_experts, K_ = moe.top_k;
  buf.declare_op_scratch(moe_plan_scratch_bytes(N_ * K_, E_));  // its routers' GEMMs take none
  F_ = moe.d_ff_expert, Fs_ = int64_t{moe.n_shared_experts} * moe.d_ff_expert;
  const int64_t S = N_ * K_;
  const MoePlanSize size = moe_plan_size(cfg, moe, batch);
  capacity_ = size.capacity, R_ = size.rows;
  const float out_std = cfg.init_std / std::sqrt(2.0f * cfg.n_layer);
  const std::string p = prefix + ".block_sparse_moe.";
  name_ = prefix;
  ep_ = moe.ep, El_ = moe.local_experts();

  router_ = buf.add_param({.name = p + "gate.weight", .global_shape = {E_, C_},
                           .std = cfg.init_std, .sp_partial = sp_},
                          {E_, C_});
  if (moe.balance == MoeBalance::aux_free)
    // Not trained by the optimizer's gradient (it stays zero) but saved with
    // the model, as DeepSeek-V3 checkpoints carry it.
    bias_ = buf.add_param({.name = p + "gate.e_score_correction_bias", .global_shape = {E_},
                           .init = Init::zeros, .weight_decay = false, .sp_partial = sp_},
                          {E_});
  TRAINER_CHECK(!moe.shared_gate || moe.n_shared_experts > 0,
                "{}: a shared expert gate without shared experts", prefix);
  if (moe.shared_gate)
    // One logit per token from the router's fp32 input (Qwen2-MoE's shared_expert_gate).
    shared_gate_ = buf.add_param({.name = p + "shared_expert_gate.weight", .global_shape = {1, C_},
                                  .std = cfg.init_std, .sp_partial = sp_},
                                 {1, C_});
  // In an fp8 layer every expert GEMM is an fp8 GEMM with its own delayed
  // scaling (as Transformer Engine's grouped linear); the router stays fp32
  // (router_in_ below), as in Megatron-Core.
  const bool fp8 = buf.fp8_active();
  auto mlp = [&](const std::string& name, int64_t F, bool expert, int64_t rows) {
    Mlp3 m;
    m.w1 = buf.add_param({.name = name + "w1.weight", .global_shape = {F, C_},
                          .std = cfg.init_std, .sp_partial = sp_, .expert = expert},
                         {F, C_});
    if (fp8) m.fp8_w1 = buf.add_fp8_gemm(name + "w1", expert, {F, C_});
    if (swiglu_) {
      m.w3 = buf.add_param({.name = name + "w3.weight", .global_shape = {F, C_},
                            .std = cfg.init_std, .sp_partial = sp_, .expert = expert},
                           {F, C_});
      if (fp8) m.fp8_w3 = buf.add_fp8_gemm(name + "w3", expert, {F, C_});
    }
    m.w2 = buf.add_param({.name = name + "w2.weight", .global_shape = {C_, F},
                          .std = out_std, .sp_partial = sp_, .expert = expert},
                         {C_, F});
    if (fp8) {
      m.fp8_w2 = buf.add_fp8_gemm(name + "w2", expert, {C_, F});
      for (int64_t out : {F, C_}) declare_fp8_linear_scratch(buf, rows, out, false, false);
    } else if (!swiglu_) {  // GELU fused into w1's forward and w2's backward (mlp_forward)
      buf.declare_op_scratch(linear_gelu_forward_scratch_bytes(rows, F, buf.act_dtype()));
      buf.declare_op_scratch(linear_dgelu_backward_scratch_bytes(rows, F, C_, buf.act_dtype(), false));
    }
    return m;
  };
  // The shared experts before the routed ones: the block's dense parameters
  // are then one run, and ZeRO with ep shards it in one part (zero_layout.h).
  if (Fs_ > 0) shared_ = mlp(p + "shared_experts.", Fs_, false, N_);
  experts_.clear();
  for (int64_t e = moe.first_expert(); e < moe.first_expert() + El_; ++e)
    experts_.push_back(mlp(p + "experts." + std::to_string(e) + ".", F_, true, R_));

  const auto A = Category::activations, G = Category::scratch;
  logits_ = buf.add(A, p + "router_logits", {N_, E_});
  probs_ = buf.add(A, p + "router_probs", {N_, E_});
  topk_idx_ = buf.add(A, p + "topk_idx", {N_, K_}, DType::i32);
  topk_w_ = buf.add(A, p + "topk_weight", {N_, K_});
  slot_src_ = buf.add(A, p + "slot_src", {S}, DType::i32);
  assign_slot_ = buf.add(A, p + "assign_slot", {S}, DType::i32);
  counts_ = buf.add(A, p + "counts", {2, E_}, DType::i32);
  xs_ = buf.add(A, p + "dispatched", {S, C_}, buf.act_dtype());
  ys_ = buf.add(A, p + "expert_out", {S, C_}, buf.act_dtype());
  if (ep_ > 1) {
    xr_ = buf.add(A, p + "ep_received", {R_, C_}, buf.act_dtype());
    yr_ = buf.add(A, p + "ep_expert_out", {R_, C_}, buf.act_dtype());
    all_counts_ = buf.add(A, p + "ep_counts", {ep_, E_}, DType::i32);
  }
  h1_ = buf.add(A, p + "w1_out", {R_, F_}, buf.act_dtype());
  if (swiglu_) h3_ = buf.add(A, p + "w3_out", {R_, F_}, buf.act_dtype());
  act_ = buf.add(A, p + "activation", {R_, F_}, buf.act_dtype());
  // Written by each forward, read by the host only on request (aux_loss(),
  // tests): one copy per layer in scratch, outside the region full
  // recomputation shares.
  z_loss_ = buf.add(G, p + "z_loss", {1});
  // The router statistics (kernels/moe_stats.h), summed over every rank that
  // routes part of the micro-batch.
  sums_ = buf.add(G, p + "router_sums", {2 * E_ + 1}, DType::f64);
  buf.declare_op_scratch(moe_router_sums_scratch_bytes(N_));
  if (shared_stats()) {
    if (capacity_ > 0) {
      // Every token-sharing rank's runs (fixed by the layout), rows [cp rank][tp
      // rank], and room for each one's per-run loads.
      const int64_t tp_share = sp_ ? tp_ : 1;
      parallel::CpLayout layout = cp_layout(cfg, batch);
      // [cp rank * tp share + tp rank]: every token-sharing rank's runs.
      std::vector<std::vector<TokenRun>> share_runs;
      int64_t runs_max = 0;
      for (int c = 0; c < cp_; ++c)
        for (int64_t t = 0; t < tp_share; ++t) {
          layout.rank = c;
          share_runs.push_back(token_runs(layout, batch.B, tp_share, t));
          runs_max = std::max<int64_t>(runs_max, share_runs.back().size());
        }
      const int self = static_cast<int>(cfg.cp_rank * tp_share + (sp_ ? tp_rank_ : 0));
      run_loads_ = buf.add(G, p + "capacity_run_loads", {runs_max, E_}, DType::i32);
      tp_run_loads_ = buf.add(G, p + "capacity_tp_run_loads", {tp_share * runs_max, E_}, DType::i32);
      all_run_loads_ =
          buf.add(G, p + "capacity_all_run_loads", {cp_ * tp_share * runs_max, E_}, DType::i32);
      taken_ = buf.add(G, p + "capacity_taken", {E_}, DType::i32);
      run_table_.host = run_table(share_runs[self], runs_max);
      run_table_.id = buf.add(G, p + "capacity_run_table", {runs_max, 2}, DType::i32);
      order_table_.host = capacity_order(share_runs, self, runs_max);
      order_table_.id = buf.add(G, p + "capacity_order",
                                {static_cast<int64_t>(order_table_.host.size()) / 2, 2}, DType::i32);
    }
  }
  // The step counters sum over every micro-batch of a step, so they live in
  // the scratch arena (one copy), not with the activations a pipeline keeps
  // one copy of per micro-batch in flight.
  step_ = buf.add(G, p + "step_counts", {2, E_});
  step_aux_ = buf.add(G, p + "step_aux_loss", {1});
  if (moe.seq_aux_loss_coeff > 0) {
    // The layout fixes which of this rank's rows belong to which sequence.
    const int64_t tp_share = sp_ ? tp_ : 1;
    const parallel::CpLayout layout = cp_layout(cfg, batch);
    seq_len_ = layout.seq;
    seq_rows_.host = seq_row_table(token_runs(layout, batch.B, tp_share, sp_ ? tp_rank_ : 0),
                                   batch.B, seq_len_);
    for (int64_t q = 0; q < batch.B; ++q)
      seq_max_rows_ = std::max<int64_t>(seq_max_rows_, seq_rows_.host[2 * q + 1]);
    seq_rows_.id = buf.add(G, p + "seq_aux_rows", {batch.B, 2}, DType::i32);
    seq_sums_ = buf.add(A, p + "seq_aux_sums", {batch.B, 2 * E_}, DType::f64);
    seq_loss_ = buf.add(G, p + "seq_aux_loss", {1});
    step_seq_aux_ = buf.add(G, p + "step_seq_aux_loss", {1});
    buf.declare_op_scratch(moe_seq_aux_scratch_bytes(N_, batch.B, E_, seq_max_rows_));
  }
  if (moe.balance == MoeBalance::aux_loss && moe.aux_loss_coeff > 0) {
    bal_rows_.host = {0, static_cast<int32_t>(N_)};
    bal_rows_.id = buf.add(G, p + "balance_rows", {1, 2}, DType::i32);
    bal_sums_ = buf.add(A, p + "balance_sums", {1, 2 * E_}, DType::f64);
    bal_loss_ = buf.add(G, p + "balance_loss", {1});
    buf.declare_op_scratch(moe_seq_aux_scratch_bytes(N_, 1, E_, N_));
  }
  // The backward's temporaries (and the fp32 router input) are spent before
  // the layer returns: every MoE layer of the model shares one copy.
  auto temp = [&](const char* name, std::vector<int64_t> shape, DType dtype) {
    return buf.add_shared_scratch(std::string("moe.") + name, std::move(shape), dtype);
  };
  const DType act = buf.act_dtype();
  dys_ = temp("d_expert_out", {S, C_}, act);
  dxs_ = temp("d_dispatched", {S, C_}, act);
  if (ep_ > 1) {
    dyr_ = temp("d_ep_expert_out", {R_, C_}, act);
    dxr_ = temp("d_ep_received", {R_, C_}, act);
  }
  dh1_ = temp("d_w1_out", {R_, F_}, act);
  // GELU experts take w2's backward straight into d_w1_out (gemm_dgelu_backward).
  if (swiglu_) dh3_ = temp("d_w3_out", {R_, F_}, act);
  if (swiglu_) dact_ = temp("d_activation", {R_, F_}, act);
  dtopk_ = temp("d_topk_weight", {N_, K_}, DType::f32);
  dlogits_ = temp("d_router_logits", {N_, E_}, DType::f32);
  dtmp_ = temp("d_input_tmp", {N_, C_}, act);
  if (act != DType::f32) {
    // The router runs in fp32 (as Megatron-Core's): its 16-bit input is
    // widened exactly, so both backends' GEMMs take one dtype (the CUDA
    // linear takes no mixed operands) and compute the CPU's numbers.
    router_in_ = temp("router_input_f32", {N_, C_}, DType::f32);
    router_din_ = temp("d_router_input_f32", {N_, C_}, DType::f32);
  }
  if (Fs_ > 0) {
    sh1_ = buf.add(A, p + "shared_w1_out", {N_, Fs_}, buf.act_dtype());
    if (swiglu_) sh3_ = buf.add(A, p + "shared_w3_out", {N_, Fs_}, buf.act_dtype());
    sact_ = buf.add(A, p + "shared_activation", {N_, Fs_}, buf.act_dtype());
    if (moe.shared_gate) {
      shared_out_ = buf.add(A, p + "shared_out", {N_, C_}, buf.act_dtype());
      gate_logit_ = buf.add(A, p + "shared_gate_logit", {N_, 1}, DType::f32);
      dshared_out_ = temp("d_shared_out", {N_, C_}, act);
      dgate_logit_ = temp("d_shared_gate_logit", {N_, 1}, DType::f32);
      gate_din_ = temp("d_shared_gate_input_f32", {N_, C_}, DType::f32);
    }
    dsh1_ = temp("d_shared_w1_out", {N_, Fs_}, act);
    if (swiglu_) dsh3_ = temp("d_shared_w3_out", {N_, Fs_}, act);
    if (swiglu_) dsact_ = temp("d_shared_activation", {N_, Fs_}, act);
  }
}

void Moe::mlp_forward(const LayerEnv& env, const Mlp3& w, Tensor out, Tensor x, const Acts& a) const {
  const Buffers& b = env.buf;
  if (swiglu_) {
    gemm_forward(env, w.fp8_w1, a.h1, x, b.weight(w.w1), {});
    gemm_forward(env, w.fp8_w3, a.h3, x, b.weight(w.w3), {});
    swiglu_forward(env.ctx, a.act, a.h1, a.h3);
  } else {  // GELU fused as in GPT-2's dense MLP
    gemm_gelu_forward(env, w.fp8_w1, a.act, a.h1, x, b.weight(w.w1), {});
  }
  gemm_forward(env, w.fp8_w2, out, a.act, b.weight(w.w2), {});
}

// dx written (tmp: scratch of dx's shape, may alias dy, which is dead after the
// first GEMM); weight gradients accumulated.
void Moe::mlp_backward(const LayerEnv& env, const Mlp3& w, Tensor dx, Tensor dy, Tensor x,
                       const Acts& a, const Acts& d, Tensor tmp) const {
  const Buffers& b = env.buf;
  if (swiglu_) {
    gemm_backward(env, w.fp8_w2, d.act, b.grad(w.w2), {}, dy, a.act, b.weight(w.w2));
    swiglu_backward(env.ctx, d.h1, d.h3, d.act, a.h1, a.h3);
    gemm_backward(env, w.fp8_w1, dx, b.grad(w.w1), {}, d.h1, x, b.weight(w.w1));
    gemm_backward(env, w.fp8_w3, tmp, b.grad(w.w3), {}, d.h3, x, b.weight(w.w3));
    accumulate(env.ctx, dx, tmp);
    return;
  }
  gemm_dgelu_backward(env, w.fp8_w2, d.h1, b.grad(w.w2), {}, dy, a.act, b.weight(w.w2), a.h1);
  gemm_backward(env, w.fp8_w1, dx, b.grad(w.w1), {}, d.h1, x, b.weight(w.w1));
}

std::vector<Moe::RowBlock> Moe::row_blocks(const Buffers& b,
                                           const parallel::EpRoute& route) const {
  std::vector<RowBlock> blocks;
  int64_t s0 = 0;
  auto add = [&](int64_t expert, int64_t n) {
    if (n > 0) blocks.push_back({expert, s0, s0 + n});
    s0 += n;
  };
  if (ep_ == 1) {
    std::vector<int32_t> counts(2 * E_);  // (2, E): load, kept
    copy_to_host(counts.data(), b.get(counts_));
    for (int64_t e = 0; e < E_; ++e) add(e, counts[E_ + e]);
  } else {
    // Received rows come grouped by source peer, then by local expert.
    for (int64_t q = 0; q < ep_; ++q)
      for (int64_t l = 0; l < El_; ++l) add(l, route.recv_expert_rows[q * El_ + l]);
  }
  TRAINER_CHECK(s0 <= R_, "MoE: {} expert rows exceed the {} planned", s0, R_);
  return blocks;
}

const Moe::HostRouting& Moe::host_routing(const Buffers& b) const {
  auto it = routing_.find(b.get(counts_).data);
  TRAINER_CHECK(it != routing_.end(), "{}: MoE backward without its forward (no routing for this "
                "activation slot)", name_);
  return it->second;
}

Tensor Moe::capacity_taken(const LayerEnv& env, Tensor topk_idx) const {
  if (!shared_stats() || capacity_ == 0) return {};
  if (sp_)
    TRAINER_CHECK(env.tp.size() == tp_, "{}: MoE layer planned for tp {} but the tp group has {} ranks",
                  name_, tp_, env.tp.size());
  if (cp_ > 1)
    TRAINER_CHECK(env.cp != nullptr && env.cp->size() == cp_,
                  "{}: MoE layer planned for cp {} without a cp group of that size", name_, cp_);
  const Buffers& b = env.buf;
  Tensor runs = run_table_.get(b), order = order_table_.get(b);
  // This rank's loads per run, gathered over tp (SP blocks), then over cp:
  // rows [cp rank][tp rank][run].
  Tensor own = b.get(run_loads_), over_tp = b.get(tp_run_loads_), all = b.get(all_run_loads_);
  moe_run_loads(env.ctx, own, topk_idx, runs);
  if (sp_) env.tp.all_gather(own, over_tp);
  else over_tp = own;
  if (cp_ > 1) env.cp->all_gather(over_tp, all);
  else all = over_tp;
  Tensor out = b.get(taken_);
  moe_capacity_taken(env.ctx, out, all, order, capacity_);
  return out;
}

Tensor Moe::RowTable::get(const Buffers& b) const {
  Tensor rows = b.get(id);
  if (at != rows.data) {
    copy_from_host(rows, host.data());
    at = rows.data;
  }
  return rows;
}

parallel::Communicator& Moe::ep_group(const LayerEnv& env) const {
  TRAINER_CHECK(env.ep != nullptr && env.ep->size() == ep_,
                "MoE layer split over ep {} but the layer environment's ep group has {} ranks",
                ep_, env.ep ? env.ep->size() : 1);
  return *env.ep;
}

namespace {

Tensor rows(const Tensor& t, int64_t begin, int64_t end) {
  return t.empty() ? t : t.slice(begin, end);
}

}  // namespace

void Moe::forward(const LayerEnv& env, Tensor out, Tensor in) const {
  Context& ctx = env.ctx;
  const Buffers& b = env.buf;
  Tensor logits = b.get(logits_), probs = b.get(probs_), idx = b.get(topk_idx_);
  Tensor w = b.get(topk_w_), counts = b.get(counts_);
  Tensor router_in = in;
  if (router_in_ >= 0) {
    router_in = b.get(router_in_);
    copy(ctx, router_in, in);
  }
  linear_forward(ctx, logits, router_in, b.param(router_), {});
  // The shared experts' gate logit, from the same fp32 input as the router's.
  if (shared_gate_.index >= 0)
    linear_forward(ctx, b.get(gate_logit_), router_in, b.param(shared_gate_), {});
  Tensor bias = bias_.index >= 0 ? b.param(bias_) : Tensor{};
  moe_route_forward(ctx, probs, idx, w, logits, bias, moe_.sigmoid, moe_.normalize_topk,
                    {moe_.n_groups, moe_.top_groups});
  if (moe_.topk_scaling != 1.0f) scale(ctx, w, moe_.topk_scaling);
  Tensor load = counts.slice(0, 1).view({E_}), kept = counts.slice(1, 2).view({E_});
  moe_plan(ctx, b.get(slot_src_), b.get(assign_slot_), load, kept, idx, capacity_,
           capacity_taken(env, idx));
  Tensor xs = b.get(xs_), ys = b.get(ys_);
  moe_gather(ctx, xs, in, b.get(slot_src_), K_);
  // The experts run on xs/ys, or with ep on the rows received from the group.
  Tensor xe = xs, ye = ys;
  HostRouting& host = routing_[counts.data];
  parallel::EpRoute& route = host.route;
  if (ep_ > 1) {
    parallel::Communicator& ep = ep_group(env);
    route = parallel::ep_exchange_counts(ep, counts.slice(1, 2).view({E_}), b.get(all_counts_));
    recv_peak_ = std::max(recv_peak_, double(route.max_recv) / double(N_ * K_));
    // Every rank sees every rank's total, so all refuse together (no hang).
    // The headroom that would have held it, rounded up to a tenth.
    TRAINER_CHECK(route.max_recv <= R_,
                  "{}: expert parallelism: a rank's {} experts were routed {} rows in one "
                  "micro-batch, more than the {} planned ({:g}x the balanced load of {}); resume "
                  "with model.moe.ep_recv_headroom >= {:g} (more memory: see trainer plan), or "
                  "bound the rows with model.moe.capacity_factor",
                  name_, El_, route.max_recv, R_, moe_.ep_recv_headroom, N_ * K_,
                  std::ceil(10.0 * double(route.max_recv) / double(N_ * K_)) / 10.0);
    xe = b.get(xr_), ye = b.get(yr_);
    parallel::ep_dispatch(ep, route, xs, xe);
  }
  host.blocks = row_blocks(b, route);
  Tensor h1 = b.get(h1_), h3 = swiglu_ ? b.get(h3_) : Tensor{}, act = b.get(act_);
  for (const RowBlock& r : host.blocks) {
    const int64_t s0 = r.begin, s1 = r.end;
    mlp_forward(env, experts_[r.expert], ye.slice(s0, s1), xe.slice(s0, s1),
                {rows(h1, s0, s1), rows(h3, s0, s1), rows(act, s0, s1)});
  }
  if (ep_ > 1) parallel::ep_combine(ep_group(env), route, ye, ys);
  if (Fs_ > 0) {
    const bool gated = shared_gate_.index >= 0;
    Tensor shared_out = gated ? b.get(shared_out_) : out;
    mlp_forward(env, shared_, shared_out, in,
                {b.get(sh1_), swiglu_ ? b.get(sh3_) : Tensor{}, b.get(sact_)});
    if (gated) sigmoid_gate_forward(ctx, out, shared_out, b.get(gate_logit_));
  } else {
    fill(ctx, out, 0.0f);
  }
  moe_combine(ctx, out, ys, b.get(assign_slot_), w);

  // The z-loss, the step counters and the balance losses, on the device: the
  // host reads nothing here (kernels/moe_stats.h, kernels/moe_seq_aux.h). Every
  // sum is the whole micro-batch's: the ranks routing parts of it add theirs.
  TRAINER_CHECK(cp_ == 1 || (env.cp != nullptr && env.cp->size() == cp_),
                "{}: MoE layer planned for cp {} without a cp group of that size", name_, cp_);
  auto share_sum = [&](Tensor t) {
    if (sp_) env.tp.all_reduce(t, parallel::ReduceOp::sum);
    if (cp_ > 1) env.cp->all_reduce(t, parallel::ReduceOp::sum);
  };
  Tensor sums = b.get(sums_);
  moe_router_sums(ctx, sums, counts, logits);
  share_sum(sums);
  // A recomputed forward is not counted again: the step counters hold it.
  const bool count = !env.recompute;
  moe_router_losses(ctx, b.get(z_loss_), count ? b.get(step_) : Tensor{},
                    count ? b.get(step_aux_) : Tensor{}, sums, Ng_, moe_.z_loss_coeff);
  if (bal_sums_ >= 0) {
    Tensor bal = b.get(bal_sums_);
    moe_seq_aux_sums(ctx, bal, logits, bal_rows_.get(b), N_, K_, moe_.sigmoid);
    share_sum(bal);
    moe_seq_aux_loss(ctx, b.get(bal_loss_), count ? b.get(step_aux_) : Tensor{}, bal, Ng_, K_,
                     moe_.aux_loss_coeff);
  }
  if (seq_sums_ >= 0) {
    Tensor seq = b.get(seq_sums_);
    moe_seq_aux_sums(ctx, seq, logits, seq_rows_.get(b), seq_max_rows_, K_, moe_.sigmoid);
    share_sum(seq);
    moe_seq_aux_loss(ctx, b.get(seq_loss_), count ? b.get(step_seq_aux_) : Tensor{}, seq, seq_len_,
                     K_, moe_.seq_aux_loss_coeff);
  }
}

void Moe::backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in, float dloss) const {
  Context& ctx = env.ctx;
  const Buffers& b = env.buf;
  Tensor dys = b.get(dys_), dxs = b.get(dxs_), ys = b.get(ys_), xs = b.get(xs_);
  Tensor dtopk = b.get(dtopk_), dtmp = b.get(dtmp_);
  moe_combine_backward(ctx, dys, dtopk, dout, ys, b.get(assign_slot_), b.get(slot_src_),
                       b.get(topk_w_));
  Tensor xe = xs, dye = dys, dxe = dxs;
  const HostRouting& host = host_routing(b);
  const parallel::EpRoute& route = host.route;
  if (ep_ > 1) {
    xe = b.get(xr_), dye = b.get(dyr_), dxe = b.get(dxr_);
    parallel::ep_combine_backward(ep_group(env), route, dys, dye);
  }
  Tensor h1 = b.get(h1_), h3 = swiglu_ ? b.get(h3_) : Tensor{}, act = b.get(act_);
  Tensor dh1 = b.get(dh1_), dh3 = swiglu_ ? b.get(dh3_) : Tensor{};
  Tensor dact = swiglu_ ? b.get(dact_) : Tensor{};
  for (const RowBlock& r : host.blocks) {
    const int64_t s0 = r.begin, s1 = r.end;
    Tensor dy = dye.slice(s0, s1);
    mlp_backward(env, experts_[r.expert], dxe.slice(s0, s1), dy, xe.slice(s0, s1),
                 {rows(h1, s0, s1), rows(h3, s0, s1), rows(act, s0, s1)},
                 {rows(dh1, s0, s1), rows(dh3, s0, s1), rows(dact, s0, s1)}, dy);
  }
  if (ep_ > 1) parallel::ep_dispatch_backward(ep_group(env), route, dxe, dxs);
  if (Fs_ > 0) {
    Tensor dshared = dout;
    if (shared_gate_.index >= 0) {
      dshared = b.get(dshared_out_);
      sigmoid_gate_backward(ctx, dshared, b.get(dgate_logit_), dout, b.get(shared_out_),
                            b.get(gate_logit_));
    }
    mlp_backward(env, shared_, dinp, dshared, in,
                 {b.get(sh1_), swiglu_ ? b.get(sh3_) : Tensor{}, b.get(sact_)},
                 {b.get(dsh1_), swiglu_ ? b.get(dsh3_) : Tensor{}, swiglu_ ? b.get(dsact_) : Tensor{}}, dtmp);
  } else {
    fill(ctx, dinp, 0.0f);
  }
  moe_gather_backward(ctx, dinp, dxs, b.get(assign_slot_));

  // Router: combine weights and z-loss, then the balance losses (their counts
  // are the whole micro-batch's or sequence's, as forward saved them).
  const float z_grad = dloss * moe_.z_loss_coeff / static_cast<float>(Ng_);
  // The combine weights were scaled after routing: the router's gradient is too.
  if (moe_.topk_scaling != 1.0f) scale(ctx, dtopk, moe_.topk_scaling);
  moe_route_backward(ctx, b.get(dlogits_), dtopk, b.get(logits_), b.get(probs_),
                     b.get(topk_idx_), z_grad, moe_.sigmoid, moe_.normalize_topk);
  if (bal_sums_ >= 0)
    moe_seq_aux_backward(ctx, b.get(dlogits_), b.get(logits_), bal_rows_.get(b), b.get(bal_sums_),
                         Ng_, K_, dloss * moe_.aux_loss_coeff, moe_.sigmoid);
  if (seq_sums_ >= 0)
    moe_seq_aux_backward(ctx, b.get(dlogits_), b.get(logits_), seq_rows_.get(b), b.get(seq_sums_),
                         seq_len_, K_, dloss * moe_.seq_aux_loss_coeff, moe_.sigmoid);
  // The shared expert gate reads the router's input: its input gradient joins the router's.
  auto gate_backward = [&](Tensor x, Tensor dx) {
    if (shared_gate_.index < 0) return;
    Tensor gate_din = b.get(gate_din_);
    linear_backward(ctx, gate_din, b.grad(shared_gate_), {}, b.get(dgate_logit_), x,
                    b.param(shared_gate_));
    accumulate(ctx, dx, gate_din);
  };
  if (router_in_ >= 0) {
    Tensor router_in = b.get(router_in_), router_din = b.get(router_din_);
    copy(ctx, router_in, in);
    linear_backward(ctx, router_din, b.grad(router_), {}, b.get(dlogits_), router_in, b.param(router_));
    gate_backward(router_in, router_din);
    copy(ctx, dtmp, router_din);  // one rounding into the activation dtype
  } else {
    linear_backward(ctx, dtmp, b.grad(router_), {}, b.get(dlogits_), in, b.param(router_));
    gate_backward(in, dtmp);
  }
  accumulate(ctx, dinp, dtmp);
}

float Moe::aux_loss(const Buffers& buf) const {
  float z = 0.0f;
  copy_to_host(&z, buf.get(z_loss_));
  float balance = 0.0f;
  if (bal_loss_ >= 0) {
    copy_to_host(&balance, buf.get(bal_loss_));
    balance *= moe_.aux_loss_coeff;
  }
  float seq = 0.0f;
  if (seq_loss_ >= 0) copy_to_host(&seq, buf.get(seq_loss_));
  return balance + moe_.z_loss_coeff * z + moe_.seq_aux_loss_coeff * seq;
}

void Moe::reset_step_stats(Context& ctx, const Buffers& buf) const {
  recv_peak_ = 0;
  fill(ctx, buf.get(step_), 0.0f);
  fill(ctx, buf.get(step_aux_), 0.0f);
  if (step_seq_aux_ >= 0) fill(ctx, buf.get(step_seq_aux_), 0.0f);
}

MoeStats Moe::stats(const Buffers& buf) const {
  std::vector<float> step(2 * E_);
  copy_to_host(step.data(), buf.get(step_));
  return stats_of(step.data(), E_);
}

MoeStats Moe::stats_of(const float* step, int64_t experts) {
  MoeStats s;
  int64_t max_load = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const auto load = static_cast<int64_t>(step[e]), kept = static_cast<int64_t>(step[experts + e]);
    s.load.push_back(load);
    s.assignments += load;
    s.dropped += load - kept;
    max_load = std::max(max_load, load);
  }
  s.imbalance = s.assignments > 0 ? double(max_load) * experts / double(s.assignments) : 0.0;
  return s;
}

void Moe::update_bias(Context& ctx, const Buffers& buf, float rate, Tensor load) const {
  if (bias_.index < 0) return;
  moe_bias_update(ctx, buf.param(bias_), load, rate);
}

}  // namespace trainer::model
