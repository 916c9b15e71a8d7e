// The collective watchdog thread (see watchdog.h).
#include "parallel/watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "kernels/error.h"

namespace trainer::parallel {

namespace {
std::atomic<bool> g_fired{false};
}  // namespace

bool watchdog_fired() { return g_fired.load(); }

void park_if_watchdog_fired() {
  while (g_fired.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

Watchdog::Watchdog(double timeout_s, int world_rank, std::function<void()> abort_all)
    : timeout_s_(timeout_s), world_rank_(world_rank), abort_all_(std::move(abort_all)) {
  TRAINER_CHECK(timeout_s > 0, "watchdog timeout {} s must be positive", timeout_s);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (auto& [id, entry] : pending_) {
    if (entry.release) entry.release();
  }
}

uint64_t Watchdog::begin(const char* axis, const char* op, int group_rank, int group_size) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t id = next_id_++;
  pending_.emplace(id, Entry{axis, op, group_rank, group_size, std::chrono::steady_clock::now(),
                             nullptr, nullptr});
  return id;
}

void Watchdog::end(uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.erase(id);
}

void Watchdog::track(const char* axis, const char* op, int group_rank, int group_size,
                     Poll poll, std::function<void()> release) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.emplace(next_id_++, Entry{axis, op, group_rank, group_size,
                                       std::chrono::steady_clock::now(), std::move(poll),
                                       std::move(release)});
  }
  wake_.notify_all();
}

size_t Watchdog::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

void Watchdog::run() {
  // Polling often enough to report within ~5% of the timeout, but never
  // spinning: async ops are polled at most every 2 ms.
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 20, 0.002, 1.0));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const bool has_async = std::any_of(pending_.begin(), pending_.end(),
                                       [](const auto& kv) { return bool(kv.second.poll); });
    wake_.wait_for(lock, has_async ? std::chrono::duration<double>(0.002) : period);
    if (stop_) break;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = pending_.begin(); it != pending_.end();) {
      Entry& e = it->second;
      const double elapsed = std::chrono::duration<double>(now - e.start).count();
      int state = 0;
      if (e.poll) state = e.poll();
      if (state == 1) {
        if (e.release) e.release();
        it = pending_.erase(it);
        continue;
      }
      if (state < 0) fire(e, "failed", elapsed);
      if (elapsed > timeout_s_) fire(e, "has not finished", elapsed);
      ++it;
    }
  }
}

void Watchdog::fire(const Entry& e, const char* what, double elapsed_s) {
  // One line, written with a single call so ranks' lines do not interleave.
  const std::string line = fmt::format(
      "trainer: watchdog: rank {}: {} on axis {} (group rank {} of {}) {} after {:.1f} s "
      "(timeout {} s); aborting\n",
      world_rank_, e.op, e.axis, e.group_rank, e.group_size, what, elapsed_s, timeout_s_);
  g_fired.store(true);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  if (abort_all_) {
    // ncclCommAbort frees device memory, which waits for the GPU: with a
    // stream stuck behind something other than a collective it may never
    // return. The abort gets a grace period on its own thread, then the
    // process ends regardless.
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([abort = abort_all_, done] {
      abort();
      done->store(true);
    }).detach();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration<double>(kAbortGraceS);
    while (!done->load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!done->load()) {
      const std::string late = fmt::format(
          "trainer: watchdog: rank {}: aborting the communicators took over {} s; exiting\n",
          world_rank_, kAbortGraceS);
      std::fputs(late.c_str(), stderr);
      std::fflush(stderr);
    }
  }
  // The main thread is stuck inside the collective, so nothing can unwind:
  // ending the process here is the only way not to hang.
  std::_Exit(kWatchdogExitCode);
}

}  // namespace trainer::parallel
