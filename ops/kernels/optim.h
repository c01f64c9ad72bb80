#pragma once
#include <vector>

#include "dispatch.h"
#include "ember/ops/optim.h"

// Preconditions the front (ops/src/optim.cpp) guarantees:
// - all lists have the same length n >= 1; every tensor is defined, contiguous, on one device
//   and has numel > 0;
// - grads[i] has params[i]'s shape and dtype (floating); state tensors have params[i]'s shape
//   and dtype optim_state_dtype(params[i].dtype());
// - scalars[i] holds tensor i's bias-corrected step size and sqrt(1 - beta2^t), in double;
// - params may mix dtypes (the drivers dispatch per tensor or per dtype bucket).
// sgd: momentum_buffers is empty when p.momentum == 0; first[i] != 0 means buffer i takes d.
namespace ember::ops {
struct AdamTensorScalars {
  double step_size;       // lr / (1 - beta1^t)
  double bias_corr2_sqrt; // sqrt(1 - beta2^t)
};
}  // namespace ember::ops

#define EMBER_OPTIM_KERNELS                                                                  \
  void adam_step_kernel(const TensorList& params, const TensorList& grads,                   \
                        const TensorList& exp_avgs, const TensorList& exp_avg_sqs,           \
                        const std::vector<AdamTensorScalars>& scalars,                       \
                        const AdamStepParams& p);                                            \
  void sgd_step_kernel(const TensorList& params, const TensorList& grads,                    \
                       const TensorList& momentum_buffers, const std::vector<uint8_t>& first, \
                       const SgdStepParams& p);

EMBER_DECLARE_KERNELS(EMBER_OPTIM_KERNELS)
