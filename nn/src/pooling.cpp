#include "ember/nn/pooling.h"

#include <cmath>

namespace ember::nn {
namespace {

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

std::string size2_str(Size2 s) { return str("(", s.h, ", ", s.w, ")"); }

}  // namespace

// ---- AvgPool2d ----

AvgPool2d::AvgPool2d(Size2 kernel_size, OptionalPair<int64_t> stride, Size2 padding, bool ceil_mode,
                     bool count_include_pad, std::optional<int64_t> divisor_override)
    : kernel_size(kernel_size), stride(stride ? Size2(*stride) : kernel_size), padding(padding), ceil_mode(ceil_mode),
      count_include_pad(count_include_pad), divisor_override(divisor_override) {
  check_positive("AvgPool2d", "kernel height", kernel_size.h);
  check_positive("AvgPool2d", "kernel width", kernel_size.w);
  check_positive("AvgPool2d", "stride height", this->stride.h);
  check_positive("AvgPool2d", "stride width", this->stride.w);
  if (divisor_override) check_positive("AvgPool2d", "divisor_override", *divisor_override);
}

Tensor AvgPool2d::forward(const Tensor& x) const {
  return functional::avg_pool2d(x, kernel_size.array(), stride.array(), padding.array(), ceil_mode,
                                count_include_pad, divisor_override);
}

std::string AvgPool2d::extra_repr() const {
  std::string s = "kernel_size=" + size2_str(kernel_size) + ", stride=" + size2_str(stride) +
                  ", padding=" + size2_str(padding);
  if (ceil_mode) s += ", ceil_mode=true";
  if (!count_include_pad) s += ", count_include_pad=false";
  if (divisor_override) s += str(", divisor_override=", *divisor_override);
  return s;
}

// ---- AdaptiveAvgPool2d / AdaptiveMaxPool2d ----

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {
  EMBER_CHECK(output_size.h >= 0 && output_size.w >= 0, ValueError,
              "[AdaptiveAvgPool2d] output_size must be non-negative, got ", size2_str(output_size));
}
Tensor AdaptiveAvgPool2d::forward(const Tensor& x) const {
  return functional::adaptive_avg_pool2d(x, output_size.array());
}
std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size2_str(output_size); }

AdaptiveMaxPool2d::AdaptiveMaxPool2d(Size2 output_size) : output_size(output_size) {
  EMBER_CHECK(output_size.h >= 0 && output_size.w >= 0, ValueError,
              "[AdaptiveMaxPool2d] output_size must be non-negative, got ", size2_str(output_size));
}
Tensor AdaptiveMaxPool2d::forward(const Tensor& x) const {
  return functional::adaptive_max_pool2d(x, output_size.array());
}
ValuesIndices AdaptiveMaxPool2d::forward_with_indices(const Tensor& x) const {
  return functional::adaptive_max_pool2d_with_indices(x, output_size.array());
}
std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + size2_str(output_size); }

// ---- Upsample ----

Upsample::Upsample(UpsampleOptions options) : options(std::move(options)) {
  EMBER_CHECK(this->options.size.has_value() != this->options.scale_factor.has_value(), ValueError,
              "[Upsample] exactly one of size and scale_factor must be given");
  EMBER_CHECK(this->options.mode == "nearest" || this->options.mode == "bilinear", ValueError, "[Upsample] mode \"",
              this->options.mode, "\" is not supported (\"nearest\" or \"bilinear\")");
}

Tensor Upsample::forward(const Tensor& x) const {
  return functional::interpolate(x, options);
}

std::string Upsample::extra_repr() const {
  std::string s = options.size ? "size=" + size2_str(*options.size)
                               : str("scale_factor=(", (*options.scale_factor)[0], ", ", (*options.scale_factor)[1], ")");
  s += ", mode=" + options.mode;
  if (options.align_corners) s += str(", align_corners=", *options.align_corners);
  return s;
}

}  // namespace ember::nn
