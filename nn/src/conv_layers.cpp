#include "ember/nn/conv_layers.h"

#include <cmath>

#include "ember/factory.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

std::string size2_str(Size2 s) { return str("(", s.h, ", ", s.w, ")"); }

// PyTorch's _ConvNd.reset_parameters: kaiming_uniform_(a = sqrt(5)) on the weight, and the
// bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in (for a transposed
// convolution that is weight.size(1) * kh * kw = out_channels / groups * kh * kw).
void reset_conv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

void check_groups(const char* layer, int64_t in_channels, int64_t out_channels, int64_t groups) {
  check_positive(layer, "in_channels", in_channels);
  check_positive(layer, "out_channels", out_channels);
  check_positive(layer, "groups", groups);
  EMBER_CHECK(in_channels % groups == 0 && out_channels % groups == 0, ValueError, "[", layer, "] in_channels ",
              in_channels, " and out_channels ", out_channels, " must both be divisible by groups ", groups);
}

}  // namespace

// ---- Conv1d ----

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  check_groups("Conv1d", in_channels, out_channels, options.groups);
  check_positive("Conv1d", "kernel_size", kernel_size);
  weight = register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv1d::reset_parameters() { reset_conv(weight, bias); }

Tensor Conv1d::forward(const Tensor& x) const {
  return functional::conv1d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv1d::extra_repr() const {
  std::string s = str(in_channels, ", ", out_channels, ", kernel_size=(", kernel_size, ",), stride=(",
                      options.stride, ",)");
  if (options.padding) s += str(", padding=(", options.padding, ",)");
  if (options.dilation != 1) s += str(", dilation=(", options.dilation, ",)");
  if (options.groups != 1) s += str(", groups=", options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

// ---- ConvTranspose2d ----

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  check_groups("ConvTranspose2d", in_channels, out_channels, options.groups);
  check_positive("ConvTranspose2d", "kernel height", kernel_size.h);
  check_positive("ConvTranspose2d", "kernel width", kernel_size.w);
  weight = register_parameter(
      "weight", empty({in_channels, out_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void ConvTranspose2d::reset_parameters() { reset_conv(weight, bias); }

Tensor ConvTranspose2d::forward(const Tensor& x) const {
  return functional::conv_transpose2d(x, weight, bias, options.stride.array(), options.padding.array(),
                                      options.output_padding.array(), options.groups, options.dilation.array());
}

std::string ConvTranspose2d::extra_repr() const {
  std::string s = str(in_channels, ", ", out_channels, ", kernel_size=", size2_str(kernel_size),
                      ", stride=", size2_str(options.stride));
  if (options.padding.h || options.padding.w) s += ", padding=" + size2_str(options.padding);
  if (options.output_padding.h || options.output_padding.w)
    s += ", output_padding=" + size2_str(options.output_padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + size2_str(options.dilation);
  if (options.groups != 1) s += str(", groups=", options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

}  // namespace ember::nn
