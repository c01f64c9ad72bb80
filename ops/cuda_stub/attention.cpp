#include "kernels/attention.h"

namespace ember::ops::cuda {
void attention_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const AttentionKernelExtras&, bool, double) {
  EMBER_NO_CUDA("scaled_dot_product_attention");
}
void attention_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const AttentionKernelExtras&, bool, double) {
  EMBER_NO_CUDA("scaled_dot_product_attention_backward");
}
}  // namespace ember::ops::cuda
