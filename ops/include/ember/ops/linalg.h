// Linear algebra: matmul (torch.matmul semantics) and linear (x @ w^T + b), the
// autograd-oblivious front. Shapes, dtypes and devices are validated here; the backend's
// batched GEMM kernel only multiplies.
#pragma once

#include <utility>

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

// The fused pieces of a GELU MLP and of linear's backward: one GEMM each, with the rest done
// in the GEMM's epilogue (CUDA: cuBLASLt's GELU_AUX_BIAS, DGELU_BGRAD and BGRADB epilogues,
// or the unfused composite where cuBLASLt has no algorithm; CPU: the GEMM and one fused
// pass). The GELU is the tanh approximation (GPT-2's). Leading dims are flattened as linear
// does; all tensors share one dtype (floating) and one device.
//
// {gelu_tanh(pre), pre} with pre = linear(x, weight, bias), each [..., out_features]; bias
// is required.
std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias);
// The backward of y = linear(gelu_tanh(pre), weight) into pre: {dpre, dbias} with
// dpre = (grad @ weight) * gelu_tanh'(pre) [..., in_features] and dbias = dpre summed over
// the leading dims [in_features] (the gradient of the bias that produced pre). grad is
// [..., out_features], weight [out_features, in_features], pre [..., in_features].
std::pair<Tensor, Tensor> linear_dgelu_bgrad(const Tensor& grad, const Tensor& weight, const Tensor& pre);
// linear's parameter gradients: {dweight, dbias} with dweight = grad^T @ x over the flattened
// leading dims [out_features, in_features] and dbias = grad summed over them [out_features]
// (undefined unless with_bias). grad is [..., out_features], x [..., in_features].
std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& grad, const Tensor& x, bool with_bias);

// The shape matmul(a, b) produces (throws the same errors matmul would).
Shape matmul_shape(const Shape& a, const Shape& b);

}  // namespace ember::ops
