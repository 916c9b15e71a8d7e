// EventFileWriter: one TensorBoard event file, appended to record by record.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensorboard/event.h"

namespace trainer::engine::tensorboard {

class EventFileWriter {
 public:
  // Creates dir and a new file events.out.tfevents.<unix seconds>.<hostname>
  // in it, never an existing one: a run resumed within the same second gets
  // a ".1", ".2", ... suffix. TensorBoard reads every such file in the folder
  // and merges them by step. The first record says kFileVersion.
  explicit EventFileWriter(const std::string& dir);

  // One Event of scalars at step, stamped with the current time, flushed at
  // once so a killed run keeps every step it logged.
  void write_scalars(int64_t step, const std::vector<Scalar>& scalars);
  // An encoded Event (event.h), framed as one record and flushed.
  void write_event(std::string_view event);

  const std::string& path() const { return path_; }

 private:
  struct Close {
    void operator()(FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<FILE, Close> file_;
};

// Seconds since the Unix epoch, as Event.wall_time holds them.
double wall_time_now();

}  // namespace trainer::engine::tensorboard
