// Elementwise ops (unary, binary with broadcasting, where), copies, casts and fills:
// the autograd-oblivious front. Each function validates its inputs, decides dtypes and the
// output shape, allocates, and calls the CPU or CUDA family driver.
#pragma once

#include "ember/ops/functors.h"
#include "ember/tensor.h"

namespace ember::ops {

#define EMBER_OP_ENUM(name, Functor, kind) name,
enum class UnaryOp : uint8_t { EMBER_UNARY_OPS(EMBER_OP_ENUM) };
enum class BinaryOp : uint8_t { EMBER_BINARY_OPS(EMBER_OP_ENUM) };
#undef EMBER_OP_ENUM

const char* op_name(UnaryOp op);
const char* op_name(BinaryOp op);

// PyTorch's result_type for two operands: dimensioned tensors outrank 0-dim tensors within a
// category (bool < integer < floating), so `f16_tensor * f32_scalar_tensor` stays f16.
DType result_type(const Tensor& a, const Tensor& b);
// The dtype `op` produces for these operands.
DType result_dtype(BinaryOp op, const Tensor& a, const Tensor& b);
DType result_dtype(UnaryOp op, DType input);

Tensor unary(UnaryOp op, const Tensor& x, UnaryParams params = {});
// out = op(x) into an existing tensor of x's shape (out may be x itself: in place).
void unary_out(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params = {});
// params: the parameters of a parameterized fused backward (leaky_relu_backward's slope).
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, UnaryParams params = {});
// out = op(a, b); out has the broadcast shape (out may be a: in place). The result is cast to
// out's dtype, which must be able to hold it (an f32 result cannot go into an i64 tensor).
void binary_out(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
// cond ? a : b with broadcasting; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// A 0-dim tensor holding `value`.
Tensor scalar_tensor(Scalar value, DType dtype, Device device);
// The operand a Scalar becomes next to `t`: t's dtype if the Scalar's category is not higher
// (int tensor + 2 -> int, float tensor + 2.5 -> float), otherwise the Scalar's default dtype.
Tensor wrap_scalar(Scalar value, const Tensor& t);

// dst[...] = src broadcast to dst's shape, converting dtype and crossing devices.
void copy_(const Tensor& dst, const Tensor& src, bool non_blocking = false);
Tensor contiguous(const Tensor& t);  // t itself when already contiguous
// t itself when it already has exactly `format`'s strides (Tensor::suggest_memory_format),
// else a dense copy in that layout.
Tensor contiguous(const Tensor& t, MemoryFormat format);
Tensor to(const Tensor& t, Device device, DType dtype, bool non_blocking = false);
void fill_(const Tensor& t, Scalar value);

}  // namespace ember::ops
