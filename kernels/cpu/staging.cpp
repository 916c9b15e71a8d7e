// Staging of bf16/fp16 op arguments through fp32 buffers (see staging.h): the
// per-thread buffer pool, alias detection and the parallel conversions.
#include "kernels/cpu/staging.h"

#include <deque>
#include <limits>

#include "kernels/cpu/half_convert.h"
#include "kernels/numeric.h"

namespace trainer::cpu {

namespace {

// Below this many elements a conversion stays on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;
constexpr size_t kNoPool = std::numeric_limits<size_t>::max();

// Buffers are handed out in stack order: a Staging takes the next free ones and
// gives them back when it ends, so a staging inside another (an op calling an op)
// never shares a buffer. A deque keeps earlier buffers in place as it grows.
struct Pool {
  std::deque<std::vector<float>> buffers;
  size_t used = 0;
};

Pool& thread_pool() {
  static thread_local Pool pool;
  return pool;
}

float* acquire(size_t n) {
  Pool& pool = thread_pool();
  if (pool.used == pool.buffers.size()) pool.buffers.emplace_back();
  std::vector<float>& b = pool.buffers[pool.used++];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// f(begin, end) over [0, n), split over the OpenMP team when n is large.
template <class F>
void parallel_ranges(int64_t n, F&& f) {
  if (n < kParallelMin) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    int64_t b, e;
    split_range(n, omp_get_thread_num(), omp_get_num_threads(), &b, &e);
    if (e > b) f(b, e);
  }
}

// A view padded to 4 dims on the left, walked as rows of its last dim.
struct Rows {
  int64_t shape[Tensor::kMaxDims];
  int64_t stride[Tensor::kMaxDims];
  explicit Rows(const Tensor& t) {
    const int pad = Tensor::kMaxDims - t.ndim;
    for (int d = 0; d < Tensor::kMaxDims; ++d) {
      shape[d] = d < pad ? 1 : t.shape[d - pad];
      stride[d] = d < pad ? 0 : t.stride[d - pad];
    }
  }
  int64_t num_rows() const { return shape[0] * shape[1] * shape[2]; }
  int64_t cols() const { return shape[3]; }
  int64_t row_offset(int64_t r) const {
    const int64_t i2 = r % shape[2], i1 = (r / shape[2]) % shape[1], i0 = r / (shape[2] * shape[1]);
    return i0 * stride[0] + i1 * stride[1] + i2 * stride[2];
  }
};

// Tensor t (bf16 or fp16, any strides) -> contiguous fp32 dst, exactly.
void load(float* dst, const Tensor& t) {
  const auto* src = static_cast<const uint16_t*>(t.data);
  const auto convert = t.dtype == DType::bf16 ? bf16_to_f32_n : f16_to_f32_n;
  if (t.contiguous()) {
    parallel_ranges(t.numel(), [&](int64_t b, int64_t e) { convert(src + b, dst + b, e - b); });
    return;
  }
  const Rows rows(t);
  const int64_t cols = rows.cols(), cs = rows.stride[3];
  parallel_ranges(rows.num_rows() * cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b / cols; r * cols < e; ++r) {
      const uint16_t* s = src + rows.row_offset(r);
      const int64_t c0 = std::max(b - r * cols, int64_t{0}), c1 = std::min(e - r * cols, cols);
      if (cs == 1) {
        convert(s + c0, dst + r * cols + c0, c1 - c0);
      } else {
        for (int64_t c = c0; c < c1; ++c)
          dst[r * cols + c] =
              t.dtype == DType::bf16 ? bf16_to_f32(s[c * cs]) : f16_to_f32(s[c * cs]);
      }
    }
  });
}

// Contiguous fp32 src -> tensor t (bf16 or fp16, any strides), one rounding each.
void store(const Tensor& t, const float* src) {
  auto* dst = static_cast<uint16_t*>(t.data);
  const auto convert = t.dtype == DType::bf16 ? f32_to_bf16_n : f32_to_f16_n;
  if (t.contiguous()) {
    parallel_ranges(t.numel(), [&](int64_t b, int64_t e) { convert(src + b, dst + b, e - b); });
    return;
  }
  const Rows rows(t);
  const int64_t cols = rows.cols(), cs = rows.stride[3];
  parallel_ranges(rows.num_rows() * cols, [&](int64_t b, int64_t e) {
    for (int64_t r = b / cols; r * cols < e; ++r) {
      uint16_t* d = dst + rows.row_offset(r);
      const int64_t c0 = std::max(b - r * cols, int64_t{0}), c1 = std::min(e - r * cols, cols);
      if (cs == 1) {
        convert(src + r * cols + c0, d + c0, c1 - c0);
      } else {
        for (int64_t c = c0; c < c1; ++c)
          d[c * cs] = t.dtype == DType::bf16 ? f32_to_bf16(src[r * cols + c])
                                             : f32_to_f16(src[r * cols + c]);
      }
    }
  });
}

std::array<int64_t, Tensor::kMaxDims> contiguous_strides(const Tensor& t) {
  std::array<int64_t, Tensor::kMaxDims> s{};
  int64_t step = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    s[d] = step;
    step *= t.shape[d];
  }
  return s;
}

// Both name the same elements in the same order (an in-place call).
bool same_view(const Tensor& a, const Tensor& b) {
  if (a.data != b.data || a.dtype != b.dtype) return false;
  if (a.contiguous() && b.contiguous()) return a.numel() == b.numel();
  if (a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || a.stride[d] != b.stride[d]) return false;
  return true;
}

bool bytes_overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.data);
  const char* pb = static_cast<const char*>(b.data);
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

void check_float_arg(const Tensor& t, const char* op, const char* name) {
  TRAINER_CHECK(t.device == Device::cpu, "{}: {} is {}, expected a CPU tensor", op, name, t.str());
  TRAINER_CHECK(t.contiguous(), "{}: {} {} must be contiguous", op, name, t.str());
  TRAINER_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16 || t.dtype == DType::f16,
                "{}: {} is {}; the CPU backend takes f32, bf16 or f16 float tensors", op, name,
                t.str());
}

Staging::Staging(const char* op) : op_(op), pool_base_(kNoPool) {}

Staging::~Staging() {
  if (pool_base_ != kNoPool) thread_pool().used = pool_base_;
}

StagedView Staging::stage(const Tensor& t, const char* name, bool read, bool write, bool strided) {
  TRAINER_CHECK(t.device == Device::cpu, "{}: {} is {}, expected a CPU tensor", op_, name, t.str());
  TRAINER_CHECK(strided || t.contiguous(), "{}: {} {} must be contiguous", op_, name, t.str());
  if (t.dtype == DType::f32) return StagedView{static_cast<float*>(t.data), t.stride};
  TRAINER_CHECK(t.dtype == DType::bf16 || t.dtype == DType::f16,
                "{}: {} is {}; the CPU backend takes f32, bf16 or f16 float tensors", op_, name,
                t.str());
  const StagedView fresh{nullptr, contiguous_strides(t)};
  if (t.numel() == 0) return StagedView{static_cast<float*>(t.data), fresh.stride};
  for (int i = 0; i < num_entries_; ++i) {
    Entry& e = entries_[i];
    if (same_view(e.tensor, t)) {
      if (read && !e.loaded) {
        load(e.buffer, t);
        e.loaded = true;
      }
      e.written = e.written || write;
      return StagedView{e.buffer, fresh.stride};
    }
    // Views into one buffer at different offsets (q, k, v of a fused QKV) are
    // fine when strided; contiguous ones must be disjoint if either is written.
    TRAINER_CHECK(e.tensor.data != t.data, "{}: {} {} and {} {} view the same memory differently",
                  op_, name, t.str(), e.name, e.tensor.str());
    TRAINER_CHECK(!(write || e.written) || !e.tensor.contiguous() || !t.contiguous() ||
                      !bytes_overlap(e.tensor, t),
                  "{}: {} {} overlaps {} {}, and one of them is written", op_, name, t.str(),
                  e.name, e.tensor.str());
  }
  TRAINER_CHECK(num_entries_ < kMaxArgs, "{}: more than {} staged arguments", op_, kMaxArgs);
  if (pool_base_ == kNoPool) pool_base_ = thread_pool().used;
  Entry& e = entries_[num_entries_++];
  e = Entry{t, name, acquire(static_cast<size_t>(t.numel())), read, write};
  if (read) load(e.buffer, t);
  return StagedView{e.buffer, fresh.stride};
}

void Staging::commit() {
  for (int i = 0; i < num_entries_; ++i) {
    const Entry& e = entries_[i];
    if (!e.written) continue;
    store(e.tensor, e.buffer);
  }
}

}  // namespace trainer::cpu
