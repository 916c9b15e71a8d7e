// embedding_forward / embedding_backward: lookups, vocab-parallel slices, positions.
#include "kernels/embedding.h"

#include "test/kernels/kernel_test_util.h"

using namespace trainer;
using namespace trainer::test;

namespace {

// out rows for a table slice holding global ids [vocab_start, vocab_start + V_local).
std::vector<double> ref_embedding(const std::vector<int32_t>& ids, const std::vector<double>& wte,
                                  const std::vector<double>* wpe, int64_t C, int64_t T,
                                  int64_t pos_offset, int64_t vocab_start) {
  const int64_t N = ids.size(), V_local = wte.size() / C;
  std::vector<double> y(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t local = ids[n] - vocab_start;
      if (local >= 0 && local < V_local) y[n * C + c] += wte[local * C + c];
      if (wpe) y[n * C + c] += (*wpe)[(pos_offset + n % T) * C + c];
    }
  return y;
}

}  // namespace

TEST_CASE("embedding forward and backward, with and without positions", "[cpu][embedding]") {
  Context ctx;
  const int64_t B = 2, T = 5, N = B * T, C = 17, V_local = 6, T_max = 9;
  // Global ids; this rank holds [4, 10). Ids 2, 10 (the first past the slice), 11 and -1 are off it.
  std::vector<int32_t> ids = {4, 9, 2, 4, 10, 7, -1, 11, 9, 5};
  const int64_t vocab_start = 4, pos_offset = 3;
  auto wte = random_floats(V_local * C, 81), wpe = random_floats(T_max * C, 82), dy = random_floats(N * C, 83);
  const auto wted = to_double(wte), wped = to_double(wpe), dyd = to_double(dy);
  for (bool with_pos : {true, false}) {
    INFO("wpe " << with_pos);
    const Tensor wpe_t = with_pos ? view(wpe, {T_max, C}) : Tensor();
    const std::vector<double>* wpe_ref = with_pos ? &wped : nullptr;
    std::vector<float> y(N * C, 5.0f);
    cpu::embedding_forward(ctx, view(y, {N, C}), view(ids, {N}), view(wte, {V_local, C}), wpe_t, T,
                           pos_offset, vocab_start);
    require_close(y, ref_embedding(ids, wted, wpe_ref, C, T, pos_offset, vocab_start), 0.0, 1e-6,
                  "embedding out");
    if (!with_pos) {
      for (int64_t c = 0; c < C; ++c) REQUIRE(y[2 * C + c] == 0.0f);  // off-rank id: zero row
    }

    std::vector<float> dwte(V_local * C, 1.0f), dwpe(T_max * C, 2.0f);
    for (int call = 1; call <= 2; ++call) {
      cpu::embedding_backward(ctx, view(dwte, {V_local, C}), with_pos ? view(dwpe, {T_max, C}) : Tensor(),
                              view(dy, {N, C}), view(ids, {N}), T, pos_offset, vocab_start);
      auto gte = finite_diff([&](const std::vector<double>& v) {
        return dot(dyd, ref_embedding(ids, v, wpe_ref, C, T, pos_offset, vocab_start));
      }, wted);
      for (size_t i = 0; i < gte.size(); ++i) gte[i] = 1.0 + call * gte[i];
      require_close(dwte, gte, 1e-5, 1e-5, "embedding dwte");
      if (with_pos) {
        auto gpe = finite_diff([&](const std::vector<double>& v) {
          return dot(dyd, ref_embedding(ids, wted, &v, C, T, pos_offset, vocab_start));
        }, wped);
        for (size_t i = 0; i < gpe.size(); ++i) gpe[i] = 2.0 + call * gpe[i];
        require_close(dwpe, gpe, 1e-5, 1e-5, "embedding dwpe");
      } else {
        CHECK(dwpe == std::vector<float>(T_max * C, 2.0f));
      }
    }
  }
}

TEST_CASE("embedding backward is bitwise deterministic", "[cpu][embedding]") {
  Context ctx;
  const int64_t N = 257, C = 33, V = 7;
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n) ids[n] = static_cast<int32_t>((n * 5) % V);  // many repeats
  auto dy = random_floats(N * C, 91);
  std::vector<float> first(V * C, 0.0f);
  cpu::embedding_backward(ctx, view(first, {V, C}), Tensor(), view(dy, {N, C}), view(ids, {N}), N, 0, 0);
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<float> again(V * C, 0.0f);
    cpu::embedding_backward(ctx, view(again, {V, C}), Tensor(), view(dy, {N, C}), view(ids, {N}), N, 0, 0);
    REQUIRE(again == first);
  }
}

TEST_CASE("embedding refuses positions beyond wpe and non-int32 ids", "[cpu][embedding]") {
  Context ctx;
  std::vector<int32_t> ids = {0, 1, 0, 1};
  std::vector<float> wte(2 * 3), wpe(2 * 3), y(4 * 3), fids(4);
  CHECK_THROWS_AS(cpu::embedding_forward(ctx, view(y, {4, 3}), view(ids, {4}), view(wte, {2, 3}),
                                         view(wpe, {2, 3}), 2, 1, 0), Error);
  CHECK_THROWS_AS(cpu::embedding_forward(ctx, view(y, {4, 3}), view(fids, {4}), view(wte, {2, 3}),
                                         Tensor(), 2, 0, 0), Error);
  CHECK_NOTHROW(cpu::embedding_forward(ctx, view(y, {4, 3}), view(ids, {4}), view(wte, {2, 3}),
                                       view(wpe, {2, 3}), 2, 0, 0));
}

TEST_CASE("embedding at per-token positions (documents restarting at 0)", "[cpu][embedding][docmask]") {
  Context ctx;
  const int64_t N = 8, C = 5, V = 4, T_max = 6;
  std::vector<int32_t> ids = {0, 3, 1, 1, 2, 0, 3, 2}, pos = {0, 1, 2, 0, 1, 0, 1, 5};
  auto wte = random_floats(V * C, 84), wpe = random_floats(T_max * C, 85), dy = random_floats(N * C, 86);
  const auto wted = to_double(wte), wped = to_double(wpe), dyd = to_double(dy);
  // Token n alone at pos_offset = its position.
  auto ref = [&](const std::vector<double>& te, const std::vector<double>& pe) {
    std::vector<double> y;
    for (int64_t n = 0; n < N; ++n) {
      auto r = ref_embedding({ids[n]}, te, &pe, C, 1, pos[n], 0);
      y.insert(y.end(), r.begin(), r.end());
    }
    return y;
  };
  const Tensor positions = view(pos, {N});
  std::vector<float> y(N * C, 5.0f);
  cpu::embedding_forward(ctx, view(y, {N, C}), view(ids, {N}), view(wte, {V, C}), view(wpe, {T_max, C}),
                         N, 0, 0, positions);
  require_close(y, ref(wted, wped), 0.0, 1e-6, "embedding out");
  std::vector<float> dwte(V * C, 0.0f), dwpe(T_max * C, 0.0f);
  cpu::embedding_backward(ctx, view(dwte, {V, C}), view(dwpe, {T_max, C}), view(dy, {N, C}),
                          view(ids, {N}), N, 0, 0, positions);
  require_close(dwte, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref(v, wped)); }, wted),
                1e-5, 1e-5, "embedding dwte");
  require_close(dwpe, finite_diff([&](const std::vector<double>& v) { return dot(dyd, ref(wted, v)); }, wped),
                1e-5, 1e-5, "embedding dwpe");
  std::vector<int32_t> past = pos;
  past[3] = T_max;
  CHECK_THROWS_WITH(cpu::embedding_forward(ctx, view(y, {N, C}), view(ids, {N}), view(wte, {V, C}),
                                           view(wpe, {T_max, C}), N, 0, 0, view(past, {N})),
                    Catch::Contains("position 6 of token 3 exceeds the 6 learned positions"));
}
