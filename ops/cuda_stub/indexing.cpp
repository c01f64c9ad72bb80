#include "kernels/indexing.h"

namespace ember::ops::cuda {
void index_offset_kernel(const char*, const Tensor&, int64_t, int64_t, int64_t, const Tensor&) {
  EMBER_NO_CUDA("index");
}
void index_gather_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("index"); }
void index_put_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("index_put_"); }
void nonzero_scan_kernel(const Tensor&, const Tensor&) { EMBER_NO_CUDA("nonzero"); }
void nonzero_fill_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("nonzero"); }
}  // namespace ember::ops::cuda
