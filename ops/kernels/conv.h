#pragma once
#include "dispatch.h"
#include "ember/ops/conv.h"

// Preconditions the front guarantees: every tensor contiguous, on one device, one floating
// dtype (indices: i64); shapes consistent with the params (validated); outputs freshly
// allocated and not overlapping inputs; bias undefined or [O]. Backward kernels overwrite
// their output (they zero it themselves where they accumulate).
#define EMBER_CONV_KERNELS                                                                     \
  void conv2d_fwd_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, \
                         const Conv2dParams& p);                                                \
  void conv2d_bwd_input_kernel(const Tensor& gy, const Tensor& w, const Tensor& gx,             \
                               const Conv2dParams& p);                                          \
  void conv2d_bwd_weight_kernel(const Tensor& gy, const Tensor& x, const Tensor& gw,            \
                                const Conv2dParams& p);                                         \
  void max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices,           \
                             const Pool2dParams& p);                                            \
  void max_pool2d_bwd_kernel(const Tensor& gy, const Tensor& indices, const Tensor& gx);        \
  void max_pool2d_gather_kernel(const Tensor& gx, const Tensor& indices, const Tensor& gy);

EMBER_DECLARE_KERNELS(EMBER_CONV_KERNELS)
