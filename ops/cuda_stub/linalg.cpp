#include "kernels/linalg.h"

namespace ember::ops::cuda {
void gemm_kernel(const Tensor&, const Tensor&, const Tensor&, bool) { EMBER_NO_CUDA("matmul"); }
}  // namespace ember::ops::cuda
