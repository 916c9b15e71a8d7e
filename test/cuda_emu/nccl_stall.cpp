// The watchdog over NCCL, on emulated GPU ranks (one emulated GPU each): one
// rank (TRAINER_TEST_STALL_RANK) never joins an all_reduce of device memory.
// The others' call returns at once, as NCCL's does, and their collective is
// stuck on the stream: the communicator's synchronize polls, the watchdog's
// thread polls the collective's event, reports it and aborts (ncclCommAbort,
// then MPI_Abort). test/parallel/watchdog_test.sh checks the line, the exit
// status and the time.
// Usage: nccl_stall TIMEOUT_S op TAG
#include <chrono>
#include <cstdio>
#include <thread>

#include "kernels/cuda/cuda_state.h"
#include "kernels/elementwise.h"
#include "kernels/memory.h"
#include "parallel/mesh.h"
#include "parallel/stream_order.h"
#include "test/parallel/mpi_check.h"

using namespace trainer;
using namespace trainer::parallel;

int main(int argc, char** argv) {
  return run_mpi_test([&] {
    const auto [timeout_s, stall_rank] = stall_test(argc, argv);
    const LaunchEnv env = detect_launch_env();
    CudaState* state = create_cuda_state(env.local_rank);
    Context ctx{Device::cuda, state};
    Mesh mesh(env, resolve_mesh({.world = env.world}), Device::cuda, timeout_s);
    Communicator& dp = mesh.comm(Axis::dp);
    bind_compute_stream(dp, ctx);
    void* mem = device_alloc(Device::cuda, 16 * sizeof(float));
    Tensor x(mem, {16}, DType::f32, Device::cuda);
    fill(ctx, x, 1.0f);
    dp.all_reduce(x, ReduceOp::sum);  // all join this one
    dp.synchronize();
    float back[16];
    copy_to_host(back, x);
    MPI_TEST_CHECK(back[0] == float(env.world), env.rank);
    if (env.rank == stall_rank) {
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } else {
      dp.all_reduce(x, ReduceOp::sum);
      dp.synchronize();
    }
    std::printf("rank %d finished without the watchdog\n", env.rank);
  });
}
