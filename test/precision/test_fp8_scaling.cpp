// Fp8Scaling: history rotation, the scale update rule (max over the window, margin,
// amax 0/inf/NaN keeps the scale, tiny amax), the CPU ops on its views, and the
// checkpoint bytes.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <vector>

#include "test/precision/cpu_ops.h"
#include "kernels/fp8_scaling.h"
#include "kernels/fp8_update.h"

using trainer::DType;
using trainer::Fp8Scaling;

namespace {

std::vector<float> rows_of(const Fp8Scaling& s, int idx) {
  std::vector<float> r;
  for (int i = 0; i < s.history_len(); ++i) r.push_back(s.history(i, idx));
  return r;
}

}  // namespace

TEST_CASE("fp8_max", "[cpu][precision]") {
  CHECK(trainer::fp8_max(DType::e4m3) == 448.0f);
  CHECK(trainer::fp8_max(DType::e5m2) == 57344.0f);
  CHECK_THROWS_AS(trainer::fp8_max(DType::bf16), trainer::Error);
}

TEST_CASE("fp8 scaling: the amax history rolls as Transformer Engine's", "[cpu][precision]") {
  Fp8Scaling s(4, 0);
  const int a = s.add(DType::e4m3), b = s.add(DType::e5m2);
  REQUIRE(a == 0);
  REQUIRE(b == 1);
  CHECK(s.size() == 2);
  // Row 0 accumulates this step (max of the records); update moves it to the newest
  // row (last), shifts the others one towards the front and clears row 0.
  s.record_amax(a, 3.0f);
  s.record_amax(a, 1.0f);
  s.record_amax(b, 5.0f);
  CHECK(s.current_amax()[0] == 3.0f);
  CHECK(s.current_amax()[1] == 5.0f);
  s.update();
  CHECK(rows_of(s, a) == std::vector<float>{0, 0, 0, 3});
  CHECK(rows_of(s, b) == std::vector<float>{0, 0, 0, 5});
  const float steps[] = {7, 2, 4, 6};
  for (float v : steps) {
    s.record_amax(a, v);
    s.update();
  }
  // Window of H = 4 rows: after the steps 3, 7, 2, 4, 6 the newest three stay in
  // rows 1..3 (oldest first) and row 0 is clear for the next step; b's single 5
  // has moved out after H updates.
  CHECK(rows_of(s, a) == std::vector<float>{0, 2, 4, 6});
  CHECK(rows_of(s, b) == std::vector<float>{0, 0, 0, 0});
}

TEST_CASE("fp8 scaling: scale = (fp8_max / max over the window) / 2^margin", "[cpu][precision]") {
  Fp8Scaling s(3, 0);
  const int w = s.add(DType::e4m3);
  CHECK(s.scale(w) == 1.0f);
  CHECK(s.scale_inv(w) == 1.0f);
  // The window is this step's amax and the previous H-1 = 2 steps'.
  struct Step {
    float amax, window_max;
  };
  const Step steps[] = {{10, 10}, {2, 10}, {3, 10}, {1, 3}, {0.5f, 3}, {0.25f, 1}, {0.0f, 0.5f}};
  for (const Step& st : steps) {
    s.record_amax(w, st.amax);
    s.update();
    INFO("amax " << st.amax);
    CHECK(s.scale(w) == 448.0f / st.window_max);
    CHECK(s.scale_inv(w) == 1.0f / (448.0f / st.window_max));
  }

  Fp8Scaling m(1, 3);
  const int g = m.add(DType::e5m2), x = m.add(DType::e4m3);
  m.record_amax(g, 3.0f);
  m.record_amax(x, 3.0f);
  m.update();
  CHECK(m.scale(g) == (57344.0f / 3.0f) / 8.0f);
  CHECK(m.scale(x) == (448.0f / 3.0f) / 8.0f);
  // History length 1: the scale follows the last step's amax alone.
  m.record_amax(x, 2.0f);
  m.update();
  CHECK(m.scale(x) == (448.0f / 2.0f) / 8.0f);
}

TEST_CASE("fp8 scaling: amax 0, inf or NaN keeps the old scale", "[cpu][precision]") {
  Fp8Scaling s(1, 0);
  const int w = s.add(DType::e4m3);
  s.update();  // no amax recorded: 0
  CHECK(s.scale(w) == 1.0f);
  s.record_amax(w, 4.0f);
  s.update();
  REQUIRE(s.scale(w) == 112.0f);
  s.update();  // a step with amax 0
  CHECK(s.scale(w) == 112.0f);
  s.record_amax(w, INFINITY);
  s.update();
  CHECK(s.scale(w) == 112.0f);
  CHECK(s.scale_inv(w) == 1.0f / 112.0f);
  // A NaN amax never counts: record_amax is an fmax, and a NaN written into the slot
  // directly (as a device reduction might) is skipped by the update's fmax.
  s.record_amax(w, NAN);
  CHECK(s.current_amax()[w] == 0.0f);
  s.current_amax()[w] = NAN;
  s.update();
  CHECK(s.scale(w) == 112.0f);

  // With a window, an inf keeps the scale for as long as it stays in the window.
  Fp8Scaling h(2, 0);
  const int v = h.add(DType::e4m3);
  h.record_amax(v, INFINITY);
  h.update();
  CHECK(h.scale(v) == 1.0f);
  h.record_amax(v, 8.0f);
  h.update();  // window {inf, 8}
  CHECK(h.scale(v) == 1.0f);
  h.record_amax(v, 8.0f);
  h.update();  // window {8, 8}
  CHECK(h.scale(v) == 56.0f);
  // A NaN in the window next to a finite amax: the finite one decides.
  h.current_amax()[v] = NAN;
  h.update();  // window {8, NaN}
  CHECK(h.scale(v) == 56.0f);
  h.record_amax(v, 16.0f);
  h.update();  // window {NaN, 16}
  CHECK(h.scale(v) == 28.0f);
}

TEST_CASE("fp8 scaling: a tiny amax gives FLT_MAX, not inf", "[cpu][precision]") {
  Fp8Scaling s(1, 0);
  const int w = s.add(DType::e4m3);
  s.record_amax(w, 1e-40f);  // fp32 subnormal: 448 / 1e-40 overflows
  s.update();
  CHECK(s.scale(w) == FLT_MAX);
  CHECK(s.scale_inv(w) == 1.0f / FLT_MAX);
}

TEST_CASE("fp8 scaling: the CPU ops on the state's views", "[cpu][precision]") {
  trainer::Context ctx;
  Fp8Scaling s(2, 0);
  const int w = s.add(DType::e4m3);
  std::vector<float> x{0.5f, -3.5f, 1.0f, 0.25f};
  trainer::Tensor xt(x.data(), {4});
  std::vector<uint8_t> q(4);
  trainer::Tensor qt(q.data(), {4}, DType::e4m3);
  // Step 1: scale 1 (nothing seen yet); amax recorded into the current slot.
  precision_test::cast(ctx, qt, xt, s.scale_view(w));
  precision_test::amax(ctx, s.amax_view(w), xt);
  CHECK(q[1] == 0xC6);  // -3.5 = -(2^1 * 1.75): sign, exponent 1 + 7 = 8, mantissa 110b
  CHECK(s.current_amax()[w] == 3.5f);
  s.update();
  CHECK(s.scale(w) == 128.0f);
  // Step 2: -3.5 * 128 = -448, the E4M3 maximum.
  precision_test::cast(ctx, qt, xt, s.scale_view(w));
  CHECK(q[1] == 0xFE);
  std::vector<float> back(4);
  precision_test::cast(ctx, trainer::Tensor(back.data(), {4}), qt, s.scale_inv_view(w));
  CHECK(back == x);  // x * 128 is exact in E4M3 and 1/128 exact in fp32
}

TEST_CASE("fp8 scaling: checkpoint bytes", "[cpu][precision]") {
  Fp8Scaling s(4, 1);
  const int a = s.add(DType::e4m3), b = s.add(DType::e5m2);
  const float amaxes[] = {1, 2, 3, 4, 5};
  for (float v : amaxes) {
    s.record_amax(a, v);
    s.record_amax(b, 10 * v);
    s.update();
  }
  s.record_amax(a, 0.5f);  // mid-step: row 0 is part of the state too
  const std::string bytes = s.serialize();

  Fp8Scaling same(4, 1);
  same.add(DType::e4m3);
  same.add(DType::e5m2);
  same.restore(bytes, "ckpt/fp8.bin");
  for (int i : {a, b}) {
    CHECK(rows_of(same, i) == rows_of(s, i));
    CHECK(same.scale(i) == s.scale(i));
    CHECK(same.scale_inv(i) == s.scale_inv(i));
  }
  CHECK(same.serialize() == bytes);

  // A shorter history keeps the newest entries; a longer one has zeros in front.
  Fp8Scaling shorter(2, 1), longer(6, 1);
  for (Fp8Scaling* t : {&shorter, &longer}) {
    t->add(DType::e4m3);
    t->add(DType::e5m2);
    t->restore(bytes, "ckpt/fp8.bin");
  }
  CHECK(rows_of(s, a) == std::vector<float>{0.5f, 3, 4, 5});
  CHECK(rows_of(shorter, a) == std::vector<float>{0.5f, 5});
  CHECK(rows_of(longer, a) == std::vector<float>{0.5f, 0, 0, 3, 4, 5});
  CHECK(longer.scale(b) == s.scale(b));

  Fp8Scaling fewer(4, 1);
  fewer.add(DType::e4m3);
  CHECK_THROWS_AS(fewer.restore(bytes, "x"), trainer::InputError);
  Fp8Scaling swapped(4, 1);
  swapped.add(DType::e5m2);
  swapped.add(DType::e4m3);
  CHECK_THROWS_WITH(swapped.restore(bytes, "ckpt/fp8.bin"),
                    Catch::Contains("ckpt/fp8.bin") && Catch::Contains("tensor 0 was e4m3"));
  CHECK_THROWS_AS(same.restore(bytes.substr(0, bytes.size() - 1), "x"), trainer::InputError);
  CHECK_THROWS_AS(same.restore("garbage", "x"), trainer::InputError);
}

TEST_CASE("fp8 scaling: configuration checks", "[cpu][precision]") {
  CHECK_THROWS_WITH(Fp8Scaling(0, 0), Catch::Contains("precision.fp8_amax_history"));
  CHECK_THROWS_AS(Fp8Scaling(0, 0), trainer::InputError);
  CHECK_THROWS_AS(Fp8Scaling(16, -1), trainer::InputError);
  Fp8Scaling s(16, 0);
  CHECK_THROWS_AS(s.add(DType::bf16), trainer::Error);
  CHECK_THROWS_AS(s.scale(0), trainer::Error);
  const int w = s.add(DType::e4m3);
  CHECK_THROWS_AS(s.set_scale(w, 0.0f), trainer::Error);
  s.set_scale(w, 4.0f);
  CHECK(s.scale_inv(w) == 0.25f);
}

TEST_CASE("fp8 scaling: one tensor's state by name, as checkpoints store it", "[cpu][precision]") {
  Fp8Scaling s(4, 0);
  const int a = s.add(DType::e4m3), b = s.add(DType::e5m2);
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}) {
    s.record_amax(a, v);
    s.record_amax(b, 10 * v);
    s.update();
  }
  s.record_amax(b, 0.25f);
  const std::vector<float> sa = s.tensor_state(a), sb = s.tensor_state(b);
  CHECK(sa == std::vector<float>{s.scale(a), 0, 3, 4, 5});
  CHECK(sb == std::vector<float>{s.scale(b), 0.25f, 30, 40, 50});

  // Restored into another object in the other registration order: same rows and scales.
  Fp8Scaling t(4, 0);
  const int tb = t.add(DType::e5m2), ta = t.add(DType::e4m3);
  t.set_tensor_state(ta, sa, "ckpt");
  t.set_tensor_state(tb, sb, "ckpt");
  CHECK(rows_of(t, ta) == rows_of(s, a));
  CHECK(rows_of(t, tb) == rows_of(s, b));
  CHECK(t.scale(ta) == s.scale(a));
  CHECK(t.scale_inv(tb) == s.scale_inv(b));
  // The next update then matches the original's.
  s.update();
  t.update();
  CHECK(t.scale(ta) == s.scale(a));
  CHECK(t.scale(tb) == s.scale(b));

  // Other history lengths keep the newest entries, as restore() does.
  Fp8Scaling shorter(2, 0), longer(6, 0);
  shorter.add(DType::e4m3);
  longer.add(DType::e4m3);
  shorter.set_tensor_state(0, sa, "ckpt");
  longer.set_tensor_state(0, sa, "ckpt");
  CHECK(rows_of(shorter, 0) == std::vector<float>{0, 5});
  CHECK(rows_of(longer, 0) == std::vector<float>{0, 0, 0, 3, 4, 5});

  CHECK_THROWS_WITH(t.set_tensor_state(ta, {0.0f, 1.0f}, "ckpt/rank_00000.safetensors"),
                    Catch::Contains("ckpt/rank_00000.safetensors"));
  CHECK_THROWS_AS(t.set_tensor_state(ta, {1.0f}, "x"), trainer::InputError);
}

TEST_CASE("fp8 scaling: the update op refuses malformed state", "[cpu][precision]") {
  using trainer::Error;
  using trainer::Tensor;
  namespace cpu = trainer::cpu;
  trainer::Context ctx;
  std::vector<float> h(8), s(4), inv(4), top(4), three(3);
  CHECK_NOTHROW(cpu::fp8_scaling_update(ctx, Tensor(h.data(), {2, 4}), Tensor(s.data(), {4}),
                                        Tensor(inv.data(), {4}), Tensor(top.data(), {4})));
  CHECK_THROWS_AS(cpu::fp8_scaling_update(ctx, Tensor(h.data(), {8}), Tensor(s.data(), {4}),
                                          Tensor(inv.data(), {4}), Tensor(top.data(), {4})),
                  Error);
  CHECK_THROWS_AS(cpu::fp8_scaling_update(ctx, Tensor(h.data(), {0, 4}), Tensor(s.data(), {4}),
                                          Tensor(inv.data(), {4}), Tensor(top.data(), {4})),
                  Error);
  CHECK_THROWS_AS(cpu::fp8_scaling_update(ctx, Tensor(h.data(), {2, 4}), Tensor(s.data(), {4}),
                                          Tensor(inv.data(), {4}), Tensor(three.data(), {3})),
                  Error);
  CHECK_THROWS_AS(cpu::fp8_scaling_update(ctx, Tensor(h.data(), {2, 4}), Tensor(s.data(), {4}),
                                          Tensor(inv.data(), {4}, DType::bf16), Tensor(top.data(), {4})),
                  Error);
}
