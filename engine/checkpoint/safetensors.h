// Safetensors files (the Hugging Face format): an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__":
// {string: string}} padded with spaces to a multiple of 8, then the raw
// little-endian tensor bytes. A writer and a validating memory-mapped reader.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/files.h"

namespace trainer::engine::data {
class MappedFile;
}

namespace trainer::engine::checkpoint {

// Safetensors dtype names this project reads ("F32", "BF16", "F16", "F64", and
// "F8_E4M3" codes, which only hf_fp8.h reads, with their scales) and
// their element sizes; other names are refused with InputError.
size_t safetensors_dtype_size(const std::string& dtype);

class SafetensorsWriter {
 public:
  // The bytes are referenced, not copied: they must live until write().
  void add(std::string name, std::string dtype, std::vector<int64_t> shape, const void* data,
           size_t bytes);
  void add_f32(std::string name, std::vector<int64_t> shape, const float* data);
  // A tensor whose bytes `fill` writes into a scratch buffer at write() time,
  // so a device-resident model streams out without a whole host copy.
  void add_lazy(std::string name, std::string dtype, std::vector<int64_t> shape,
                std::function<void(void* dst)> fill);
  void set_metadata(std::string key, std::string value);

  // The header JSON (without padding): "__metadata__" first (when any), then
  // the tensors in the order added, with contiguous data offsets.
  std::string header_json() const;
  // Writes the whole file durably (new file, fsync) and returns its digest.
  FileDigest write(const std::string& path) const;

 private:
  struct Entry {
    std::string name, dtype;
    std::vector<int64_t> shape;
    const void* data;
    size_t bytes;
    std::function<void(void*)> fill;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

struct TensorView {
  std::string dtype;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t numel() const;
};

// A memory-mapped safetensors file, validated on open: header length within
// the file, strict JSON, known dtypes, shape * element size == byte range, and
// ranges that tile the data section exactly (so truncation is caught).
// Problems are InputError naming the path.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const TensorView& tensor(const std::string& name) const;  // InputError when absent
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor converted to fp32 (from F32, BF16, F16 or F64), row-major.
  std::vector<float> read_f32(const std::string& name) const;
  // The whole file's bytes (for digests).
  const uint8_t* file_data() const;
  size_t file_size() const;

 private:
  std::string path_;
  std::unique_ptr<data::MappedFile> map_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// IEEE half and bfloat16 bit patterns to float (exact).
float half_to_float(uint16_t h);
float bf16_to_float(uint16_t b);

}  // namespace trainer::engine::checkpoint
