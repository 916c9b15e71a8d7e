// How a rank of a multi-rank job reports bad input (an InputError): one line
// for the whole job when every rank finds the same fault, as all of them do
// with a wrong key or a data file missing on a shared file system, and still a
// line from a rank whose fault is its own (a file missing on one node).
#pragma once

#include <string>

#include "parallel/launch_env.h"

namespace trainer::parallel {
class Mesh;
}

namespace trainer::cmd {

class InputErrorReport {
 public:
  explicit InputErrorReport(parallel::LaunchEnv env);

  const parallel::LaunchEnv& env() const { return env_; }
  // The job's collective watchdog timeout, once the spec is read: the wait
  // below stays under half of it, so that a rank waiting on this one in a
  // collective does not report a hang before this rank reports its fault.
  void set_watchdog_timeout(double seconds);
  // Once there is a mesh, a report brings every rank down through it.
  void set_mesh(parallel::Mesh* mesh) { mesh_ = mesh; }

  // Rank 0 (and a one-rank job) prints the line at once and ends the job. Any
  // other rank first waits a few seconds, in which the launcher's teardown
  // after rank 0's exit ends it without a repeat (mpirun does so, srun with
  // --kill-on-bad-exit, launch.sh); a rank still alive after the wait prints
  // its line naming its rank and host, then ends the job itself. Only repeats
  // are lost to the wait, never an error. Returns the exit code, 2.
  //
  // Runtime failures (exit 1) are not held back like this: a failure on one
  // rank can be the consequence of another's, and each cause must print first.
  int report(const std::string& message) const;

 private:
  parallel::LaunchEnv env_;
  double grace_s_;
  parallel::Mesh* mesh_ = nullptr;
};

}  // namespace trainer::cmd
