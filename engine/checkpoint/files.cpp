// Durable writes and XXH3 digests (xxhash compiled inline: no library to link).
#include "engine/checkpoint/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/data/mapped_file.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

namespace fs = std::filesystem;

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t xxh3(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

DurableWriter::DurableWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("{}: cannot create ({})", path_, std::strerror(errno)));
  auto* st = XXH3_createState();
  TRAINER_CHECK(st != nullptr, "out of memory for a hash state");
  XXH3_64bits_reset(st);
  state_ = st;
}

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (state_) XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void DurableWriter::write(const void* data, size_t bytes) {
  TRAINER_CHECK(fd_ >= 0, "{}: write after finish", path_);
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, bytes);
  const char* p = static_cast<const char*>(data);
  size_t left = bytes;
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("{}: write failed ({})", path_, std::strerror(errno)));
    p += n;
    left -= static_cast<size_t>(n);
  }
  bytes_ += bytes;
}

FileDigest DurableWriter::finish() {
  TRAINER_CHECK(fd_ >= 0, "{}: finished twice", path_);
  if (::fsync(fd_) != 0) throw Error(fmt::format("{}: fsync failed ({})", path_, std::strerror(errno)));
  int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error(fmt::format("{}: close failed ({})", path_, std::strerror(errno)));
  return {bytes_, XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_))};
}

FileDigest write_file_durably(const std::string& path, std::string_view text) {
  DurableWriter w(path);
  w.write(text.data(), text.size());
  return w.finish();
}

void fsync_directory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open directory ({})", dir, std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems (and /proc-like mounts) refuse fsync on directories: not fatal there.
  if (rc != 0 && err != EINVAL && err != EROFS)
    throw Error(fmt::format("{}: fsync failed ({})", dir, std::strerror(err)));
}

void replace_file_atomically(const std::string& path, std::string_view text) {
  replace_file_with(path, [&](const std::string& tmp) { write_file_durably(tmp, text); });
}

void replace_file_with(const std::string& path, const std::function<void(const std::string& tmp)>& write) {
  std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  try {
    write(tmp);
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    fs::remove(tmp, ec);
    throw Error(fmt::format("{}: rename failed ({})", path, std::strerror(err)));
  }
  fs::path parent = fs::path(path).parent_path();
  fsync_directory(parent.empty() ? "." : parent.string());
}

FileDigest digest_file(const std::string& path) {
  std::error_code ec;
  auto size = fs::file_size(path, ec);
  TRAINER_INPUT_CHECK(!ec, "{}: cannot read ({})", path, ec.message());
  if (size == 0) return {0, XXH3_64bits(nullptr, 0)};
  data::MappedFile f(path);
  return {f.size(), XXH3_64bits(f.data(), f.size())};
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TRAINER_INPUT_CHECK(in.good(), "{}: cannot open ({})", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  TRAINER_INPUT_CHECK(!in.bad(), "{}: read failed", path);
  return ss.str();
}

void check_output_dir(const std::string& path, const std::string& key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  TRAINER_INPUT_CHECK(!ec, "{}: {}: {}", key, path, ec.message());
  // The path itself, or the nearest ancestor that exists (what create_directories starts from).
  fs::path existing = p;
  while (!fs::exists(existing, ec) && existing.has_relative_path()) existing = existing.parent_path();
  const std::string which = existing == p ? std::string("it") : existing.string();
  TRAINER_INPUT_CHECK(fs::is_directory(existing, ec), "{}: {}: {} exists and is not a directory", key,
                      path, which);
  TRAINER_INPUT_CHECK(::access(existing.c_str(), W_OK | X_OK) == 0, "{}: {}: {} is not writable ({})",
                      key, path, which, std::strerror(errno));
}

}  // namespace trainer::engine::checkpoint
