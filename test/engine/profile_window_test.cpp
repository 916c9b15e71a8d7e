// log.profile_steps on CPU ranks and its rank checks (engine/profile_window.h);
// the GPU's capture range itself: test/cuda/profile_window_test.cpp.
#include "engine/profile_window.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "kernels/error.h"

using namespace trainer;
using namespace trainer::engine;

namespace {

LogSpec window(int first, int last, std::vector<int> ranks) {
  LogSpec log;
  log.profile_first = first;
  log.profile_last = last;
  log.profile_ranks = std::move(ranks);
  return log;
}

std::string text_of(FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[256];
  while (std::fgets(buf, sizeof buf, f)) s += buf;
  return s;
}

}  // namespace

TEST_CASE("log.profile_steps on CPU ranks: a note from the profiled ranks, no range", "[cpu][engine]") {
  Context cpu;
  FILE* out = std::tmpfile();
  {
    ProfileWindow w(window(2, 3, {0, 3}), 3, 4, cpu, out);
    for (int step = 1; step <= 4; ++step) {
      w.before_step(step);
      CHECK_FALSE(w.capturing());
      w.after_step(step, step == 4);
    }
    ProfileWindow other(window(2, 3, {0, 3}), 1, 4, cpu, out);
    ProfileWindow off(LogSpec{}, 0, 4, cpu, out);
  }
  CHECK(text_of(out) ==
        "log.profile_steps: rank 3 runs on the CPU: no CUDA profiler range is opened (the steps' "
        "NVTX ranges are the GPU's too)\n");
  std::fclose(out);
}

TEST_CASE("log.profile_ranks outside the world are refused", "[cpu][engine]") {
  Context cpu;
  try {
    ProfileWindow w(window(1, 2, {0, 4}), 0, 4, cpu, stderr);
    FAIL("accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "log.profile_ranks: rank 4 is not in this run's world of 4 ranks");
  }
  // Off: the ranks are not looked at.
  CHECK_NOTHROW(ProfileWindow(window(0, 0, {9}), 0, 1, cpu, stderr));
}
