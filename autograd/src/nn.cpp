// Differentiable fused nn ops: softmax, log_softmax, cross_entropy, layer_norm,
// residual_layer_norm. Each forward is one fused kernel (ops/include/ember/ops/nn.h) and each
// VJP one fused backward kernel, using what the forward saved (the output for softmax, per-row
// max and log-sum-exp for cross-entropy, per-row mean and rstd for layer norm).
//
// Double backward: softmax and log_softmax are differentiable any number of times (their
// backward ops are recorded with VJPs written in ember ops, which need the reduce family's
// sum). cross_entropy's and layer_norm's backward ops are recorded with a VJP that throws
// NotImplementedError, so differentiating their gradients fails loudly instead of silently
// giving zeros.
#include <algorithm>
#include <utility>

#include "ember/ops/nn.h"
#include "autocast_policy.h"
#include "fused_util.h"
#include "inplace.h"
#include "loss.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::no_double_backward;
using autograd::record;
using autograd::save;
using autograd::to_ops;

namespace {

// The dims to reduce over in the composite double-backward formulas (a 0-dim tensor is one
// row of one element: reduce over all of it).
Shape reduce_dims(const Tensor& t, int64_t dim) { return t.dim() == 0 ? Shape{} : Shape{dim}; }

// dx = y * (g - sum(g*y)). Its Jacobian in g is symmetric, so dg = softmax_backward(h, y);
// d/dy of <h, dx> = h * (g - sum(g*y)) - g * sum(h*y).
Tensor softmax_backward(const Tensor& g, const Tensor& y, int64_t dim) {
  return record("softmax_backward", ops::softmax_backward(g, y, dim), {g, y},
                [g = save(g), y = save(y), dim](const Tensor& h) -> TensorList {
                  const Tensor& gv = g;
                  const Tensor& yv = y;
                  const Shape dims = reduce_dims(yv, dim);
                  Tensor dg, dy;
                  if (needs_input_grad(0)) dg = softmax_backward(h, yv, dim);
                  if (needs_input_grad(1))
                    dy = sub(mul(h, sub(gv, sum(mul(gv, yv), dims, true))),
                             mul(gv, sum(mul(h, yv), dims, true)));
                  return {dg, dy};
                });
}

// dx = g - exp(y) * sum(g): dg = h - sum(h * exp(y)); dy = -h * exp(y) * sum(g).
Tensor log_softmax_backward(const Tensor& g, const Tensor& y, int64_t dim) {
  return record("log_softmax_backward", ops::log_softmax_backward(g, y, dim), {g, y},
                [g = save(g), y = save(y), dim](const Tensor& h) -> TensorList {
                  const Tensor& gv = g;
                  const Shape dims = reduce_dims(gv, dim);
                  Tensor p = exp(y.get());
                  Tensor hp = mul(h, p);
                  Tensor dg, dy;
                  if (needs_input_grad(0)) dg = sub(h, sum(hp, dims, true));
                  if (needs_input_grad(1)) dy = neg(mul(hp, sum(gv, dims, true)));
                  return {dg, dy};
                });
}

// layer_norm's VJP (of x, weight, bias) through the fused backward kernel, for a node
// recorded with inputs (x, weight, bias); the gradients are recorded under `name`.
TensorList layer_norm_vjp(const char* name, const Tensor& g, const Tensor& x, const Shape& ns,
                          const Tensor& w, const Tensor& mean, const Tensor& rstd) {
  ops::LayerNormBackward b = ops::layer_norm_backward(
      g, x, ns, w, mean, rstd, {needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)});
  return {no_double_backward(name, b.dx, {g, x, w}), no_double_backward(name, b.dweight, {g, x}),
          no_double_backward(name, b.dbias, {g})};
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::softmax, x))
      return softmax((*c)[0], dim);
  Tensor y = ops::softmax(x, dim);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "softmax");
  Tensor result = record("softmax", y, {x}, [d](const Tensor& g, const Tensor& out) -> TensorList {
    return {softmax_backward(g, out, d)};
  });
  EMBER_TRACE(result, "softmax", {x}, {{"dim", d}});
  return result;
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::log_softmax, x))
      return log_softmax((*c)[0], dim);
  Tensor y = ops::log_softmax(x, dim);
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "log_softmax");
  Tensor result = record("log_softmax", y, {x}, [d](const Tensor& g, const Tensor& out) -> TensorList {
    return {log_softmax_backward(g, out, d)};
  });
  EMBER_TRACE(result, "log_softmax", {x}, {{"dim", d}});
  return result;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::cross_entropy, logits))
      return cross_entropy((*c)[0], target, options);
  // Class weights, probability targets and [N, C, d...]: autograd/src/loss.cpp.
  if (options.weight.defined() || (target.defined() && target.is_floating_point()) || (logits.defined() && logits.dim() > 2))
    return autograd::cross_entropy_general(logits, target, options);
  const ops::CrossEntropyParams p{options.ignore_index, options.label_smoothing,
                                  to_ops(options.reduction, "cross_entropy")};
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, p);
  return record("cross_entropy", f.loss, {logits},
                [x = save(logits), t = save(target), m = f.row_max, ls = f.log_sum,
                 p](const Tensor& g) -> TensorList {
                  const Tensor& xv = x;
                  return {no_double_backward("cross_entropy_backward",
                                             ops::cross_entropy_backward(g, xv, t, m, ls, p), {g, xv})};
                });
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::layer_norm, x, weight, bias))
      return layer_norm((*c)[0], normalized_shape, (*c)[1], (*c)[2], eps);
  ops::LayerNormForward f = ops::layer_norm_forward(x, normalized_shape, weight, bias, eps);
  Tensor result = record("layer_norm", f.y, {x, weight, bias},
                         [x = save(x), w = save(weight), ns = normalized_shape, mean = f.mean,
                          rstd = f.rstd](const Tensor& g) -> TensorList {
                           return layer_norm_vjp("layer_norm_backward", g, x, ns, w, mean, rstd);
                         });
  EMBER_TRACE(result, "layer_norm", {x, weight, bias}, {{"normalized_shape", normalized_shape}, {"eps", eps}});
  return result;
}

// Two nodes from the one fused forward (a node has one output): "residual_add" (x, delta) ->
// sum, whose VJP hands sum's total gradient to both inputs (the engine casts it to each
// input's dtype: a bf16 delta gets a bf16 gradient), and "residual_layer_norm" (sum, weight,
// bias) -> y, layer_norm's VJP, whose kernel reads dy in y's dtype (bf16 under autocast)
// without a cast pass.
std::pair<Tensor, Tensor> residual_layer_norm(const Tensor& x, const Tensor& delta,
                                              const Shape& normalized_shape, const Tensor& weight,
                                              const Tensor& bias, double eps) {
  ember::detail::check_defined("residual_layer_norm", x);
  ember::detail::check_defined("residual_layer_norm", delta, "delta");
  const DType s = promote_types(x.dtype(), delta.dtype());
  DType y_dtype = s;
  Tensor w = weight, b = bias;
  if (autocast::any_enabled()) [[unlikely]] {
    const DeviceType device_type = x.device().type;
    const bool low_sum = s == DType::f16 || s == DType::bf16;
    if (autocast::is_enabled(device_type) && (s == DType::f32 || low_sum)) {
      const DType low = autocast::get_dtype(device_type);
      if (low_sum) {  // off the GPT path: the composite, layer_norm's autocast casting sum up
        Tensor sum = add(x, delta);
        Tensor y = layer_norm(sum, normalized_shape, weight, bias, eps);
        return {sum, to(y, y.device(), low)};
      }
      y_dtype = low;
      const Tensor& first = weight.defined() ? weight : bias;
      if (auto c = autograd::autocast_inputs(autograd::AutocastOp::residual_layer_norm, first,
                                             weight.defined() ? bias : Tensor())) {
        if (weight.defined()) {
          w = (*c)[0];
          b = (*c)[1];
        } else {
          b = (*c)[0];
        }
      }
    }
  }
  ops::ResidualLayerNormForward f =
      ops::residual_layer_norm_forward(x, delta, normalized_shape, w, b, eps, y_dtype);
  Tensor sum = record("residual_add", f.sum, {x, delta},
                      [](const Tensor& g) -> TensorList { return {g, g}; });
  Tensor y = record("residual_layer_norm", f.y, {sum, w, b},
                    [s_ = save(sum), w_ = save(w), ns = normalized_shape, mean = f.mean,
                     rstd = f.rstd](const Tensor& g) -> TensorList {
                      return layer_norm_vjp("residual_layer_norm_backward", g, s_, ns, w_, mean,
                                            rstd);
                    });
  EMBER_TRACE(y, "residual_layer_norm", {sum, w, b}, {{"normalized_shape", normalized_shape}, {"eps", eps}});
  return {std::move(sum), std::move(y)};
}

}  // namespace ember
