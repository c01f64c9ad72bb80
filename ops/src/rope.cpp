// Front of rotary_embedding: validation, cos/sin as contiguous compute-type tables (they are
// [T, D/2], tiny next to x, so converting them costs nothing), and the contiguous output. x
// itself is read in place through its strides (q and k usually arrive as views of a fused
// projection), so no copy of x is made.
#include "ember/ops/rope.h"

#include "ember/ops/elementwise.h"
#include "ember/ops/nn.h"
#include "kernels/rope.h"

namespace ember::ops {

namespace {

Tensor table_arg(const char* op, const Tensor& t, const char* what, const Tensor& x) {
  detail::check_defined(op, t, what);
  detail::check_same_device(op, x, t);
  const int64_t T = x.sizes()[1], half = x.sizes()[3] / 2;
  EMBER_CHECK(t.dim() == 2 && t.sizes()[0] == T && t.sizes()[1] == half, ShapeError, "[", op,
              "] ", what, " of shape ", t.sizes(), " must have shape [T, D/2] = [", T, ", ", half,
              "] for x of shape ", x.sizes(), " (narrow the table to the positions of x)");
  EMBER_CHECK(t.dtype() == DType::f32 || (t.dtype() == DType::f64 && x.dtype() == DType::f64),
              DTypeError, "[", op, "] ", what, " has dtype ", t.dtype(), " but must be f32 (or f64 "
              "for an f64 x); x has dtype ", x.dtype());
  const DType c = stats_dtype(x.dtype());
  return contiguous(t.dtype() == c ? t : to(t, t.device(), c));
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse) {
  const char* op = "rotary_embedding";
  detail::check_defined(op, x);
  EMBER_CHECK(is_floating(x.dtype()), DTypeError, "[", op,
              "] expects a floating-point x, got ", x.dtype());
  EMBER_CHECK(x.dim() == 4, ShapeError, "[", op, "] expects x of shape [B, T, H, D], got ",
              x.sizes());
  EMBER_CHECK(x.sizes()[3] % 2 == 0, ShapeError, "[", op,
              "] expects an even head dim D (the last dim of x), got x of shape ", x.sizes());
  const Tensor c = table_arg(op, cos, "cos", x);
  const Tensor s = table_arg(op, sin, "sin", x);
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (x.numel() == 0) return out;
  if (inverse) EMBER_DISPATCH_KERNEL(x.device(), rope_bwd_kernel, x, c, s, out);
  else EMBER_DISPATCH_KERNEL(x.device(), rope_fwd_kernel, x, c, s, out);
  return out;
}

}  // namespace ember::ops
