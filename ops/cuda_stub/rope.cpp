#include "kernels/rope.h"

namespace ember::ops::cuda {
void rope_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("rotary_embedding");
}
void rope_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("rotary_embedding_backward");
}
}  // namespace ember::ops::cuda
