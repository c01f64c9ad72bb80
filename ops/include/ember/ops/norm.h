// Fused normalization ops (batch norm, group norm, RMS norm): the autograd-oblivious front.
// Each function validates its inputs, allocates outputs and calls the CPU or CUDA family
// driver (ops/cpu/norm.cpp, ops/cuda/norm.cu). Forwards return the statistics their backward
// needs (mean and invstd / rstd), so backward never recomputes a reduction.
//
// Precision: 16-bit inputs are computed in f32 and rounded once on store, f32 and f64 in their
// own type; sums accumulate in f64 for f32/f64 inputs and in f32 for 16-bit ones (CPU:
// per-segment f32 partials folded into f64). Saved statistics are in the stats dtype
// (ops::stats_dtype: f64 for f64, else f32).
#pragma once

#include <array>

#include "ember/ops/nn.h"
#include "ember/tensor.h"

namespace ember::ops {

// ---- batch norm over x [N, C, *] (per channel, over N and *) ----
struct BatchNormForward {
  Tensor y;       // x's shape and dtype, contiguous
  Tensor mean;    // [C] stats dtype: the batch mean (training) or the running mean (eval)
  Tensor invstd;  // [C] stats dtype: 1 / sqrt(var + eps), biased batch var or running var
};
// weight, bias: undefined or [C], in x's dtype or (16-bit x) f32. running_mean/var: undefined
// (both) or [C] floating tensors of any floating dtype, updated in place when training (no
// autograd; version bumped) with the unbiased batch variance; required when !training.
// Throws ValueError in training mode when N * prod(*) == 1 (PyTorch: "Expected more than 1
// value per channel when training").
BatchNormForward batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    bool training, double momentum, double eps);
struct NormBackward {
  Tensor dx, dweight, dbias;  // undefined where not requested; dweight/dbias in weight's dtype
};
// training: the batch-statistics gradient (two per-channel reductions); otherwise the affine's.
NormBackward batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                                 const Tensor& mean, const Tensor& invstd, bool training,
                                 std::array<bool, 3> needs);

// ---- group norm over x [N, C, *], groups of C / G channels ----
struct GroupNormForward {
  Tensor y;     // x's shape and dtype, contiguous
  Tensor mean;  // [N, G] stats dtype
  Tensor rstd;  // [N, G] stats dtype (biased variance)
};
// weight, bias: undefined or [C] in x's dtype or (16-bit x) f32.
GroupNormForward group_norm_forward(const Tensor& x, int64_t num_groups, const Tensor& weight,
                                    const Tensor& bias, double eps);
NormBackward group_norm_backward(const Tensor& grad, const Tensor& x, int64_t num_groups,
                                 const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                 std::array<bool, 3> needs);

// ---- RMS norm over the trailing dims normalized_shape ----
struct RmsNormForward {
  Tensor y;     // x's shape and dtype, contiguous
  Tensor rstd;  // [rows] stats dtype: 1 / sqrt(mean(x^2) + eps)
};
// weight: undefined or normalized_shape in x's dtype or (16-bit x) f32. dbias is never set.
RmsNormForward rms_norm_forward(const Tensor& x, const Shape& normalized_shape,
                                const Tensor& weight, double eps);
NormBackward rms_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                               const Tensor& weight, const Tensor& rstd, std::array<bool, 2> needs);

}  // namespace ember::ops
