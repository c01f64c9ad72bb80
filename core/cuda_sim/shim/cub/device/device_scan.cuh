// cub::DeviceScan sums for the CUDA simulation (cub/sim_algorithms.h: the contract). In place
// (d_out == d_in) is allowed, as in CUB.
#pragma once
#include "../sim_algorithms.h"

namespace cub {
struct DeviceScan {
  template <class InputIt, class OutputIt, class NumItemsT>
  static cudaError_t ExclusiveSum(void* d_temp_storage, size_t& temp_storage_bytes, InputIt d_in, OutputIt d_out,
                                  NumItemsT num_items, cudaStream_t stream = nullptr) {
    return scan(d_temp_storage, temp_storage_bytes, d_in, d_out, num_items, stream, false);
  }
  template <class InputIt, class OutputIt, class NumItemsT>
  static cudaError_t InclusiveSum(void* d_temp_storage, size_t& temp_storage_bytes, InputIt d_in, OutputIt d_out,
                                  NumItemsT num_items, cudaStream_t stream = nullptr) {
    return scan(d_temp_storage, temp_storage_bytes, d_in, d_out, num_items, stream, true);
  }

 private:
  template <class InputIt, class OutputIt, class NumItemsT>
  static cudaError_t scan(void* d_temp_storage, size_t& temp_storage_bytes, InputIt in, OutputIt out,
                          NumItemsT num_items, cudaStream_t stream, bool inclusive) {
    bool query = false;
    sim_detail::temp_bytes(d_temp_storage, temp_storage_bytes, query);
    if (query) return cudaSuccess;
    const int64_t n = int64_t(num_items);
    ::ember::cuda::sim::detail::submit(stream, [=] {
      using T = std::decay_t<decltype(in[0])>;
      T running{};
      for (int64_t i = 0; i < n; ++i) {
        const T v = in[i];  // read before the write: in place works
        if (inclusive) running = running + v;
        out[i] = inclusive ? running : std::exchange(running, running + v);
      }
    });
    return cudaSuccess;
  }
};
}  // namespace cub
