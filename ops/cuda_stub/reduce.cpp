#include "kernels/reduce.h"

namespace ember::ops::cuda {
void reduce_kernel(ReduceOp op, const Tensor&, const Tensor&, const ReduceParams&) {
  throw NotImplementedError(str("[", op_name(op), "] has no CUDA implementation in this build"));
}
void arg_reduce_kernel(bool is_max, const Tensor&, const Tensor&, const Tensor&) {
  if (is_max) EMBER_NO_CUDA("max");
  EMBER_NO_CUDA("min");
}
}  // namespace ember::ops::cuda
