#pragma once
#include "dispatch.h"
#include "ember/ops/indexing.h"

// Preconditions the front (ops/src/indexing.cpp) guarantees: all tensors on one device.
//  index_offset: off is i64 and contiguous; index (i64/i32) is a view with off's shape (stride
//                0 where broadcast). off += (v < 0 ? v + size : v) * stride for each index
//                value v; a v outside [-size, size) is IndexError naming `op` with dim and size
//                (CUDA: deferred, the element is left unchanged, so off stays in bounds).
//  index_gather: out is contiguous; src is a restrided view of x with out's shape (stride 0 on
//                the indexed dims); off is i64 with out's shape (stride 0 where broadcast);
//                src and out share a dtype. out[o] = src[o + off[o]] (off in elements).
//  index_put:    dst (restrided x) and values (x's dtype) and off have one shape;
//                dst[o + off[o]] = values[o]. values does not overlap dst. CPU: in order
//                (the last repeated index wins); CUDA: unordered.
//  nonzero_scan: x contiguous with n elements; pos i64 contiguous [n + 1]: pos[i] = number of
//                nonzero elements before i, pos[n] the total.
//  nonzero_fill: out i64 contiguous [pos[n], x.dim()]; row pos[i] = coordinates of element i
//                (row-major over x's shape) for every nonzero x[i].
#define EMBER_INDEXING_KERNELS                                                                   \
  void index_offset_kernel(const char* op, const Tensor& index, int64_t dim, int64_t size,       \
                           int64_t stride, const Tensor& off);                                   \
  void index_gather_kernel(const Tensor& src, const Tensor& off, const Tensor& out);             \
  void index_put_kernel(const Tensor& dst, const Tensor& off, const Tensor& values);             \
  void nonzero_scan_kernel(const Tensor& x, const Tensor& pos);                                  \
  void nonzero_fill_kernel(const Tensor& x, const Tensor& pos, const Tensor& out);

EMBER_DECLARE_KERNELS(EMBER_INDEXING_KERNELS)
