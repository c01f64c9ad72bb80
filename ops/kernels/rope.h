#pragma once

#include "dispatch.h"
#include "ember/ops/rope.h"

// Preconditions the front (ops/src/rope.cpp) guarantees, for both kernels:
// - x (or grad) is [B, T, H, D], floating, any strides, numel > 0, D even;
// - cos and sin are contiguous [T, D/2] in the compute type C (f32 for 16-bit and f32, f64
//   for f64);
// - out (dx) is contiguous [B, T, H, D] in x's dtype and does not overlap x.
// fwd rotates by +angle, bwd by -angle (the forward's transpose).
#define EMBER_ROPE_KERNELS                                                              \
  void rope_fwd_kernel(const Tensor& x, const Tensor& cos, const Tensor& sin,           \
                       const Tensor& out);                                              \
  void rope_bwd_kernel(const Tensor& grad, const Tensor& cos, const Tensor& sin,        \
                       const Tensor& dx);

EMBER_DECLARE_KERNELS(EMBER_ROPE_KERNELS)
