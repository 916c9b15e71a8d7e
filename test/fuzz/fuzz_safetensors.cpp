// engine/checkpoint/safetensors: any file is either refused with one line or
// opened with every tensor readable inside the mapped bytes (ASan checks the
// reads).
#include "engine/checkpoint/safetensors.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string path = fuzz::write_input_file("st", data, size);
  fuzz::expect_only_input_errors([&] {
    engine::checkpoint::SafetensorsFile f(path);
    uint64_t covered = 0;
    for (const auto& [name, t] : f.tensors()) {
      if (t.data < f.file_data() || t.data + t.bytes > f.file_data() + f.file_size())
        fuzz::fail("tensor " + name + " outside the file");
      covered += t.bytes;
      std::vector<float> v = f.read_f32(name);
      if (static_cast<int64_t>(v.size()) != t.numel()) fuzz::fail("read_f32 size of " + name);
    }
    if (covered > f.file_size()) fuzz::fail("tensors cover more bytes than the file has");
  });
  return 0;
}
