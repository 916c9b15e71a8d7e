#include "engine/checkpoint/background_write.h"

#include <chrono>
#include <exception>

namespace trainer::engine::checkpoint {

BackgroundWrite::BackgroundWrite(std::unique_ptr<SafetensorsWriter> writer,
                                 size_t snapshot_bytes, std::string path)
    : writer_(std::move(writer)), snapshot_bytes_(snapshot_bytes), path_(std::move(path)) {
  thread_ = std::thread([this] {
    const auto start = std::chrono::steady_clock::now();
    try {
      digest_ = writer_->write(path_);
    } catch (const std::exception& e) {
      error_ = e.what();
      if (error_.empty()) error_ = "unknown error";
    } catch (...) {
      error_ = "unknown error";
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    done_.store(true, std::memory_order_release);
  });
}

BackgroundWrite::~BackgroundWrite() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundWrite::wait() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace trainer::engine::checkpoint
