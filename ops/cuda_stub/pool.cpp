#include "kernels/pool.h"

namespace ember::ops::cuda {
void avg_pool2d_fwd_kernel(const Tensor&, const Tensor&, const AvgPool2dParams&) { EMBER_NO_CUDA("avg_pool2d"); }
void avg_pool2d_bwd_kernel(const Tensor&, const Tensor&, const AvgPool2dParams&) {
  EMBER_NO_CUDA("avg_pool2d_backward");
}
void adaptive_avg_pool2d_fwd_kernel(const Tensor&, const Tensor&) { EMBER_NO_CUDA("adaptive_avg_pool2d"); }
void adaptive_avg_pool2d_bwd_kernel(const Tensor&, const Tensor&) { EMBER_NO_CUDA("adaptive_avg_pool2d_backward"); }
void adaptive_max_pool2d_fwd_kernel(const Tensor&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("adaptive_max_pool2d");
}
void upsample2d_fwd_kernel(const Tensor&, const Tensor&, const Upsample2dParams&) { EMBER_NO_CUDA("interpolate"); }
void upsample2d_bwd_kernel(const Tensor&, const Tensor&, const Upsample2dParams&) {
  EMBER_NO_CUDA("interpolate_backward");
}
void pad_fwd_kernel(const Tensor&, const Tensor&, const PadGeom&, PadMode, double) { EMBER_NO_CUDA("pad"); }
void pad_bwd_kernel(const Tensor&, const Tensor&, const PadGeom&, PadMode) { EMBER_NO_CUDA("pad_backward"); }
}  // namespace ember::ops::cuda
