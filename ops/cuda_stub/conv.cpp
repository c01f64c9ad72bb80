#include "kernels/conv.h"

namespace ember::ops::cuda {
void conv2d_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  EMBER_NO_CUDA("conv2d");
}
void conv2d_bwd_input_kernel(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  EMBER_NO_CUDA("conv2d_backward_input");
}
void conv2d_bwd_weight_kernel(const Tensor&, const Tensor&, const Tensor&, const Conv2dParams&) {
  EMBER_NO_CUDA("conv2d_backward_weight");
}
void max_pool2d_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Pool2dParams&) {
  EMBER_NO_CUDA("max_pool2d");
}
void max_pool2d_bwd_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("max_pool2d_backward"); }
void max_pool2d_gather_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("max_pool2d_gather"); }
}  // namespace ember::ops::cuda
