// cub::BlockScan<T, THREADS>::ExclusiveSum over ITEMS per thread (blocked
// arrangement: thread t holds items t*ITEMS .. t*ITEMS+ITEMS-1), for the
// emulator. It meets its threads at __syncthreads as cub's does, so reusing
// TempStorage without a barrier in between shows as a wrong sum.
#pragma once

#include "../../cuda_runtime.h"

namespace cub {

template <class T, int THREADS>
class BlockScan {
 public:
  struct TempStorage {
    T totals[THREADS];
  };
  explicit BlockScan(TempStorage& storage) : s_(storage) {}

  template <int ITEMS>
  void ExclusiveSum(const T (&in)[ITEMS], T (&out)[ITEMS], T& aggregate) {
    const int tid = static_cast<int>(threadIdx.x);
    T mine = T(0);
    for (int j = 0; j < ITEMS; ++j) mine += in[j];
    s_.totals[tid] = mine;
    __syncthreads();
    T prefix = T(0), all = T(0);
    for (int t = 0; t < THREADS; ++t) {
      if (t < tid) prefix += s_.totals[t];
      all += s_.totals[t];
    }
    for (int j = 0; j < ITEMS; ++j) {
      out[j] = prefix;
      prefix += in[j];
    }
    aggregate = all;
  }
  void ExclusiveSum(T in, T& out, T& aggregate) {
    T a[1] = {in}, b[1];
    ExclusiveSum(a, b, aggregate);
    out = b[0];
  }

 private:
  TempStorage& s_;
};

}  // namespace cub
