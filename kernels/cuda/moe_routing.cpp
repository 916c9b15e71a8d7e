// CUDA side of the MoE routing ops: not written yet. Each op refuses with a
// clear error so a CUDA build links and a GPU run with MoE stops at its first
// forward instead of computing anything wrong.
#include "kernels/moe_routing.h"

namespace trainer::cuda {

namespace {
[[noreturn]] void refuse(const char* op) {
  TRAINER_CHECK(false, "{}: MoE routing has no CUDA kernel yet (run MoE on the CPU backend)", op);
  throw Error("unreachable");
}
}  // namespace

void moe_route_forward(Context&, Tensor, Tensor, Tensor, Tensor, Tensor, bool, bool) {
  refuse("moe_route_forward");
}
void moe_route_backward(Context&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, float, bool,
                        bool) {
  refuse("moe_route_backward");
}
void moe_plan(Context&, Tensor, Tensor, Tensor, Tensor, Tensor, int64_t, Tensor) {
  refuse("moe_plan");
}
void moe_gather(Context&, Tensor, Tensor, Tensor, int64_t) { refuse("moe_gather"); }
void moe_gather_backward(Context&, Tensor, Tensor, Tensor) { refuse("moe_gather_backward"); }
void moe_combine(Context&, Tensor, Tensor, Tensor, Tensor) { refuse("moe_combine"); }
void moe_combine_backward(Context&, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
  refuse("moe_combine_backward");
}

}  // namespace trainer::cuda
