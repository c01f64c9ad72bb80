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
// Inputs of any strides are accepted: the kernels read views whose last dim has stride 1 in
// place (Note [attention strided operands] in ops/kernels/attention.h) and copy only the
// others. Outputs are contiguous.
//
// Note [attention masks and dropout]: AttentionExtras adds PyTorch's attn_mask and dropout_p.
// - attn_mask broadcasts to [B, H, Tq, Tk] (key padding [B, 1, 1, Tk], a [Tq, Tk] mask, ...)
//   and is read through its broadcast strides, never expanded into memory. A bool mask keeps
//   the scores where it is true (PyTorch's convention); a floating mask (q's dtype or f32; f64
//   too for f64 q) is added to the scaled scores. A floating mask whose dtype is not the
//   compute type (f32, f64 for f64 q) is converted once, in its own (unbroadcast) shape.
//   A mask and causal together are an error, as in PyTorch.
// - Fully masked rows (every key hidden): the output row is 0, lse is +inf, and the backward
//   gives that row zero gradients (FlashAttention's convention; PyTorch's math path gives
//   NaN). +inf makes exp(s - lse) = 0 for every key in the backward, so no kernel needs a
//   special case there.
// - dropout_p in [0, 1): the probabilities P = softmax(...) are multiplied by mask / (1 - p),
//   mask element (b, h, i, j) drawn exactly as ops::dropout_mask over [B, H, Tq, Tk] with
//   the same Generator::State (Note [dropout Philox layout]): element e = ((b H + h) Tq + i)
//   Tk + j uses counter offset + e / 4, word e % 4, kept when u >= p. The backward
//   regenerates the mask from the same state (nothing O(Tq Tk) is saved); lse is that of the
//   undropped softmax, and Delta = rowsum(dO * O) still equals rowsum(P * dP) with dropout.
//   Callers reserve attention_dropout_counters(B, H, Tq, Tk) counters.
// - CUDA: the tensor-core path (flash_attention.cu, f16/bf16, D 64 or 128) takes masks, read
//   per score through the same broadcast strides; a call with dropout always runs the generic
//   kernels (tests/ops/test_attention_mask.cpp proves both through the profiler range the
//   tensor-core path opens).
#pragma once

#include <optional>

#include "ember/random.h"
#include "ember/tensor.h"

namespace ember::ops {

// Note [attention dQ atomics]: the tensor-core backward (flash_attention.cu) is deterministic
// by default (Note [Determinism]): dQ has its own kernel that recomputes the scores and dP of
// every tile, 7 tile products in all. With set_attention_dq_atomics(true) the dK/dV kernel
// also adds each tile's dS K into an f32 dQ buffer with atomics (FlashAttention-2's scheme, and
// what PyTorch's flash backward always does), so the dQ kernel and its 2 recomputed products
// go: dQ then differs from run to run in its last bits (the order of the f32 additions).
// Ignored under set_deterministic(true) and by the generic kernels (f32, dropout, other head
// sizes), which stay deterministic. Default false, or true when the environment has
// EMBER_ATTENTION_DQ_ATOMICS=1; read at every call; one atomic flag shared by all threads.
void set_attention_dq_atomics(bool on);
bool attention_dq_atomics();

struct AttentionExtras {
  Tensor attn_mask;        // undefined (none), bool, or floating; broadcastable to [B, H, Tq, Tk]
  double dropout_p = 0.0;  // in [0, 1)
  Generator::State rng{};  // the dropout draws (only read when dropout_p > 0)
};
inline uint64_t attention_dropout_counters(int64_t B, int64_t H, int64_t Tq, int64_t Tk) {
  return (uint64_t(B) * uint64_t(H) * uint64_t(Tq) * uint64_t(Tk) + 3) / 4;
}

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
// With a mask and/or dropout (Note [attention masks and dropout]). Also throws ShapeError for
// a mask that does not broadcast to [B, H, Tq, Tk], DTypeError for a floating mask of another
// dtype, ValueError for causal with a mask or dropout_p outside [0, 1).
AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, const AttentionExtras& extras,
                                                      bool causal,
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
// The backward of the masked / dropout forward: the same extras (mask, p, rng state).
AttentionBackward scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q,
                                                        const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& lse,
                                                        const AttentionExtras& extras, bool causal,
                                                        std::optional<double> scale = std::nullopt);

// Attention over GPT's packed projection qkv [B, T, 3C], C = n_head * D: per token the q,
// then the k, then the v of every head, head h at columns h*D .. h*D+D-1 of each third (the
// row-major output of a Linear(C, 3C)). q, k, v are read as strided views of qkv (no copy;
// qkv itself is copied only when its last dim is not unit-stride). Returns out as y
// [B, T, C], contiguous, y[b, t, h*D + d] (what the output projection reads), and lse
// [B, n_head, T]. Equal to splitting the heads, scaled_dot_product_attention_forward, and
// merging them. Throws ShapeError when qkv is not 3-D or its last dim is not a positive
// multiple of 3 * n_head.
AttentionForward scaled_dot_product_attention_packed_forward(
    const Tensor& qkv, int64_t n_head, bool causal, std::optional<double> scale = std::nullopt);
// dqkv [B, T, 3C] (contiguous, qkv's dtype) from the gradient of y `grad` [B, T, C] and the
// forward's y and lse: dq, dk and dv are written straight into their thirds of one buffer.
Tensor scaled_dot_product_attention_packed_backward(const Tensor& grad, const Tensor& qkv,
                                                   const Tensor& out, const Tensor& lse,
                                                   int64_t n_head, bool causal,
                                                   std::optional<double> scale = std::nullopt);

}  // namespace ember::ops
