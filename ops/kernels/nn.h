#pragma once
#include <type_traits>

#include "dispatch.h"
#include "ember/ops/nn.h"

// Preconditions the front (ops/src/nn.cpp) guarantees:
// softmax: x floating, numel > 0, 0 <= dim < x.dim() (x.dim() >= 1); out contiguous with x's
//   shape and dtype; x may have any strides. bwd: grad, y and dx share shape and dtype, dx is
//   contiguous, grad and y any strides.
// cross_entropy: logits [N, C] floating (any strides, N, C >= 1), target [N] integral (any
//   strides), row_max and log_sum [N] contiguous in the stats dtype, loss [N] (none) or [] in the logits'
//   dtype; bwd: grad [N] (none) or [] in the logits' dtype, dlogits contiguous [N, C].
// layer_norm (and residual_layer_norm): x contiguous viewed as [rows, cols], of dtype S;
//   delta undefined (plain layer norm) or contiguous [rows, cols] of dtype S, or f16/bf16
//   when S is f32; sum defined exactly when delta is, contiguous [rows, cols] of dtype S (the
//   normalized input is then x + delta rounded to S, written to sum); weight/bias undefined
//   or contiguous [cols] of dtype S; y contiguous [rows, cols] of dtype S, or f16/bf16 when S
//   is f32; mean/rstd contiguous [rows] in the stats dtype. bwd: grad contiguous [rows, cols]
//   of dtype S, or f16/bf16 when S is f32; dx/dweight/dbias undefined or contiguous, of S.
// check_class_targets: target contiguous, integral (visit_target), numel > 0. check_probabilities:
//   x contiguous floating, numel > 0. Both: `op` a string literal.
#define EMBER_NN_KERNELS                                                                     \
  void softmax_fwd_kernel(const Tensor& x, const Tensor& out, int64_t dim, bool log);       \
  void softmax_bwd_kernel(const Tensor& grad, const Tensor& y, const Tensor& dx, int64_t dim, \
                          bool log);                                                         \
  void cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target, const Tensor& loss, \
                                const Tensor& row_max, const Tensor& log_sum,                \
                                const CrossEntropyParams& p);                                \
  void cross_entropy_bwd_kernel(const Tensor& grad, const Tensor& logits, const Tensor& target, \
                                const Tensor& row_max, const Tensor& log_sum,                \
                                const Tensor& dlogits, const CrossEntropyParams& p);         \
  void layer_norm_fwd_kernel(const Tensor& x, const Tensor& delta, const Tensor& weight,     \
                             const Tensor& bias, const Tensor& sum, const Tensor& y,         \
                             const Tensor& mean, const Tensor& rstd, int64_t cols,           \
                             double eps);                                                    \
  void layer_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,      \
                             const Tensor& mean, const Tensor& rstd, const Tensor& dx,       \
                             const Tensor& dweight, const Tensor& dbias, int64_t cols);      \
  void check_class_targets_kernel(const Tensor& target, int64_t classes, int64_t ignore_index, \
                                  const char* op);                                           \
  void check_probabilities_kernel(const Tensor& x, const char* op);

EMBER_DECLARE_KERNELS(EMBER_NN_KERNELS)

namespace ember::ops {
// check_probabilities' message after "[op] " (core/cuda/device_checks.cpp formats a CUDA fault
// of kind not_a_probability with the same words; the CUDA loss tests compare the two).
inline constexpr const char* kProbabilitiesMessage =
    "all elements of input should be between 0 and 1 (probabilities: pass logits to "
    "binary_cross_entropy_with_logits)";
}  // namespace ember::ops

namespace ember::ops {
// Calls f(tag) with the storage type of a layer-norm side tensor (delta, y, the output
// gradient) around a normalized input of storage type S: S itself, or Half/BFloat16 when S is
// float (the contract above; the front casts anything else), so each backend instantiates 9
// f32 variants and one per other dtype.
template <class S, class F>
decltype(auto) visit_layer_norm_side(DType side, F&& f) {
  if constexpr (std::is_same_v<S, float>) {
    if (side == DType::f16) return f(Half{});
    if (side == DType::bf16) return f(BFloat16{});
  }
  return f(S{});
}
}  // namespace ember::ops
