#include "kernels/nn.h"

namespace ember::ops::cuda {
void softmax_fwd_kernel(const Tensor&, const Tensor&, int64_t, bool log) {
  if (log) EMBER_NO_CUDA("log_softmax");
  EMBER_NO_CUDA("softmax");
}
void softmax_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, int64_t, bool log) {
  if (log) EMBER_NO_CUDA("log_softmax_backward");
  EMBER_NO_CUDA("softmax_backward");
}
void cross_entropy_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const CrossEntropyParams&) {
  EMBER_NO_CUDA("cross_entropy");
}
void cross_entropy_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const Tensor&, const CrossEntropyParams&) {
  EMBER_NO_CUDA("cross_entropy_backward");
}
void layer_norm_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                           double) {
  EMBER_NO_CUDA("layer_norm");
}
void layer_norm_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t) {
  EMBER_NO_CUDA("layer_norm_backward");
}
void check_class_targets_kernel(const Tensor&, int64_t, int64_t, const char*) { EMBER_NO_CUDA("check_class_targets"); }
void check_probabilities_kernel(const Tensor&, const char*) { EMBER_NO_CUDA("check_probabilities"); }
}  // namespace ember::ops::cuda
