// Differentiable conv1d and conv_transpose2d, both built on conv2d's kernels (no GEMM code of
// their own). conv1d is conv2d over [N, C, 1, L] (a view, as PyTorch's C++ does on some
// paths), so conv2d's VJP covers it. conv_transpose2d is conv2d's adjoint: its forward is
// conv2d's input gradient, and its VJP is conv2d itself (w.r.t. x, differentiable again) and
// conv2d's weight gradient with the roles of input and gradient swapped (w.r.t. weight).
#include "autocast_policy.h"
#include "ember/ops/conv.h"
#include "inplace.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::record;
using autograd::save;

Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups) {
  ember::detail::check_defined("conv1d", x);
  ember::detail::check_defined("conv1d", weight, "weight");
  EMBER_CHECK(x.dim() == 2 || x.dim() == 3, ShapeError,
              "[conv1d] expected a 2-D [C, L] or 3-D [N, C, L] input, got shape ", x.sizes());
  EMBER_CHECK(weight.dim() == 3, ShapeError, "[conv1d] expected a 3-D weight [out_channels, in_channels / groups, "
              "kernel_size], got shape ", weight.sizes());
  // Checked here, in conv1d's terms: conv2d would name itself and the [1, stride] it was given.
  EMBER_CHECK(stride >= 1 && dilation >= 1 && padding >= 0 && groups >= 1, ValueError,
              "[conv1d] stride (", stride, ") and dilation (", dilation, ") must be >= 1, padding (", padding,
              ") >= 0 and groups (", groups, ") >= 1");
  const int64_t channels = x.sizes()[x.dim() - 2];
  EMBER_CHECK(weight.sizes()[0] % groups == 0 && channels == weight.sizes()[1] * groups, ShapeError,
              "[conv1d] input with ", channels, " channels and weight of shape ", weight.sizes(), " with groups ",
              groups, " do not fit (expected in_channels = weight.size(1) * groups and out_channels % groups == 0)");
  if (x.dim() == 2) return squeeze(conv1d(unsqueeze(x, 0), weight, bias, stride, padding, dilation, groups), 0);
  const Tensor y = conv2d(unsqueeze(x, 2), unsqueeze(weight, 2), bias, {1, stride}, {0, padding}, {1, dilation}, groups);
  return squeeze(y, 2);
}

namespace {

// conv_transpose2d's weight gradient: conv2d's weight gradient with x as the "output
// gradient" and g as the "input". Recorded so that differentiating it again says so.
Tensor transpose_weight_grad(const Tensor& x, const Tensor& g, const Shape& weight_sizes, const ops::Conv2dParams& p) {
  return record("conv_transpose2d_backward", ops::conv2d_backward_weight(x, g, weight_sizes, p), {x, g},
                [](const Tensor&) -> TensorList {
                  throw NotImplementedError(
                      "[conv_transpose2d] double backward w.r.t. the weight is not implemented");
                });
}

// The core: x of exactly the conv2d output extent of the result (output_padding < stride).
Tensor conv_transpose_core(const Tensor& x, const Tensor& w, const Shape& out_shape, const ops::Conv2dParams& p) {
  return record("conv_transpose2d", ops::conv2d_backward_input(x, w, out_shape, p), {x, w},
                [x = save(x), w = save(w), p](const Tensor& g) -> TensorList {
                  Tensor dx, dw;
                  if (needs_input_grad(0)) dx = conv2d(g, w.get(), Tensor(), p.stride, p.padding, p.dilation, p.groups);
                  if (needs_input_grad(1)) dw = transpose_weight_grad(x.get(), g, w->sizes(), p);
                  return {dx, dw};
                });
}

}  // namespace

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::array<int64_t, 2> stride,
                        std::array<int64_t, 2> padding, std::array<int64_t, 2> output_padding, int64_t groups,
                        std::array<int64_t, 2> dilation) {
  if (autocast::any_enabled()) [[unlikely]]  // conv2d's policy: PyTorch casts both alike
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::conv2d, x, weight, bias))
      return conv_transpose2d((*c)[0], (*c)[1], (*c)[2], stride, padding, output_padding, groups, dilation);
  ember::detail::check_defined("conv_transpose2d", x);
  ember::detail::check_defined("conv_transpose2d", weight, "weight");
  const size_t trace_mark = trace::mark();
  if (x.dim() == 3)
    return squeeze(conv_transpose2d(unsqueeze(x, 0), weight, bias, stride, padding, output_padding, groups, dilation), 0);
  EMBER_CHECK(x.dim() == 4 && weight.dim() == 4, ShapeError,
              "[conv_transpose2d] expected a 4-D input [N, C, H, W] and weight [in_channels, out_channels / groups, "
              "kH, kW], got shapes ", x.sizes(), " and ", weight.sizes());
  EMBER_CHECK(groups >= 1, ValueError, "[conv_transpose2d] groups must be positive, got ", groups);
  ember::detail::check_same_device("conv_transpose2d", x, weight);
  EMBER_CHECK(is_floating(x.dtype()) && x.dtype() == weight.dtype(), DTypeError, "[conv_transpose2d] input dtype ",
              x.dtype(), " and weight dtype ", weight.dtype(), " must be the same floating type");
  EMBER_CHECK(x.sizes()[1] == weight.sizes()[0] && weight.sizes()[0] % groups == 0, ShapeError,
              "[conv_transpose2d] input of shape ", x.sizes(), " has ", x.sizes()[1], " channels, weight of shape ",
              weight.sizes(), " expects ", weight.sizes()[0], " (weight.size(0)), divisible by groups=", groups);
  const ops::Conv2dParams p{stride, padding, dilation, groups};
  Shape out{x.sizes()[0], weight.sizes()[1] * groups, 0, 0};
  std::vector<int64_t> extend(4, 0);  // pad() order: {w_lo, w_hi, h_lo, h_hi}
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(stride[i] >= 1 && dilation[i] >= 1 && padding[i] >= 0, ValueError,
                "[conv_transpose2d] stride and dilation must be positive and padding non-negative, got stride [",
                stride[0], ", ", stride[1], "], padding [", padding[0], ", ", padding[1], "], dilation [",
                dilation[0], ", ", dilation[1], "]");
    EMBER_CHECK(output_padding[i] >= 0 && (output_padding[i] < stride[i] || output_padding[i] < dilation[i]),
                ValueError, "[conv_transpose2d] output padding [", output_padding[0], ", ", output_padding[1],
                "] must be smaller than either stride [", stride[0], ", ", stride[1], "] or dilation [", dilation[0],
                ", ", dilation[1], "]");
    const int64_t in = x.sizes()[size_t(2 + i)], k = weight.sizes()[size_t(2 + i)];
    const int64_t o = (in - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + output_padding[i] + 1;
    EMBER_CHECK(o >= 1, ShapeError, "[conv_transpose2d] input of shape ", x.sizes(), " and weight of shape ",
                weight.sizes(), " give a non-positive output extent ", o);
    out[size_t(2 + i)] = o;
    // An output_padding >= stride (allowed when below dilation) makes conv2d of the result
    // longer than x; the extra positions read zeros, so x is zero-extended to match.
    extend[size_t(3 - 2 * i)] = ops::conv_output_size(o, k, stride[i], padding[i], dilation[i]) - in;
  }
  const bool extended = extend[1] > 0 || extend[3] > 0;
  Tensor y = conv_transpose_core(extended ? pad(x, extend) : x, weight, out, p);
  if (bias.defined()) {
    ember::detail::check_same_device("conv_transpose2d", x, bias);
    EMBER_CHECK(bias.dim() == 1 && bias.sizes()[0] == out[1], ShapeError, "[conv_transpose2d] bias of shape ",
                bias.sizes(), " does not match ", out[1], " output channels");
    y = y + reshape(bias, {1, out[1], 1, 1});
  }
  // One ONNX ConvTranspose for the zero-extension, the core op and the bias add above.
  EMBER_TRACE_COMPOSITE(trace_mark, y, "conv_transpose2d", {x, weight, bias},
                        {{"stride", stride}, {"padding", padding}, {"output_padding", output_padding},
                         {"dilation", dilation}, {"groups", groups}});
  return y;
}

}  // namespace ember
