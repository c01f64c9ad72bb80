// Front of the pool family (avg / adaptive pooling, upsampling, padding): every argument is
// validated here, once for all backends, and inputs are made contiguous, so the kernels
// (ops/cpu/pool.cpp, ops/cuda/pool.cu) index dense NCHW buffers.
#include "ember/ops/pool.h"

#include <string>

#include "ember/ops/elementwise.h"
#include "kernels/pool.h"

namespace ember::ops {

namespace {

void check_floating(const char* op, const Tensor& t) {
  EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] input must be a floating tensor, got ", t.dtype());
}

void check_4d(const char* op, const Tensor& t) {
  EMBER_CHECK(t.dim() == 4, ShapeError, "[", op, "] expected a 4-D input [N, C, H, W], got shape ", t.sizes());
}

void check_nonempty_planes(const char* op, const Shape& s) {
  EMBER_CHECK(s[2] > 0 && s[3] > 0, ShapeError, "[", op, "] expected an input with non-zero height and width, got shape ",
              s);
}

void check_grad(const char* op, const Tensor& grad, const Shape& expected) {
  EMBER_CHECK(grad.sizes() == expected, ShapeError, "[", op, "] gradient of shape ", grad.sizes(),
              " does not match the output shape ", expected);
  check_floating(op, grad);
}

Shape avg_pool_shape(const Shape& x, const AvgPool2dParams& p) {
  EMBER_CHECK(x.size() == 4, ShapeError, "[avg_pool2d] expected a 4-D input [N, C, H, W], got shape ", x);
  Shape out{x[0], x[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.kernel[i] >= 1, ValueError, "[avg_pool2d] kernel_size must be positive, got [", p.kernel[0], ", ",
                p.kernel[1], "]");
    EMBER_CHECK(p.stride[i] >= 1, ValueError, "[avg_pool2d] stride must be positive, got [", p.stride[0], ", ",
                p.stride[1], "]");
    EMBER_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], ValueError, "[avg_pool2d] padding [",
                p.padding[0], ", ", p.padding[1], "] must be non-negative and at most half of kernel_size [",
                p.kernel[0], ", ", p.kernel[1], "]");
    const int64_t o = pool_output_size(x[2 + i], p.kernel[i], p.stride[i], p.padding[i], p.ceil_mode);
    EMBER_CHECK(o >= 1, ShapeError, "[avg_pool2d] input of shape ", x, " is too small for kernel_size [",
                p.kernel[0], ", ", p.kernel[1], "] with padding [", p.padding[0], ", ", p.padding[1],
                "] (output extent ", o, ")");
    out[size_t(2 + i)] = o;
  }
  EMBER_CHECK(p.divisor_override >= 0, ValueError, "[avg_pool2d] divisor_override must be positive, got ",
              p.divisor_override);
  return out;
}

void check_output_size(const char* op, std::array<int64_t, 2> output_size) {
  EMBER_CHECK(output_size[0] >= 0 && output_size[1] >= 0, ValueError, "[", op,
              "] output_size must be non-negative, got [", output_size[0], ", ", output_size[1], "]");
}

void check_upsample(const Shape& x, std::array<int64_t, 2> out) {
  EMBER_CHECK(x.size() == 4, ShapeError, "[interpolate] expected a 4-D input [N, C, H, W], got shape ", x);
  EMBER_CHECK(x[2] > 0 && x[3] > 0 && out[0] > 0 && out[1] > 0, ShapeError, "[interpolate] input of shape ", x,
              " and output size [", out[0], ", ", out[1], "] must have non-zero height and width");
}

// The PadGeom of x's shape under pad (validated for mode).
PadGeom pad_geom(const Shape& x, const std::vector<int64_t>& pad, PadMode mode) {
  const char* op = "pad";
  EMBER_CHECK(pad.size() % 2 == 0 && !pad.empty() && pad.size() <= 6, ValueError, "[", op,
              "] pad must have 2, 4 or 6 entries (last dim first), got ", int64_t(pad.size()));
  const int64_t k = int64_t(pad.size()) / 2, dims = int64_t(x.size());
  if (mode == PadMode::constant) {
    EMBER_CHECK(dims >= k, ShapeError, "[", op, "] pad of ", int64_t(pad.size()), " entries needs an input of at least ",
                k, " dims, got shape ", x);
  } else {
    EMBER_CHECK(dims == k + 1 || dims == k + 2, ShapeError, "[", op, "] ",
                mode == PadMode::reflect ? "reflect" : "replicate", " padding of ", k, " dim(s) expects a ", k + 1,
                "-D or ", k + 2, "-D input, got shape ", x);
  }
  PadGeom g;
  for (int64_t d = 0; d < dims - k; ++d) g.outer *= x[size_t(d)];
  for (int64_t j = 0; j < k; ++j) {
    // pad[2j], pad[2j + 1] pad dim (dims - 1 - j), which is slot (2 - j) of the geometry.
    const int64_t n = x[size_t(dims - 1 - j)], lo = pad[size_t(2 * j)], hi = pad[size_t(2 * j + 1)];
    const int slot = int(2 - j);
    if (mode == PadMode::reflect) {
      EMBER_CHECK(lo >= 0 && hi >= 0 && lo < n && hi < n, ValueError, "[", op, "] reflect padding (", lo, ", ", hi,
                  ") of dim ", dims - 1 - j, " must be non-negative and less than its size ", n, " (input shape ",
                  x, ")");
    } else if (mode == PadMode::replicate) {
      EMBER_CHECK(lo >= 0 && hi >= 0 && n > 0, ValueError, "[", op, "] replicate padding (", lo, ", ", hi,
                  ") of dim ", dims - 1 - j, " must be non-negative, of a non-empty dim (input shape ", x, ")");
    }
    const int64_t o = n + lo + hi;
    EMBER_CHECK(o >= 0, ShapeError, "[", op, "] input size ", n, " of dim ", dims - 1 - j, " plus padding (", lo, ", ",
                hi, ") gives a negative output size ", o, " (input shape ", x, ")");
    g.in[slot] = n;
    g.lo[slot] = lo;
    g.out[slot] = o;
  }
  return g;
}

Shape pad_shape(const Shape& x, const PadGeom& g, size_t k) {
  Shape out = x;
  for (size_t j = 0; j < k; ++j) out[x.size() - 1 - j] = g.out[2 - j];
  return out;
}

}  // namespace

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  const int64_t num = in + 2 * padding - kernel + (ceil_mode ? stride - 1 : 0);
  // Floor division (num may be negative for a too-small input).
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

Tensor avg_pool2d(const Tensor& x, const AvgPool2dParams& p) {
  detail::check_defined("avg_pool2d", x);
  check_4d("avg_pool2d", x);
  check_floating("avg_pool2d", x);
  Tensor y = detail::make_tensor(avg_pool_shape(x.sizes(), p), x.dtype(), x.device());
  if (y.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), avg_pool2d_fwd_kernel, contiguous(x), y, p);
  return y;
}

Tensor avg_pool2d_backward(const Tensor& grad, const Shape& input_sizes, const AvgPool2dParams& p) {
  detail::check_defined("avg_pool2d_backward", grad, "gradient");
  check_grad("avg_pool2d_backward", grad, avg_pool_shape(input_sizes, p));
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device());
  if (gx.numel() == 0) return gx;
  EMBER_DISPATCH_KERNEL(grad.device(), avg_pool2d_bwd_kernel, contiguous(grad), gx, p);
  return gx;
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  detail::check_defined("adaptive_avg_pool2d", x);
  check_4d("adaptive_avg_pool2d", x);
  check_floating("adaptive_avg_pool2d", x);
  check_output_size("adaptive_avg_pool2d", output_size);
  check_nonempty_planes("adaptive_avg_pool2d", x.sizes());
  Tensor y = detail::make_tensor({x.sizes()[0], x.sizes()[1], output_size[0], output_size[1]}, x.dtype(), x.device());
  if (y.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), adaptive_avg_pool2d_fwd_kernel, contiguous(x), y);
  return y;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad, const Shape& input_sizes) {
  detail::check_defined("adaptive_avg_pool2d_backward", grad, "gradient");
  EMBER_CHECK(input_sizes.size() == 4 && grad.dim() == 4, ShapeError,
              "[adaptive_avg_pool2d_backward] expected 4-D shapes, got gradient ", grad.sizes(), " and input ",
              input_sizes);
  check_grad("adaptive_avg_pool2d_backward", grad, {input_sizes[0], input_sizes[1], grad.sizes()[2], grad.sizes()[3]});
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device());
  if (gx.numel() == 0) return gx;
  if (grad.numel() == 0) {
    fill_(gx, 0);
    return gx;
  }
  EMBER_DISPATCH_KERNEL(grad.device(), adaptive_avg_pool2d_bwd_kernel, contiguous(grad), gx);
  return gx;
}

ValuesIndices adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  detail::check_defined("adaptive_max_pool2d", x);
  check_4d("adaptive_max_pool2d", x);
  check_floating("adaptive_max_pool2d", x);
  check_output_size("adaptive_max_pool2d", output_size);
  check_nonempty_planes("adaptive_max_pool2d", x.sizes());
  const Shape out{x.sizes()[0], x.sizes()[1], output_size[0], output_size[1]};
  Tensor y = detail::make_tensor(out, x.dtype(), x.device());
  Tensor idx = detail::make_tensor(out, DType::i64, x.device());
  if (y.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), adaptive_max_pool2d_fwd_kernel, contiguous(x), y, idx);
  return {y, idx};
}

Tensor upsample2d(const Tensor& x, std::array<int64_t, 2> output_size, const Upsample2dParams& p) {
  detail::check_defined("interpolate", x);
  check_4d("interpolate", x);
  check_floating("interpolate", x);
  check_upsample(x.sizes(), output_size);
  Tensor y = detail::make_tensor({x.sizes()[0], x.sizes()[1], output_size[0], output_size[1]}, x.dtype(), x.device());
  if (y.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), upsample2d_fwd_kernel, contiguous(x), y, p);
  return y;
}

Tensor upsample2d_backward(const Tensor& grad, const Shape& input_sizes, const Upsample2dParams& p) {
  detail::check_defined("interpolate_backward", grad, "gradient");
  EMBER_CHECK(grad.dim() == 4, ShapeError, "[interpolate_backward] expected a 4-D gradient, got ", grad.sizes());
  check_upsample(input_sizes, {grad.sizes()[2], grad.sizes()[3]});
  check_grad("interpolate_backward", grad, {input_sizes[0], input_sizes[1], grad.sizes()[2], grad.sizes()[3]});
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device());
  if (gx.numel() == 0) return gx;
  EMBER_DISPATCH_KERNEL(grad.device(), upsample2d_bwd_kernel, contiguous(grad), gx, p);
  return gx;
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode, double value) {
  detail::check_defined("pad", x);
  EMBER_CHECK(mode == PadMode::constant || is_floating(x.dtype()), DTypeError,
              "[pad] reflect and replicate padding need a floating tensor, got ", x.dtype());
  const PadGeom g = pad_geom(x.sizes(), pad, mode);
  Tensor y = detail::make_tensor(pad_shape(x.sizes(), g, pad.size() / 2), x.dtype(), x.device());
  if (y.numel() == 0) return y;
  if (x.numel() == 0) {
    fill_(y, value);
    return y;
  }
  EMBER_DISPATCH_KERNEL(x.device(), pad_fwd_kernel, contiguous(x), y, g, mode, value);
  return y;
}

Tensor pad_backward(const Tensor& grad, const Shape& input_sizes, const std::vector<int64_t>& pad, PadMode mode) {
  detail::check_defined("pad_backward", grad, "gradient");
  const PadGeom g = pad_geom(input_sizes, pad, mode);
  check_grad("pad_backward", grad, pad_shape(input_sizes, g, pad.size() / 2));
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device());
  if (gx.numel() == 0) return gx;
  if (grad.numel() == 0) {
    fill_(gx, 0);
    return gx;
  }
  EMBER_DISPATCH_KERNEL(grad.device(), pad_bwd_kernel, contiguous(grad), gx, g, mode);
  return gx;
}

}  // namespace ember::ops
