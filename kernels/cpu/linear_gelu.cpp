// CPU linear + GELU (kernels/linear_gelu.h): the CPU linear and GELU ops over an
// fp32 copy of the pre-activation (or its gradient), so the GELU reads the
// unrounded GEMM output and each 16-bit result is rounded once, as the GPU's
// epilogue does. In fp32 the staged buffer is the tensor itself: no copy.
#include "kernels/linear_gelu.h"

#include "kernels/cpu/staging.h"
#include "kernels/gelu.h"
#include "kernels/linear.h"

namespace trainer::cpu {
namespace {

// The staged fp32 buffer of `t` as a tensor of t's shape (Staging takes only
// contiguous tensors, so t's strides are the buffer's).
Tensor fp32_view(Tensor t, float* data) {
  t.data = data;
  t.dtype = DType::f32;
  return t;
}

}  // namespace

void linear_gelu_forward(Context& ctx, Tensor act, Tensor pre, Tensor inp, Tensor weight,
                         Tensor bias) {
  const char* op = "linear_gelu_forward";
  TRAINER_CHECK(act.ndim == pre.ndim && act.shape == pre.shape,
                "{}: act {} and pre {} differ in shape", op, act.str(), pre.str());
  TRAINER_CHECK(act.data != pre.data || act.empty(), "{}: act {} aliases pre", op, act.str());
  Staging st(op);
  const Tensor p = fp32_view(pre, st.out(pre, "pre"));
  const Tensor a = fp32_view(act, st.out(act, "act"));
  cpu::linear_forward(ctx, p, inp, weight, bias);
  cpu::gelu_forward(ctx, a, p);
  st.commit();
}

void linear_dgelu_backward(Context& ctx, Tensor dpre, Tensor dweight, Tensor dbias, Tensor dout,
                           Tensor act, Tensor weight, Tensor pre) {
  const char* op = "linear_dgelu_backward";
  TRAINER_CHECK(!dpre.empty() && dpre.ndim == pre.ndim && dpre.shape == pre.shape &&
                    act.ndim == pre.ndim && act.shape == pre.shape,
                "{}: dpre {}, act {} and pre {} must have one shape", op, dpre.str(), act.str(),
                pre.str());
  Staging st(op);
  const Tensor d = fp32_view(dpre, st.out(dpre, "dpre"));
  cpu::linear_backward(ctx, d, dweight, dbias, dout, act, weight);
  cpu::gelu_backward(ctx, d, d, pre);
  st.commit();
}

}  // namespace trainer::cpu
