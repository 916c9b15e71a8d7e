// On 2 and 4 ranks as one cp group: cp_gather_kv puts every rank's two chunks
// (rank r: chunks r and 2cp-1-r) at their places in the whole sequence, and
// cp_reduce_scatter_kv gives each rank the sum over ranks of the rows of its
// own chunks, against values computed from the global positions.
#include <cstdio>
#include <vector>

#include "kernels/context.h"
#include "mpi_check.h"
#include "parallel/cp_kv_exchange.h"

using namespace trainer;
using namespace trainer::parallel;

namespace {

constexpr int64_t kB = 2, kChunk = 3, kHeads = 2, kD = 2, kRow = kHeads * kD;

// The value of sequence b, global position t, element e of a K/V row.
float value(int64_t b, int64_t t, int64_t e) { return float(1000 * b + 10 * t + e); }
// Rank r's gradient contribution there (small integers: every sum is exact).
float contribution(int r, int64_t b, int64_t t, int64_t e) { return float((r + 1) * (b + 2 * t + e)); }

void test_exchange(Communicator& world) {
  Context ctx;
  const int me = world.rank(), cp = world.size();
  const CpLayout layout{cp, me, 2 * cp * kChunk};
  const int64_t T = layout.seq, L = layout.local_tokens();
  std::vector<float> local(kB * L * kRow), global(kB * T * kRow, -1.0f), blocked(global.size());
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t e = 0; e < kRow; ++e)
        local[(b * L + t) * kRow + e] = value(b, layout.offset(int(t / kChunk)) + t % kChunk, e);
  const Tensor g(global.data(), {kB, T, kHeads, kD}), bl(blocked.data(), {int64_t(blocked.size())});
  cp_gather_kv(ctx, world, layout, Tensor(local.data(), {kB, L, kHeads, kD}), bl, g);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < kRow; ++e) MPI_TEST_CHECK(global[(b * T + t) * kRow + e] == value(b, t, e), me);

  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < kRow; ++e) global[(b * T + t) * kRow + e] = contribution(me, b, t, e);
  std::vector<float> dlocal(local.size(), -1.0f);
  cp_reduce_scatter_kv(ctx, world, layout, g, bl, Tensor(dlocal.data(), {kB, L, kHeads, kD}));
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t t = 0; t < L; ++t)
      for (int64_t e = 0; e < kRow; ++e) {
        const int64_t pos = layout.offset(int(t / kChunk)) + t % kChunk;
        float sum = 0;
        for (int r = 0; r < cp; ++r) sum += contribution(r, b, pos, e);
        MPI_TEST_CHECK(dlocal[(b * L + t) * kRow + e] == sum, me);
      }
}

}  // namespace

int main() {
  return run_mpi_test([] {
    auto world = make_mpi_world();
    test_exchange(*world);
    if (world->rank() == 0) std::printf("cp exchange on %d ranks: ok\n", world->size());
  });
}
