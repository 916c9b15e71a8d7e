// [cuda] cross-entropy (three passes + backward, vocab-parallel shards, padding,
// ignored targets) and embedding forward/backward (at per-token positions too)
// against the CPU op on the same dtypes: logits, tables and activations fp32,
// bf16 or fp16; statistics, losses and table gradients fp32.
#include <cmath>

#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "test/cuda/harness.h"

namespace trainer::cuda_test {

namespace {
constexpr DType kDtypes[] = {DType::f32, DType::bf16, DType::f16};
}  // namespace

TEST_CASE("cross-entropy passes match the CPU op", "[cuda][cross_entropy]") {
  struct Case {
    int64_t N, Vp, vocab_start, vocab_size;
  };
  // Whole vocab; a shard with padding columns; a shard past the vocabulary (all padding).
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 0, 1}, Case{17, 4097, 0, 4097}, Case{33, 4097, 4097, 8000},
                       Case{5, 64, 128, 100}}) {
    auto targets = random_ints(c.N, 300 + c.N, -1, static_cast<int32_t>(c.vocab_size - 1));
    const auto logits = round_to(random_floats(c.N * c.Vp, 301 + c.Vp, -8.0f, 8.0f), dtype);
    const auto dloss = random_floats(c.N, 302, 0.1f, 1.0f);
    const auto zeros = std::vector<float>(c.N);
    HostTensor hl({c.N, c.Vp}, logits, dtype), hmax({c.N}, zeros), hse({c.N}, zeros),
        htl({c.N}, zeros), hloss({c.N}, zeros), hdl({c.N}, dloss),
        hdx({c.N, c.Vp}, std::vector<float>(c.N * c.Vp), dtype);
    const Tensor ht = host_ints(targets, {c.N});
    cpu::cross_entropy_max(cpu(), hmax, hl, c.vocab_start, c.vocab_size);
    cpu::cross_entropy_sumexp(cpu(), hse, htl, hl, hmax, ht, c.vocab_start, c.vocab_size);
    cpu::cross_entropy_loss(cpu(), hloss, hmax, hse, htl, ht);
    cpu::cross_entropy_backward(cpu(), hdx, hl, hmax, hse, ht, hdl, c.vocab_start, c.vocab_size);

    DeviceTensor gl({c.N, c.Vp}, dtype), gmax({c.N}), gse({c.N}), gtl({c.N}), gloss({c.N}),
        gdl({c.N}), gt({c.N}, DType::i32);
    gt.upload_ints(targets);
    gdl.upload(dloss);
    auto run = [&] {
      for (DeviceTensor* t : {&gmax, &gse, &gtl, &gloss}) t->poison();
      gl.upload(logits);
      cuda::cross_entropy_max(gpu(), gmax, gl, c.vocab_start, c.vocab_size);
      cuda::cross_entropy_sumexp(gpu(), gse, gtl, gl, gmax, gt, c.vocab_start, c.vocab_size);
      cuda::cross_entropy_loss(gpu(), gloss, gmax, gse, gtl, gt);
      // In place, as the model reuses the logits buffer for dlogits.
      cuda::cross_entropy_backward(gpu(), gl, gl, gmax, gse, gt, gdl, c.vocab_start, c.vocab_size);
      std::vector<std::vector<float>> r;
      for (DeviceTensor* t : {&gmax, &gse, &gtl, &gloss, &gl}) r.push_back(t->download());
      return r;
    };
    const auto r1 = run();
    const auto r2 = run();
    const std::string tag = fmt::format("cross_entropy {} N={} Vp={} start={} V={}",
                                        dtype_name(dtype), c.N, c.Vp, c.vocab_start, c.vocab_size);
    const HostTensor* refs[] = {&hmax, &hse, &htl, &hloss, &hdx};
    const char* names[] = {" maxv", " sumexp", " target_logit", " loss", " dlogits"};
    for (int i = 0; i < 5; ++i) {
      // A shard with no valid column has maxv (and, before the group reduction, the
      // loss) = -inf on both sides: compare those bits. The statistics are fp32 sums
      // of the same logits on both sides; dlogits is rounded once into the dtype.
      const bool empty_shard = c.vocab_start >= c.vocab_size;
      if (empty_shard && (i == 0 || i == 3))
        expect_same_bits(tag + names[i], r1[i], refs[i]->values());
      else
        expect_close(tag + names[i], r1[i], refs[i]->values(),
                     i == 4 ? narrow_tolerance(dtype, kF32Reduction, false) : kF32Reduction);
      expect_same_bits(tag + names[i] + " rerun", r1[i], r2[i]);
    }
  }
}

namespace {

// One embedding forward/backward on both backends, the GPU's twice (a race
// shows as different bits). Without positions, token t of each sequence of T
// reads row pos_offset + t; with them, row positions[t] (then T = N, offset 0).
struct EmbeddingCase {
  std::vector<int32_t> ids, positions;
  int64_t T, V_local, C, T_max, vocab_start, pos_offset;
  bool wpe;
  int seed;  // of wte, wpe, dy, dwte0, dwpe0: seed + 1 ... seed + 5
};

// By value: host_ints wraps the id vectors in place, so they must be mutable.
void compare_embedding(DType dtype, EmbeddingCase c, const std::string& tag) {
  const int64_t N = static_cast<int64_t>(c.ids.size());
  const auto wte = round_to(random_floats(c.V_local * c.C, c.seed + 1), dtype);
  const auto wpe = round_to(random_floats(c.T_max * c.C, c.seed + 2), dtype);
  const auto dy = round_to(random_floats(N * c.C, c.seed + 3), dtype);
  const auto dwte0 = random_floats(c.V_local * c.C, c.seed + 4);
  const auto dwpe0 = random_floats(c.T_max * c.C, c.seed + 5);
  HostTensor hwte({c.V_local, c.C}, wte, dtype), hwpe({c.T_max, c.C}, wpe, dtype),
      hy({N, c.C}, std::vector<float>(N * c.C), dtype), hdy({N, c.C}, dy, dtype),
      hdwte({c.V_local, c.C}, dwte0), hdwpe({c.T_max, c.C}, dwpe0);
  const Tensor hids = host_ints(c.ids, {N});
  const Tensor hpos = c.positions.empty() ? Tensor{} : host_ints(c.positions, {N});
  cpu::embedding_forward(cpu(), hy, hids, hwte, c.wpe ? Tensor(hwpe) : Tensor{}, c.T,
                         c.pos_offset, c.vocab_start, hpos);
  cpu::embedding_backward(cpu(), hdwte, c.wpe ? Tensor(hdwpe) : Tensor{}, hdy, hids, c.T,
                          c.pos_offset, c.vocab_start, hpos);

  DeviceTensor gids({N}, DType::i32), gpos({N}, DType::i32),
      gwte({c.V_local, c.C}, dtype), gwpe({c.T_max, c.C}, dtype), gy({N, c.C}, dtype),
      gdy({N, c.C}, dtype), gdwte({c.V_local, c.C}), gdwpe({c.T_max, c.C});
  gids.upload_ints(c.ids);
  if (!c.positions.empty()) gpos.upload_ints(c.positions);
  gwte.upload(wte);
  gwpe.upload(wpe);
  gdy.upload(dy);
  const Tensor positions = c.positions.empty() ? Tensor{} : gpos.view();
  const Tensor table = c.wpe ? gwpe.view() : Tensor{}, dtable = c.wpe ? gdwpe.view() : Tensor{};
  auto run = [&] {
    gy.poison();
    gdwte.upload(dwte0);
    gdwpe.upload(dwpe0);
    cuda::embedding_forward(gpu(), gy, gids, gwte, table, c.T, c.pos_offset, c.vocab_start,
                            positions);
    cuda::embedding_backward(gpu(), gdwte, dtable, gdy, gids, c.T, c.pos_offset, c.vocab_start,
                             positions);
    return std::vector<std::vector<float>>{gy.download(), gdwte.download(), gdwpe.download()};
  };
  const auto r1 = run();
  const auto r2 = run();
  // One fp32 add of the same two rows, then one rounding: the same bits.
  expect_close(tag + " out", r1[0], hy.values(), Tolerance{0, 0, 0});
  expect_close(tag + " dwte", r1[1], hdwte.data, kF32LongSum);
  expect_close(tag + " dwpe", r1[2], c.wpe ? hdwpe.data : dwpe0, kF32LongSum);
  for (int i = 0; i < 3; ++i) expect_same_bits(tag + " rerun", r1[i], r2[i]);
}

}  // namespace

TEST_CASE("embedding forward/backward match the CPU op", "[cuda][embedding]") {
  struct Case {
    int64_t B, T, V_local, C, vocab_start;
    bool wpe;
  };
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 1, 1, 0, true}, Case{2, 17, 50, 17, 0, true},
                       Case{3, 64, 100, 48, 100, false}, Case{1, 4097, 300, 8, 0, true}}) {
    const int64_t N = c.B * c.T;
    // ids cover this shard and beyond (zero rows), with many repeats.
    auto ids = random_ints(N, 400 + N, 0, static_cast<int32_t>(c.vocab_start + c.V_local + 20));
    compare_embedding(dtype,
                      EmbeddingCase{ids, {}, c.T, c.V_local, c.C, c.T + 3, c.vocab_start, 2,
                                    c.wpe, 400},
                      fmt::format("embedding {} B={} T={} V={} C={} start={} wpe={}",
                                  dtype_name(dtype), c.B, c.T, c.V_local, c.C, c.vocab_start,
                                  c.wpe));
  }
}

// Documents packed into sequences: each token's learned position row given
// (restarting at 0), so rows repeat across the batch in any order; dwpe goes
// through the sorted, deterministic path as dwte does.
TEST_CASE("embedding at per-token positions matches the CPU op", "[cuda][embedding][docmask]") {
  struct Case {
    int64_t N, V_local, C, T_max;
  };
  for (DType dtype : kDtypes)
  for (const Case c : {Case{1, 1, 1, 1}, Case{34, 50, 17, 20}, Case{4097, 300, 8, 1024}}) {
    const int64_t N = c.N;
    auto ids = random_ints(N, 500 + N, 0, static_cast<int32_t>(c.V_local - 1));
    const auto restart = random_ints(N, 501 + N, 0, 6);
    std::vector<int32_t> pos(N);
    for (int64_t n = 0; n < N; ++n)
      pos[n] = n == 0 || restart[n] == 0 || pos[n - 1] + 1 == c.T_max ? 0 : pos[n - 1] + 1;
    pos[N - 1] = static_cast<int32_t>(c.T_max - 1);
    compare_embedding(dtype, EmbeddingCase{ids, pos, N, c.V_local, c.C, c.T_max, 0, 0, true, 501},
                      fmt::format("embedding positions {} N={} V={} C={} T_max={}",
                                  dtype_name(dtype), N, c.V_local, c.C, c.T_max));
  }
}

TEST_CASE("embedding refuses a position past the learned ones", "[cuda][embedding][docmask]") {
  const int64_t N = 8, C = 5, V = 4, T_max = 6;
  DeviceTensor ids({N}, DType::i32), pos({N}, DType::i32), wte({V, C}), wpe({T_max, C}),
      y({N, C}), dwte({V, C}), dwpe({T_max, C});
  ids.upload_ints({0, 3, 1, 1, 2, 0, 3, 2});
  for (DeviceTensor* t : {&wte, &wpe, &y}) t->upload(std::vector<float>(t->numel(), 0.5f));
  pos.upload_ints({0, 1, 2, 6, 1, -1, 1, 5});
  y.poison();
  CHECK_THROWS_WITH(cuda::embedding_forward(gpu(), y, ids, wte, wpe, N, 0, 0, pos),
                    Catch::Contains("position 6 of token 3 exceeds the 6 learned positions"));
  CHECK(std::isnan(y.download()[0]));
  pos.upload_ints({0, 1, 2, 0, 1, -1, 1, 5});
  CHECK_THROWS_WITH(cuda::embedding_backward(gpu(), dwte, dwpe, y, ids, N, 0, 0, pos),
                    Catch::Contains("position -1 of token 5 exceeds the 6 learned positions"));
  // Without a position table the positions are not read (as on the CPU).
  CHECK_NOTHROW(cuda::embedding_forward(gpu(), y, ids, wte, Tensor{}, N, 0, 0, pos));
}

}  // namespace trainer::cuda_test
