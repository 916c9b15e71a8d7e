// Test helpers for the kernel tests: random data, tensor views over vectors,
// tolerance checks and central finite differences of double references.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/context.h"
#include "kernels/tensor.h"

namespace trainer::test {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

template <class T>
Tensor view(std::vector<T>& v, std::initializer_list<int64_t> shape) {
  Tensor t(v.data(), shape, dtype_of<T>());
  REQUIRE(static_cast<size_t>(t.numel()) == v.size());
  return t;
}

// Every |got - want| <= atol + rtol |want|; reports the worst element.
template <class G>
void require_close(const std::vector<G>& got, const std::vector<double>& want, double rtol,
                   double atol, const std::string& what) {
  REQUIRE(got.size() == want.size());
  double worst = 0.0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::abs(double(got[i]) - want[i]) - (atol + rtol * std::abs(want[i]));
    if (i == 0 || excess > worst) {
      worst = excess;
      worst_i = i;
    }
  }
  INFO(what << ": worst element " << worst_i << " got " << double(got[worst_i]) << " want "
            << want[worst_i]);
  CHECK(worst <= 0.0);
}

// Gradient of the scalar J at x by central differences (double, eps 1e-6).
inline std::vector<double> finite_diff(const std::function<double(const std::vector<double>&)>& J,
                                       std::vector<double> x, double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + eps;
    const double jp = J(x);
    x[i] = x0 - eps;
    const double jm = J(x);
    x[i] = x0;
    g[i] = (jp - jm) / (2 * eps);
  }
  return g;
}

// sum(w * y): the random scalar objective whose gradient backward computes for dout = w.
inline double dot(const std::vector<double>& w, const std::vector<double>& y) {
  REQUIRE(w.size() == y.size());
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) s += w[i] * y[i];
  return s;
}

}  // namespace trainer::test
