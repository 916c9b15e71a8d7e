// Signal handlers only touch lock-free atomics and clock_gettime (both
// async-signal-safe).
#include "engine/stop_signal.h"

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <csignal>

namespace trainer::engine {

namespace {
std::atomic<int> g_signal{0};
std::atomic<long> g_first_ns{0};

long now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

void on_signal(int sig) {
  int first = g_signal.exchange(sig);
  if (first != 0) {
    // A launcher often delivers the same signal twice within moments (Slurm
    // to the step and a batch-script trap forwarding it): that is still the
    // first request. A later one, or a different signal, means "exit now".
    if (first == sig && now_ns() - g_first_ns.load() < 2000000000L) return;
    _exit(128 + sig);
  }
  g_first_ns.store(now_ns());
  const char msg[] = "trainer: stop requested, finishing the current step (signal again after 2 s to exit now)\n";
  (void)!write(2, msg, sizeof(msg) - 1);
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
}

bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }

}  // namespace trainer::engine
