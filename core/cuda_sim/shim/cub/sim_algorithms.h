// The CUB device algorithms ember calls, for the CUDA simulation (issue 39): host code with
// CUB's contract, found before the toolkit's CUB on a simulation build's include path. They
// check ember's use of CUB (the two-call temp-storage protocol, stream order, the key bits,
// segment offsets read when the work runs), not CUB itself.
//
// - A call with d_temp_storage == nullptr only reports the bytes of temporary storage (at
//   least 1); the second call does the work.
// - The work is stream-ordered like a kernel: it runs when issued, or is recorded into the
//   graph the stream is capturing, reading its inputs (segment offsets included) when it runs.
// - Radix sorts are stable and order by the key bits [begin_bit, end_bit) only, as CUB's.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/cuda_sim/simt.h"

namespace cub::sim_detail {

inline cudaError_t temp_bytes(void* temp, size_t& bytes, bool& query) {
  query = temp == nullptr;
  if (query) bytes = 1;
  return cudaSuccess;
}

template <class K>
uint64_t key_bits(K k, int begin_bit, int end_bit) {
  static_assert(std::is_unsigned_v<K>, "ember sorts unsigned keys (signed and float keys are mapped first)");
  const uint64_t v = uint64_t(k) >> begin_bit;
  const int width = end_bit - begin_bit;
  return width >= 64 ? v : v & ((uint64_t(1) << width) - 1);
}

// Stable sort of pairs [lo, hi) by key bits.
template <class K, class V>
void sort_range(const K* kin, K* kout, const V* vin, V* vout, int64_t lo, int64_t hi, int begin_bit, int end_bit,
                bool descending) {
  std::vector<int64_t> order(static_cast<size_t>(std::max<int64_t>(hi - lo, 0)));
  std::iota(order.begin(), order.end(), lo);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const uint64_t ka = key_bits(kin[a], begin_bit, end_bit), kb = key_bits(kin[b], begin_bit, end_bit);
    return descending ? kb < ka : ka < kb;
  });
  std::vector<K> keys(order.size());
  std::vector<V> values(order.size());
  for (size_t i = 0; i < order.size(); ++i) keys[i] = kin[order[i]], values[i] = vin[order[i]];
  std::copy(keys.begin(), keys.end(), kout + lo);  // through copies: in and out may alias
  std::copy(values.begin(), values.end(), vout + lo);
}

}  // namespace cub::sim_detail
