// Advanced indexing (PyTorch's at::index / index_put_), nonzero and from_blob: the
// autograd-oblivious front. Basic indices (integers, slices, None, Ellipsis) are views and
// are applied by the caller (autograd/src/indexing.cpp); what reaches here is one entry per
// leading dim of x, undefined for "the whole dim", an integer (i64/i32) or a bool mask
// tensor otherwise.
//
// Note [advanced index placement]: the index tensors (masks replaced by the columns of their
// nonzero()) broadcast to one shape B. If the dims they index are adjacent, B takes their place
// in the result (x [2, 3, 4, 5], idx [6] at dims 1 and 2 -> [2, 6, 5]); otherwise B goes first,
// followed by the remaining dims in order (dims 0 and 2 -> [6, 3, 5]). Negative index values
// count from the end; values outside [-size, size) are IndexError "[op] index v is out of
// range for dim d of size s" (on CUDA raised at the next synchronization: Note [deferred
// device checks]).
#pragma once

#include <functional>
#include <optional>

#include "ember/tensor.h"

namespace ember::ops {

// Replaces each bool/u8 mask by the i64 columns of nonzero(mask) (one per mask dim), after
// checking that the mask's shape matches the dims it covers; integer entries are checked
// (i64 or i32) and kept. The result has at most x.dim() entries. On CUDA, a mask costs one
// host synchronization (nonzero's count).
TensorList expand_index_masks(const char* op, const Shape& x_sizes, const TensorList& indices);
// x[indices] as a new contiguous tensor (indices as after expand_index_masks, at least one
// defined).
Tensor index(const Tensor& x, const TensorList& indices);
// x[indices] = values (accumulate: +=) in x's memory; values are converted to x's dtype and
// broadcast to the shape index(x, indices) has. Without accumulate, repeated indices keep one
// of their values (the last on the CPU; unspecified on CUDA, as in PyTorch). With accumulate,
// repeated indices sum deterministically (index_add's order).
void index_put_(const Tensor& x, const TensorList& indices, const Tensor& values, bool accumulate);
// The shape index(x, indices) has.
Shape index_result_shape(const Shape& x_sizes, const TensorList& indices, const char* op);

// [n, x.dim()] i64: the coordinates of x's nonzero elements in row-major order. On CUDA the
// count needs the one host synchronization PyTorch also makes (the output's size depends on
// it): do not call it inside a training step's hot path or a graph capture.
Tensor nonzero(const Tensor& x);

// A tensor over memory the caller owns: no copy. strides default to contiguous; deleter (may
// be empty) runs once, when the last tensor or view of the memory is gone.
Tensor from_blob(void* data, const Shape& sizes, const std::optional<Shape>& strides,
                 std::function<void(void*)> deleter, DType dtype, Device device);

}  // namespace ember::ops
