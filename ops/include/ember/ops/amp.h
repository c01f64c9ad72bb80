// Mixed-precision support ops (the GradScaler's kernels): the autograd-oblivious front.
// These are PyTorch's torch._amp_foreach_non_finite_check_and_unscale_ and
// torch._amp_update_scale_, with the same semantics, so amp::GradScaler can follow
// torch.cuda.amp.GradScaler line for line.
//
// Invariants the callers rely on:
// - Nothing here synchronizes with the host: the inverse scale, the found_inf flag, the scale
//   and the growth tracker are tensors on the gradients' device, read and written by the
//   kernels. A caller decides when (once per step) to read found_inf back.
// - amp_unscale_and_check_ over a whole list is ONE parallel pass on the CPU (one OpenMP loop
//   over all elements of all gradients) and ONE kernel launch on CUDA (a pointer table;
//   a further launch per 256 tensors only for longer lists).
// - found_inf is only ever set to 1, never cleared, so several calls (several optimizers or
//   parameter groups) accumulate into one flag; the caller zeroes it per step.
#pragma once

#include <cstdint>

#include "ember/tensor.h"

namespace ember::ops {

// For every gradient g (any floating dtype, any strides, one device):
//   g *= inv_scale (computed in f32, or f64 for f64 gradients, and stored back in g's dtype)
//   if any element of g (before scaling) is inf or NaN: found_inf = 1
// found_inf and inv_scale are one-element f32 tensors on the gradients' device.
// Every gradient is scaled, finite or not (as PyTorch does); undefined or empty ones are
// skipped.
void amp_unscale_and_check_(const TensorList& grads, const Tensor& found_inf,
                            const Tensor& inv_scale);

// The dynamic loss-scale update (torch._amp_update_scale_), on the scale's device:
//   found_inf != 0: scale *= backoff_factor; growth_tracker = 0
//   else:           growth_tracker += 1; when it reaches growth_interval:
//                     scale *= growth_factor (only if the product is finite); growth_tracker = 0
// scale: one-element f32; growth_tracker: one-element i32; found_inf: one-element f32; all on
// one device.
void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval);

}  // namespace ember::ops
