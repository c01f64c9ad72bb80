#pragma once
#include "dispatch.h"
#include "ember/ops/attention.h"

// Preconditions the front (ops/src/attention.cpp) guarantees:
// q [B, H, Tq, D] and k, v [B, H, Tk, D] contiguous, one floating dtype, one device;
// B * H >= 1, Tq >= 1, Tk >= 1, D >= 1; causal implies Tq <= Tk (Note [attention causal
// alignment]); out contiguous like q; lse contiguous [B, H, Tq] in the stats dtype.
// bwd: grad and out contiguous like q; lse as above; dq, dk, dv contiguous like q, k, v
// (every element is written).
#define EMBER_ATTENTION_KERNELS                                                               \
  void attention_fwd_kernel(const Tensor& q, const Tensor& k, const Tensor& v,                \
                            const Tensor& out, const Tensor& lse, bool causal, double scale); \
  void attention_bwd_kernel(const Tensor& grad, const Tensor& q, const Tensor& k,             \
                            const Tensor& v, const Tensor& out, const Tensor& lse,           \
                            const Tensor& dq, const Tensor& dk, const Tensor& dv, bool causal, \
                            double scale);

EMBER_DECLARE_KERNELS(EMBER_ATTENTION_KERNELS)
