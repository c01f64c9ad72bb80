#pragma once
#include "dispatch.h"
#include "ember/ops/index.h"

// Preconditions the front (ops/src/index.cpp) guarantees: all tensors on one device; every
// output is freshly allocated and contiguous; dim is wrapped (0 <= dim < rank).
//  cat:          inputs (the skipped [0]-shaped ones removed) match out's shape except along
//                dim; their dtypes may differ from out's (the kernel converts).
//  index_select: x and out share a dtype; index is i32/i64, contiguous, 1-D; out.size(dim) =
//                index.numel(). Out-of-range indices throw IndexError naming `op`.
//  index_add:    out += src's slices at rows index[j] along dim; out and src share a dtype
//                (not bool) and match except along dim; index as for index_select.
//                Deterministic: each out element is accumulated by one thread in j order.
//  gather:       x, index, out of one rank; index i32/i64 with out's shape; x and out share
//                a dtype; index.size(d) <= x.size(d) for d != dim.
//  scatter_add:  out (already holding x) += src at index along dim; out and src share a
//                dtype (not bool); index.size(d) <= src.size(d) for all d and
//                <= out.size(d) for d != dim. Deterministic as index_add.
//  tri:          x and out share shape and dtype, rank >= 2.
//  dropout_mask: mask is contiguous bool.
//  masked_scale: x floating, mask bool, both out's shape; out has x's dtype.
#define EMBER_INDEX_KERNELS                                                                    \
  void cat_kernel(const TensorList& inputs, int64_t dim, const Tensor& out);                   \
  void index_select_kernel(const char* op, const Tensor& x, int64_t dim, const Tensor& index, \
                           const Tensor& out);                                                 \
  void index_add_kernel(const char* op, const Tensor& out, int64_t dim, const Tensor& index,   \
                        const Tensor& src);                                                    \
  void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out);    \
  void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index,                \
                          const Tensor& src);                                                  \
  void tri_kernel(const Tensor& x, const Tensor& out, int64_t diagonal, bool upper);          \
  void dropout_mask_kernel(const Tensor& mask, Generator::State s, double p);                 \
  void masked_scale_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out);

EMBER_DECLARE_KERNELS(EMBER_INDEX_KERNELS)
