// An MoE layer split over an ep group of MPI ranks (ctest runs 2 and 4)
// against the whole layer on each rank, for each rank's own tokens: outputs,
// input gradients, aux losses and router/shared gradients must agree with
// the rank's whole layer, and each routed expert's gradient with the sum
// over ranks of the whole layers' gradients for that expert (its owner saw
// every rank's tokens for it). GELU and SwiGLU experts, dropless and
// capacity dispatch, softmax and sigmoid routers.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../parallel/mpi_check.h"
#include "moe_harness.h"
#include "model/rng.h"
#include "parallel/mpi_communicator.h"

using namespace trainer;
using trainer::test::MoeHarness;

namespace {

constexpr int64_t kTokens = 24, kC = 16;

// Parameters keyed by global name (as Model::init_parameters does), so the
// split layer's experts equal the whole layer's experts of the same name.
void init_by_name(MoeHarness& h) {
  for (const auto& p : h.buf.params()) {
    Tensor w = h.buf.get(p.value);
    const bool router = p.spec.name.find("gate.weight") != std::string::npos;
    const bool bias = p.spec.init == model::Init::zeros;
    const uint64_t key = model::hash_name(p.spec.name);
    for (int64_t i = 0; i < w.numel(); ++i)
      w.ptr<float>()[i] = bias ? 0.05f * static_cast<float>(i % 3) - 0.05f
                               : (router ? 0.7f : 0.4f) * model::normal_at(11, key, uint64_t(i));
  }
}

// Each rank's own tokens and output gradient.
void init_io(MoeHarness& h, int rank) {
  for (int64_t i = 0; i < kTokens * kC; ++i) {
    h.in[i] = model::normal_at(5, uint64_t(100 + rank), uint64_t(i));
    h.dout[i] = model::normal_at(5, uint64_t(200 + rank), uint64_t(i));
  }
}

bool close(double a, double b) { return std::abs(a - b) <= 1e-5 + 1e-5 * std::abs(b); }

std::vector<float> grad_of(const MoeHarness& h, const std::string& name) {
  for (const auto& p : h.buf.params())
    if (p.spec.name == name) {
      Tensor g = h.buf.get(p.grad);
      return std::vector<float>(g.ptr<float>(), g.ptr<float>() + g.numel());
    }
  return {};
}

void check_case(parallel::Communicator& ep, model::Family family, model::MoeConfig mc,
                const char* what) {
  const int me = ep.rank();
  MoeHarness whole(family, mc, kTokens, kC, 1);
  mc.ep = ep.size();
  mc.ep_rank = me;
  MoeHarness split(family, mc, kTokens, kC, 1);
  for (MoeHarness* h : {&whole, &split}) {
    init_by_name(*h);
    init_io(*h, me);
    h->zero_grads();
  }
  whole.forward();
  whole.backward();
  model::LayerEnv env{split.ctx, split.buf, *split.tp, &ep};
  split.moe.forward(env, split.t(split.out), split.t(split.in));
  split.moe.backward(env, split.t(split.dinp), split.t(split.dout), split.t(split.in), 1.0f);

  int bad = 0;
  for (int64_t i = 0; i < kTokens * kC; ++i) {
    bad += !close(split.out[i], whole.out[i]);
    bad += !close(split.dinp[i], whole.dinp[i]);
  }
  bad += !close(split.moe.aux_loss(split.buf), whole.moe.aux_loss(whole.buf));
  // Every parameter of the whole layer: replicated ones equal the split
  // layer's; experts, summed over the ranks, equal their owner's gradient.
  int experts_checked = 0;
  for (const auto& p : whole.buf.params()) {
    std::vector<float> gw = grad_of(whole, p.spec.name);
    if (p.spec.expert) {
      ep.all_reduce(Tensor(gw.data(), {int64_t(gw.size())}), parallel::ReduceOp::sum);
      std::vector<float> gs = grad_of(split, p.spec.name);
      if (gs.empty()) continue;  // another rank's expert
      ++experts_checked;
      for (size_t i = 0; i < gw.size(); ++i) bad += !close(gs[i], gw[i]);
    } else {
      std::vector<float> gs = grad_of(split, p.spec.name);
      MPI_TEST_CHECK(gs.size() == gw.size(), me);
      for (size_t i = 0; i < gw.size(); ++i) bad += !close(gs[i], gw[i]);
    }
  }
  const int per_expert = family == model::Family::llama ? 3 : 2;
  if (bad > 0) std::fprintf(stderr, "rank %d, %s: %d values differ\n", me, what, bad);
  MPI_TEST_CHECK(bad == 0, me);
  MPI_TEST_CHECK(experts_checked == per_expert * mc.n_experts / ep.size(), me);
  // Load statistics are per rank (every rank routes its tokens over all experts).
  MPI_TEST_CHECK(split.moe.stats(split.buf).load == whole.moe.stats(whole.buf).load, me);
}

// Every token's top-2 forced onto experts 0 and 1 (the selection bias): with
// ep 4 (2 experts a rank) rank 0 receives all 4 * 2N rows, 4x the balanced
// load, beyond the 2x (and 3.5x) planned for dropless routing, and every rank
// must refuse the micro-batch with the same error naming the headroom that
// would hold it (none may wait in the exchange); with ep_recv_headroom 4, or
// with ep 2, the worst case fits the plan, and the layer reports that peak.
void check_overflow(parallel::Communicator& ep, double headroom) {
  model::MoeConfig mc;
  mc.n_experts = 8, mc.top_k = 2, mc.d_ff_expert = 12, mc.balance = model::MoeBalance::aux_free;
  mc.ep = ep.size(), mc.ep_rank = ep.rank(), mc.ep_recv_headroom = headroom;
  MoeHarness split(model::Family::gpt2, mc, kTokens, kC, 1);
  init_by_name(split);
  init_io(split, ep.rank());
  Tensor bias = split.buf.param(split.moe.selection_bias());
  for (int64_t e = 0; e < bias.numel(); ++e) bias.ptr<float>()[e] = e < 2 ? 100.0f : 0.0f;
  model::LayerEnv env{split.ctx, split.buf, *split.tp, &ep};
  std::string error;
  try {
    split.moe.forward(env, split.t(split.out), split.t(split.in));
  } catch (const Error& e) {
    error = e.what();
  }
  if (ep.size() == 4 && headroom < 4) {
    if (ep.rank() == 0) std::printf("refused at headroom %g: %s\n", headroom, error.c_str());
    MPI_TEST_CHECK(error.find("expert parallelism") != std::string::npos &&
                       error.find("192 rows") != std::string::npos &&
                       error.find("model.moe.ep_recv_headroom >= 4 ") != std::string::npos,
                   ep.rank());
  } else {
    MPI_TEST_CHECK(error.empty(), ep.rank());
    // Rank 0 received every rank's 2N rows: ep x the balanced load, on every rank.
    MPI_TEST_CHECK(split.moe.ep_recv_peak() == double(ep.size()), ep.rank());
    split.moe.reset_step_stats(split.ctx, split.buf);
    MPI_TEST_CHECK(split.moe.ep_recv_peak() == 0.0, ep.rank());
  }
}

}  // namespace

int main() {
  return run_mpi_test([] {
    auto world = parallel::make_mpi_world("ep");
    model::MoeConfig gelu;
    gelu.n_experts = 8, gelu.top_k = 2, gelu.d_ff_expert = 12;
    check_case(*world, model::Family::gpt2, gelu, "gelu dropless softmax");

    model::MoeConfig swiglu = gelu;
    swiglu.top_k = 3, swiglu.n_shared_experts = 1, swiglu.capacity_factor = 1.0f;
    swiglu.z_loss_coeff = 0.01f;
    check_case(*world, model::Family::llama, swiglu, "swiglu capacity shared");

    model::MoeConfig sigmoid = gelu;
    sigmoid.sigmoid = true, sigmoid.balance = model::MoeBalance::aux_free;
    check_case(*world, model::Family::llama, sigmoid, "swiglu sigmoid aux_free");
    for (double headroom : {2.0, 3.5, 4.0}) check_overflow(*world, headroom);
    if (world->rank() == 0) std::printf("ep %d: split MoE layer equals the whole one\n", world->size());
  });
}
