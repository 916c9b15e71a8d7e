// Safetensors writer and validating reader.
#include "engine/checkpoint/safetensors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "engine/data/mapped_file.h"
#include "engine/json.h"
#include "kernels/error.h"

namespace trainer::engine::checkpoint {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F64") return 8;
  if (dtype == "F8_E4M3") return 1;  // fine-grained fp8 checkpoints (hf_fp8.h), read with their scales
  return 0;
}

float half_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while ((man & 0x400) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3FF) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void SafetensorsWriter::add(std::string name, std::string dtype, std::vector<int64_t> shape,
                            const void* data, size_t bytes) {
  size_t esize = safetensors_dtype_size(dtype);
  TRAINER_CHECK(esize > 0, "safetensors: unsupported dtype {}", dtype);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  TRAINER_CHECK(static_cast<size_t>(n) * esize == bytes, "safetensors: {} has {} bytes for {} elements",
                name, bytes, n);
  TRAINER_CHECK(name != "__metadata__", "safetensors: reserved tensor name");
  for (const Entry& e : entries_) TRAINER_CHECK(e.name != name, "safetensors: duplicate tensor {}", name);
  entries_.push_back({std::move(name), std::move(dtype), std::move(shape), data, bytes, {}});
}

void SafetensorsWriter::add_lazy(std::string name, std::string dtype, std::vector<int64_t> shape,
                                 std::function<void(void*)> fill) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  add(std::move(name), dtype, std::move(shape), nullptr,
      static_cast<size_t>(n) * safetensors_dtype_size(dtype));
  entries_.back().fill = std::move(fill);
}

void SafetensorsWriter::add_f32(std::string name, std::vector<int64_t> shape, const float* data) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  add(std::move(name), "F32", std::move(shape), data, static_cast<size_t>(n) * 4);
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_.emplace_back(std::move(key), std::move(value));
}

std::string SafetensorsWriter::header_json() const {
  Json h = Json::object();
  if (!metadata_.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata_) m.set(k, Json(v));
    h.set("__metadata__", std::move(m));
  }
  uint64_t offset = 0;
  for (const Entry& e : entries_) {
    Json t = Json::object();
    t.set("dtype", Json(e.dtype));
    Json shape = Json::array();
    for (int64_t d : e.shape) shape.push(Json(d));
    t.set("shape", std::move(shape));
    Json offs = Json::array();
    offs.push(Json(offset));
    offs.push(Json(offset + e.bytes));
    t.set("data_offsets", std::move(offs));
    h.set(e.name, std::move(t));
    offset += e.bytes;
  }
  return h.dump();
}

FileDigest SafetensorsWriter::write(const std::string& path) const {
  std::string header = header_json();
  // Padding to 8 bytes keeps the data section aligned for memory-mapped readers.
  header.append((8 - header.size() % 8) % 8, ' ');
  uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  DurableWriter w(path);
  w.write(len, 8);
  w.write(header.data(), header.size());
  std::vector<uint8_t> scratch;
  for (const Entry& e : entries_) {
    if (e.fill) {
      scratch.resize(e.bytes);
      e.fill(scratch.data());
      w.write(scratch.data(), e.bytes);
    } else {
      w.write(e.data, e.bytes);
    }
  }
  return w.finish();
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  TRAINER_INPUT_CHECK(!ec, "{}: cannot read ({})", path, ec.message());
  TRAINER_INPUT_CHECK(size >= 8, "{}: truncated safetensors file ({} bytes, header length needs 8)",
                      path, size);
  map_ = std::make_unique<data::MappedFile>(path);
  const uint8_t* p = map_->data();
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(p[i]) << (8 * i);
  TRAINER_INPUT_CHECK(hlen <= size - 8, "{}: truncated safetensors file (header of {} bytes, file of {})",
                      path, hlen, size);
  std::string_view text(reinterpret_cast<const char*>(p + 8), hlen);
  Json header = parse_json(text, path + " (safetensors header)");
  TRAINER_INPUT_CHECK(header.is_object(), "{}: safetensors header is not a JSON object", path);
  const uint8_t* data = p + 8 + hlen;
  uint64_t data_size = size - 8 - hlen;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, entry] : header.members()) {
    try {
      if (name == "__metadata__") {
        for (const auto& [k, v] : entry.members()) metadata_[k] = v.as_string();
        continue;
      }
      TensorView t;
      t.dtype = entry.at("dtype").as_string();
      size_t esize = safetensors_dtype_size(t.dtype);
      if (esize == 0) throw std::runtime_error(fmt::format("unsupported dtype {}", t.dtype));
      for (const Json& d : entry.at("shape").items()) {
        int64_t v = d.as_int();
        if (v < 0) throw std::runtime_error("negative dimension");
        t.shape.push_back(v);
      }
      const auto& offs = entry.at("data_offsets").items();
      if (offs.size() != 2) throw std::runtime_error("data_offsets must have 2 entries");
      int64_t b = offs[0].as_int(), e = offs[1].as_int();
      if (b < 0 || e < b) throw std::runtime_error("bad data_offsets");
      if (static_cast<uint64_t>(e) > data_size)
        throw std::runtime_error(fmt::format("data ends at {} but the file holds {} data bytes "
                                             "(truncated)", e, data_size));
      // The element count in checked arithmetic: a crafted [2^40, 2^40] must
      // not wrap to a size that happens to match.
      uint64_t need = esize;
      for (int64_t d : t.shape)
        if (__builtin_mul_overflow(need, static_cast<uint64_t>(d), &need))
          throw std::runtime_error(fmt::format("shape [{}] overflows 64-bit sizes", fmt::join(t.shape, ", ")));
      if (need != static_cast<uint64_t>(e - b))
        throw std::runtime_error(fmt::format("shape needs {} bytes, data_offsets give {}", need, e - b));
      t.data = data + b;
      t.bytes = static_cast<size_t>(e - b);
      ranges.emplace_back(b, e);
      tensors_[name] = std::move(t);
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& ex) {
      throw InputError(fmt::format("{}: safetensors header: tensor \"{}\": {}", path, name, ex.what()));
    }
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (auto [b, e] : ranges) {
    TRAINER_INPUT_CHECK(b == at, "{}: safetensors data ranges overlap or leave a gap at byte {}",
                        path, at);
    at = e;
  }
  TRAINER_INPUT_CHECK(at == data_size, "{}: safetensors data section has {} bytes, tensors cover {}",
                      path, data_size, at);
}

SafetensorsFile::~SafetensorsFile() = default;

const uint8_t* SafetensorsFile::file_data() const { return map_->data(); }
size_t SafetensorsFile::file_size() const { return map_->size(); }

const TensorView& SafetensorsFile::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  TRAINER_INPUT_CHECK(it != tensors_.end(), "{}: no tensor \"{}\"", path_, name);
  return it->second;
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const TensorView& t = tensor(name);
  size_t n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (n == 0) return out;  // memcpy from a null vector's data() is undefined even for 0 bytes
  // Codes mean nothing without their block scales (hf_fp8.h dequantizes them).
  TRAINER_INPUT_CHECK(t.dtype != "F8_E4M3", "{}: tensor \"{}\" is F8_E4M3, read here as F32, BF16, F16 or "
                      "F64 only (fp8 weights are read with their weight_scale_inv)", path_, name);
  if (t.dtype == "F32") {
    std::memcpy(out.data(), t.data, n * 4);
  } else if (t.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, t.data + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    bool bf = t.dtype == "BF16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      out[i] = bf ? bf16_to_float(h) : half_to_float(h);
    }
  }
  return out;
}

}  // namespace trainer::engine::checkpoint
