// A read-only memory map of a whole file: corpora are read through the page
// cache, never copied into RAM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace trainer::engine::data {

class MappedFile {
 public:
  // InputError naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Writes to `path + ".tmp"` and renames onto path on commit(); a writer
// destroyed without commit() removes its temp file, so an interrupted or failed
// write never leaves a file that looks complete.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);
  void pwrite_at(uint64_t offset, const void* data, size_t bytes);  // overwrite earlier bytes
  uint64_t bytes_written() const { return size_; }
  // Flushes and closes; the file keeps its temp name until commit().
  void close();
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
};

}  // namespace trainer::engine::data
