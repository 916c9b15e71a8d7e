// An independent reference for the narrow float formats, written from their
// definitions rather than by bit tricks: decoding evaluates sign * 2^e * m with ldexp
// in double; encoding searches the sorted table of representable values for the
// nearest one (ties to the even code), then applies the format's overflow rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace precision_test {

struct Format {
  const char* name;
  int exp_bits;
  int man_bits;
  int bias;
  bool ieee_specials;  // all-ones exponent = inf (mantissa 0) or NaN; else only all-ones code = NaN
  bool saturate;       // overflow and inf -> +-max (__NV_SATFINITE); else -> +-inf
  uint32_t nan_code;   // what a NaN input encodes to (CUDA's canonical NaN)
  int bits() const { return 1 + exp_bits + man_bits; }
  uint32_t num_codes() const { return 1u << bits(); }
  uint32_t sign_bit() const { return 1u << (bits() - 1); }
};

inline const Format kBF16{"bf16", 8, 7, 127, true, false, 0x7FFF};
inline const Format kF16{"fp16", 5, 10, 15, true, false, 0x7FFF};
inline const Format kE4M3{"e4m3", 4, 3, 7, false, true, 0x7F};
inline const Format kE5M2{"e5m2", 5, 2, 15, true, true, 0x7F};

enum class Kind { finite, inf, nan };

inline Kind kind_of(const Format& f, uint32_t code) {
  const uint32_t exp_all = (1u << f.exp_bits) - 1, man_all = (1u << f.man_bits) - 1;
  const uint32_t e = (code >> f.man_bits) & exp_all, m = code & man_all;
  if (f.ieee_specials && e == exp_all) return m == 0 ? Kind::inf : Kind::nan;
  if (!f.ieee_specials && e == exp_all && m == man_all) return Kind::nan;
  return Kind::finite;
}

// The exact value of a code (NaN codes give a NaN of the code's sign).
inline double decode_ref(const Format& f, uint32_t code) {
  const bool negative = (code & f.sign_bit()) != 0;
  const uint32_t e = (code >> f.man_bits) & ((1u << f.exp_bits) - 1);
  const uint32_t m = code & ((1u << f.man_bits) - 1);
  double v;
  switch (kind_of(f, code)) {
    case Kind::nan: v = std::nan(""); break;
    case Kind::inf: v = INFINITY; break;
    default:
      // Subnormal: 0.m * 2^(1 - bias); normal: 1.m * 2^(e - bias).
      v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.man_bits)
                 : std::ldexp(static_cast<double>(m + (1u << f.man_bits)), static_cast<int>(e) - f.bias - f.man_bits);
  }
  return std::copysign(v, negative ? -1.0 : 1.0);
}

// Non-negative finite values and their codes, ascending by value.
inline std::vector<std::pair<double, uint32_t>> positive_table(const Format& f) {
  std::vector<std::pair<double, uint32_t>> t;
  for (uint32_t c = 0; c < f.sign_bit(); ++c)
    if (kind_of(f, c) == Kind::finite) t.emplace_back(decode_ref(f, c), c);
  std::sort(t.begin(), t.end());
  return t;
}

// Nearest representable value to x, ties to the even code; overflow per the format.
class Encoder {
 public:
  explicit Encoder(const Format& f) : f_(f), table_(positive_table(f)) {
    const double max = table_.back().first, below = table_[table_.size() - 2].first;
    max_code_ = table_.back().second;
    // Rounding as if the exponent went on: the next value after max is max + ulp,
    // so values from max + ulp/2 on leave the format (the tie goes to that next
    // value exactly when max's code is odd).
    overflow_threshold_ = max + (max - below) / 2;
    for (uint32_t c = 0; c < f.sign_bit(); ++c)
      if (kind_of(f, c) == Kind::inf) inf_code_ = c;
  }

  uint32_t encode(float x) const {
    if (std::isnan(x)) return f_.nan_code;
    const uint32_t sign = std::signbit(x) ? f_.sign_bit() : 0;
    const double a = std::fabs(static_cast<double>(x));
    return sign | magnitude(a);
  }

  double max() const { return table_.back().first; }
  uint32_t max_code() const { return max_code_; }
  const std::vector<std::pair<double, uint32_t>>& table() const { return table_; }

 private:
  uint32_t magnitude(double a) const {
    if (a > max()) {
      if (f_.saturate) return max_code_;
      const bool up = a > overflow_threshold_ || (a == overflow_threshold_ && (max_code_ & 1));
      return up ? inf_code_ : max_code_;
    }
    // First entry with value > a; its predecessor is <= a.
    auto hi = std::upper_bound(table_.begin(), table_.end(), std::make_pair(a, UINT32_MAX));
    auto lo = hi - 1;
    if (lo->first == a || hi == table_.end()) return lo->second;
    const double dlo = a - lo->first, dhi = hi->first - a;
    if (dlo < dhi) return lo->second;
    if (dhi < dlo) return hi->second;
    return (lo->second & 1) == 0 ? lo->second : hi->second;
  }

  Format f_;
  std::vector<std::pair<double, uint32_t>> table_;
  uint32_t max_code_ = 0;
  uint32_t inf_code_ = 0;
  double overflow_threshold_ = 0;
};

}  // namespace precision_test
