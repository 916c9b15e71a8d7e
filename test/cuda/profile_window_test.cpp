// [cuda][state]: log.profile_steps' capture range (engine/profile_window.h)
// opens and closes the CUDA profiler at the steps it names. Without nsys
// attached the calls do nothing on a GPU; the emulator refuses a start while
// capturing and a stop while not, and counts the starts.
#include <cstdio>

#include "engine/profile_window.h"
#include "test/cuda/harness.h"

#ifdef TRAINER_CUDA_EMULATOR
#include <cuda_profiler_api.h>
#endif

namespace trainer::cuda_test {
namespace {

int starts() {
#ifdef TRAINER_CUDA_EMULATOR
  return cuda_emu_profiler_starts();
#else
  return 0;  // a GPU's runtime keeps no count
#endif
}

engine::LogSpec window(int first, int last, std::vector<int> ranks = {0}) {
  engine::LogSpec log;
  log.profile_first = first;
  log.profile_last = last;
  log.profile_ranks = std::move(ranks);
  return log;
}

}  // namespace

TEST_CASE("the profiler range covers log.profile_steps", "[cuda][state]") {
  FILE* out = std::tmpfile();
  const int before = starts();
  SECTION("steps 3 to 5 of an 8-step run") {
    engine::ProfileWindow w(window(3, 5), 0, 1, gpu(), out);
    for (int step = 1; step <= 8; ++step) {
      w.before_step(step);
      CHECK(w.capturing() == (step >= 3 && step <= 5));
      w.after_step(step, step == 8);
      CHECK(w.capturing() == (step >= 3 && step < 5));
    }
#ifdef TRAINER_CUDA_EMULATOR
    CHECK(starts() == before + 1);
#endif
  }
  SECTION("a resumed run that starts inside the window opens it at its first step") {
    engine::ProfileWindow w(window(3, 5), 0, 1, gpu(), out);
    w.before_step(4);
    CHECK(w.capturing());
    w.after_step(4, false);
    CHECK(w.capturing());
    w.before_step(5);
    w.after_step(5, false);
    CHECK_FALSE(w.capturing());
  }
  SECTION("the run's final step closes it, and so does the destructor") {
    {
      engine::ProfileWindow w(window(2, 9), 0, 1, gpu(), out);
      w.before_step(2);
      w.after_step(2, true);  // train.steps 2
      CHECK_FALSE(w.capturing());
      w.before_step(3);  // a later run of the same window reopens
      CHECK(w.capturing());
    }  // closed here: the next start succeeds
    engine::ProfileWindow again(window(1, 1), 0, 1, gpu(), out);
    again.before_step(1);
    CHECK(again.capturing());
    again.after_step(1, false);
    CHECK_FALSE(again.capturing());
  }
  SECTION("ranks outside profile_ranks open nothing") {
    engine::ProfileWindow w(window(1, 3, {1}), 0, 2, gpu(), out);
    w.before_step(1);
    CHECK_FALSE(w.capturing());
    CHECK(starts() == before);
  }
  std::fclose(out);
}

}  // namespace trainer::cuda_test
