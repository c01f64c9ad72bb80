// Linear algebra: matmul (torch.matmul semantics) and linear (x @ w^T + b), the
// autograd-oblivious front. Shapes, dtypes and devices are validated here; the backend's
// batched GEMM kernel only multiplies.
#pragma once

#include "ember/tensor.h"

namespace ember::ops {

// torch.matmul: 1-D x 1-D is a dot product (0-dim result); a 1-D operand is promoted to a
// matrix (a row on the left, a column on the right) and that dim is dropped from the result;
// dims before the last two are batch dims and broadcast. Both operands must have one dtype
// (no promotion, as in PyTorch); bool is rejected.
Tensor matmul(const Tensor& a, const Tensor& b);

// x[..., in] @ weight[out, in]^T + bias[out] -> [..., out], as torch.nn.functional.linear.
// One GEMM over the flattened leading dims; the bias (optional) is added by the GEMM itself
// (CUDA: cuBLASLt's bias epilogue; CPU: it seeds the output, which the GEMM accumulates into).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// The shape matmul(a, b) produces (throws the same errors matmul would).
Shape matmul_shape(const Shape& a, const Shape& b);

}  // namespace ember::ops
