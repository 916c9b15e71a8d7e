// Fp8Scaling: delayed-scaling state, its update rule and its checkpoint bytes.
#include "kernels/fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/error.h"
#include "kernels/fp8_update.h"

namespace trainer {

namespace {

// Bytes: magic, u32 count, u32 history_len, count format bytes, then the history
// (history_len x count), scales and scale_invs as native (little-endian) fp32.
constexpr char kMagic[8] = {'T', 'R', 'F', 'P', '8', 'S', 'C', '1'};

template <class T>
void put(std::string& out, const T* data, size_t count) {
  out.append(reinterpret_cast<const char*>(data), sizeof(T) * count);
}

}  // namespace

float fp8_max(DType format) {
  if (format == DType::e4m3) return 448.0f;
  if (format == DType::e5m2) return 57344.0f;
  TRAINER_CHECK(false, "fp8_max: {} is not an fp8 dtype", dtype_name(format));
  return 0.0f;
}

Fp8Scaling::Fp8Scaling(int history_len, int margin) : history_len_(history_len), margin_(margin) {
  TRAINER_INPUT_CHECK(history_len >= 1, "precision.fp8_amax_history: {} is not >= 1", history_len);
  TRAINER_INPUT_CHECK(margin >= 0, "precision.fp8_margin: {} is not >= 0", margin);
}

int Fp8Scaling::add(DType format) {
  TRAINER_CHECK(format == DType::e4m3 || format == DType::e5m2,
                "Fp8Scaling::add: {} is not an fp8 dtype", dtype_name(format));
  const size_t n = formats_.size();
  formats_.push_back(format);
  scale_.push_back(1.0f);
  scale_inv_.push_back(1.0f);
  return static_cast<int>(n);
}

void Fp8Scaling::lay_out() const {
  const size_t n = formats_.size(), old = laid_out_;
  if (old == n) return;
  std::vector<float> grown(static_cast<size_t>(history_len_) * n, 0.0f);  // new tensors: no amax yet
  for (int r = 0; old > 0 && r < history_len_; ++r)
    std::memcpy(grown.data() + r * n, history_.data() + r * old, old * sizeof(float));
  history_ = std::move(grown);
  laid_out_ = n;
}

void Fp8Scaling::check_index(int idx) const {
  TRAINER_CHECK(idx >= 0 && idx < size(), "Fp8Scaling: tensor index {} not in [0, {})", idx,
                size());
}

DType Fp8Scaling::format(int idx) const {
  check_index(idx);
  return formats_[idx];
}

void Fp8Scaling::record_amax(int idx, float amax) {
  check_index(idx);
  float& slot = row(0)[idx];
  slot = std::fmax(slot, amax);
}

float Fp8Scaling::history(int r, int idx) const {
  check_index(idx);
  TRAINER_CHECK(r >= 0 && r < history_len_, "Fp8Scaling: history row {} not in [0, {})", r,
                history_len_);
  return row(r)[idx];
}

float Fp8Scaling::scale(int idx) const {
  check_index(idx);
  return scale_[idx];
}

float Fp8Scaling::scale_inv(int idx) const {
  check_index(idx);
  return scale_inv_[idx];
}

void Fp8Scaling::set_scale(int idx, float scale) {
  check_index(idx);
  TRAINER_CHECK(std::isfinite(scale) && scale > 0.0f, "Fp8Scaling: scale {} is not finite > 0",
                scale);
  scale_[idx] = scale;
  scale_inv_[idx] = 1.0f / scale;
}

Tensor Fp8Scaling::amax_view(int idx) {
  check_index(idx);
  return Tensor(row(0) + idx, {1});
}

Tensor Fp8Scaling::scale_view(int idx) {
  check_index(idx);
  return Tensor(scale_.data() + idx, {1});
}

Tensor Fp8Scaling::scale_inv_view(int idx) {
  check_index(idx);
  return Tensor(scale_inv_.data() + idx, {1});
}

float Fp8Scaling::scaled_max(int idx) const {
  check_index(idx);
  // Power-of-two factor first, one rounding in the division: TE's scaled_max / amax.
  return std::ldexp(fp8_max(formats_[idx]), -margin_);
}

void Fp8Scaling::update() {
  const int64_t n = size();
  std::vector<float> top(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) top[i] = scaled_max(i);
  Context host;
  lay_out();
  cpu::fp8_scaling_update(host, Tensor(history_.data(), {history_len_, n}), Tensor(scale_.data(), {n}),
                          Tensor(scale_inv_.data(), {n}), Tensor(top.data(), {n}));
}

std::string Fp8Scaling::serialize() const {
  std::string out;
  const uint32_t count = static_cast<uint32_t>(size()), len = static_cast<uint32_t>(history_len_);
  out.append(kMagic, sizeof(kMagic));
  put(out, &count, 1);
  put(out, &len, 1);
  lay_out();
  for (DType f : formats_) out.push_back(static_cast<char>(f));
  put(out, history_.data(), history_.size());
  put(out, scale_.data(), scale_.size());
  put(out, scale_inv_.data(), scale_inv_.size());
  return out;
}

std::vector<float> Fp8Scaling::tensor_state(int idx) const {
  check_index(idx);
  std::vector<float> s{scale_[idx]};
  for (int r = 0; r < history_len_; ++r) s.push_back(history(r, idx));
  return s;
}

void Fp8Scaling::set_tensor_state(int idx, const std::vector<float>& state,
                                  const std::string& source) {
  check_index(idx);
  TRAINER_INPUT_CHECK(state.size() >= 2 && std::isfinite(state[0]) && state[0] > 0.0f,
                      "{}: fp8 state of {} values with scale {}, expected a finite scale > 0 and "
                      "an amax history",
                      source, state.size(), state.empty() ? 0.0f : state[0]);
  const int old_len = static_cast<int>(state.size()) - 1;
  for (int r = 0; r < history_len_; ++r) row(r)[idx] = 0.0f;
  row(0)[idx] = state[1];
  const int keep = std::min(old_len, history_len_) - 1;
  for (int k = 0; k < keep; ++k) row(history_len_ - 1 - k)[idx] = state[1 + old_len - 1 - k];
  scale_[idx] = state[0];
  scale_inv_[idx] = 1.0f / state[0];
}

void Fp8Scaling::restore(std::string_view bytes, const std::string& source) {
  const size_t n = formats_.size();
  uint32_t count = 0, len = 0;
  const size_t header = sizeof(kMagic) + 2 * sizeof(uint32_t);
  TRAINER_INPUT_CHECK(bytes.size() >= header && std::memcmp(bytes.data(), kMagic, 8) == 0,
                      "{}: not an fp8 scaling state (bad header)", source);
  std::memcpy(&count, bytes.data() + 8, 4);
  std::memcpy(&len, bytes.data() + 12, 4);
  TRAINER_INPUT_CHECK(count == n, "{}: fp8 scaling state has {} tensors, the model has {}", source,
                      count, n);
  TRAINER_INPUT_CHECK(len >= 1 && len <= (1u << 24), "{}: fp8 amax history length {} is invalid",
                      source, len);
  const size_t expected = header + n + (static_cast<size_t>(len) * n + 2 * n) * sizeof(float);
  TRAINER_INPUT_CHECK(bytes.size() == expected, "{}: fp8 scaling state is {} bytes, expected {}",
                      source, bytes.size(), expected);
  const char* p = bytes.data() + header;
  for (size_t i = 0; i < n; ++i)
    TRAINER_INPUT_CHECK(static_cast<DType>(p[i]) == formats_[i],
                        "{}: fp8 tensor {} was {} in the checkpoint, is {} now", source, i,
                        dtype_name(static_cast<DType>(p[i])), dtype_name(formats_[i]));
  p += n;
  std::vector<float> old(static_cast<size_t>(len) * n), scale(n), scale_inv(n);
  std::memcpy(old.data(), p, old.size() * sizeof(float));
  p += old.size() * sizeof(float);
  std::memcpy(scale.data(), p, n * sizeof(float));
  std::memcpy(scale_inv.data(), p + n * sizeof(float), n * sizeof(float));
  for (size_t i = 0; i < n; ++i)
    TRAINER_INPUT_CHECK(std::isfinite(scale[i]) && scale[i] > 0.0f,
                        "{}: fp8 tensor {} has scale {}, expected finite > 0", source, i, scale[i]);
  // Row 0 is the current step; rows 1.. run oldest to newest, so a shorter history
  // keeps the last rows and a longer one gets zeros (no amax) in front.
  lay_out();
  std::fill(history_.begin(), history_.end(), 0.0f);
  std::memcpy(row(0), old.data(), n * sizeof(float));
  const int old_len = static_cast<int>(len);
  const int keep = std::min(old_len, history_len_) - 1;
  for (int k = 0; k < keep; ++k)
    std::memcpy(row(history_len_ - 1 - k), old.data() + (old_len - 1 - k) * n, n * sizeof(float));
  scale_ = std::move(scale);
  scale_inv_ = std::move(scale_inv);
}

}  // namespace trainer
