#include "kernels/index.h"

namespace ember::ops::cuda {
void cat_kernel(const TensorList&, int64_t, const Tensor&) { EMBER_NO_CUDA("cat"); }
void index_select_kernel(const char*, const Tensor&, int64_t, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("index_select");
}
void index_add_kernel(const char*, const Tensor&, int64_t, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("index_add");
}
void gather_kernel(const Tensor&, int64_t, const Tensor&, const Tensor&) { EMBER_NO_CUDA("gather"); }
void scatter_add_kernel(const Tensor&, int64_t, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("scatter_add");
}
void tri_kernel(const Tensor&, const Tensor&, int64_t, bool) { EMBER_NO_CUDA("tril/triu"); }
void dropout_mask_kernel(const Tensor&, Generator::State, double) { EMBER_NO_CUDA("dropout"); }
void masked_scale_kernel(const Tensor&, const Tensor&, double, const Tensor&) {
  EMBER_NO_CUDA("dropout");
}
}  // namespace ember::ops::cuda
