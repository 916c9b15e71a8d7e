// Memory-mapped input files and temp-then-rename output files.
#include "engine/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "kernels/error.h"

namespace trainer::engine::data {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw InputError(fmt::format("{}: cannot open ({})", path, std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InputError(fmt::format("{}: not a regular file", path));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) throw InputError(fmt::format("{}: cannot map ({})", path, std::strerror(err)));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd_ < 0) throw InputError(fmt::format("{}: cannot create ({})", tmp_, std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::write(fd_, p, bytes);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(fmt::format("{}: write failed ({})", tmp_, std::strerror(errno)));
    p += w;
    bytes -= static_cast<size_t>(w);
    size_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::pwrite_at(uint64_t offset, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t w = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error(fmt::format("{}: write failed ({})", tmp_, std::strerror(errno)));
    p += w;
    offset += static_cast<uint64_t>(w);
    bytes -= static_cast<size_t>(w);
  }
}

void AtomicFile::close() {
  if (fd_ < 0) return;
  int rc = ::fsync(fd_);
  int err = errno;
  ::close(fd_);
  fd_ = -1;
  if (rc != 0) throw Error(fmt::format("{}: fsync failed ({})", tmp_, std::strerror(err)));
}

void AtomicFile::commit() {
  close();
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw Error(fmt::format("{}: cannot rename to {} ({})", tmp_, path_, std::strerror(errno)));
  committed_ = true;
}

}  // namespace trainer::engine::data
