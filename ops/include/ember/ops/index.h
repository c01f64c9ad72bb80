// Indexing and joining ops (cat, index_select, gather, scatter_add, index_add, embedding,
// tril/triu, dropout masks): the autograd-oblivious front. Each function validates its
// inputs (shapes, dtypes, devices), allocates a contiguous output and calls the CPU or CUDA
// driver. Index tensors are i64 or i32; an index outside [0, size) is an IndexError naming
// the value (negative indices are not wrapped, as in PyTorch's index_select/gather).
#pragma once

#include "ember/random.h"
#include "ember/tensor.h"

namespace ember::ops {

// Concatenation along `dim` (negative counts from the end) with dtype promotion across the
// inputs. 1-D empty tensors ([0]) are skipped, as PyTorch's legacy rule allows.
Tensor cat(const TensorList& tensors, int64_t dim);
// True for the inputs cat ignores (1-D, size 0).
inline bool cat_skips(const Tensor& t) { return t.dim() == 1 && t.sizes()[0] == 0; }

// x's dim `dim` indexed by a 0-d or 1-D index: out.size(dim) = index.numel().
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// Zeros of `sizes` with src's slices along dim accumulated at rows index[j] (the VJP of
// index_select; deterministic for repeated indices).
Tensor index_add_into_zeros(const Tensor& src, int64_t dim, const Tensor& index, const Shape& sizes);
// out[..i..] = x[..index[..i..]..] along dim; index has x's rank, out has index's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// x + src scattered along dim at index (out-of-place; x is not modified).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);

// weight [V, D], indices of any shape -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// grad [..., D] accumulated into zeros [num_weights, D] at rows `indices` (deterministic).
Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights);

// Lower/upper triangle of the last two dims (batched over the leading ones): tril keeps
// j - i <= diagonal, triu keeps j - i >= diagonal.
Tensor tril(const Tensor& x, int64_t diagonal);
Tensor triu(const Tensor& x, int64_t diagonal);

// A bool keep-mask of `sizes` (true with probability 1 - p) from Philox state `s`; see
// Note [dropout Philox layout] in ops/cpu/index.cpp. dropout_counters(n) counters are used.
Tensor dropout_mask(const Shape& sizes, Device device, Generator::State s, double p);
inline uint64_t dropout_counters(int64_t n) { return uint64_t(n + 3) / 4; }
// x * scale where mask is true, 0 elsewhere (mask is bool with x's shape; x floating).
Tensor masked_scale(const Tensor& x, const Tensor& mask, double scale);

}  // namespace ember::ops
