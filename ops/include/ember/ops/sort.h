// Sorting and scans (sort, topk, cumsum, cumprod, flip): the autograd-oblivious front. It
// validates dims and k, moves the sorted dim last (a copy only when it is not already the
// contiguous innermost dim) and hands the backend rows; the outputs are fresh contiguous
// tensors of the input's shape (topk: with size k along dim).
//
// Note [sort order]: every backend sorts by one strict total order, so CPU and CUDA agree
// element for element, ties included: NaN is greater than every number (all NaNs equal), -0.0
// equals 0.0, and equal keys keep their original order (a lower index first), in both
// directions. So sort is always stable (PyTorch's stable=true result, which its stable=false
// is allowed to return too), and topk returns the first k elements of that order: among equal
// values at the boundary, the lowest indices.
#pragma once

#include "ember/tensor.h"

namespace ember::ops {

// Values and i64 indices along `dim`; a 0-d input is one element (index 0).
ValuesIndices sort(const Tensor& x, int64_t dim, bool descending);
// The k largest (or smallest) along `dim`, 0 <= k <= size(dim); in sort order when `sorted`
// (ember also returns them in that order when not: PyTorch leaves it unspecified).
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted);

enum class ScanOp : uint8_t { cumsum, cumprod };
const char* op_name(ScanOp op);
// Inclusive scan along dim. Integer and bool inputs give i64 (as torch.cumsum/cumprod); floating
// inputs keep their dtype (the CPU accumulates f16/bf16/f32 in f64; CUDA accumulates f16/bf16 in f32, f32/f64 in f64).
Tensor scan(ScanOp op, const Tensor& x, int64_t dim);

// x reversed along each of `dims` (a copy, as torch.flip). Repeated dims are an error.
Tensor flip(const Tensor& x, const Shape& dims);

}  // namespace ember::ops
