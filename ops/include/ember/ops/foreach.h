// Multi-tensor ("foreach") ops: one call over a whole list of tensors, as PyTorch's
// torch._foreach_* functions, autograd-oblivious (callers hold a NoGradGuard or work on
// gradients, like clip_grad_norm_ and the optimizers). On CUDA a call is a few kernel launches
// whatever the list's length (a table of pointers and sizes passed as a kernel parameter:
// ops/cuda/multi_tensor.cuh), instead of one or more per tensor; on the CPU it is one OpenMP
// pass over the elements of every tensor.
//
// Invariants the callers rely on:
// - Every tensor of a list is defined, floating-point (any mix of f16, bf16, f32, f64) and on
//   one device; tensors with no elements are allowed and contribute nothing. Any strides work
//   (non-contiguous tensors go through a contiguous copy or a per-tensor op).
// - Nothing waits on the host: results stay on the device, scalars are read on the device.
// - Results are deterministic: a fixed function of the list's sizes and values, bit for bit
//   from run to run (sums are combined in an order fixed by the sizes, never by atomics), on
//   the CPU independently of the thread count too.
#pragma once

#include <vector>

#include "ember/tensor.h"

namespace ember::ops {

// The norm of order `ord` of all elements of all tensors together (as if they were
// concatenated), as a 0-dim tensor on their device: f64 when any tensor is f64, else f32.
//   ord = 2:    sqrt(sum x^2);  ord = 1: sum |x|;  ord = inf: max |x| (0 when there are no
//               elements; NaN when any element is NaN)
// computed in one pass: per-chunk partial sums in the accumulation type (f32 for 16-bit and
// f32 inputs on CUDA, f64 on the CPU and for f64 inputs), combined in a fixed order, rounded
// once. Other orders (-inf, 0, any p) are computed per tensor and combined:
//   ord = -inf: min |x|;  ord = 0: the number of non-zero elements;  else (sum |x|^p)^(1/p).
// Unlike torch.stack([norm(t) for t in tensors]).norm(), a 16-bit tensor's own norm is
// never rounded to 16 bits on the way.
// With no elements at all the result is 0 (+inf for ord = -inf).
// Throws ValueError for an empty list, DTypeError for a non-floating tensor, DeviceError
// for tensors on several devices, ValueError for a NaN ord.
Tensor foreach_norm(const std::vector<Tensor>& tensors, double ord = 2);

// tensors[i] *= scalar for every i, in place (versions bumped). `scalar` is a 0-dim floating
// tensor on the tensors' device, read there (no host read, so the call may be captured in a
// CUDA graph and replays with the value current at each replay), or on the CPU (read on the
// host, as a CPU scalar operand of mul_ is). Each tensor's result equals tensors[i].mul_(scalar): the scalar
// is rounded to the tensor's dtype, the product computed in the compute type (f32 for 16-bit
// tensors) and rounded once.
void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scalar);

}  // namespace ember::ops
