// Rotary position embeddings (RoPE), the autograd-oblivious front: validation, the contiguous
// output, and the CPU or CUDA driver (ops/cpu/rope.cpp, ops/cuda/rope.cu).
//
// Convention: Hugging Face Llama's rotate_half (the two halves of the head dim are the pair),
// not Meta's interleaved pairs. For i < D/2, c = cos[t, i], s = sin[t, i]:
//   out[..., i]       = x[..., i] * c - x[..., i + D/2] * s
//   out[..., i + D/2] = x[..., i + D/2] * c + x[..., i] * s
// i.e. HF's x * cos + rotate_half(x) * sin with cos/sin repeated over both halves.
//
// Precision: f16/bf16 compute in f32 and round once on store; f32 and f64 in their own type.
#pragma once

#include "ember/tensor.h"

namespace ember::ops {

// x [B, T, H, D] (any strides, D even, floating); cos and sin [T, D/2] (any strides), f32 for
// any x or f64 for an f64 x. Returns a contiguous [B, T, H, D] tensor in x's dtype. inverse:
// the rotation by -angle (s -> -s), which is the rotation's transpose: the VJP of the forward.
// Errors: "[rotary_embedding] ..." (ShapeError, DTypeError, DeviceError).
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin,
                        bool inverse = false);

}  // namespace ember::ops
