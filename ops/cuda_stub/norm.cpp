#include "kernels/norm.h"

namespace ember::ops::cuda {
void batch_norm_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                           int64_t, int64_t, bool, double, double) {
  EMBER_NO_CUDA("batch_norm");
}
void batch_norm_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                           int64_t, int64_t, bool) {
  EMBER_NO_CUDA("batch_norm_backward");
}
void group_norm_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, int64_t, int64_t, int64_t, int64_t,
                           double) {
  EMBER_NO_CUDA("group_norm");
}
void group_norm_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                           int64_t, int64_t, int64_t) {
  EMBER_NO_CUDA("group_norm_backward");
}
void rms_norm_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t,
                         double) {
  EMBER_NO_CUDA("rms_norm");
}
void rms_norm_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, int64_t) {
  EMBER_NO_CUDA("rms_norm_backward");
}
}  // namespace ember::ops::cuda
