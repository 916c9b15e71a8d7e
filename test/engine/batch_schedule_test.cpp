// train.rampup_batch_size: each step's global batch as Megatron-LM's
// RampupBatchsizeNumMicroBatchesCalculator gives it, and the samples a run has
// consumed after any number of steps from any point (what checkpoints record).
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "engine/batch_schedule.h"

using namespace trainer::engine;

namespace {

TrainSpec ramped(int start, int increment, int64_t samples, int global_batch) {
  TrainSpec t;
  t.global_batch = global_batch;
  t.rampup_batch_size = TrainSpec::Rampup{start, increment, samples};
  return t;
}

// The batches of `steps` steps taken one at a time from `consumed`.
std::vector<int> step_by_step(const BatchSchedule& b, int64_t consumed, int steps) {
  std::vector<int> out;
  for (int i = 0; i < steps; ++i) {
    out.push_back(b.batch_at(consumed));
    consumed += out.back();
  }
  return out;
}

}  // namespace

TEST_CASE("the ramp's batches are Megatron's", "[cpu][engine]") {
  // Printed by Megatron's update(consumed_samples) stepped in Python:
  // rampup [4, 4, 20] to 16, and [2, 2, 40] to 8.
  CHECK(step_by_step(BatchSchedule(ramped(4, 4, 20, 16)), 0, 8) ==
        std::vector<int>{4, 4, 8, 12, 16, 16, 16, 16});
  CHECK(step_by_step(BatchSchedule(ramped(2, 2, 40, 8)), 0, 20) ==
        std::vector<int>{2, 2, 2, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 8, 8, 8, 8, 8, 8, 8});
  // At `samples` itself the ramp still holds (Megatron: consumed > samples ends it).
  const BatchSchedule b(ramped(4, 4, 20, 16));
  CHECK(b.batch_at(20) == 16);  // 20 / (20 / 3) = 3 increments
  CHECK(b.batch_at(19) == 12);
  CHECK(b.batch_at(21) == 16);
  CHECK(b.batch_at(int64_t(1) << 40) == 16);
  // Megatron divides in double: 9 / (9 / 7.) is 6.999..., so 6 increments
  // there, not the 7 exact arithmetic gives.
  const BatchSchedule edge(ramped(1, 1, 9, 8));
  CHECK(edge.batch_at(9) == 7);
  CHECK(edge.batch_at(10) == 8);
  CHECK(edge.ramps());
  CHECK(edge.global_batch() == 8);
}

TEST_CASE("without a ramp every step takes global_batch", "[cpu][engine]") {
  TrainSpec t;
  t.global_batch = 24;
  const BatchSchedule b(t);
  CHECK_FALSE(b.ramps());
  CHECK(b.batch_at(0) == 24);
  CHECK(b.consumed_after(0, 10) == 240);
  CHECK(b.consumed_after(100, 3) == 172);
  CHECK(b.consumed_after(5, 0) == 5);
}

TEST_CASE("consumed_after jumps runs of equal batches as stepping does", "[cpu][engine]") {
  std::mt19937 rng(11);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    const int start = pick(1, 40), increment = pick(1, 16), increments = pick(1, 12);
    const int64_t samples = pick(1, 5000);
    const BatchSchedule b(ramped(start, increment, samples, start + increments * increment));
    // From the start and from a resumed run's arbitrary sample count.
    for (int64_t from : {int64_t(0), int64_t(pick(0, 6000))}) {
      const int steps = pick(0, 400);
      int64_t consumed = from;
      for (int s = 0; s < steps; ++s) consumed += b.batch_at(consumed);
      INFO("start " << start << " increment " << increment << " increments " << increments
                    << " samples " << samples << " from " << from << " steps " << steps);
      REQUIRE(b.consumed_after(from, steps) == consumed);
    }
  }
  // A ramp over 2^40 samples in steps of one sample: still a few searches.
  const BatchSchedule slow(ramped(1, 1, int64_t(1) << 40, 3));
  CHECK(slow.consumed_after(0, int64_t(1) << 30) == int64_t(1) << 30);
  const int64_t half = int64_t(1) << 39;  // 2^39 samples at batch 1, then batch 2
  CHECK(slow.consumed_after(0, half + 10) == half + 20);
}
