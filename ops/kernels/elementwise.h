#pragma once
#include "ember/ops/elementwise.h"
#include "dispatch.h"

// Preconditions the front guarantees: tensors on one device; unary: x and out have one shape
// and one dtype; binary: a and b have one dtype and broadcast to out's shape, out's dtype is
// that dtype or bool (comparisons); where: cond is bool; copy: src broadcasts to dst's shape,
// any two dtypes.
#define EMBER_ELEMENTWISE_KERNELS                                                         \
  void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& p); \
  void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);    \
  void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out); \
  void copy_kernel(const Tensor& dst, const Tensor& src);                                  \
  void fill_kernel(const Tensor& t, Scalar value);

EMBER_DECLARE_KERNELS(EMBER_ELEMENTWISE_KERNELS)
