// cub::DeviceRadixSort::SortPairs on the host, for the emulator: a stable sort
// of (key, value) pairs on key bits [begin_bit, end_bit), signed keys in their
// two's-complement order as cub's bit twiddling gives it. The size query
// answers what cub's onesweep needs at most (both double buffers' worth plus
// the histograms), and the sort overwrites the whole temporary storage first,
// so a caller who placed live data inside it sees that data destroyed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../cuda_runtime_api.h"

namespace cub {

struct DeviceRadixSort {
  template <class K, class V>
  static size_t temp_bytes(int n) {
    return static_cast<size_t>(n) * (sizeof(K) + sizeof(V)) + 4096 + 256 * sizeof(K) * 4;
  }

  template <class K, class V, class N>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes,
                               const K* keys_in, K* keys_out, const V* values_in, V* values_out,
                               N num_items, int begin_bit = 0, int end_bit = sizeof(K) * 8,
                               cudaStream_t stream = nullptr) {
    static_assert(std::is_integral_v<K>, "the emulator sorts integer keys");
    const int n = static_cast<int>(num_items);
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = temp_bytes<K, V>(n);
      return cudaSuccess;
    }
    if (n < 0 || begin_bit < 0 || end_bit > static_cast<int>(sizeof(K) * 8) || begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    if (!cuda_emu::is_stream(stream)) return cudaErrorInvalidResourceHandle;
    if (temp_storage_bytes < temp_bytes<K, V>(n)) return cudaErrorInvalidValue;
    cuda_emu::require_device_range(d_temp_storage, temp_storage_bytes, "SortPairs temp storage");
    cuda_emu::require_device_range(keys_in, n * sizeof(K), "SortPairs keys_in");
    cuda_emu::require_device_range(keys_out, n * sizeof(K), "SortPairs keys_out");
    cuda_emu::require_device_range(values_in, n * sizeof(V), "SortPairs values_in");
    cuda_emu::require_device_range(values_out, n * sizeof(V), "SortPairs values_out");
    // In stream order, as cub's kernels run.
    cuda_emu::enqueue(stream, [=] {
      sort(d_temp_storage, temp_storage_bytes, keys_in, keys_out, values_in, values_out, n,
           begin_bit, end_bit);
    });
    return cudaSuccess;
  }

 private:
  template <class K, class V>
  static void sort(void* d_temp_storage, size_t temp_storage_bytes, const K* keys_in, K* keys_out,
                   const V* values_in, V* values_out, int n, int begin_bit, int end_bit) {
    using U = std::make_unsigned_t<K>;
    std::vector<U> bits(static_cast<size_t>(n));
    std::vector<K> keys(keys_in, keys_in + n);
    std::vector<V> values(values_in, values_in + n);
    const U sign = std::is_signed_v<K> ? U(U(1) << (sizeof(K) * 8 - 1)) : U(0);
    const int width = end_bit - begin_bit;
    const U mask = width >= static_cast<int>(sizeof(U) * 8) ? U(~U(0)) : U((U(1) << width) - 1);
    for (int i = 0; i < n; ++i) bits[i] = U((U(keys[i]) ^ sign) >> begin_bit) & mask;
    std::vector<int> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bits[a] < bits[b]; });
    std::memset(d_temp_storage, 0xFF, temp_storage_bytes);
    for (int i = 0; i < n; ++i) {
      keys_out[i] = keys[order[i]];
      values_out[i] = values[order[i]];
    }
  }
};

}  // namespace cub
