#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test/fuzz/fuzz_target.h"

namespace trainer::fuzz {

std::string write_input_file(const char* tag, const uint8_t* data, size_t size) {
  static const std::string dir = [] {
    const char* shm = "/dev/shm";
    const char* tmp = std::getenv("TMPDIR");
    return std::string(std::filesystem::is_directory(shm) ? shm : (tmp ? tmp : "/tmp"));
  }();
  std::string path = dir + "/trainer_fuzz_" + std::to_string(::getpid()) + "_" + tag;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) fail("cannot write " + path);
  return path;
}

}  // namespace trainer::fuzz
