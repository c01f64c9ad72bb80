// A CUB device algorithm called the way CUB asks: once for the bytes of temporary storage it
// needs, then again with that scratch. The scratch comes from ember's caching allocator, which
// is stream-ordered: it is free again for the work queued after the call on the same stream,
// so it lives as long as the call and no host synchronization is needed. Both calls' status is
// checked. `call(temp, bytes)` is the algorithm with all its other arguments bound.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "ember/cuda/check.h"
#include "ember/tensor.h"

namespace ember::ops::cuda {

template <class Call>
void cub_with_scratch(Device device, Call&& call) {
  size_t bytes = 0;
  EMBER_CUDA_CHECK(call(nullptr, bytes));
  Tensor temp = ember::detail::make_tensor({int64_t(std::max<size_t>(bytes, 1))}, DType::u8, device);
  EMBER_CUDA_CHECK(call(temp.data_ptr(), bytes));
}

}  // namespace ember::ops::cuda
