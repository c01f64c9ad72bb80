// Fused nn ops (softmax, log_softmax, cross-entropy, layer norm): the autograd-oblivious
// front. Each function validates its inputs, picks dtypes, allocates outputs and calls the
// CPU or CUDA family driver (ops/cpu/nn.cpp, ops/cuda/nn.cu). Forward functions return what
// their backward needs (per-row logsumexp, mean, rstd), so backward never recomputes a
// reduction the forward already did.
//
// Precision: 16-bit floats are computed in f32 and rounded once on store; f32 and f64 in their
// own type. Statistics saved for backward (row max and log-sum-exp, mean, rstd) are f32 for
// 16-bit and f32 inputs and f64 for f64 inputs (the "stats dtype"). Log-probabilities are
// formed as (x - max) - log(sum(exp(x - max))), never as x - logsumexp: with large logits
// (1e4) the logsumexp itself cannot hold the small difference.
#pragma once

#include <array>

#include "ember/tensor.h"

namespace ember::ops {

// The dtype in which per-row statistics of a `t` input are kept: f64 for f64, else f32.
inline DType stats_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// ---- softmax / log_softmax over one dim (negative dims wrap; a 0-dim input is one row) ----
// Output: contiguous, x's shape and dtype. x must be floating.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Gradients from the forward output y and the output gradient g (same shape; any strides):
//   softmax:      dx = y * (g - sum(g * y))
//   log_softmax:  dx = g - exp(y) * sum(g)
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);

// ---- cross-entropy of logits [N, C] (or [C]) with integer class targets [N] (or []) ----
enum class LossReduction : uint8_t { none, mean, sum };
struct CrossEntropyParams {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  LossReduction reduction = LossReduction::mean;
};
struct CrossEntropyForward {
  Tensor loss;     // [N] (or []) for none, [] otherwise; the logits' dtype
  Tensor row_max;  // [N] max_c x[i, c], stats dtype   } what backward needs: log p =
  Tensor log_sum;  // [N] log sum_c exp(x - max)        } (x - row_max) - log_sum
};
// PyTorch semantics: mean divides by the number of non-ignored targets (NaN when all are
// ignored); with smoothing eps, a row's loss is (1-eps)*nll + eps*mean_c(-log p_c); ignored
// rows contribute 0. Throws DTypeError for non-integer targets, ShapeError on mismatched
// shapes, IndexError for a target outside [0, C) that is not ignore_index.
CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                          const CrossEntropyParams& params);
// dlogits = scale_i * (softmax(x_i) - (1-eps)*onehot(t_i) - eps/C), zero for ignored rows;
// scale_i = grad_i (none), grad (sum) or grad / count (mean). The logits' shape and dtype.
Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& row_max, const Tensor& log_sum,
                              const CrossEntropyParams& params);

// ---- layer norm over the trailing dims `normalized_shape` ----
struct LayerNormForward {
  Tensor y;     // x's shape and dtype, contiguous
  Tensor mean;  // [rows] in the stats dtype
  Tensor rstd;  // [rows] in the stats dtype, 1 / sqrt(var + eps) (biased variance)
};
// weight and bias are optional (undefined) and otherwise of shape normalized_shape and x's
// dtype. Throws ShapeError when normalized_shape is not a suffix of x's shape.
LayerNormForward layer_norm_forward(const Tensor& x, const Shape& normalized_shape,
                                    const Tensor& weight, const Tensor& bias, double eps);
struct LayerNormBackward {
  Tensor dx, dweight, dbias;  // undefined where not requested
};
LayerNormBackward layer_norm_backward(const Tensor& grad, const Tensor& x,
                                      const Shape& normalized_shape, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd,
                                      std::array<bool, 3> needs);

}  // namespace ember::ops
