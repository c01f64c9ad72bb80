#pragma once
#include "dispatch.h"
#include "ember/ops/classifier.h"

// Preconditions the front (ops/src/classifier.cpp) guarantees:
// linear_cross_entropy_fwd: logits [N, Vp] contiguous, floating, N >= 1, 1 <= classes <= Vp,
//   storage offset 0 (a fresh GEMM output); target [N] of i64, i32 or u8 (any stride); loss []
//   in the stats dtype; grad_factor [] in the stats dtype when write_grad, else undefined.
//   With write_grad the logits are overwritten with dlogits (Note [fused classifier memory]).
// linear_cross_entropy_scale: t contiguous floating, numel >= 1, multiplied in place by
//   grad * factor (both [] in t's stats dtype), computed in t's compute type.
#define EMBER_CLASSIFIER_KERNELS                                                              \
  void linear_cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target,           \
                                       const Tensor& loss, const Tensor& grad_factor,        \
                                       int64_t classes, int64_t ignore_index, bool mean,     \
                                       bool write_grad);                                     \
  void linear_cross_entropy_scale_kernel(const Tensor& t, const Tensor& grad, const Tensor& factor);

EMBER_DECLARE_KERNELS(EMBER_CLASSIFIER_KERNELS)
