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

// ---- loss input checks, on the tensor's device without a host wait (CUDA: Note [deferred
// device checks]: raised at the next synchronization, or at once in synchronous-check mode;
// which bad element is named when several are is then unspecified). `op` names the loss the
// user called and must be a string literal (a CUDA fault reads it back later).
// Every target (integral) is in [0, classes) or equals ignore_index, else IndexError
// "[op] target <t> at position <i> is out of bounds for <classes> classes (expected ...)".
void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op);
// Every element of x (floating) is in [0, 1] (NaN is not), else ValueError "[op] all elements
// of input should be between 0 and 1 ...", PyTorch's refusal for binary_cross_entropy.
void check_probabilities(const Tensor& x, const char* op);

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
// grad may be in x's dtype or, when x is f32, in f16/bf16 (the output gradient of a layer
// norm whose y was written in 16 bits): the kernel reads it as it is, no cast pass. Other
// dtypes are cast to x's. The gradients are in x's dtype.
LayerNormBackward layer_norm_backward(const Tensor& grad, const Tensor& x,
                                      const Shape& normalized_shape, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd,
                                      std::array<bool, 3> needs);

// ---- residual_layer_norm: ember's fused pre-LN residual step (PyTorch has no such op) ----
// sum = x + delta; y = layer_norm(sum). One pass reads x and delta once and writes sum, y,
// mean and rstd, where the composite reads and writes sum twice more (and, under autocast, y
// once more for the cast its GEMM consumer would do).
//   - x and delta have one shape (no broadcasting), any strides, floating dtypes; sum is
//     contiguous in promote(x, delta) (GPT: the f32 residual stream plus a bf16 delta).
//   - The statistics are computed from sum as stored (rounded to its dtype), so y, mean and
//     rstd equal layer_norm_forward(sum, ...) exactly.
//   - weight and bias: as layer_norm's, in sum's dtype.
//   - y is written in y_dtype: sum's dtype, or f16/bf16 when sum is f32 (rounded once from the
//     f32 result, which equals casting layer_norm's f32 y). The autograd op picks it (the
//     autocast rule in ember/functions.h); ops never look at autocast.
// Backward: sum's gradient is the layer_norm_backward of y's (any of y's dtypes above) plus
// whatever else reads sum; x and delta each receive that total.
struct ResidualLayerNormForward {
  Tensor sum;   // x's shape, promote(x, delta), contiguous
  Tensor y;     // x's shape, y_dtype, contiguous
  Tensor mean;  // [rows] in the stats dtype of sum
  Tensor rstd;  // [rows] in the stats dtype of sum
};
ResidualLayerNormForward residual_layer_norm_forward(const Tensor& x, const Tensor& delta,
                                                     const Shape& normalized_shape,
                                                     const Tensor& weight, const Tensor& bias,
                                                     double eps, DType y_dtype);

}  // namespace ember::ops
