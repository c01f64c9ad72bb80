#pragma once
#include "dispatch.h"
#include "ember/ops/attention.h"

// Note [attention strided operands]: the contract between the attention front
// (ops/src/attention.cpp) and every attention kernel (ops/cpu/attention.cpp,
// ops/cuda/attention.cu, ops/cuda/flash_attention.cu). Attention reads q, k, v straight out
// of the layouts its neighbours produce (GPT's packed [B, T, 3, H, D] projection) and writes
// out and dq, dk, dv into theirs ([B, T, H, D], one dqkv buffer), so no operand is copied.
//
// Shapes: q [B, H, Tq, D]; k, v [B, H, Tk, D]; out and grad like q; dq, dk, dv like q, k, v.
// One floating dtype, one device; B * H >= 1, Tq >= 1, Tk >= 1, D >= 1; causal implies
// Tq <= Tk (Note [attention causal alignment]).
//
// Strides (of q, k, v, grad, out, dq, dk, dv), in elements:
// - stride(3) == 1, always (D == 1 included): element (b, h, t, d) is at
//   data_ptr() + b * stride(0) + h * stride(1) + t * stride(2) + d.
// - stride(0..2) are any values >= 0. A dim of size 1 has stride 0, so that alignment checks
//   can test every stride without special cases. Index math is 64-bit: one tensor may span
//   more than 2^31 elements even when each head is small.
// - Nothing is 16-byte aligned by contract: a kernel with vector accesses checks data_ptr()
//   and stride(0..2) (multiples of 8 elements for 16-bit dtypes) and otherwise declines.
// - Inputs (q, k, v, and in the backward grad and out) may overlap each other and themselves
//   (q, k, v interleaved in one qkv buffer; a stride 0 from expand()): they are only read.
// - Outputs (out and lse; dq, dk, dv) never overlap an input, themselves or each other, but
//   dq, dk, dv may be disjoint interleaved views of one buffer (the packed op's dqkv; out is
//   the [B, H, Tq, D] view of a [B, Tq, H, D] buffer): a kernel writes exactly the elements of
//   its output views, every one of them, and nothing between their rows.
// - lse: contiguous [B, H, Tq] in the stats dtype (f64 for f64 inputs, else f32); the forward
//   writes it, the backward reads it.
//
// Mask and dropout (Note [attention masks and dropout] in ember/ops/attention.h) reach the
// kernels as AttentionKernelExtras: `mask` is undefined or a [B, H, Tq, Tk] view of the
// user's mask with stride 0 on every broadcast dim (any strides >= 0, last dim included),
// either bool (keep where true) or additive in the compute dtype (f64 for f64, else f32).
// A fully masked row gives out = 0 and lse = +inf; the backward relies on exp(s - lse) = 0.
namespace ember::ops {
struct AttentionKernelExtras {
  Tensor mask;
  double dropout_p = 0.0;
  Generator::State rng{};
  bool any() const { return mask.defined() || dropout_p > 0; }
};
}  // namespace ember::ops

#define EMBER_ATTENTION_KERNELS                                                               \
  void attention_fwd_kernel(const Tensor& q, const Tensor& k, const Tensor& v,                \
                            const Tensor& out, const Tensor& lse,                             \
                            const AttentionKernelExtras& extras, bool causal, double scale);  \
  void attention_bwd_kernel(const Tensor& grad, const Tensor& q, const Tensor& k,             \
                            const Tensor& v, const Tensor& out, const Tensor& lse,           \
                            const Tensor& dq, const Tensor& dk, const Tensor& dv,            \
                            const AttentionKernelExtras& extras, bool causal, double scale);

EMBER_DECLARE_KERNELS(EMBER_ATTENTION_KERNELS)
