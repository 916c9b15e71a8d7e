// Durable file primitives of the checkpoint format: write-and-fsync with an
// XXH3-64 digest computed on the way out, directory fsync, whole-file digest,
// and small text files replaced atomically (temp + fsync + rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace trainer::engine::checkpoint {

struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;  // XXH3_64bits of the whole file, seed 0
};

std::string hex64(uint64_t v);  // 16 lowercase hex digits

// Streams bytes into a new file (O_EXCL: never overwrites), hashing as it goes;
// finish() fsyncs and closes. Errors are trainer::Error naming the path.
class DurableWriter {
 public:
  explicit DurableWriter(std::string path);
  ~DurableWriter();
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  void write(const void* data, size_t bytes);
  FileDigest finish();

 private:
  std::string path_;
  int fd_ = -1;
  void* state_ = nullptr;  // XXH3_state_t
  uint64_t bytes_ = 0;
};

// Writes a whole small file durably (fsync); the file must not exist yet.
FileDigest write_file_durably(const std::string& path, std::string_view text);
// Replaces `path` atomically: writes path.tmp-<pid>, fsyncs, renames, fsyncs the directory.
void replace_file_atomically(const std::string& path, std::string_view text);
// The same for a file another writer produces: `write(tmp)` writes the whole
// file durably at tmp (a SafetensorsWriter); on any throw tmp is removed.
void replace_file_with(const std::string& path, const std::function<void(const std::string& tmp)>& write);
void fsync_directory(const std::string& dir);
// Digest of a file as stored (reads it through a memory map).
FileDigest digest_file(const std::string& path);
uint64_t xxh3(const void* data, size_t bytes);
// The whole file as text; InputError naming the path when it cannot be read.
std::string read_text_file(const std::string& path);
// Checks, creating nothing, that `path` is a directory this process can
// write, or can be created as one (its nearest existing ancestor is a
// writable directory). InputError "KEY: PATH: why" otherwise: found before a
// run trains for hours and then cannot save.
void check_output_dir(const std::string& path, const std::string& key);

}  // namespace trainer::engine::checkpoint
