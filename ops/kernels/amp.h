#pragma once
#include "dispatch.h"
#include "ember/ops/amp.h"

// Preconditions the front (ops/src/amp.cpp) guarantees:
// - grads is non-empty; every gradient is defined, contiguous, floating, numel > 0, and on
//   found_inf's device; found_inf and inv_scale are contiguous one-element f32 tensors;
// - amp_update_scale_kernel: scale f32, growth_tracker i32, found_inf f32, one element each,
//   one device; growth_interval >= 1.
#define EMBER_AMP_KERNELS                                                                    \
  void amp_unscale_and_check_kernel(const TensorList& grads, const Tensor& found_inf,        \
                                    const Tensor& inv_scale);                                \
  void amp_update_scale_kernel(const Tensor& scale, const Tensor& growth_tracker,            \
                               const Tensor& found_inf, double growth_factor,                \
                               double backoff_factor, int64_t growth_interval);

EMBER_DECLARE_KERNELS(EMBER_AMP_KERNELS)
