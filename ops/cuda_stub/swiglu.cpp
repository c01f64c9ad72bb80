#include "kernels/swiglu.h"

namespace ember::ops::cuda {
void swiglu_fwd_kernel(const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("swiglu"); }
void swiglu_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                       const Tensor&) {
  EMBER_NO_CUDA("swiglu_backward");
}
}  // namespace ember::ops::cuda
