// Differentiable avg / adaptive pooling, interpolate and pad: forward (one ops:: call) beside
// its VJP. Each of these ops is linear in its input (pad: affine), and its backward kernel is
// exactly the adjoint of its forward kernel, so each VJP is recorded with the forward as its
// own VJP: every order of derivative is available. adaptive_max_pool2d routes gradients
// through max_pool2d's index scatter / gather pair (same index convention).
#include <cmath>
#include <string>

#include "autocast_policy.h"
#include "ember/ops/conv.h"
#include "ember/ops/pool.h"
#include "inplace.h"

namespace ember {

using autograd::record;

namespace {

// ---- avg_pool2d ----
Tensor avg_pool_fwd(const Tensor& x, const ops::AvgPool2dParams& p);
Tensor avg_pool_bwd(const Tensor& g, const Shape& input_sizes, const ops::AvgPool2dParams& p) {
  return record("avg_pool2d_backward", ops::avg_pool2d_backward(g, input_sizes, p), {g},
                [p](const Tensor& gg) -> TensorList { return {avg_pool_fwd(gg, p)}; });
}
Tensor avg_pool_fwd(const Tensor& x, const ops::AvgPool2dParams& p) {
  Tensor result = record("avg_pool2d", ops::avg_pool2d(x, p), {x},
                         [p, sizes = x.sizes()](const Tensor& g) -> TensorList { return {avg_pool_bwd(g, sizes, p)}; });
  EMBER_TRACE(result, "avg_pool2d", {x}, {{"kernel_size", p.kernel}, {"stride", p.stride}, {"padding", p.padding}, {"ceil_mode", p.ceil_mode}, {"count_include_pad", p.count_include_pad}, {"divisor_override", p.divisor_override}});
  return result;
}

// ---- adaptive_avg_pool2d ----
Tensor adaptive_avg_fwd(const Tensor& x, std::array<int64_t, 2> out);
Tensor adaptive_avg_bwd(const Tensor& g, const Shape& input_sizes) {
  return record("adaptive_avg_pool2d_backward", ops::adaptive_avg_pool2d_backward(g, input_sizes), {g},
                [out = std::array<int64_t, 2>{g.sizes()[2], g.sizes()[3]}](const Tensor& gg) -> TensorList {
                  return {adaptive_avg_fwd(gg, out)};
                });
}
Tensor adaptive_avg_fwd(const Tensor& x, std::array<int64_t, 2> out) {
  return record("adaptive_avg_pool2d", ops::adaptive_avg_pool2d(x, out), {x},
                [sizes = x.sizes()](const Tensor& g) -> TensorList { return {adaptive_avg_bwd(g, sizes)}; });
}

// ---- adaptive_max_pool2d: scatter to / gather from the argmax positions ----
Tensor max_gather(const Tensor& grad_input, const Tensor& indices);
Tensor max_scatter(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  return record("adaptive_max_pool2d_backward", ops::max_pool2d_backward(grad, indices, input_sizes), {grad},
                [indices](const Tensor& gg) -> TensorList { return {max_gather(gg, indices)}; });
}
Tensor max_gather(const Tensor& grad_input, const Tensor& indices) {
  return record("adaptive_max_pool2d_gather", ops::max_pool2d_gather(grad_input, indices), {grad_input},
                [indices, sizes = grad_input.sizes()](const Tensor& gg) -> TensorList {
                  return {max_scatter(gg, indices, sizes)};
                });
}

// ---- upsample2d ----
Tensor upsample_fwd(const Tensor& x, std::array<int64_t, 2> out, const ops::Upsample2dParams& p);
Tensor upsample_bwd(const Tensor& g, const Shape& input_sizes, const ops::Upsample2dParams& p) {
  return record("interpolate_backward", ops::upsample2d_backward(g, input_sizes, p), {g},
                [p, out = std::array<int64_t, 2>{g.sizes()[2], g.sizes()[3]}](const Tensor& gg) -> TensorList {
                  return {upsample_fwd(gg, out, p)};
                });
}
Tensor upsample_fwd(const Tensor& x, std::array<int64_t, 2> out, const ops::Upsample2dParams& p) {
  return record("interpolate", ops::upsample2d(x, out, p), {x},
                [p, sizes = x.sizes()](const Tensor& g) -> TensorList { return {upsample_bwd(g, sizes, p)}; });
}

// ---- pad ----
Tensor pad_fwd(const Tensor& x, const std::vector<int64_t>& pad, ops::PadMode mode, double value);
Tensor pad_bwd(const Tensor& g, const Shape& input_sizes, const std::vector<int64_t>& pad, ops::PadMode mode) {
  return record("pad_backward", ops::pad_backward(g, input_sizes, pad, mode), {g},
                [pad, mode](const Tensor& gg) -> TensorList { return {pad_fwd(gg, pad, mode, 0.0)}; });
}
Tensor pad_fwd(const Tensor& x, const std::vector<int64_t>& pad, ops::PadMode mode, double value) {
  return record("pad", ops::pad(x, pad, mode, value), {x},
                [pad, mode, sizes = x.sizes()](const Tensor& g) -> TensorList {
                  return {pad_bwd(g, sizes, pad, mode)};
                });
}

// Runs f on x, treating a 3-D [C, H, W] input as one sample (as PyTorch's 2-D pools do).
template <class F>
Tensor unbatched_ok(const char* op, const Tensor& x, F f) {
  ember::detail::check_defined(op, x);
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError, "[", op, "] expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
              x.sizes());
  if (x.dim() == 3) return squeeze(f(unsqueeze(x, 0)), 0);
  return f(x);
}

}  // namespace

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  EMBER_CHECK((stride[0] == 0) == (stride[1] == 0), ValueError, "[avg_pool2d] stride [", stride[0], ", ", stride[1],
              "] must be both positive, or {0, 0} for the default (= kernel_size)");
  EMBER_CHECK(!divisor_override || *divisor_override != 0, ValueError, "[avg_pool2d] divisor must be not zero");
  if (stride[0] == 0) stride = kernel_size;
  const ops::AvgPool2dParams p{kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override.value_or(0)};
  return unbatched_ok("avg_pool2d", x, [&](const Tensor& x4) { return avg_pool_fwd(x4, p); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return unbatched_ok("adaptive_avg_pool2d", x, [&](const Tensor& x4) { return adaptive_avg_fwd(x4, output_size); });
}
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t output_size) {
  return adaptive_avg_pool2d(x, std::array<int64_t, 2>{output_size, output_size});
}

ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> output_size) {
  ember::detail::check_defined("adaptive_max_pool2d", x);
  EMBER_CHECK(x.dim() == 3 || x.dim() == 4, ShapeError,
              "[adaptive_max_pool2d] expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ", x.sizes());
  if (x.dim() == 3) {
    auto [y, idx] = adaptive_max_pool2d_with_indices(unsqueeze(x, 0), output_size);
    return {squeeze(y, 0), squeeze(idx, 0)};
  }
  auto [y, indices] = ops::adaptive_max_pool2d(x, output_size);
  Tensor out = record("adaptive_max_pool2d", y, {x}, [indices = indices, sizes = x.sizes()](const Tensor& g) -> TensorList {
    return {max_scatter(g, indices, sizes)};
  });
  return {out, indices};
}
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return adaptive_max_pool2d_with_indices(x, output_size).values;
}
Tensor adaptive_max_pool2d(const Tensor& x, int64_t output_size) {
  return adaptive_max_pool2d(x, std::array<int64_t, 2>{output_size, output_size});
}

Tensor interpolate(const Tensor& x, const InterpolateOptions& o) {
  ember::detail::check_defined("interpolate", x);
  EMBER_CHECK(x.dim() == 4, ShapeError, "[interpolate] expected a 4-D input [N, C, H, W], got shape ", x.sizes());
  ops::Upsample2dParams p;
  if (o.mode == "nearest") p.mode = ops::InterpolateMode::nearest;
  else if (o.mode == "bilinear") p.mode = ops::InterpolateMode::bilinear;
  else
    throw ValueError(str("[interpolate] mode \"", o.mode, "\" is not supported (\"nearest\" or \"bilinear\")"));
  EMBER_CHECK(!(o.align_corners && p.mode == ops::InterpolateMode::nearest), ValueError,
              "[interpolate] align_corners option can only be set with the interpolating modes: bilinear");
  p.align_corners = o.align_corners.value_or(false);
  EMBER_CHECK(o.size.has_value() != o.scale_factor.has_value(), ValueError,
              "[interpolate] exactly one of size and scale_factor must be given");
  std::array<int64_t, 2> out{};
  if (o.size) {
    out = *o.size;
  } else {
    for (int i = 0; i < 2; ++i) {
      const double s = (*o.scale_factor)[size_t(i)];
      EMBER_CHECK(s > 0 && std::isfinite(s), ValueError, "[interpolate] scale_factor must be positive, got ", s);
      // PyTorch: floor(in * scale), and the given scale (not out / in) in the source index
      // unless recompute_scale_factor.
      out[size_t(i)] = int64_t(std::floor(double(x.sizes()[size_t(2 + i)]) * s));
      if (!o.recompute_scale_factor.value_or(false)) p.scale[size_t(i)] = s;
    }
  }
  return upsample_fwd(x, out, p);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode, double value) {
  ember::detail::check_defined("pad", x);
  ops::PadMode m;
  if (mode == "constant") m = ops::PadMode::constant;
  else if (mode == "reflect") m = ops::PadMode::reflect;
  else if (mode == "replicate") m = ops::PadMode::replicate;
  else
    throw ValueError(str("[pad] mode \"", mode, "\" is not supported (\"constant\", \"reflect\" or \"replicate\")"));
  EMBER_CHECK(m == ops::PadMode::constant || value == 0, ValueError, "[pad] padding mode \"", mode,
              "\" doesn't take in value argument");
  return pad_fwd(x, pad, m, value);
}

}  // namespace ember
