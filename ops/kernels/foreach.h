#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "dispatch.h"
#include "ember/ops/foreach.h"

// Preconditions the front (ops/src/foreach.cpp) guarantees:
// - every tensor of a list is defined, contiguous, floating, on the call's device, and has
//   numel > 0; lists may mix dtypes and may be empty (then only the result is written);
// - foreach_norm: `out` is a 0-dim contiguous f32 or f64 tensor on that device, and `ord` is
//   1, 2 or +inf (kernel_norm_order); f64 `out` when any tensor is f64;
// - foreach_mul: `scalar` is a 0-dim floating tensor on the tensors' device, or undefined,
//   and then `value` is the multiplier (read on the host from a CPU scalar).
namespace ember::ops {
// The orders foreach_norm_kernel computes in one pass; the front combines the others.
inline bool kernel_norm_order(double ord) { return ord == 1 || ord == 2 || (std::isinf(ord) && ord > 0); }
}  // namespace ember::ops

#define EMBER_FOREACH_KERNELS                                                           \
  void foreach_norm_kernel(const TensorList& tensors, double ord, const Tensor& out);    \
  void foreach_mul_kernel(const TensorList& tensors, const Tensor& scalar, double value);

EMBER_DECLARE_KERNELS(EMBER_FOREACH_KERNELS)
