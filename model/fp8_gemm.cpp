// FP8 quantise-dequantise around the fp32 GEMMs of kernels/linear.h.
#include "model/fp8_gemm.h"

#include "kernels/cast.h"
#include "kernels/linear.h"

namespace trainer::model {

namespace {

// A (M, K) view of the first M*K elements of workspace buffer `id` as `dtype`.
Tensor workspace(const LayerEnv& env, BufferId id, const Tensor& like, DType dtype) {
  Tensor b = env.buf.get(id);
  int64_t K = like.size(-1), M = K == 0 ? 0 : like.numel() / K;
  TRAINER_CHECK(size_t(M * K) * dtype_size(dtype) <= size_t(b.numel()) * dtype_size(b.dtype),
                "fp8 workspace {} too small for {}", b.str(), like.str());
  return Tensor(b.data, {M, K}, dtype, b.device);
}

// Records amax(t) for tensor idx, quantises t with its scale and returns the
// dequantised values in f32 workspace `dst`.
Tensor quantize(const LayerEnv& env, int idx, Tensor t, BufferId dst) {
  Fp8Scaling& s = *env.buf.fp8();
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor flat = t.view({t.numel() / t.size(-1), t.size(-1)});
  amax(env.ctx, s.amax_view(idx), flat);
  Tensor q = workspace(env, ws.q, flat, s.format(idx));
  cast(env.ctx, q, flat, s.scale_view(idx));
  Tensor d = workspace(env, dst, flat, DType::f32);
  cast(env.ctx, d, q, s.scale_inv_view(idx));
  return d;
}

}  // namespace

void fp8_linear_forward(const LayerEnv& env, int idx, Tensor out, Tensor in, Tensor w,
                        Tensor bias) {
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor x = quantize(env, idx, in, ws.x);
  Tensor wq = quantize(env, idx + 1, w, ws.w);
  linear_forward(env.ctx, out.view({x.size(0), out.size(-1)}), x, wq, bias);
}

void fp8_linear_backward(const LayerEnv& env, int idx, Tensor dinp, Tensor dw, Tensor dbias,
                         Tensor dout, Tensor in, Tensor w) {
  const Buffers::Fp8Workspace& ws = env.buf.fp8_workspace();
  Tensor g = quantize(env, idx + 2, dout, ws.g);
  Tensor x = quantize(env, idx, in, ws.x);
  Tensor wq = quantize(env, idx + 1, w, ws.w);
  linear_backward(env.ctx, dinp.empty() ? dinp : dinp.view({g.size(0), wq.size(1)}), dw, dbias,
                  g, x, wq);
}

}  // namespace trainer::model
