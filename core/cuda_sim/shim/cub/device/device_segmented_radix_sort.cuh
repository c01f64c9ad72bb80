// cub::DeviceSegmentedRadixSort for the CUDA simulation (cub/sim_algorithms.h: the contract).
// Segment i is [d_begin_offsets[i], d_end_offsets[i]); the offsets are read when the work runs.
#pragma once
#include "../sim_algorithms.h"

namespace cub {
struct DeviceSegmentedRadixSort {
  template <class K, class V, class NumItemsT, class NumSegmentsT, class BeginOffsetIt, class EndOffsetIt>
  static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in, K* d_keys_out,
                               const V* d_values_in, V* d_values_out, NumItemsT num_items, NumSegmentsT num_segments,
                               BeginOffsetIt d_begin_offsets, EndOffsetIt d_end_offsets, int begin_bit = 0,
                               int end_bit = int(sizeof(K) * 8), cudaStream_t stream = nullptr) {
    return sort(d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in, d_values_out, num_items,
                num_segments, d_begin_offsets, d_end_offsets, begin_bit, end_bit, stream, false);
  }
  template <class K, class V, class NumItemsT, class NumSegmentsT, class BeginOffsetIt, class EndOffsetIt>
  static cudaError_t SortPairsDescending(void* d_temp_storage, size_t& temp_storage_bytes, const K* d_keys_in,
                                         K* d_keys_out, const V* d_values_in, V* d_values_out, NumItemsT num_items,
                                         NumSegmentsT num_segments, BeginOffsetIt d_begin_offsets,
                                         EndOffsetIt d_end_offsets, int begin_bit = 0,
                                         int end_bit = int(sizeof(K) * 8), cudaStream_t stream = nullptr) {
    return sort(d_temp_storage, temp_storage_bytes, d_keys_in, d_keys_out, d_values_in, d_values_out, num_items,
                num_segments, d_begin_offsets, d_end_offsets, begin_bit, end_bit, stream, true);
  }

 private:
  template <class K, class V, class NumItemsT, class NumSegmentsT, class BeginOffsetIt, class EndOffsetIt>
  static cudaError_t sort(void* d_temp_storage, size_t& temp_storage_bytes, const K* kin, K* kout, const V* vin,
                          V* vout, NumItemsT, NumSegmentsT num_segments, BeginOffsetIt begins, EndOffsetIt ends,
                          int begin_bit, int end_bit, cudaStream_t stream, bool descending) {
    bool query = false;
    sim_detail::temp_bytes(d_temp_storage, temp_storage_bytes, query);
    if (query) return cudaSuccess;
    const int64_t segments = int64_t(num_segments);
    ::ember::cuda::sim::detail::submit(stream, [=] {
      for (int64_t s = 0; s < segments; ++s)
        sim_detail::sort_range(kin, kout, vin, vout, int64_t(begins[s]), int64_t(ends[s]), begin_bit, end_bit,
                               descending);
    });
    return cudaSuccess;
  }
};
}  // namespace cub
