// Differentiable fused normalization ops: batch_norm, group_norm, rms_norm. Each forward is one
// fused kernel family (ember/ops/norm.h) and each VJP one fused backward, using the statistics
// the forward saved (per-channel mean and invstd; per-(n, group) mean and rstd; per-row rstd).
// Their gradients are recorded with a VJP that throws, so double backward fails loudly.
//
// Autocast: group_norm and rms_norm follow layer_norm's row (f32 for 16-bit inputs).
// batch_norm has no row, as in PyTorch (its autocast lists batch_norm in neither list): a
// 16-bit activation from an autocast conv is normalized as it is, with f32 weight, bias and
// running statistics, and the output stays 16-bit for the next conv.
#include <limits>
#include <optional>

#include "ember/ops/norm.h"
#include "autocast_policy.h"
#include "fused_util.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::no_double_backward;
using autograd::record;
using autograd::save;

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  ember::detail::check_defined("batch_norm", x);
  // The running statistics are state, not part of the graph (PyTorch updates them under
  // no_grad): the kernel writes them in place and the front bumps their versions.
  ops::BatchNormForward f = ops::batch_norm_forward(x, weight, bias, running_mean, running_var,
                                                    training, momentum, eps);
  Tensor result = record("batch_norm", f.y, {x, weight, bias},
                         [x = save(x), w = save(weight), mean = f.mean, invstd = f.invstd,
                          training](const Tensor& g) -> TensorList {
                           const Tensor& xv = x;
                           const Tensor& wv = w;
                           ops::NormBackward b = ops::batch_norm_backward(
                               g, xv, wv, mean, invstd, training,
                               {needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)});
                           const char* name = "batch_norm_backward";
                           return {no_double_backward(name, b.dx, {g, xv, wv}),
                                   no_double_backward(name, b.dweight, {g, xv}),
                                   no_double_backward(name, b.dbias, {g})};
                         });
  EMBER_TRACE(result, "batch_norm", {x, running_mean, running_var, weight, bias}, {{"training", training}, {"eps", eps}});
  return result;
}

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::group_norm, x, weight, bias))
      return group_norm((*c)[0], num_groups, (*c)[1], (*c)[2], eps);
  ops::GroupNormForward f = ops::group_norm_forward(x, num_groups, weight, bias, eps);
  Tensor result = record("group_norm", f.y, {x, weight, bias},
                         [x = save(x), w = save(weight), num_groups, mean = f.mean,
                          rstd = f.rstd](const Tensor& g) -> TensorList {
                           const Tensor& xv = x;
                           const Tensor& wv = w;
                           ops::NormBackward b = ops::group_norm_backward(
                               g, xv, num_groups, wv, mean, rstd,
                               {needs_input_grad(0), needs_input_grad(1), needs_input_grad(2)});
                           const char* name = "group_norm_backward";
                           return {no_double_backward(name, b.dx, {g, xv, wv}),
                                   no_double_backward(name, b.dweight, {g, xv}),
                                   no_double_backward(name, b.dbias, {g})};
                         });
  EMBER_TRACE(result, "group_norm", {x, weight, bias}, {{"num_groups", num_groups}, {"eps", eps}});
  return result;
}

namespace {
// torch.finfo(dtype).eps.
double machine_eps(DType t) {
  switch (t) {
    case DType::f64: return std::numeric_limits<double>::epsilon();
    case DType::f16: return 0.0009765625;  // 2^-10
    case DType::bf16: return 0.0078125;    // 2^-7
    default: return double(std::numeric_limits<float>::epsilon());
  }
}
}  // namespace

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  ember::detail::check_defined("rms_norm", x);
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::rms_norm, x, weight))
      return rms_norm((*c)[0], normalized_shape, (*c)[1], eps);
  // The default is the epsilon of the dtype the op runs in (after any autocast cast).
  const double e = eps ? *eps : machine_eps(x.dtype());
  ops::RmsNormForward f = ops::rms_norm_forward(x, normalized_shape, weight, e);
  Tensor result = record("rms_norm", f.y, {x, weight},
                         [x = save(x), w = save(weight), ns = normalized_shape,
                          rstd = f.rstd](const Tensor& g) -> TensorList {
                           const Tensor& xv = x;
                           const Tensor& wv = w;
                           ops::NormBackward b = ops::rms_norm_backward(
                               g, xv, ns, wv, rstd, {needs_input_grad(0), needs_input_grad(1)});
                           const char* name = "rms_norm_backward";
                           return {no_double_backward(name, b.dx, {g, xv, wv}),
                                   no_double_backward(name, b.dweight, {g, xv})};
                         });
  EMBER_TRACE(result, "rms_norm", {x, weight}, {{"normalized_shape", normalized_shape}, {"eps", e}});
  return result;
}

}  // namespace ember
