// The CPU's MFU denominator: a step that beats the measured peak triggers a new
// measurement (the start-up one may have run on loaded cores), the best kept,
// a bounded number of times.
#include <catch2/catch.hpp>

#include <omp.h>

#include <utility>

#include "engine/peak_flops.h"

using namespace trainer::engine;

TEST_CASE("refine_cpu_peak measures again only when a step beats the peak", "[cpu][engine]") {
  int remeasures = 0, calls = 0;
  auto measure = [&calls] {
    ++calls;
    return 150.0 + calls;  // each measurement a little better
  };
  // At or below the peak: nothing measured.
  CHECK(refine_cpu_peak(100.0, 100.0, remeasures, measure) == 100.0);
  CHECK(refine_cpu_peak(100.0, 80.0, remeasures, measure) == 100.0);
  CHECK(calls == 0);
  // Beaten: measured again and the better value kept.
  CHECK(refine_cpu_peak(100.0, 120.0, remeasures, measure) == 151.0);
  CHECK(remeasures == 1);
  // A worse new measurement keeps the old peak.
  CHECK(refine_cpu_peak(500.0, 600.0, remeasures, measure) == 500.0);
  CHECK(remeasures == 2);
  CHECK(refine_cpu_peak(100.0, 200.0, remeasures, measure) == 153.0);
  // Bounded: no more measurements after kMaxPeakRemeasures.
  CHECK(remeasures == kMaxPeakRemeasures);
  CHECK(refine_cpu_peak(100.0, 200.0, remeasures, measure) == 100.0);
  CHECK(calls == kMaxPeakRemeasures);
}

TEST_CASE("the start-up GEMM grows with the cube root of the threads", "[cpu][engine]") {
  const int before = omp_get_max_threads();
  const std::pair<int, int> cases[] = {{1, 512}, {2, 704}, {8, 1024}, {27, 1536}, {64, 2048}, {512, 2048}};
  for (auto [threads, size] : cases) {
    omp_set_num_threads(threads);
    CHECK(quick_gemm_size() == size);
  }
  omp_set_num_threads(before);
}
