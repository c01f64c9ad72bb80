#include "kernels/elementwise.h"

namespace ember::ops::cuda {
void unary_kernel(UnaryOp, const Tensor&, const Tensor&, const UnaryParams&) { EMBER_NO_CUDA("unary"); }
void binary_kernel(BinaryOp, const Tensor&, const Tensor&, const Tensor&, const UnaryParams&) { EMBER_NO_CUDA("binary"); }
void where_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&) { EMBER_NO_CUDA("where"); }
void copy_kernel(const Tensor&, const Tensor&) { EMBER_NO_CUDA("copy"); }
void fill_kernel(const Tensor&, Scalar) { EMBER_NO_CUDA("fill"); }
void arange_kernel(const Tensor&, const ArangeTerms&) { EMBER_NO_CUDA("arange"); }
}  // namespace ember::ops::cuda
