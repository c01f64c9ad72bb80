#pragma once
#include "ember/ops/reduce.h"
#include "dispatch.h"

// Preconditions the front guarantees: `in` is a 3-D view [O, R, K]; either K == 1 and
// stride(1) == 1 (each output reduces one contiguous run: "rows"), or stride(2) == 1 (outputs
// are contiguous columns of a strided stack of rows: "columns"). R may be 0 only for ops with
// an identity (sum, mean, var, std, finite-p norm). Outputs are contiguous with O*K elements
// (flat index o*K + k) of dtype reduce_result_dtype(op, in.dtype()) (values: in's dtype;
// indices: i64; an index counts along R). Results must not depend on the thread count.
#define EMBER_REDUCE_KERNELS                                                                    \
  void reduce_kernel(ReduceOp op, const Tensor& in, const Tensor& out, const ReduceParams& p); \
  void arg_reduce_kernel(bool is_max, const Tensor& in, const Tensor& values,                  \
                         const Tensor& indices);

EMBER_DECLARE_KERNELS(EMBER_REDUCE_KERNELS)
