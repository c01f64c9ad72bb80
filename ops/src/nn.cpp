// Front of the fused nn family: validation, dtypes, output allocation and the views that give
// the drivers one canonical geometry (softmax: >= 1-D; cross-entropy: [N, C] logits and [N]
// targets; layer norm: contiguous [rows, cols]). The drivers never see a 0-dim tensor.
#include "ember/ops/nn.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "ember/ops/elementwise.h"
#include "kernels/nn.h"

namespace ember::ops {

namespace {

// A 0-dim tensor seen as [1] (same storage), so drivers only handle >= 1-D tensors.
Tensor as_1d(const Tensor& t) {
  return t.dim() == 0 ? detail::make_view(t, {1}, {1}, t.storage_offset()) : t;
}

Tensor cast(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : to(t, t.device(), dtype);
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] expects a floating-point ", what,
              ", got ", t.dtype(), " (convert it with to() first)");
}

Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  detail::check_defined(op, x);
  check_floating(op, x, "input");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (x.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), softmax_fwd_kernel, as_1d(x), as_1d(out), d, log);
  return out;
}

Tensor softmax_backward_impl(const Tensor& grad, const Tensor& y, int64_t dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, y, "output");
  detail::check_same_device(op, grad, y);
  check_floating(op, y, "output");
  EMBER_CHECK(grad.sizes() == y.sizes(), ShapeError, "[", op, "] gradient of shape ",
              grad.sizes(), " does not match the output shape ", y.sizes());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(y.dim(), 1), op);
  Tensor g = cast(grad, y.dtype());
  Tensor dx = detail::make_tensor(y.sizes(), y.dtype(), y.device());
  if (y.numel() == 0) return dx;
  EMBER_DISPATCH_KERNEL(y.device(), softmax_bwd_kernel, as_1d(g), as_1d(y), as_1d(dx), d, log);
  return dx;
}

// Logits as [N, C] and targets as [N] (a [C] / [] pair is one row).
Tensor logits_2d(const Tensor& logits) {
  if (logits.dim() == 2) return logits;
  const int64_t s = logits.strides()[0];
  return detail::make_view(logits, {1, logits.sizes()[0]}, {logits.sizes()[0] * s, s},
                           logits.storage_offset());
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_forward(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_forward(x, dim, true); }
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(grad, y, dim, false);
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return softmax_backward_impl(grad, y, dim, true);
}

// ---- cross-entropy ----

CrossEntropyForward cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                          const CrossEntropyParams& p) {
  detail::check_defined("cross_entropy", logits, "logits");
  detail::check_defined("cross_entropy", target, "target");
  detail::check_same_device("cross_entropy", logits, target);
  check_floating("cross_entropy", logits, "logits tensor");
  EMBER_CHECK(is_integral(target.dtype()), DTypeError,
              "[cross_entropy] target must hold integer class indices (i64, i32 or u8), got ",
              target.dtype());
  EMBER_CHECK(logits.dim() == 1 || logits.dim() == 2, ShapeError,
              "[cross_entropy] logits must be [N, C] or [C], got shape ", logits.sizes());
  const Shape want = logits.dim() == 2 ? Shape{logits.sizes()[0]} : Shape{};
  EMBER_CHECK(target.sizes() == want, ShapeError, "[cross_entropy] logits of shape ",
              logits.sizes(), " need a target of shape ", want, ", got ", target.sizes());
  const int64_t classes = logits.sizes()[logits.dim() - 1];
  EMBER_CHECK(classes > 0, ShapeError, "[cross_entropy] logits of shape ", logits.sizes(),
              " have no classes");
  EMBER_CHECK(p.label_smoothing >= 0.0 && p.label_smoothing <= 1.0, ValueError,
              "[cross_entropy] label_smoothing must be in [0, 1], got ", p.label_smoothing);

  Tensor l2 = logits_2d(logits);
  const int64_t n = l2.sizes()[0];
  CrossEntropyForward out;
  const bool none = p.reduction == LossReduction::none;
  out.loss = detail::make_tensor(none ? target.sizes() : Shape{}, logits.dtype(), logits.device());
  out.row_max = detail::make_tensor({n}, stats_dtype(logits.dtype()), logits.device());
  out.log_sum = detail::make_tensor({n}, stats_dtype(logits.dtype()), logits.device());
  if (n == 0) {  // PyTorch: the mean of no targets is NaN, their sum 0
    if (!none)
      fill_(out.loss, p.reduction == LossReduction::mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return out;
  }
  Tensor loss = none ? as_1d(out.loss) : out.loss;
  EMBER_DISPATCH_KERNEL(logits.device(), cross_entropy_fwd_kernel, l2, as_1d(target), loss,
                        out.row_max, out.log_sum, p);
  return out;
}

namespace {
// A forward's per-row statistic handed back to its backward (the kernel reads it as a dense
// array): contiguous, of the statistics dtype of `data`, [rows].
void check_row_stats(const char* op, const char* what, const Tensor& t, int64_t rows, DType data) {
  EMBER_CHECK(t.sizes() == Shape{rows} && t.dtype() == stats_dtype(data) && t.is_contiguous(), ValueError, "[",
              op, "] ", what, " must be contiguous ", stats_dtype(data), " [", rows, "] (the forward's), got ",
              t.dtype(), " ", t.sizes());
}
}  // namespace

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& row_max, const Tensor& log_sum,
                              const CrossEntropyParams& p) {
  const char* op = "cross_entropy_backward";
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, target, "target");
  detail::check_defined(op, row_max, "row maxima");
  detail::check_defined(op, log_sum, "row log-sums");
  // Every operand a kernel reads must be where it runs: a CPU pointer handed to a CUDA kernel
  // is read as a device address.
  for (const Tensor* t : {&logits, &target, &row_max, &log_sum}) detail::check_same_device(op, grad, *t);
  EMBER_CHECK(is_integral(target.dtype()) && target.dtype() != DType::b8, DTypeError, "[", op,
              "] expects integer class targets, got ", target.dtype());
  const int64_t n = logits.dim() == 2 ? logits.sizes()[0] : 1;
  EMBER_CHECK(target.numel() == n, ShapeError, "[", op, "] target of shape ", target.sizes(),
              " does not match logits of shape ", logits.sizes());
  for (const Tensor* t : {&row_max, &log_sum}) check_row_stats(op, "row statistics", *t, n, logits.dtype());
  const bool none = p.reduction == LossReduction::none;
  const Shape want = none ? target.sizes() : Shape{};
  EMBER_CHECK(grad.sizes() == want, ShapeError, "[cross_entropy_backward] gradient of shape ",
              grad.sizes(), " does not match the loss shape ", want);
  Tensor dlogits = detail::make_tensor(logits.sizes(), logits.dtype(), logits.device());
  if (dlogits.numel() == 0) return dlogits;
  Tensor g = cast(grad, logits.dtype());
  EMBER_DISPATCH_KERNEL(logits.device(), cross_entropy_bwd_kernel, none ? as_1d(g) : g,
                        logits_2d(logits), as_1d(target), row_max, log_sum, logits_2d(dlogits), p);
  return dlogits;
}

// ---- layer norm ----

namespace {
// weight/bias of a layer norm whose normalized input has dtype `dtype` and lives on `like`'s
// device.
void check_affine(const char* op, const Tensor& t, const char* what, const Tensor& like, DType dtype,
                  const Shape& ns) {
  if (!t.defined()) return;
  detail::check_same_device(op, like, t);
  EMBER_CHECK(t.sizes() == ns, ShapeError, "[", op, "] ", what, " of shape ", t.sizes(),
              " must have the normalized shape ", ns);
  EMBER_CHECK(t.dtype() == dtype, DTypeError, "[", op, "] ", what, " has dtype ", t.dtype(),
              " but the input has dtype ", dtype);
}

// The rows layer_norm normalizes (the product of the dims before normalized_shape), after
// checking that normalized_shape is the input's trailing dims: the forward and the backward
// count them one way.
int64_t layer_norm_rows(const char* op, const Tensor& x, const Shape& ns) {
  const int64_t k = int64_t(ns.size());
  EMBER_CHECK(k >= 1, ShapeError, "[", op, "] normalized_shape must name at least one dim");
  bool suffix = x.dim() >= k;
  for (int64_t i = 0; suffix && i < k; ++i) suffix = x.sizes()[x.dim() - k + i] == ns[i];
  EMBER_CHECK(suffix, ShapeError, "[", op, "] normalized_shape ", ns,
              " does not match the trailing dims of the input of shape ", x.sizes());
  int64_t rows = 1;
  for (int64_t i = 0; i < x.dim() - k; ++i) rows *= x.sizes()[i];
  return rows;
}

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

// The dtypes a layer-norm kernel reads or writes beside the normalized input's dtype `s`
// (delta, y, the output gradient): `s` itself, or 16 bits around an f32 computation (the
// kernels are instantiated for those pairs only).
bool kernel_side_dtype(DType side, DType s) { return side == s || (s == DType::f32 && is_16bit(side)); }

Tensor affine_arg(const Tensor& t) { return t.defined() ? contiguous(t) : Tensor(); }
}  // namespace

LayerNormForward layer_norm_forward(const Tensor& x, const Shape& ns, const Tensor& weight,
                                    const Tensor& bias, double eps) {
  detail::check_defined("layer_norm", x);
  check_floating("layer_norm", x, "input");
  const int64_t rows = layer_norm_rows("layer_norm", x, ns);
  check_affine("layer_norm", weight, "weight", x, x.dtype(), ns);
  check_affine("layer_norm", bias, "bias", x, x.dtype(), ns);
  EMBER_CHECK(eps >= 0.0, ValueError, "[layer_norm] eps must be >= 0, got ", eps);

  const int64_t cols = ns.numel();
  const DType st = stats_dtype(x.dtype());
  LayerNormForward out;
  out.y = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  out.mean = detail::make_tensor({rows}, st, x.device());
  out.rstd = detail::make_tensor({rows}, st, x.device());
  if (rows == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), layer_norm_fwd_kernel, contiguous(x), Tensor(), affine_arg(weight),
                        affine_arg(bias), Tensor(), out.y, out.mean, out.rstd, cols, eps);
  return out;
}

ResidualLayerNormForward residual_layer_norm_forward(const Tensor& x, const Tensor& delta, const Shape& ns,
                                                     const Tensor& weight, const Tensor& bias, double eps,
                                                     DType y_dtype) {
  const char* op = "residual_layer_norm";
  detail::check_defined(op, x);
  detail::check_defined(op, delta, "delta");
  detail::check_same_device(op, x, delta);
  check_floating(op, x, "input");
  check_floating(op, delta, "delta");
  EMBER_CHECK(delta.sizes() == x.sizes(), ShapeError, "[", op, "] delta of shape ", delta.sizes(),
              " must have the input's shape ", x.sizes(), " (no broadcasting)");
  const DType s = promote_types(x.dtype(), delta.dtype());
  EMBER_CHECK(kernel_side_dtype(y_dtype, s), DTypeError, "[", op, "] output dtype ", y_dtype,
              " must be the sum's dtype ", s, ", or f16/bf16 when the sum is f32");
  const int64_t rows = layer_norm_rows(op, x, ns);
  check_affine(op, weight, "weight", x, s, ns);
  check_affine(op, bias, "bias", x, s, ns);
  EMBER_CHECK(eps >= 0.0, ValueError, "[", op, "] eps must be >= 0, got ", eps);

  // The kernel reads `a` in the sum's dtype and `b` in it or in 16 bits. x + delta == delta + x
  // bit for bit, so the operands may be swapped; a pair neither of which is the sum's dtype
  // (f16 + bf16) or a wide delta (f32 into an f64 sum) is cast first, off the GPT path.
  Tensor a = x, b = delta;
  if (a.dtype() != s) std::swap(a, b);
  if (a.dtype() != s) a = cast(a, s);
  if (!kernel_side_dtype(b.dtype(), s)) b = cast(b, s);

  const DType st = stats_dtype(s);
  ResidualLayerNormForward out;
  out.sum = detail::make_tensor(x.sizes(), s, x.device());
  out.y = detail::make_tensor(x.sizes(), y_dtype, x.device());
  out.mean = detail::make_tensor({rows}, st, x.device());
  out.rstd = detail::make_tensor({rows}, st, x.device());
  if (rows == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), layer_norm_fwd_kernel, contiguous(a), contiguous(b), affine_arg(weight),
                        affine_arg(bias), out.sum, out.y, out.mean, out.rstd, ns.numel(), eps);
  return out;
}

LayerNormBackward layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& ns,
                                      const Tensor& weight, const Tensor& mean,
                                      const Tensor& rstd, std::array<bool, 3> needs) {
  const char* op = "layer_norm_backward";
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, mean, "mean");
  detail::check_defined(op, rstd, "rstd");
  for (const Tensor* t : {&x, &mean, &rstd}) detail::check_same_device(op, grad, *t);
  EMBER_CHECK(grad.sizes() == x.sizes(), ShapeError, "[layer_norm_backward] gradient of shape ",
              grad.sizes(), " does not match the input shape ", x.sizes());
  const int64_t rows = layer_norm_rows(op, x, ns);
  for (const Tensor* t : {&mean, &rstd}) check_row_stats(op, "mean and rstd", *t, rows, x.dtype());
  check_affine(op, weight, "weight", x, x.dtype(), ns);
  LayerNormBackward out;
  if (needs[0]) out.dx = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (needs[1] && weight.defined()) out.dweight = detail::make_tensor(ns, x.dtype(), x.device());
  if (needs[2]) out.dbias = detail::make_tensor(ns, x.dtype(), x.device());
  if (!out.dx.defined() && !out.dweight.defined() && !out.dbias.defined()) return out;
  if (mean.numel() == 0) {  // no rows: the parameter gradients are sums of nothing
    if (out.dweight.defined()) fill_(out.dweight, 0);
    if (out.dbias.defined()) fill_(out.dbias, 0);
    return out;
  }
  // A 16-bit gradient of an f32 layer norm (its y was written in 16 bits) is read as it is.
  const Tensor g = kernel_side_dtype(grad.dtype(), x.dtype()) ? grad : cast(grad, x.dtype());
  EMBER_DISPATCH_KERNEL(x.device(), layer_norm_bwd_kernel, contiguous(g), contiguous(x), affine_arg(weight),
                        mean, rstd, out.dx, out.dweight, out.dbias, ns.numel());
  return out;
}

void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op) {
  detail::check_defined(op, target, "target");
  if (target.numel() == 0) return;
  EMBER_DISPATCH_KERNEL(target.device(), check_class_targets_kernel, contiguous(target), classes, ignore_index, op);
}

void check_probabilities(const Tensor& x, const char* op) {
  detail::check_defined(op, x);
  check_floating(op, x, "input");
  if (x.numel() == 0) return;
  EMBER_DISPATCH_KERNEL(x.device(), check_probabilities_kernel, contiguous(x), op);
}

}  // namespace ember::ops
