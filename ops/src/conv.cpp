// Front of the conv/pool family: every argument is validated here, once for all backends,
// and inputs are made contiguous, so kernels index dense NCHW buffers.
#include "ember/ops/conv.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ember/ops/elementwise.h"
#include "ember/ops/reduce.h"
#include "kernels/conv.h"

namespace ember::ops {

namespace {

void check_floating(const char* op, const Tensor& t, const char* what) {
  EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] ", what, " must be a floating tensor, got ",
              t.dtype());
}

void check_same_dtype(const char* op, const Tensor& a, const char* a_name, const Tensor& b,
                      const char* b_name) {
  EMBER_CHECK(a.dtype() == b.dtype(), DTypeError, "[", op, "] ", a_name, " dtype ", a.dtype(), " and ",
              b_name, " dtype ", b.dtype(), " differ");
}

void check_4d(const char* op, const Tensor& t, const char* what, const char* layout) {
  EMBER_CHECK(t.dim() == 4, ShapeError, "[", op, "] expected a 4-D ", what, " ", layout, ", got shape ",
              t.sizes());
}

void check_params(const Conv2dParams& p) {
  EMBER_CHECK(p.stride[0] >= 1 && p.stride[1] >= 1, ValueError, "[conv2d] stride must be positive, got [",
              p.stride[0], ", ", p.stride[1], "]");
  EMBER_CHECK(p.padding[0] >= 0 && p.padding[1] >= 0, ValueError,
              "[conv2d] padding must be non-negative, got [", p.padding[0], ", ", p.padding[1], "]");
  EMBER_CHECK(p.dilation[0] >= 1 && p.dilation[1] >= 1, ValueError,
              "[conv2d] dilation must be positive, got [", p.dilation[0], ", ", p.dilation[1], "]");
  EMBER_CHECK(p.groups >= 1, ValueError, "[conv2d] groups must be positive, got ", p.groups);
}

// The output shape of conv2d, validating x against weight and the params.
Shape conv_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  EMBER_CHECK(x.size() == 4 && w.size() == 4, ShapeError, "[conv2d] expected a 4-D input and weight, got shapes ",
              x, " and ", w);
  const int64_t C = x[1], O = w[0];
  EMBER_CHECK(C == w[1] * p.groups, ShapeError, "[conv2d] input of shape ", x, " has ", C,
              " channels, but weight of shape ", w, " with groups=", p.groups, " expects ", w[1] * p.groups,
              " (weight.size(1) * groups)");
  EMBER_CHECK(O % p.groups == 0, ShapeError, "[conv2d] weight of shape ", w, " has ", O,
              " output channels, which groups=", p.groups, " does not divide");
  Shape out{x[0], O, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t k = w[2 + i], eff = p.dilation[i] * (k - 1) + 1, padded = x[2 + i] + 2 * p.padding[i];
    EMBER_CHECK(k >= 1, ShapeError, "[conv2d] weight of shape ", w, " has an empty kernel");
    EMBER_CHECK(eff <= padded, ShapeError, "[conv2d] kernel size ", w[2], "x", w[3],
                " (dilated: ", p.dilation[0] * (w[2] - 1) + 1, "x", p.dilation[1] * (w[3] - 1) + 1,
                ") is bigger than the padded input ", x[2] + 2 * p.padding[0], "x",
                x[3] + 2 * p.padding[1], " (input shape ", x, ", padding [", p.padding[0], ", ",
                p.padding[1], "])");
    out[size_t(2 + i)] = conv_output_size(x[2 + i], k, p.stride[i], p.padding[i], p.dilation[i]);
  }
  return out;
}

void check_grad_shape(const char* op, const Tensor& grad, const Shape& expected) {
  EMBER_CHECK(grad.sizes() == expected, ShapeError, "[", op, "] gradient of shape ", grad.sizes(),
              " does not match the output shape ", expected);
}

}  // namespace

namespace {
// An environment switch that defaults on: off only when the variable is "0".
bool env_not_zero(const char* name) {
  const char* env = std::getenv(name);
  return !(env && std::string(env) == "0");
}
std::atomic<bool> g_conv_winograd{env_not_zero("EMBER_CONV_WINOGRAD")};
std::atomic<bool> g_conv_onednn{env_not_zero("EMBER_CONV_ONEDNN")};
std::atomic<bool> g_conv_autotune{env_not_zero("EMBER_CONV_AUTOTUNE")};
}  // namespace

void set_conv_winograd(bool allow) { g_conv_winograd.store(allow, std::memory_order_relaxed); }
bool conv_winograd() { return g_conv_winograd.load(std::memory_order_relaxed); }
void set_conv_onednn(bool allow) { g_conv_onednn.store(allow, std::memory_order_relaxed); }
bool conv_onednn() { return g_conv_onednn.load(std::memory_order_relaxed); }
void set_conv_autotune(bool on) { g_conv_autotune.store(on, std::memory_order_relaxed); }
bool conv_autotune() { return g_conv_autotune.load(std::memory_order_relaxed); }

namespace {
std::atomic<int64_t> g_cudnn_workspace_limit{[] {
  const char* env = std::getenv("EMBER_CUDNN_WORKSPACE_LIMIT_MB");
  return env && *env ? int64_t(std::strtoll(env, nullptr, 10)) * (int64_t(1) << 20) : int64_t(1) << 30;
}()};
}  // namespace

void set_cudnn_workspace_limit(int64_t bytes) { g_cudnn_workspace_limit.store(bytes, std::memory_order_relaxed); }
int64_t cudnn_workspace_limit() { return g_cudnn_workspace_limit.load(std::memory_order_relaxed); }

namespace {
std::atomic<bool> g_cudnn_benchmark{[] {
  const char* env = std::getenv("EMBER_CUDNN_BENCHMARK");
  return env && std::string_view(env) == "1";
}()};
}  // namespace

void set_cudnn_benchmark(bool on) { g_cudnn_benchmark.store(on, std::memory_order_relaxed); }
bool cudnn_benchmark() { return g_cudnn_benchmark.load(std::memory_order_relaxed); }

namespace {
// The activations' layout a CPU convolution keeps (Note [Memory format]): a channels_last
// input gives a channels_last output, and its gradients stay channels_last. The CUDA kernels
// read dense NCHW (they have not run on channels_last yet).
MemoryFormat activation_format(const Tensor& t) {
  return t.is_cpu() ? t.suggest_memory_format() : MemoryFormat::contiguous;
}
}  // namespace

int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  detail::check_defined("conv2d", x);
  detail::check_defined("conv2d", weight, "weight");
  detail::check_same_device("conv2d", x, weight);
  check_4d("conv2d", x, "input", "[N, C, H, W]");
  check_4d("conv2d", weight, "weight", "[out_channels, in_channels / groups, kH, kW]");
  check_floating("conv2d", x, "input");
  check_same_dtype("conv2d", x, "input", weight, "weight");
  check_params(p);
  const Shape out_shape = conv_shape(x.sizes(), weight.sizes(), p);
  Tensor b;
  if (bias.defined()) {
    detail::check_same_device("conv2d", x, bias);
    check_same_dtype("conv2d", x, "input", bias, "bias");
    EMBER_CHECK(bias.dim() == 1 && bias.sizes()[0] == weight.sizes()[0], ShapeError, "[conv2d] bias of shape ",
                bias.sizes(), " does not match weight of shape ", weight.sizes(), " (expected [",
                weight.sizes()[0], "])");
    b = contiguous(bias);
  }
  const MemoryFormat format = activation_format(x);
  Tensor y = detail::make_tensor(out_shape, x.dtype(), x.device(), format);
  if (y.numel() == 0) return y;
  EMBER_DISPATCH_KERNEL(x.device(), conv2d_fwd_kernel, contiguous(x, format), contiguous(weight), b, y, p);
  return y;
}

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_sizes,
                             const Conv2dParams& p) {
  detail::check_same_device("conv2d_backward_input", grad, weight);
  check_same_dtype("conv2d_backward_input", grad, "gradient", weight, "weight");
  check_params(p);
  check_grad_shape("conv2d_backward_input", grad, conv_shape(input_sizes, weight.sizes(), p));
  const MemoryFormat format = activation_format(grad);
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device(), format);
  if (gx.numel() == 0) return gx;
  if (grad.numel() == 0) {
    fill_(gx, 0);
    return gx;
  }
  EMBER_DISPATCH_KERNEL(grad.device(), conv2d_bwd_input_kernel, contiguous(grad, format), contiguous(weight), gx,
                        p);
  return gx;
}

Tensor conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_sizes,
                              const Conv2dParams& p) {
  detail::check_same_device("conv2d_backward_weight", grad, x);
  check_same_dtype("conv2d_backward_weight", grad, "gradient", x, "input");
  check_params(p);
  check_grad_shape("conv2d_backward_weight", grad, conv_shape(x.sizes(), weight_sizes, p));
  Tensor gw = detail::make_tensor(weight_sizes, grad.dtype(), grad.device());
  if (gw.numel() == 0) return gw;
  if (grad.numel() == 0) {
    fill_(gw, 0);
    return gw;
  }
  const MemoryFormat format = activation_format(grad);
  EMBER_DISPATCH_KERNEL(grad.device(), conv2d_bwd_weight_kernel, contiguous(grad, format), contiguous(x, format), gw,
                        p);
  return gw;
}

// The bias gradient is sum(grad, {0, 2, 3}), computed as two deterministic reductions that
// read grad in place (each sample's channel planes, contiguous rows; then the samples, a
// column sum), so every backend gets it from the reduce family instead of a kernel of its own.
// 16-bit gradients sum in f32 (both reductions accumulate in double inside) and round once.
Tensor conv2d_backward_bias(const Tensor& grad) {
  check_4d("conv2d_backward_bias", grad, "gradient", "[N, O, Ho, Wo]");
  check_floating("conv2d_backward_bias", grad, "gradient");
  const bool half = grad.dtype() == DType::f16 || grad.dtype() == DType::bf16;
  const Tensor g = half ? to(grad, grad.device(), DType::f32) : grad;
  const Tensor per_sample = reduce(ReduceOp::sum, g, {2, 3}, /*keepdim=*/false);
  const Tensor gb = reduce(ReduceOp::sum, per_sample, {0}, /*keepdim=*/false);
  return half ? to(gb, gb.device(), grad.dtype()) : gb;
}

ValuesIndices max_pool2d(const Tensor& x, const Pool2dParams& p) {
  detail::check_defined("max_pool2d", x);
  check_4d("max_pool2d", x, "input", "[N, C, H, W]");
  check_floating("max_pool2d", x, "input");
  Shape out{x.sizes()[0], x.sizes()[1], 0, 0};
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.kernel[i] >= 1, ValueError, "[max_pool2d] kernel_size must be positive, got [", p.kernel[0],
                ", ", p.kernel[1], "]");
    EMBER_CHECK(p.stride[i] >= 1, ValueError, "[max_pool2d] stride must be positive, got [", p.stride[0], ", ",
                p.stride[1], "]");
    EMBER_CHECK(p.padding[i] >= 0 && 2 * p.padding[i] <= p.kernel[i], ValueError, "[max_pool2d] padding [",
                p.padding[0], ", ", p.padding[1], "] must be non-negative and at most half of kernel_size [",
                p.kernel[0], ", ", p.kernel[1], "]");
    const int64_t padded = x.sizes()[2 + i] + 2 * p.padding[i];
    EMBER_CHECK(p.kernel[i] <= padded, ShapeError, "[max_pool2d] kernel_size [", p.kernel[0], ", ", p.kernel[1],
                "] is bigger than the padded input ", x.sizes()[2] + 2 * p.padding[0], "x",
                x.sizes()[3] + 2 * p.padding[1], " (input shape ", x.sizes(), ")");
    out[size_t(2 + i)] = conv_output_size(x.sizes()[2 + i], p.kernel[i], p.stride[i], p.padding[i], 1);
  }
  Tensor y = detail::make_tensor(out, x.dtype(), x.device());
  Tensor idx = detail::make_tensor(out, DType::i64, x.device());
  if (y.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), max_pool2d_fwd_kernel, contiguous(x), y, idx, p);
  return {y, idx};
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_sizes) {
  detail::check_same_device("max_pool2d_backward", grad, indices);
  EMBER_CHECK(indices.dtype() == DType::i64, DTypeError, "[max_pool2d_backward] indices must be i64, got ",
              indices.dtype());
  EMBER_CHECK(grad.sizes() == indices.sizes() && grad.dim() == 4 && input_sizes.size() == 4 &&
                  grad.sizes()[0] == input_sizes[0] && grad.sizes()[1] == input_sizes[1],
              ShapeError, "[max_pool2d_backward] gradient of shape ", grad.sizes(), " and indices of shape ",
              indices.sizes(), " do not fit an input of shape ", input_sizes);
  Tensor gx = detail::make_tensor(input_sizes, grad.dtype(), grad.device());
  if (gx.numel() == 0) return gx;
  EMBER_DISPATCH_KERNEL(grad.device(), max_pool2d_bwd_kernel, contiguous(grad), contiguous(indices), gx);
  return gx;
}

Tensor max_pool2d_gather(const Tensor& grad_input, const Tensor& indices) {
  detail::check_same_device("max_pool2d_gather", grad_input, indices);
  EMBER_CHECK(indices.dtype() == DType::i64, DTypeError, "[max_pool2d_gather] indices must be i64, got ",
              indices.dtype());
  EMBER_CHECK(grad_input.dim() == 4 && indices.dim() == 4 && grad_input.sizes()[0] == indices.sizes()[0] &&
                  grad_input.sizes()[1] == indices.sizes()[1],
              ShapeError, "[max_pool2d_gather] input of shape ", grad_input.sizes(), " does not fit indices of shape ",
              indices.sizes());
  Tensor gy = detail::make_tensor(indices.sizes(), grad_input.dtype(), grad_input.device());
  if (gy.numel() == 0) return gy;
  EMBER_DISPATCH_KERNEL(grad_input.device(), max_pool2d_gather_kernel, contiguous(grad_input),
                        contiguous(indices), gy);
  return gy;
}

}  // namespace ember::ops
