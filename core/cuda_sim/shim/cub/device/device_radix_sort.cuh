// cub::DeviceRadixSort for the CUDA simulation (cub/sim_algorithms.h: the contract).
#pragma once
#include "../sim_algorithms.h"

namespace cub {
struct DeviceRadixSort {
  template <class K, class V, class NumItemsT>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in, K* d_keys_out,
                               const V* d_values_in, V* d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = int(sizeof(K) * 8), cudaStream_t stream = nullptr) {
    bool query = false;
    sim_detail::temp_bytes(d_temp_storage, temp_storage_bytes, query);
    if (query) return cudaSuccess;
    const int64_t n = int64_t(num_items);
    ::ember::cuda::sim::detail::submit(stream, [=] {
      sim_detail::sort_range(d_keys_in, d_keys_out, d_values_in, d_values_out, 0, n, begin_bit, end_bit, false);
    });
    return cudaSuccess;
  }
};
}  // namespace cub
