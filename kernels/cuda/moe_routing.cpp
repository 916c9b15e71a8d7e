// CUDA side of the MoE routing ops not written yet (the router is in
// moe_route.cu, the plan in moe_plan.cu). Each refuses with a clear error so a CUDA build links and a GPU
// run with MoE stops at its first use instead of computing anything wrong.
#include "kernels/moe_routing.h"

namespace trainer::cuda {

namespace {
[[noreturn]] void refuse(const char* op) {
  TRAINER_CHECK(false, "{}: MoE routing has no CUDA kernel yet (run MoE on the CPU backend)", op);
  throw Error("unreachable");
}
}  // namespace

void moe_gather(Context&, Tensor, Tensor, Tensor, int64_t) { refuse("moe_gather"); }
void moe_gather_backward(Context&, Tensor, Tensor, Tensor) { refuse("moe_gather_backward"); }
void moe_combine(Context&, Tensor, Tensor, Tensor, Tensor) { refuse("moe_combine"); }
void moe_combine_backward(Context&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
  refuse("moe_combine_backward");
}

}  // namespace trainer::cuda
