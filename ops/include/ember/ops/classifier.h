// The fused classifier: a language model's head GEMM and its cross-entropy in one op, the
// autograd-oblivious front (ops/src/classifier.cpp; drivers ops/cpu/classifier.cpp and
// ops/cuda/classifier.cu). It equals
//   cross_entropy(linear(x, weight)[..., :V].reshape({N, V}), target, {ignore_index, mean|sum})
// with PyTorch's semantics, without ever holding the logits in more than one buffer.
//
// Note [fused classifier memory]: peak memory = ONE [N, Vp] buffer in the compute dtype
// (x's: bf16 under autocast), plus O(N) scratch. The forward writes the logits x2d @ W^T
// into it (one GEMM), then one kernel pass per row computes the row's max and log-sum-exp
// over the V used columns and the row's loss, and, when a gradient is wanted, overwrites the
// row in place with dlogits = softmax - onehot(target) (zero in the padded columns [V, Vp)
// and in ignored rows). That buffer is the only thing the backward keeps of the logits: no
// f32 copy, no second logits buffer, no separate gradient buffer. dlogits is stored WITHOUT
// the upstream gradient and the 1/count of the mean (in f16, p/N underflows); the backward
// applies s = grad * (1/count | 1) to its small results instead:
//   dx = (dlogits @ W) * s,   dW = (dlogits^T @ x2d) * s
// so no pass over [N, Vp] is added. On CUDA the per-row pass reads the row twice (max/sum,
// then loss + dlogits, usually from L2) and writes it once, in 16-byte vectors with f32 math;
// the total and the target check run on the device (no host synchronization, capture-safe;
// a bad target raises IndexError at the next synchronization: Note [deferred device checks]).
#pragma once

#include <array>

#include "ember/ops/nn.h"
#include "ember/tensor.h"

namespace ember::ops {

struct LinearCrossEntropyParams {
  int64_t ignore_index = -100;
  // V: the logits columns (weight rows) that take part, the first V of Vp; -1 = all. The
  // others (a vocabulary padded to a multiple of 64) get no probability and zero gradient.
  int64_t num_classes = -1;
  // mean (over the non-ignored targets; NaN when all are ignored) or sum. `none` would need
  // a per-row gradient scale in the backward; it is refused with NotImplementedError.
  LossReduction reduction = LossReduction::mean;
};

struct LinearCrossEntropyForward {
  Tensor loss;         // [] in the stats dtype of x (f32; f64 for f64)
  Tensor dlogits;      // [N, Vp] contiguous in x's dtype: softmax - onehot; only when requested
  Tensor grad_factor;  // [] stats dtype: 1 / max(kept targets, 1) for mean, 1 for sum; with dlogits
};

// x [..., C] floating, weight [Vp, C] of x's dtype (no bias), target [...] (x's leading dims)
// of integer class indices. keep_grad: also return dlogits and grad_factor for the backward
// (otherwise the logits buffer is freed on return). Throws DTypeError / ShapeError on bad
// inputs, ValueError for num_classes outside [1, Vp], NotImplementedError for reduction none,
// IndexError for a target outside [0, V) that is not ignore_index (on CUDA: deferred).
LinearCrossEntropyForward linear_cross_entropy_forward(const Tensor& x, const Tensor& weight,
                                                       const Tensor& target,
                                                       const LinearCrossEntropyParams& params,
                                                       bool keep_grad);

struct LinearCrossEntropyBackward {
  Tensor dx, dweight;  // x's and weight's shapes and dtypes; undefined where not requested
};
// grad: the loss's gradient ([], any floating dtype); dlogits and grad_factor from the forward.
LinearCrossEntropyBackward linear_cross_entropy_backward(const Tensor& grad, const Tensor& x,
                                                         const Tensor& weight,
                                                         const Tensor& dlogits,
                                                         const Tensor& grad_factor,
                                                         std::array<bool, 2> needs);

}  // namespace ember::ops
