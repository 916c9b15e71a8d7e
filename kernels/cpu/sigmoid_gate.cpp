// CPU per-token sigmoid gate (kernels/sigmoid_gate.h). The gate's sigmoid is
// computed in double and rounded once, as the CUDA kernel does, so both backends
// scale by the same fp32 factor.
#include "kernels/sigmoid_gate.h"

#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/staging.h"

namespace trainer::cpu {

namespace {

struct GateShape {
  int64_t N, C;
};

GateShape gate_shape(const Tensor& y, const Tensor& gate, const char* op) {
  TRAINER_CHECK(y.ndim == 2, "{}: y {} must be 2-D", op, y.str());
  const GateShape s{y.size(0), y.size(1)};
  check_shape(gate, {s.N, 1}, "sigmoid_gate gate");
  return s;
}

float sigmoid(float g) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(g)))); }

}  // namespace

void sigmoid_gate_forward(Context&, Tensor out, Tensor y, Tensor gate) {
  const char* op = "sigmoid_gate_forward";
  const GateShape s = gate_shape(y, gate, op);
  check_shape(out, {s.N, s.C}, "sigmoid_gate_forward out");
  const float* g = f32(gate, op, "gate");
  Staging st(op);
  const float* yv = st.in(y, "y");
  float* o = st.out(out, "out");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < s.N; ++n) {
    const float a = sigmoid(g[n]);
    for (int64_t c = 0; c < s.C; ++c) o[n * s.C + c] = a * yv[n * s.C + c];
  }
  st.commit();
}

void sigmoid_gate_backward(Context&, Tensor dy, Tensor dgate, Tensor dout, Tensor y, Tensor gate) {
  const char* op = "sigmoid_gate_backward";
  const GateShape s = gate_shape(y, gate, op);
  check_shape(dy, {s.N, s.C}, "sigmoid_gate_backward dy");
  check_shape(dout, {s.N, s.C}, "sigmoid_gate_backward dout");
  check_shape(dgate, {s.N, 1}, "sigmoid_gate_backward dgate");
  const float* g = f32(gate, op, "gate");
  float* dg = f32(dgate, op, "dgate");
  Staging st(op);
  const float* yv = st.in(y, "y");
  const float* d = st.in(dout, "dout");
  float* dyv = st.out(dy, "dy");
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < s.N; ++n) {
    const float a = sigmoid(g[n]);
    double dot = 0.0;
    for (int64_t c = 0; c < s.C; ++c) {
      dot += static_cast<double>(d[n * s.C + c]) * yv[n * s.C + c];
      dyv[n * s.C + c] = a * d[n * s.C + c];
    }
    dg[n] = static_cast<float>(dot * a * (1.0 - static_cast<double>(a)));
  }
  st.commit();
}

}  // namespace trainer::cpu
