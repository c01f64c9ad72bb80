// SwiGLU, silu(gate) * up (the Llama MLP's gating), fused: the forward reads gate and up once
// and writes the output once; the backward reads grad, gate and up once and writes both input
// gradients in the same pass (the composite silu, mul and their VJPs would make 3 passes
// forward and about 5 backward). Drivers: ops/cpu/swiglu.cpp, ops/cuda/swiglu.cu.
//
// Precision: f16/bf16 compute in f32 and round once on store; f32 and f64 in their own type.
#pragma once

#include <array>

#include "ember/tensor.h"

namespace ember::ops {

// gate and up: equal shapes, one floating dtype, one device, any strides. Returns silu(gate) *
// up, contiguous, in their dtype. Errors: "[swiglu] ...".
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);

struct SwigluBackward {
  Tensor dgate, dup;  // contiguous in the inputs' dtype; undefined where not requested
};
// With sig = sigmoid(gate):  dgate = grad * up * sig * (1 + gate * (1 - sig)),
//                            dup = grad * gate * sig.
// grad: the inputs' shape (any strides; cast to their dtype when it differs).
SwigluBackward swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                               std::array<bool, 2> needs);

}  // namespace ember::ops
