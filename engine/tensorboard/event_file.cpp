#include "engine/tensorboard/event_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "engine/tensorboard/tfrecord.h"
#include "kernels/error.h"

namespace trainer::engine::tensorboard {

namespace fs = std::filesystem;

double wall_time_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

EventFileWriter::EventFileWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TRAINER_INPUT_CHECK(!ec, "{}: cannot create the TensorBoard folder: {}", dir, ec.message());
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "localhost");
  double now = wall_time_now();
  std::string base = (fs::path(dir) / fmt::format("events.out.tfevents.{}.{}",
                                                  static_cast<long long>(now), host)).string();
  // "x": create or fail, so two writers can never share (and clobber) one file.
  for (int suffix = 0; !file_; ++suffix) {
    path_ = suffix == 0 ? base : fmt::format("{}.{}", base, suffix);
    file_.reset(std::fopen(path_.c_str(), "wbx"));
    TRAINER_INPUT_CHECK(file_ || errno == EEXIST, "{}: cannot create: {}", path_, std::strerror(errno));
  }
  write_event(encode_file_version_event(now));
}

void EventFileWriter::write_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  write_event(encode_scalars_event(wall_time_now(), step, scalars));
}

void EventFileWriter::write_event(std::string_view event) {
  std::string record = tfrecord_frame(event);
  bool ok = std::fwrite(record.data(), 1, record.size(), file_.get()) == record.size();
  TRAINER_CHECK(ok && std::fflush(file_.get()) == 0, "{}: write failed: {}", path_, std::strerror(errno));
}

}  // namespace trainer::engine::tensorboard
