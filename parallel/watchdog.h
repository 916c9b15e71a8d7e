// Watchdog: every collective registers (axis, op, start time) on entry and
// clears it on completion; a thread reports one that runs past timeout_s as a
// single stderr line naming rank, axis and op, aborts every communicator and
// ends the process non-zero, so a hung job never waits silently.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace trainer::parallel {

// Exit status of a process ended by the watchdog (MPI_Abort passes it on).
constexpr int kWatchdogExitCode = 3;
// How long the watchdog waits for its abort (ncclCommAbort, MPI_Abort) before
// ending the process itself.
constexpr double kAbortGraceS = 10.0;

class Watchdog {
 public:
  // Polls a pending asynchronous op: 0 still running, 1 done, -1 failed
  // (the failure is then reported like a timeout). Called on the watchdog thread.
  using Poll = std::function<int()>;

  // abort_all: aborts every communicator (ncclCommAbort / MPI_Abort); it may not
  // return. If it returns, or has not within kAbortGraceS, the watchdog ends
  // the process with kWatchdogExitCode.
  Watchdog(double timeout_s, int world_rank, std::function<void()> abort_all);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_s() const { return timeout_s_; }

  // A blocking op: begin before the call, end after it returns.
  uint64_t begin(const char* axis, const char* op, int group_rank, int group_size);
  void end(uint64_t id);
  // An op that completes asynchronously (NCCL on a stream): the watchdog
  // thread polls it and forgets it once done; `release` then runs there.
  void track(const char* axis, const char* op, int group_rank, int group_size, Poll poll,
             std::function<void()> release);
  size_t pending() const;

 private:
  struct Entry {
    const char* axis;
    const char* op;
    int group_rank;
    int group_size;
    std::chrono::steady_clock::time_point start;
    Poll poll;
    std::function<void()> release;
  };
  void run();
  [[noreturn]] void fire(const Entry& entry, const char* what, double elapsed_s);

  const double timeout_s_;
  const int world_rank_;
  std::function<void()> abort_all_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Entry> pending_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

// True once a watchdog of this process has reported a collective and begun
// aborting. A thread that then finds its communicator aborted calls
// park_if_watchdog_fired() instead of failing on its own: the watchdog ends
// the process with its line and exit status (kWatchdogExitCode), not a
// second, misleading error.
bool watchdog_fired();
void park_if_watchdog_fired();

// RAII registration of one blocking collective; a null watchdog is allowed.
class CollectiveGuard {
 public:
  CollectiveGuard(Watchdog* dog, const char* axis, const char* op, int group_rank,
                  int group_size)
      : dog_(dog), id_(dog ? dog->begin(axis, op, group_rank, group_size) : 0) {}
  ~CollectiveGuard() {
    if (dog_) dog_->end(id_);
  }
  CollectiveGuard(const CollectiveGuard&) = delete;
  CollectiveGuard& operator=(const CollectiveGuard&) = delete;

 private:
  Watchdog* dog_;
  uint64_t id_;
};

}  // namespace trainer::parallel
