// Reductions (sum, mean, amax/amin, var/std, norm, max/min with indices, argmax/argmin): the
// autograd-oblivious front. It validates dims and dtypes, computes the output shape, and
// presents the input to the backend as a 3-D strided view [O, R, K]: output element o*K + k
// reduces the R elements in[o, :, k]. No copy is made when the reduced dims already form one
// strided run next to contiguous kept dims (Note [reduce geometry] in ops/src/reduce.cpp).
//
// PyTorch semantics: an empty dims list reduces every dim; negative dims wrap; a repeated dim
// is an error; sum of an integer or bool tensor is i64; mean/var/std/norm need a floating
// input; max/min/amax/amin/argmax/argmin over an empty dim are errors.
#pragma once

#include <optional>

#include "ember/tensor.h"

namespace ember::ops {

enum class ReduceOp : uint8_t { sum, mean, amax, amin, var, std, norm };
const char* op_name(ReduceOp op);

struct ReduceParams {
  int64_t correction = 1;  // var, std: divide by (count - correction), as torch.var
  double p = 2;            // norm: 2, 1, inf, -inf, 0 (count of non-zeros) or any other p
};

// The reduced dims of an ndim-d tensor: wrapped, sorted ascending, every dim when `dims` is
// empty (none for a 0-d tensor). IndexError for a dim out of range, ValueError for a repeat.
Shape reduce_dims(const char* op, const Shape& dims, int64_t ndim);
// The output shape of reducing `sizes` over `rdims` (from reduce_dims).
Shape reduce_shape(const Shape& sizes, const Shape& rdims, bool keepdim);
// How many input elements each output element reduces.
int64_t reduce_count(const Shape& sizes, const Shape& rdims);
// The output dtype; throws DTypeError when `op` does not accept `input`.
DType reduce_result_dtype(ReduceOp op, DType input);

Tensor reduce(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim,
              const ReduceParams& params = {});

// max (is_max) or min along `dim`, or over all dims when it is nullopt (the index then
// counts elements of the flattened, row-major tensor). Ties and NaNs resolve to the first
// index. The values are computed only when `want_values` (max/min(dim) vs argmax/argmin).
ValuesIndices arg_reduce(bool is_max, const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                         bool want_values);

}  // namespace ember::ops
