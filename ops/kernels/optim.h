#pragma once
#include <math.h>

#include <vector>

#include "dispatch.h"
#include "ember/macros.h"
#include "ember/ops/optim.h"

// Preconditions the front (ops/src/optim.cpp) guarantees:
// - all lists have the same length n >= 1; every tensor is defined, contiguous, on one device
//   and has numel > 0;
// - grads[i] has params[i]'s shape and dtype (floating); state tensors have params[i]'s shape
//   and dtype optim_state_dtype(params[i].dtype());
// - scalars[i] holds tensor i's bias-corrected step size and sqrt(1 - beta2^t), in double;
// - params may mix dtypes (the drivers dispatch per tensor or per dtype bucket).
// adam: max_exp_avg_sqs is empty unless p.amsgrad, then aligned with params like the others;
//   torch_maximum is torch.maximum's NaN rule (either NaN gives NaN).
// sgd: momentum_buffers is empty when p.momentum == 0; first[i] != 0 means buffer i takes d.
namespace ember::ops {
struct AdamTensorScalars {
  double step_size;       // lr / (1 - beta1^t)
  double bias_corr2_sqrt; // sqrt(1 - beta2^t)
};
// The scalars of step t, in double: one formula for the host (adam_step_) and for the
// kernels that read lr and t from device memory (adam_step_scheduled_).
EMBER_HD inline AdamTensorScalars adam_tensor_scalars(double lr, double t, double beta1, double beta2) {
  return {lr / (1 - ::pow(beta1, t)), ::sqrt(1 - ::pow(beta2, t))};
}
template <class C>
EMBER_HD inline C torch_maximum(C a, C b) {
  // NaN in either gives NaN: a NaN `a` is kept by a != a, and a NaN `b` fails a >= b.
  return (a != a || a >= b) ? a : b;
}
}  // namespace ember::ops

#define EMBER_OPTIM_KERNELS                                                                  \
  void adam_step_kernel(const TensorList& params, const TensorList& grads,                   \
                        const TensorList& exp_avgs, const TensorList& exp_avg_sqs,           \
                        const TensorList& max_exp_avg_sqs,                                   \
                        const std::vector<AdamTensorScalars>& scalars,                       \
                        const AdamStepParams& p);                                            \
  /* scalars from device memory: lr[0], steps[step_index[i]] (+1, then stored for all of */    \
  /* steps), nothing at all when found_inf is defined and non-zero */                         \
  void adam_step_scheduled_kernel(const TensorList& params, const TensorList& grads,         \
                                  const TensorList& exp_avgs, const TensorList& exp_avg_sqs, \
                                  const TensorList& max_exp_avg_sqs,                         \
                                  const Tensor& lr, const Tensor& steps,                     \
                                  const std::vector<size_t>& step_index,                     \
                                  const Tensor& found_inf, const AdamStepParams& p);         \
  void sgd_step_kernel(const TensorList& params, const TensorList& grads,                    \
                       const TensorList& momentum_buffers, const std::vector<uint8_t>& first, \
                       const SgdStepParams& p);

EMBER_DECLARE_KERNELS(EMBER_OPTIM_KERNELS)
