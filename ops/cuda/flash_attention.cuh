// Tensor-core (mma.sync) FlashAttention-2 forward and backward for f16/bf16 (ops/cuda/
// flash_attention.cu), called first by the attention family's CUDA driver (attention.cu).
// Operands follow the strided contract of ops/kernels/attention.h.
#pragma once

#include "ember/tensor.h"

namespace ember::ops::cuda {

// Each returns false, having launched nothing, when it does not handle the case (dtype, head
// dim, alignment of pointers and strides, the mask's form); the caller then runs the generic
// kernels. `mask`: undefined, or the attn_mask as the front prepared it (Note [attention masks
// and dropout]: bool or f32, a [B, H, Tq, Tk] view with stride 0 on its broadcast dims).
bool flash_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Tensor& mask, bool causal, double scale);
bool flash_attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv, const Tensor& mask, bool causal, double scale);

}  // namespace ember::ops::cuda
