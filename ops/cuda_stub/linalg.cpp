#include "kernels/linalg.h"

namespace ember::ops::cuda {
void gemm_kernel(const Tensor&, const Tensor&, const Tensor&, bool) { EMBER_NO_CUDA("matmul"); }
void gemm_bias_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("linear"); }
void gemm_bias_gelu_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("gelu_mlp");
}
void gemm_dgelu_bgrad_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("gelu_mlp");
}
void gemm_bgrad_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("linear"); }
}  // namespace ember::ops::cuda
