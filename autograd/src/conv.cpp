// Differentiable conv2d and max_pool2d: forward (one ops:: call) beside its VJP. The
// gradients come from dedicated ops-level backward kernels (col2im, index scatter).
// conv2d's input and weight gradients are recorded as nodes that refuse double backward
// (rather than silently treating them as constants); the bias gradient and max pooling's
// gradients are linear maps whose adjoints are cheap, so they differentiate fully.
#include "ember/ops/conv.h"
#include "inplace.h"
#include "autocast_policy.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::record;
using autograd::save;

namespace {

// A conv2d gradient computed by a backward kernel, recorded so that differentiating it
// again says so instead of returning a wrong (zero) answer.
Tensor conv_grad(Tensor grad, const Tensor& g, const Tensor& other) {
  return record("conv2d_backward", std::move(grad), {g, other}, [](const Tensor&) -> TensorList {
    throw NotImplementedError("[conv2d] double backward (gradient of conv2d's gradient) is not implemented");
  });
}

// db = g summed over N, H, W; its adjoint broadcasts back.
Tensor conv_bias_grad(const Tensor& g) {
  return record("conv2d_backward_bias", ops::conv2d_backward_bias(g), {g},
                [sizes = g.sizes()](const Tensor& gg) -> TensorList {
                  return {expand(reshape(gg, {1, sizes[1], 1, 1}), sizes)};
                });
}

// max_pool2d's backward (scatter-add to the argmax positions) and its adjoint (gather from
// them) are each other's VJPs, so every order of derivative is available.
Tensor pool_gather(const Tensor& grad_input, const Tensor& indices);
Tensor pool_scatter(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  return record("max_pool2d_backward", ops::max_pool2d_backward(grad, indices, input_sizes), {grad},
                [indices](const Tensor& gg) -> TensorList { return {pool_gather(gg, indices)}; });
}
Tensor pool_gather(const Tensor& grad_input, const Tensor& indices) {
  return record("max_pool2d_gather", ops::max_pool2d_gather(grad_input, indices), {grad_input},
                [indices, sizes = grad_input.sizes()](const Tensor& gg) -> TensorList {
                  return {pool_scatter(gg, indices, sizes)};
                });
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
              std::array<int64_t, 2> padding, std::array<int64_t, 2> dilation, int64_t groups) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::conv2d, x, weight, bias))
      return conv2d((*c)[0], (*c)[1], (*c)[2], stride, padding, dilation, groups);
  ember::detail::check_defined("conv2d", x);
  if (x.dim() == 3)  // unbatched [C, H, W], as PyTorch accepts
    return squeeze(conv2d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0);
  const ops::Conv2dParams p{stride, padding, dilation, groups};
  Tensor result = record("conv2d", ops::conv2d(x, weight, bias, p), {x, weight, bias},
                         [x = save(x), w = save(weight), p](const Tensor& g) -> TensorList {
                           Tensor dx, dw, db;
                           if (needs_input_grad(0))
                             dx = conv_grad(ops::conv2d_backward_input(g, w.get(), x->sizes(), p), g, w.get());
                           if (needs_input_grad(1))
                             dw = conv_grad(ops::conv2d_backward_weight(g, x.get(), w->sizes(), p), g, x.get());
                           if (needs_input_grad(2)) db = conv_bias_grad(g);
                           return {dx, dw, db};
                         });
  EMBER_TRACE(result, "conv2d", {x, weight, bias}, {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}});
  return result;
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  ember::detail::check_defined("max_pool2d", x);
  if (x.dim() == 3) return squeeze(max_pool2d(unsqueeze(x, 0), kernel_size, stride, padding), 0);
  EMBER_CHECK((stride[0] == 0) == (stride[1] == 0), ValueError, "[max_pool2d] stride [", stride[0], ", ",
              stride[1], "] must be both positive, or {0, 0} for the default (= kernel_size)");
  if (stride[0] == 0) stride = kernel_size;
  auto [y, indices] = ops::max_pool2d(x, {kernel_size, stride, padding});
  Tensor result = record("max_pool2d", y, {x}, [indices = indices, sizes = x.sizes()](const Tensor& g) -> TensorList {
    return {pool_scatter(g, indices, sizes)};
  });
  EMBER_TRACE(result, "max_pool2d", {x}, {{"kernel_size", kernel_size}, {"stride", stride}, {"padding", padding}});
  return result;
}

}  // namespace ember
