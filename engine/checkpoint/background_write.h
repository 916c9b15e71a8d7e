// One rank's shard of an asynchronous checkpoint (checkpoint.async): the
// tensors were copied to host memory at the step, and a thread writes the
// safetensors file from that copy while training goes on. The thread touches
// only host memory and the file system (no device, no communicator), so the
// collectives that complete the checkpoint stay on the trainer's thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "engine/checkpoint/files.h"
#include "engine/checkpoint/safetensors.h"

namespace trainer::engine::checkpoint {

class BackgroundWrite {
 public:
  // Takes the writer, whose tensors point into a snapshot of snapshot_bytes
  // that its owner (the Checkpointer's HostStaging) keeps unchanged until this
  // write is done, and starts writing `path` at once.
  BackgroundWrite(std::unique_ptr<SafetensorsWriter> writer, size_t snapshot_bytes,
                  std::string path);
  // Waits for the thread: a run that ends on an error leaves a complete or
  // partial shard in the temporary directory, never a thread writing after exit.
  ~BackgroundWrite();
  BackgroundWrite(const BackgroundWrite&) = delete;
  BackgroundWrite& operator=(const BackgroundWrite&) = delete;

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Blocks until the file is written (or failed); then digest() or error().
  void wait();
  const FileDigest& digest() const { return digest_; }
  const std::string& error() const { return error_; }  // "" when the write succeeded
  double seconds() const { return seconds_; }          // the write's wall time
  size_t bytes() const { return snapshot_bytes_; }

 private:
  std::unique_ptr<SafetensorsWriter> writer_;
  size_t snapshot_bytes_;
  std::string path_;
  FileDigest digest_;
  std::string error_;
  double seconds_ = 0;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace trainer::engine::checkpoint
