#include "cmd/input_error_report.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "engine/config/job_spec.h"
#include "parallel/mesh.h"

namespace trainer::cmd {

namespace {
constexpr double kGraceS = 5.0;

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}
void exit_input_error(int) { _exit(2); }
}  // namespace

InputErrorReport::InputErrorReport(parallel::LaunchEnv env) : env_(std::move(env)) {
  // Until the spec is read, the watchdog's default timeout bounds the wait.
  set_watchdog_timeout(engine::ParallelSpec{}.timeout_s);
}

void InputErrorReport::set_watchdog_timeout(double seconds) {
  grace_s_ = std::max(0.0, std::min(kGraceS, seconds / 2));
}

int InputErrorReport::report(const std::string& message) const {
  if (env_.rank == 0 || env_.world == 1) {
    std::fprintf(stderr, "trainer: error: %s\n", message.c_str());
  } else {
    // The teardown's SIGTERM ends this process silently, and with its own
    // status: srun reports the highest of its tasks' (143 for a signal would
    // hide the 2), and the trainer's stop handler would announce a graceful stop.
    struct sigaction sa {};
    sa.sa_handler = exit_input_error;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1}) sigaction(sig, &sa, nullptr);
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s_));
    std::fprintf(stderr, "trainer: error: rank %d of %d (%s): %s\n", env_.rank, env_.world,
                 host_name().c_str(), message.c_str());
  }
  std::fflush(stderr);
  if (mesh_) mesh_->abort(2);
  return 2;
}

}  // namespace trainer::cmd
