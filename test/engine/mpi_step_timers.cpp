// On 3 MPI ranks: log.timers' phase clocks (engine/step_timers.h) on a clock
// the test moves. Each mark gives the time since the last one to its phase,
// a phase marked twice in a step adds up, begin_step starts again from zero,
// and timers that are off record nothing; the spread over the world names the
// fastest and slowest rank of each phase (the highest rank where they tie).
// Usage: mpirun -np 3 engine_mpi_step_timers
#include <cmath>
#include <cstdio>

#include "../parallel/mpi_check.h"
#include "engine/step_timers.h"
#include "parallel/launch_env.h"
#include "parallel/mesh.h"

using namespace trainer;
using namespace trainer::engine;
using namespace trainer::parallel;

int main() {
  return run_mpi_test([&] {
    const LaunchEnv env = detect_launch_env();
    MPI_TEST_CHECK(env.world == 3, env.rank);
    MeshShape shape;
    shape.world = shape.dp = 3;
    Mesh mesh(env, shape, Device::cpu, 60.0);
    Communicator& world = mesh.comm(Axis::world);
    const int r = world.rank();
    Context ctx;
    double now = 100.0;
    auto at = [&](double s) { now += s; };

    StepTimers off(false, ctx, [&] { return now; });
    off.begin_step();
    at(5);
    off.mark(StepPhase::forward_backward);
    MPI_TEST_CHECK(!off.on() && off.local()[1] == 0, r);

    StepTimers timers(true, ctx, [&] { return now; });
    for (int step = 0; step < 2; ++step) {  // the second step must not carry the first's times
      timers.begin_step();
      at(0.004);  // forward-backward's start (zero the gradients)
      timers.mark(StepPhase::forward_backward);
      at(0.001);  // every rank's data: a tie
      timers.mark(StepPhase::data);
      at(0.006 + 0.010 * r);  // the rest of forward-backward: rank 2 the slowest
      timers.mark(StepPhase::forward_backward);
      at(0.030 - 0.010 * r);  // grad sync: the others wait for rank 2
      timers.mark(StepPhase::grad_sync);
      at(r == 1 ? 0.005 : 0.002);
      timers.mark(StepPhase::optimizer);
    }
    auto near = [](double a, double b) { return std::fabs(a - b) < 1e-9; };
    MPI_TEST_CHECK(near(timers.local()[0], 0.001), r);
    MPI_TEST_CHECK(near(timers.local()[1], 0.010 + 0.010 * r), r);
    MPI_TEST_CHECK(near(timers.local()[2], 0.030 - 0.010 * r), r);

    const StepTimes t = timers.spread(world);
    auto expect = [&](StepPhase p, double min_ms, int min_rank, double max_ms, int max_rank) {
      const PhaseSpread& s = t[static_cast<int>(p)];
      const bool ok = near(s.min_ms, min_ms) && s.min_rank == min_rank && near(s.max_ms, max_ms) &&
                      s.max_rank == max_rank;
      if (!ok)
        std::fprintf(stderr, "rank %d %s: min %.9g (rank %d) max %.9g (rank %d)\n", r,
                     step_phase_name(p), s.min_ms, s.min_rank, s.max_ms, s.max_rank);
      MPI_TEST_CHECK(ok, r);
    };
    expect(StepPhase::data, 1, 2, 1, 2);
    expect(StepPhase::forward_backward, 10, 0, 30, 2);
    expect(StepPhase::grad_sync, 10, 2, 30, 0);
    expect(StepPhase::optimizer, 2, 2, 5, 1);
    if (r == 0) std::printf("step timers: phases, min/max and their ranks as expected on 3 ranks\n");
  });
}
