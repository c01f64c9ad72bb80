#include "kernels/foreach.h"

namespace ember::ops::cuda {
void foreach_norm_kernel(const TensorList&, double, const Tensor&) { EMBER_NO_CUDA("foreach_norm"); }
void foreach_mul_kernel(const TensorList&, const Tensor&, double) { EMBER_NO_CUDA("foreach_mul_"); }
}  // namespace ember::ops::cuda
