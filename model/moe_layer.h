// Mixture-of-experts layer (replaces the dense MLP of a block): a router
// (linear C -> E, softmax or sigmoid scores, top-k, renormalised combine
// weights), E routed experts (SwiGLU or GELU MLPs of d_ff_expert, no biases),
// optional shared experts every token passes through, dropless dispatch by a
// permutation that groups each expert's tokens into one contiguous block (or
// capacity-limited, with drops counted), the Switch/GShard balance loss, an
// optional router z-loss, and DeepSeek-V3's aux-loss-free selection bias.
//
// Parameter names follow Mixtral (HF MixtralForCausalLM):
//   {prefix}.block_sparse_moe.gate.weight                 (E, C)   router
//   {prefix}.block_sparse_moe.experts.{e}.w1.weight       (Fe, C)  gate (SwiGLU) / fc (GELU)
//   {prefix}.block_sparse_moe.experts.{e}.w3.weight       (Fe, C)  up (SwiGLU only)
//   {prefix}.block_sparse_moe.experts.{e}.w2.weight       (C, Fe)  down / proj
// plus, outside Mixtral's set, the same w1/w2/w3 under
// {prefix}.block_sparse_moe.shared_experts (one MLP of n_shared * Fe columns,
// DeepSeek's fused form) and DeepSeek-V3's
// {prefix}.block_sparse_moe.gate.e_score_correction_bias (E) for aux_free.
// Routed expert weights carry ParamSpec::expert. Under tensor parallelism the
// layer is replicated on every tp rank (tp_dim -1 throughout, no region ops).
// Under sequence parallelism each tp rank routes its own block of N / tp
// tokens through the replicated weights (their gradients are sp_partial,
// summed over tp); the balance statistics, z-loss and step counters are
// summed over tp, and capacity is shared in token order (rank r's block
// after ranks < r's), so the layer computes what one rank would. Context
// parallelism's chunks share statistics and capacity the same way.
//
// Expert parallelism (MoeConfig::ep > 1): this rank declares only its E / ep
// experts (under their global names) and moves the kept rows to their
// owners and back with parallel/expert_dispatch.h over LayerEnv::ep. Every
// rank routes its own tokens over all E experts, so the aux losses and step
// counters stay per rank as with dp. The expert activations are planned for
// the rows a rank can receive: the capacity bound with capacity_factor;
// dropless, the worst case (every peer's tokens on this rank's experts) or
// MoeConfig::ep_recv_headroom times the balanced load when smaller, a
// micro-batch beyond that being refused on every rank of the group at once,
// naming the headroom that would have held it (the key is not part of the
// checkpoint's model, so the job resumes with it raised).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "model/layer_env.h"
#include "model/moe_config.h"
#include "model/moe_capacity.h"
#include "parallel/expert_dispatch.h"

namespace trainer::model {

// A layer's capacity per expert (0: dropless) and the rows its experts run on
// (R: every routed row this rank's experts may receive in a micro-batch).
struct MoePlanSize {
  int64_t capacity = 0, rows = 0;
};
MoePlanSize moe_plan_size(const ModelConfig& cfg, const MoeConfig& moe, const BatchShape& batch);

// Counters summed over the forwards since reset_step_stats.
struct MoeStats {
  double imbalance = 0;     // max / mean assignments per expert (1 = balanced)
  int64_t assignments = 0;  // token-expert assignments routed (tokens * top_k)
  int64_t dropped = 0;      // of those, dropped by the capacity limit
  std::vector<int64_t> load;  // per expert, before dropping
};

class Moe {
 public:
  // `family` picks the experts' activation: llama -> SwiGLU, gpt2 -> GELU.
  void declare(Buffers& buf, const std::string& prefix, const ModelConfig& cfg,
               const MoeConfig& moe, const BatchShape& batch);
  // out (N, C) = moe(in (N, C)); written. Saves what backward needs, stores
  // this micro-batch's balance and z-loss, and adds its counts to the step stats.
  void forward(const LayerEnv& env, Tensor out, Tensor in) const;
  // dinp (N, C) written; parameter gradients accumulated. `dloss` is the
  // gradient of the trained objective w.r.t. this micro-batch's aux_loss()
  // (its coefficients are applied inside), e.g. 1 / micro-batches per step.
  void backward(const LayerEnv& env, Tensor dinp, Tensor dout, Tensor in, float dloss) const;

  // The last forward's auxiliary loss: aux_loss_coeff * balance (aux_loss
  // only) + z_loss_coeff * z + seq_aux_loss_coeff * the sequence-wise balance.
  // Reading it waits for the device.
  float aux_loss(const Buffers& buf) const;
  // The step counters: (2, E) f32, row 0 the load before dropping, row 1 after.
  // Sum it over the data-parallel group before stats() / update_bias().
  Tensor step_counts(const Buffers& buf) const { return buf.get(step_); }
  void reset_step_stats(Context& ctx, const Buffers& buf) const;
  // Sum of aux_loss() over the forwards since reset_step_stats, its
  // sequence-wise part left out (step_seq_aux), (1) f32 kept on the device:
  // what the trainer reports (Model::gather_moe_step).
  Tensor step_aux(const Buffers& buf) const { return buf.get(step_aux_); }
  // Of that, the sequence-wise balance loss's part, (1) f32 (seq_aux_loss_coeff
  // > 0; empty otherwise): reported on its own, as Megatron does.
  Tensor step_seq_aux(const Buffers& buf) const {
    return step_seq_aux_ >= 0 ? buf.get(step_seq_aux_) : Tensor{};
  }
  MoeStats stats(const Buffers& buf) const;
  // Expert parallelism: the most rows one rank of the ep group was routed in
  // a forward since reset_step_stats, as a multiple of the balanced load N K
  // (what ep_recv_headroom bounds, dropless); 0 without ep. The same on every
  // rank of the group (each sees every rank's counts).
  double ep_recv_peak() const { return recv_peak_; }
  // The stats of step counters already read: `step` (2E) as step_counts holds them.
  static MoeStats stats_of(const float* step, int64_t experts);
  // aux_free only (no-op otherwise): bias_e += rate * sign(mean load - load_e)
  // on the device (kernels/moe_stats.h), `load` (E) f32 the step's loads summed
  // over dp (row 0 of the step counters). Call once per optimizer step, after
  // the backward.
  void update_bias(Context& ctx, const Buffers& buf, float rate, Tensor load) const;

  const MoeConfig& config() const { return moe_; }
  ParamId selection_bias() const { return bias_; }

 private:
  struct Mlp3 {
    ParamId w1, w3, w2;
    int fp8_w1 = -1, fp8_w3 = -1, fp8_w2 = -1;  // fp8 operand indices (fp8 layers)
  };
  struct Acts {  // an MLP's saved activations (rows of its block)
    Tensor h1, h3, act;
  };
  void mlp_forward(const LayerEnv& env, const Mlp3& w, Tensor out, Tensor x, const Acts& a) const;
  void mlp_backward(const LayerEnv& env, const Mlp3& w, Tensor dx, Tensor dy, Tensor x,
                    const Acts& a, const Acts& d, Tensor tmp) const;
  // The routed experts' row blocks in the buffer they run on: {local expert,
  // first row, end row}, in buffer order.
  struct RowBlock {
    int64_t expert, begin, end;
  };
  // From the kept counts (read from the device) or, with ep, the route.
  std::vector<RowBlock> row_blocks(const Buffers& b, const parallel::EpRoute& route) const;
  // A micro-batch's routing as the host knows it after forward (its expert
  // GEMMs' row blocks; with ep, the exchange sizes), kept under the address of
  // the counts buffer it was read from (an activation: one per micro-batch a
  // pipeline keeps in flight), so that backward runs without reading the
  // counts back again. Forward (first or recomputed) rewrites it.
  struct HostRouting {
    std::vector<RowBlock> blocks;
    parallel::EpRoute route;
  };
  const HostRouting& host_routing(const Buffers& b) const;
  mutable std::unordered_map<const void*, HostRouting> routing_;
  mutable double recv_peak_ = 0;  // ep_recv_peak()
  parallel::Communicator& ep_group(const LayerEnv& env) const;
  // Capacity shared over the SP blocks and cp chunks of the micro-batch:
  // moe_plan's `taken` making this rank keep what one rank would
  // (model/moe_capacity.h); empty when no other rank shares the tokens.
  Tensor capacity_taken(const LayerEnv& env, Tensor topk_idx) const;

  MoeConfig moe_;
  bool swiglu_ = false;
  // N_: tokens this rank routes (its sequence-parallel block), Ng_: the
  // micro-batch's (every cp rank's chunks of its sequences included).
  int64_t N_ = 0, Ng_ = 0, C_ = 0, E_ = 0, K_ = 0, F_ = 0, Fs_ = 0, capacity_ = 0;
  bool sp_ = false;
  int64_t cp_ = 1;
  // The micro-batch's tokens are routed on several ranks (tp blocks under
  // sequence parallelism, cp chunks): balance statistics are summed over them.
  bool shared_stats() const { return sp_ || cp_ > 1; }
  int64_t tp_ = 1, tp_rank_ = 0;
  int64_t ep_ = 1, El_ = 0, R_ = 0;  // ep group size, local experts, expert rows planned
  std::string name_;
  ParamId router_, bias_;
  std::vector<Mlp3> experts_;
  Mlp3 shared_;
  // Activations.
  BufferId logits_ = -1, probs_ = -1, topk_idx_ = -1, topk_w_ = -1;   // (N, E) (N, K)
  BufferId slot_src_ = -1, assign_slot_ = -1, counts_ = -1;           // (N*K) (N*K) (2, E) i32
  BufferId xs_ = -1, ys_ = -1, h1_ = -1, h3_ = -1, act_ = -1;         // (S, C) (R, Fe)
  BufferId xr_ = -1, yr_ = -1, all_counts_ = -1;  // ep > 1: (R, C) received rows, (ep, E) i32
  BufferId sh1_ = -1, sh3_ = -1, sact_ = -1;                          // (N, Fs)
  // Gated shared experts: their output before the gate (N, C), the gate's logit (N, 1) f32.
  ParamId shared_gate_;
  BufferId shared_out_ = -1, gate_logit_ = -1;
  BufferId dshared_out_ = -1, dgate_logit_ = -1, gate_din_ = -1;      // scratch (N, C) (N, 1) (N, C) f32
  BufferId z_loss_ = -1;  // scratch (1): the last forward's z-loss
  BufferId sums_ = -1;    // scratch (2E+1) f64: the router statistics (kernels/moe_stats.h)
  // Shared capacity scratch (i32): this rank's per-run loads (runs_max, E),
  // gathered over SP's tp, then over cp; the resulting `taken` (E).
  BufferId run_loads_ = -1, tp_run_loads_ = -1, all_run_loads_ = -1, taken_ = -1;
  // A fixed i32 table built from the layout (kernels/moe_capacity.h's runs
  // and order, kernels/moe_seq_aux.h's seq_rows): scratch uploaded once per
  // place the buffer lives.
  struct RowTable {
    BufferId id = -1;
    std::vector<int32_t> host;
    mutable const void* at = nullptr;
    Tensor get(const Buffers& b) const;
  };
  RowTable run_table_, order_table_;  // kernels/moe_capacity.h's tables
  BufferId step_ = -1, step_aux_ = -1;   // scratch: (2, E) step counters, (1) summed aux loss
  // The balance loss (balance: aux_loss), Megatron's: the micro-batch taken as
  // one sequence by kernels/moe_seq_aux.h's ops (bias-free, group-free top-k
  // counts; scores normalised to sum 1, which a sigmoid router's are not).
  // bal_rows_: (1, 2) = all N rows; sums (1, 2E) f64, an activation the
  // backward reads; the last forward's loss (1) f32 scratch.
  RowTable bal_rows_;
  BufferId bal_sums_ = -1, bal_loss_ = -1;
  // The sequence-wise balance loss (seq_aux_loss_coeff > 0, kernels/moe_seq_aux.h):
  // this rank's rows of each sequence, (B, 2); the per-sequence sums (B, 2E)
  // f64, an activation the backward reads; the last forward's loss (1) f32 scratch.
  RowTable seq_rows_;
  BufferId seq_sums_ = -1, seq_loss_ = -1, step_seq_aux_ = -1;
  int64_t seq_len_ = 0;  // tokens per whole sequence
  int64_t seq_max_rows_ = 0;  // the most of one sequence's rows this rank holds
  // Scratch (live within backward).
  BufferId dys_ = -1, dxs_ = -1, dh1_ = -1, dh3_ = -1, dact_ = -1;   // (S, C) (R, Fe)
  BufferId dyr_ = -1, dxr_ = -1;                                      // ep > 1: (R, C)
  BufferId dsh1_ = -1, dsh3_ = -1, dsact_ = -1;                       // (N, Fs)
  BufferId dtopk_ = -1, dlogits_ = -1, dtmp_ = -1;                   // (N, K) (N, E) (N, C)
  BufferId router_in_ = -1, router_din_ = -1;  // 16-bit activations: the router's fp32 (N, C)
};

}  // namespace trainer::model
