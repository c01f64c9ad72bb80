#include "kernels/amp.h"

namespace ember::ops::cuda {
void amp_unscale_and_check_kernel(const TensorList&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("amp_unscale_and_check");
}
void amp_update_scale_kernel(const Tensor&, const Tensor&, const Tensor&, double, double, int64_t) {
  EMBER_NO_CUDA("amp_update_scale");
}
}  // namespace ember::ops::cuda
