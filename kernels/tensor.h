// Tensor: a non-owning view (pointer, shape, strides, dtype, device) that every
// op takes. Memory is owned by the arenas of the memory plan, never by a Tensor.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/error.h"

namespace trainer {

enum class DType : uint8_t { f32, bf16, f16, e4m3, e5m2, i32, u16, f64 };
enum class Device : uint8_t { cpu, cuda };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);
const char* device_name(Device device);
// Parses "fp32", "bf16", "fp16", "fp8" (-> e4m3), "e4m3", "e5m2"; throws InputError otherwise.
DType dtype_from_name(const std::string& name);

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<uint16_t>() { return DType::u16; }

struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  std::array<int64_t, kMaxDims> shape{};
  std::array<int64_t, kMaxDims> stride{};  // in elements
  int ndim = 0;
  DType dtype = DType::f32;
  Device device = Device::cpu;

  Tensor() = default;
  // A contiguous row-major view.
  Tensor(void* data, std::initializer_list<int64_t> shape, DType dtype = DType::f32,
         Device device = Device::cpu);

  bool empty() const { return data == nullptr; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // size(-1) is the last dim.
  int64_t size(int dim) const;
  bool contiguous() const;

  // Typed pointer; checks the dtype.
  template <class T> T* ptr() const {
    TRAINER_CHECK(dtype == dtype_of<T>(), "tensor {} accessed as {}", str(),
                  dtype_name(dtype_of<T>()));
    return static_cast<T*>(data);
  }

  // The same memory with another shape of equal numel (contiguous only).
  Tensor view(std::initializer_list<int64_t> new_shape) const;
  // Rows [begin, end) of dim 0.
  Tensor slice(int64_t begin, int64_t end) const;

  std::string str() const;  // "(4, 256) f32 cpu"
};

// Shape/dtype/device checks used by every op launcher.
void check_shape(const Tensor& t, std::initializer_list<int64_t> shape, const char* name);
void check_same_device(const Tensor& a, const Tensor& b, const char* op);

}  // namespace trainer
