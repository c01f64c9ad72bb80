// cub::DeviceRunLengthEncode for the CUDA simulation (cub/sim_algorithms.h: the contract):
// Encode writes each run of equal consecutive keys as its key and length, and the run count.
#pragma once
#include "../sim_algorithms.h"

namespace cub {
struct DeviceRunLengthEncode {
  template <class InputIt, class UniqueOutputIt, class LengthsOutputIt, class NumRunsOutputIt, class NumItemsT>
  static cudaError_t Encode(void* d_temp_storage, size_t& temp_storage_bytes, InputIt d_in, UniqueOutputIt d_unique_out,
                            LengthsOutputIt d_counts_out, NumRunsOutputIt d_num_runs_out, NumItemsT num_items,
                            cudaStream_t stream = nullptr) {
    bool query = false;
    sim_detail::temp_bytes(d_temp_storage, temp_storage_bytes, query);
    if (query) return cudaSuccess;
    const int64_t n = int64_t(num_items);
    ::ember::cuda::sim::detail::submit(stream, [=] {
      using Length = std::decay_t<decltype(d_counts_out[0])>;
      int64_t runs = 0;
      for (int64_t i = 0; i < n; ++runs) {
        int64_t j = i + 1;
        while (j < n && d_in[j] == d_in[i]) ++j;
        d_unique_out[runs] = d_in[i];
        d_counts_out[runs] = Length(j - i);
        i = j;
      }
      *d_num_runs_out = std::decay_t<decltype(*d_num_runs_out)>(runs);
    });
    return cudaSuccess;
  }
};
}  // namespace cub
