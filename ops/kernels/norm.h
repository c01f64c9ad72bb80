#pragma once

#include "dispatch.h"
#include "ember/ops/norm.h"

// Preconditions the front (ops/src/norm.cpp) guarantees, for every kernel of the family:
// - x (and grad) contiguous, floating, numel > 0, viewed as [N, C, HW] (batch/group norm) or
//   [rows, cols] (RMS norm); grad has x's dtype; y and dx contiguous in x's dtype.
// - Per-channel / per-feature parameters (weight, bias, dweight, dbias), statistics (mean,
//   invstd, rstd) and running statistics are undefined or contiguous in the stats dtype C
//   (f32 for 16-bit and f32 x, f64 for f64 x): the kernels read and write them as C.
// batch_norm fwd: training: mean/invstd are written (biased variance); running_mean/var, when
//   defined, are updated in place with momentum (unbiased variance; N * HW >= 2). Not
//   training: mean/invstd are written from running_mean/var (both defined). bwd: mean/invstd
//   as the forward wrote them; training selects the batch-statistics formula.
// group_norm: C % G == 0; mean/rstd [N, G].
#define EMBER_NORM_KERNELS                                                                    \
  void batch_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,       \
                             const Tensor& y, const Tensor& mean, const Tensor& invstd,       \
                             const Tensor& running_mean, const Tensor& running_var, int64_t N, \
                             int64_t C, int64_t HW, bool training, double momentum, double eps); \
  void batch_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,       \
                             const Tensor& mean, const Tensor& invstd, const Tensor& dx,      \
                             const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C, \
                             int64_t HW, bool training);                                      \
  void group_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,       \
                             const Tensor& y, const Tensor& mean, const Tensor& rstd,         \
                             int64_t N, int64_t C, int64_t HW, int64_t G, double eps);        \
  void group_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,       \
                             const Tensor& mean, const Tensor& rstd, const Tensor& dx,        \
                             const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C, \
                             int64_t HW, int64_t G);                                          \
  void rms_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& y,            \
                           const Tensor& rstd, int64_t cols, double eps);                     \
  void rms_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,         \
                           const Tensor& rstd, const Tensor& dx, const Tensor& dweight,       \
                           int64_t cols);

EMBER_DECLARE_KERNELS(EMBER_NORM_KERNELS)
