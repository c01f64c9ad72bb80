#pragma once
#include "ember/ops/sort.h"
#include "dispatch.h"

// Preconditions the front guarantees (Note [sort order] in ember/ops/sort.h):
// - sort: `in` is [M, N] with unit stride along N (any row stride), M, N > 0; values [M, N]
//   (in's dtype) and indices [M, N] (i64) are contiguous.
// - topk: `in` as for sort; values/indices [M, k] contiguous, 0 < k <= N; they hold the first
//   k elements of the row's order (descending when `largest`), in that order.
// - scan: `in` is a 3-D view [O, N, K] (any strides) of out's dtype; out [O, N, K] contiguous;
//   out[o, n, k] = in[o, 0, k] op ... op in[o, n, k]. O, N, K > 0.
#define EMBER_SORT_KERNELS                                                              \
  void sort_kernel(const Tensor& in, const Tensor& values, const Tensor& indices,       \
                   bool descending);                                                    \
  void topk_kernel(const Tensor& in, const Tensor& values, const Tensor& indices,       \
                   bool largest);                                                       \
  void scan_kernel(ScanOp op, const Tensor& in, const Tensor& out);

EMBER_DECLARE_KERNELS(EMBER_SORT_KERNELS)
