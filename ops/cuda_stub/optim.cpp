#include "kernels/optim.h"

namespace ember::ops::cuda {
void adam_step_kernel(const TensorList&, const TensorList&, const TensorList&, const TensorList&,
                      const TensorList&, const std::vector<AdamTensorScalars>&, const AdamStepParams&) {
  EMBER_NO_CUDA("adam_step");
}
void adam_step_scheduled_kernel(const TensorList&, const TensorList&, const TensorList&, const TensorList&,
                                const TensorList&, const Tensor&, const Tensor&, const std::vector<size_t>&, const Tensor&,
                                const AdamStepParams&) {
  EMBER_NO_CUDA("adam_step");
}
void sgd_step_kernel(const TensorList&, const TensorList&, const TensorList&,
                     const std::vector<uint8_t>&, const SgdStepParams&) {
  EMBER_NO_CUDA("sgd_step");
}
}  // namespace ember::ops::cuda
