// Tensor-core (mma.sync) FlashAttention-2 forward and backward for f16/bf16 (ops/cuda/
// flash_attention.cu), called first by the attention family's CUDA driver (attention.cu).
// Operands follow the strided contract of ops/kernels/attention.h.
#pragma once

#include "ember/tensor.h"

namespace ember::ops::cuda {

// Each returns false, having launched nothing, when it does not handle the case (dtype, head
// dim, alignment of pointers and strides); the caller then runs the generic kernels.
bool flash_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, bool causal, double scale);
bool flash_attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv, bool causal, double scale);

}  // namespace ember::ops::cuda
