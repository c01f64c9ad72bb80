// Fused scaled dot-product attention (the autograd-oblivious front of the attention family):
//   out = softmax(scale * q k^T + mask) v,   q [B, H, Tq, D], k and v [B, H, Tk, D]
// computed block by block with an online softmax, never materializing the Tq x Tk scores
// (ops/cpu/attention.cpp, ops/cuda/attention.cu). The forward returns the per-row
// logsumexp of the scaled, masked scores, which is all the backward needs to recompute the
// probabilities block by block (FlashAttention-2's scheme).
//
// Note [attention causal alignment]: with causal = true, query row i may attend to key j
// when j <= i + (Tk - Tq) ("bottom-right" alignment, as FlashAttention 2.1+). For Tq == Tk
// this is PyTorch's is_causal mask (tril); for Tq < Tk it makes the queries the last Tq
// positions of the sequence, which is what a KV-cache decoding step needs. A causal call
// requires Tq <= Tk (otherwise a row would see no key).
//
// Precision: 16-bit inputs are computed in f32 and rounded once on store; f32 and f64 in
// their own type. The logsumexp is in the stats dtype (f64 for f64 inputs, else f32).
// Inputs of any strides are accepted (copied contiguous first); outputs are contiguous.
#pragma once

#include <optional>

#include "ember/tensor.h"

namespace ember::ops {

struct AttentionForward {
  Tensor out;  // [B, H, Tq, D], q's dtype, contiguous
  Tensor lse;  // [B, H, Tq], stats dtype: log sum_j exp(scale * q_i . k_j) over visible j
};
// scale defaults to 1/sqrt(D). Throws ShapeError (not 4-D, mismatched B/H/D, Tk != Tv,
// causal with Tq > Tk, Tk == 0 with Tq > 0), DTypeError (non-floating or mixed dtypes),
// DeviceError (mixed devices).
AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, bool causal,
                                                      std::optional<double> scale = std::nullopt);

struct AttentionBackward {
  Tensor dq, dk, dv;  // shapes and dtypes of q, k, v; contiguous
};
// Gradients from the output gradient `grad` [B, H, Tq, D] and the forward's out and lse.
AttentionBackward scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q,
                                                        const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& lse,
                                                        bool causal,
                                                        std::optional<double> scale = std::nullopt);

}  // namespace ember::ops
