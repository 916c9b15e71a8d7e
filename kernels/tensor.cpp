// Tensor view helpers and dtype tables.
#include "kernels/tensor.h"

#include <fmt/format.h>

namespace trainer {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::e4m3: return 1;
    case DType::e5m2: return 1;
    case DType::i32: return 4;
    case DType::u16: return 2;
    case DType::f64: return 8;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::i32: return "int32";
    case DType::u16: return "uint16";
    case DType::f64: return "fp64";
  }
  return "?";
}

const char* device_name(Device device) { return device == Device::cpu ? "cpu" : "cuda"; }

DType dtype_from_name(const std::string& name) {
  if (name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16") return DType::f16;
  if (name == "fp8" || name == "e4m3") return DType::e4m3;
  if (name == "e5m2") return DType::e5m2;
  throw InputError(fmt::format("unknown dtype '{}': expected fp32, bf16, fp16 or fp8", name));
}

Tensor::Tensor(void* data_, std::initializer_list<int64_t> shape_, DType dtype_, Device device_)
    : data(data_), dtype(dtype_), device(device_) {
  TRAINER_CHECK(shape_.size() >= 1 && shape_.size() <= kMaxDims, "tensor rank {} unsupported",
                shape_.size());
  ndim = static_cast<int>(shape_.size());
  int i = 0;
  for (int64_t s : shape_) {
    TRAINER_CHECK(s >= 0, "negative dim {}", s);
    shape[i++] = s;
  }
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    stride[d] = st;
    st *= shape[d];
  }
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return ndim == 0 ? 0 : n;
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += ndim;
  TRAINER_CHECK(dim >= 0 && dim < ndim, "dim {} out of range for {}", dim, str());
  return shape[dim];
}

bool Tensor::contiguous() const {
  int64_t st = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != st) return false;
    st *= shape[d];
  }
  return true;
}

Tensor Tensor::view(std::initializer_list<int64_t> new_shape) const {
  TRAINER_CHECK(contiguous(), "view of non-contiguous tensor {}", str());
  Tensor t(data, new_shape, dtype, device);
  TRAINER_CHECK(t.numel() == numel(), "view {} -> {} changes numel", str(), t.str());
  return t;
}

Tensor Tensor::slice(int64_t begin, int64_t end) const {
  TRAINER_CHECK(ndim >= 1 && begin >= 0 && begin <= end && end <= shape[0],
                "slice [{}, {}) of {}", begin, end, str());
  Tensor t = *this;
  t.shape[0] = end - begin;
  t.data = static_cast<char*>(data) + begin * stride[0] * static_cast<int64_t>(dtype_size(dtype));
  return t;
}

std::string Tensor::str() const {
  std::string s = "(";
  for (int d = 0; d < ndim; ++d) s += fmt::format("{}{}", d ? ", " : "", shape[d]);
  return s + fmt::format(") {} {}", dtype_name(dtype), device_name(device));
}

void check_shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* name) {
  bool ok = t.ndim == static_cast<int>(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.shape[d] != s) ok = false;
    ++d;
  }
  if (!ok) {
    std::string want = "(";
    d = 0;
    for (int64_t s : shape) want += fmt::format("{}{}", d++ ? ", " : "", s < 0 ? std::string("*") : std::to_string(s));
    TRAINER_CHECK(false, "{} has shape {}, expected {})", name, t.str(), want);
  }
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  TRAINER_CHECK(a.device == b.device, "{}: tensors on different devices ({} vs {})", op, a.str(),
                b.str());
}

}  // namespace trainer
