// engine/data: an llm.c shard or a Megatron .idx/.bin pair built from the
// input is opened by the training loop's SampleSource and samples are read
// from it: refused with one line, or every sample read stays inside the
// mapped files and holds ids below the vocabulary.
//
// Input: byte 0 bit 0 = Megatron (else llm.c), bit 1 = shuffle, bit 2 = an
// explicit data.format; byte 1 = seq_len - 1 (mod 32); bytes 2-3 = vocab - 1;
// Megatron: bytes 4-5 = the .idx's length, then the .idx, then the .bin;
// llm.c: the shard from byte 4.
#include <algorithm>
#include <vector>

#include "engine/data/sample_source.h"
#include "test/fuzz/fuzz_target.h"

using namespace trainer;
using engine::DataFormat;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const bool megatron = data[0] & 1, shuffle = data[0] & 2, explicit_format = data[0] & 4;
  const int seq_len = 1 + data[1] % 32;
  const int vocab = 1 + (data[2] | data[3] << 8);
  std::string path;
  DataFormat format = DataFormat::auto_;
  if (megatron) {
    if (size < 6) return 0;
    fuzz::InputCursor in(data + 4, size - 4);
    const std::string_view idx = in.take_prefixed(), bin = in.rest();
    fuzz::write_input_file("mg.idx", idx);
    path = fuzz::write_input_file("mg.bin", bin);
    if (explicit_format) format = DataFormat::megatron;
  } else {
    path = fuzz::write_input_file("shard.bin", data + 4, size - 4);
    if (explicit_format) format = DataFormat::llmc;
  }
  fuzz::expect_only_input_errors([&] {
    auto source = engine::data::SampleSource::open({{path, 1.0}}, format, seq_len, vocab, 1234, shuffle);
    const int64_t n = source->samples_per_epoch();
    if (n <= 0) fuzz::fail("an opened source has no samples");
    std::vector<int32_t> sample(seq_len + 1);
    for (int64_t i : {int64_t{0}, n / 2, n - 1, n, 2 * n + 1}) {
      std::fill(sample.begin(), sample.end(), -1);
      source->get(i, sample.data());
      for (int32_t id : sample)
        if (id < 0 || id >= vocab) fuzz::fail("sample holds id " + std::to_string(id));
    }
    (void)source->describe();
  });
  return 0;
}
