// Fused multi-tensor optimizer updates (Adam/AdamW, SGD with momentum): the autograd-oblivious
// front. One call updates every tensor of a list in place with ONE parallel pass on the CPU
// (one OpenMP loop over all elements of all tensors) and one kernel launch per dtype on CUDA
// (a table of pointers and sizes, chunked; more than a launch's table holds only for very
// long lists). The optimizer (optim/) owns the state; these functions only do the math.
//
// Invariants the callers rely on:
// - Parameters are updated in place (same storage, same identity), their version bumped.
// - The math is PyTorch 1.13's single-tensor algorithm, operation for operation, in the
//   compute type: f64 for f64 parameters, f32 otherwise (f16/bf16 parameters load and store
//   in their own type but compute in f32). Host scalars (lr, betas, bias corrections) are
//   formed in double and rounded once to the compute type, as PyTorch passes them.
// - Optimizer state (exp_avg, exp_avg_sq, momentum_buffer) is contiguous, has the
//   parameter's shape and device, and has dtype optim_state_dtype(param dtype): f32 for
//   16-bit parameters (so moments keep their precision), else the parameter's dtype.
// - Gradients of another dtype are cast to the parameter's dtype first; any strides work.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/tensor.h"

namespace ember::ops {

// f64 -> f64; f32, f16, bf16 -> f32.
inline DType optim_state_dtype(DType param) { return param == DType::f64 ? DType::f64 : DType::f32; }

struct AdamStepParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * wd; Adam: g += wd * p (L2)
  bool maximize = false;
  bool amsgrad = false;  // the denominator uses the running maximum of v (max_exp_avg_sqs)
};

// For each i, with t = steps[i] (the step number after incrementing, >= 1):
//   g = maximize ? -grad : grad
//   AdamW: p = p * (1 - lr*wd)            Adam: g = g + wd * p
//   m = m * beta1 + (1 - beta1) * g
//   v = v * beta2 + (1 - beta2) * g * g
//   amsgrad: vmax = max(vmax, v) (NaN propagates, as torch.maximum), and vmax replaces v below
//   p = p + (-lr / (1 - beta1^t)) * (m / (sqrt(v) / sqrt(1 - beta2^t) + eps))
// max_exp_avg_sqs (the vmax state, like the others) is given exactly when p.amsgrad.
void adam_step_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                const TensorList& exp_avg_sqs, const std::vector<int64_t>& steps,
                const AdamStepParams& p, const TensorList& max_exp_avg_sqs = {});

// The capturable form of adam_step_ (Note [capturable optimizer step] in ops/src/optim.cpp):
// the learning rate and the step counts are read from tensors on the parameters' device when
// the update runs instead of being formed on the host, so an update captured in a CUDA graph
// replays with the values current at each replay, and a GradScaler's inf flag can skip it
// without the host reading the flag.
//   lr:        f64 [1], the learning rate (p.lr is not used);
//   steps:     f64 [n], the number of steps parameter i has taken; it updates with
//              t = steps[i] + 1, after which steps[i] = t;
//   found_inf: undefined, or f32 [1]: when non-zero nothing changes (no parameter, state or
//              step count), as a step GradScaler skips.
// Results equal adam_step_'s with p.lr = lr and steps[i] + 1 as the step counts (bit for bit
// on the CPU, where the scalars are formed by the same double arithmetic).
void adam_step_scheduled_(const TensorList& params, const TensorList& grads,
                          const TensorList& exp_avgs, const TensorList& exp_avg_sqs,
                          const Tensor& lr, const Tensor& steps, const Tensor& found_inf,
                          const AdamStepParams& p, const TensorList& max_exp_avg_sqs = {});

struct SgdStepParams {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

// For each i:
//   d = (maximize ? -grad : grad) + wd * p                         (wd term only when wd != 0)
//   momentum != 0:  buf = first[i] ? d : buf * momentum + (1 - dampening) * d
//                   d = nesterov ? d + momentum * buf : buf
//   p = p + (-lr) * d
// momentum_buffers is empty when momentum == 0; `first` marks buffers that start this step.
void sgd_step_(const TensorList& params, const TensorList& grads,
               const TensorList& momentum_buffers, const std::vector<uint8_t>& first,
               const SgdStepParams& p);

}  // namespace ember::ops
