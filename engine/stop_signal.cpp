// Signal handlers only touch a lock-free atomic (async-signal-safe).
#include "engine/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace trainer::engine {

namespace {
std::atomic<int> g_signal{0};

void on_signal(int sig) {
  if (g_signal.exchange(sig) != 0) _exit(128 + sig);
  const char msg[] = "trainer: stop requested, finishing the current step (signal again to exit now)\n";
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
