#pragma once

#include "dispatch.h"
#include "ember/ops/swiglu.h"

// Preconditions the front (ops/src/swiglu.cpp) guarantees:
// - gate, up (and grad) have one shape and one floating dtype, any strides, numel > 0;
// - out, dgate and dup are contiguous in that dtype and shape (dgate or dup, not both, may be
//   undefined) and overlap no input.
#define EMBER_SWIGLU_KERNELS                                                            \
  void swiglu_fwd_kernel(const Tensor& gate, const Tensor& up, const Tensor& out);      \
  void swiglu_bwd_kernel(const Tensor& grad, const Tensor& gate, const Tensor& up,      \
                         const Tensor& dgate, const Tensor& dup);

EMBER_DECLARE_KERNELS(EMBER_SWIGLU_KERNELS)
