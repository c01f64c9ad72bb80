// Front of the fused classifier (Note [fused classifier memory] in ember/ops/classifier.h):
// validation, the logits GEMM (ops::linear, into the one [N, Vp] buffer), the fused row pass
// and the backward's two GEMMs with their scale. The drivers see [N, Vp] logits and [N]
// targets only.
#include "ember/ops/classifier.h"

#include <limits>

#include "ember/factory.h"
#include "ember/ops/elementwise.h"
#include "ember/ops/linalg.h"
#include "kernels/classifier.h"

namespace ember::ops {

namespace {

constexpr const char* kOp = "linear_cross_entropy";

// t (any shape, n elements) as a 1-D [n] tensor: a view when its dims fold, else a copy
// (targets are small).
Tensor as_rows_1d(const Tensor& t, int64_t n) {
  if (t.dim() == 1) return t;
  if (t.dim() == 0) return detail::make_view(t, {1}, {1}, t.storage_offset());
  const Tensor c = contiguous(t);
  return detail::make_view(c, {n}, {1}, c.storage_offset());
}

// x [..., C] as [N, C]: a view when x is 2-D or contiguous, else a contiguous copy.
Tensor as_rows_2d(const Tensor& x, int64_t n, int64_t c) {
  if (x.dim() == 2) return x;
  if (x.dim() == 1) return detail::make_view(x, {1, c}, {c * x.strides()[0], x.strides()[0]}, x.storage_offset());
  const Tensor xc = contiguous(x);
  return detail::make_view(xc, {n, c}, {c, 1}, xc.storage_offset());
}

}  // namespace

LinearCrossEntropyForward linear_cross_entropy_forward(const Tensor& x, const Tensor& weight,
                                                       const Tensor& target,
                                                       const LinearCrossEntropyParams& p,
                                                       bool keep_grad) {
  detail::check_defined(kOp, x, "input");
  detail::check_defined(kOp, weight, "weight");
  detail::check_defined(kOp, target, "target");
  detail::check_same_device(kOp, x, weight);
  detail::check_same_device(kOp, x, target);
  EMBER_CHECK(is_floating(x.dtype()), DTypeError, "[linear_cross_entropy] expects a floating-point input, got ",
              x.dtype());
  EMBER_CHECK(weight.dtype() == x.dtype(), DTypeError, "[linear_cross_entropy] input has dtype ", x.dtype(),
              " but weight has dtype ", weight.dtype(), " (convert one with to() first)");
  EMBER_CHECK(is_integral(target.dtype()) && target.dtype() != DType::b8, DTypeError,
              "[linear_cross_entropy] target must hold integer class indices (i64, i32 or u8), got ",
              target.dtype());
  EMBER_CHECK(weight.dim() == 2, ShapeError,
              "[linear_cross_entropy] weight must be 2-D [classes, in_features], got shape ", weight.sizes());
  const int64_t vp = weight.sizes()[0], c = weight.sizes()[1];
  EMBER_CHECK(x.dim() >= 1 && x.sizes()[size_t(x.dim() - 1)] == c, ShapeError,
              "[linear_cross_entropy] input of shape ", x.sizes(), " does not match weight of shape ",
              weight.sizes(), " (expected [..., ", c, "])");
  const Shape lead(x.sizes().data(), size_t(x.dim() - 1));
  EMBER_CHECK(target.sizes() == lead, ShapeError, "[linear_cross_entropy] input of shape ", x.sizes(),
              " needs a target of shape ", lead, ", got ", target.sizes());
  EMBER_CHECK(vp >= 1, ShapeError, "[linear_cross_entropy] weight of shape ", weight.sizes(), " has no classes");
  EMBER_CHECK(p.num_classes == -1 || (p.num_classes >= 1 && p.num_classes <= vp), ValueError,
              "[linear_cross_entropy] num_classes must be -1 (all) or in [1, ", vp, "] (weight rows), got ",
              p.num_classes);
  if (p.reduction == LossReduction::none)
    throw NotImplementedError(
        "[linear_cross_entropy] reduction none is not supported (only mean and sum: the fused "
        "backward scales whole GEMM results by one factor); use cross_entropy(linear(x, w), t) "
        "for per-row losses");
  const int64_t classes = p.num_classes == -1 ? vp : p.num_classes;
  const bool mean = p.reduction == LossReduction::mean;
  const DType st = stats_dtype(x.dtype());
  const int64_t n = lead.numel();

  LinearCrossEntropyForward out;
  out.loss = detail::make_tensor({}, st, x.device());
  if (n == 0) {  // PyTorch: the mean of no targets is NaN, their sum 0
    fill_(out.loss, mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    if (keep_grad) {
      out.dlogits = detail::make_tensor({0, vp}, x.dtype(), x.device());
      out.grad_factor = scalar_tensor(1.0, st, x.device());
    }
    return out;
  }
  // The one [N, Vp] buffer: a fresh contiguous GEMM output (offset 0, 16-byte aligned).
  const Tensor logits = linear(x, weight);
  const Tensor l2 = detail::make_view(logits, {n, vp}, {vp, 1}, 0);
  if (keep_grad) out.grad_factor = detail::make_tensor({}, st, x.device());
  EMBER_DISPATCH_KERNEL(x.device(), linear_cross_entropy_fwd_kernel, l2, as_rows_1d(target, n), out.loss,
                        out.grad_factor, classes, p.ignore_index, mean, keep_grad);
  if (keep_grad) out.dlogits = l2;
  return out;
}

LinearCrossEntropyBackward linear_cross_entropy_backward(const Tensor& grad, const Tensor& x,
                                                         const Tensor& weight,
                                                         const Tensor& dlogits,
                                                         const Tensor& grad_factor,
                                                         std::array<bool, 2> needs) {
  const char* op = "linear_cross_entropy_backward";
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, dlogits, "dlogits");
  detail::check_defined(op, grad_factor, "gradient factor");
  for (const Tensor* t : {&x, &weight, &dlogits, &grad_factor}) detail::check_same_device(op, grad, *t);
  EMBER_CHECK(grad.numel() == 1 && is_floating(grad.dtype()), ShapeError, "[", op,
              "] expects the gradient of a scalar loss, got ", grad.dtype(), " ", grad.sizes());
  const DType st = stats_dtype(x.dtype());
  const int64_t vp = weight.sizes()[0], c = weight.sizes()[1];
  int64_t n = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) n *= x.sizes()[size_t(d)];
  EMBER_CHECK(dlogits.sizes() == (Shape{n, vp}) && dlogits.dtype() == x.dtype() && dlogits.is_contiguous() &&
                  grad_factor.numel() == 1 && grad_factor.dtype() == st,
              ValueError, "[", op, "] dlogits must be the forward's contiguous ", x.dtype(), " [", n, ", ", vp,
              "] and the factor its ", st, " scalar, got ", dlogits.dtype(), " ", dlogits.sizes(), " and ",
              grad_factor.dtype(), " ", grad_factor.sizes());
  const Tensor g = to(grad, grad.device(), st);  // grad itself when already st
  // The scale g * factor (1/count for the mean; g holds a GradScaler's loss scale) goes on the
  // GEMM results: one pass over [N, C] and [Vp, C] instead of [N, Vp]. Not in f16 (at most
  // 65504): dW of a frequent class sums N rows of (p - 1) x, which overflows in the GEMM's f16
  // output before any later scale, and a GradScaler would skip every step however far it
  // backed off. There dlogits is scaled first, into a copy (the saved one must serve a second
  // backward), the order of the unfused cross_entropy + linear backward: issue 40, item 9.
  const bool scale_first = x.dtype() == DType::f16;
  Tensor d = dlogits;
  if (scale_first && d.numel() > 0) {
    d = empty_like(dlogits);  // ops-level copy: Tensor::clone is autograd's (Note [Tensor methods])
    copy_(d, dlogits);
    EMBER_DISPATCH_KERNEL(x.device(), linear_cross_entropy_scale_kernel, d, g, grad_factor);
  }
  auto scale_result = [&](const Tensor& r) {
    if (!scale_first && r.numel() > 0)
      EMBER_DISPATCH_KERNEL(x.device(), linear_cross_entropy_scale_kernel, r, g, grad_factor);
  };
  LinearCrossEntropyBackward out;
  if (needs[0]) {
    Tensor dx = matmul(d, weight);  // [N, C]
    scale_result(dx);
    out.dx = detail::make_view(dx, x.sizes(), contiguous_strides(x.sizes()), 0);
  }
  if (needs[1]) {
    const Tensor dlt = detail::make_view(d, {vp, n}, {1, vp}, d.storage_offset());
    out.dweight = matmul(dlt, as_rows_2d(x, n, c));  // [Vp, C]
    scale_result(out.dweight);
  }
  return out;
}

}  // namespace ember::ops
