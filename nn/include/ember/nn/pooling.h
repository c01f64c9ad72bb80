// Pooling and resampling layers: AvgPool2d, AdaptiveAvgPool2d, AdaptiveMaxPool2d, Upsample.
// Parameter-free; each forward calls the matching nn::functional op (PyTorch's semantics and
// argument names). NCHW input, or unbatched [C, H, W] where PyTorch accepts it.
#pragma once

#include <concepts>
#include <optional>
#include <string>

#include "ember/nn/functional.h"
#include "ember/nn/layers.h"

namespace ember::nn {

// torch.nn.AvgPool2d's arguments after kernel_size, in its order.
struct AvgPool2dOptions {
  OptionalPair<int64_t> stride{};  // unset: kernel_size
  Size2 padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
  std::optional<int64_t> divisor_override{};
};

// Averages kernel_size windows; stride defaults to kernel_size. ceil_mode, count_include_pad
// and divisor_override as torch.nn.AvgPool2d. Either form: AvgPool2d(3, 2, 1) positionally, or
// AvgPool2d(3, {.stride = 2, .ceil_mode = true}).
class AvgPool2d : public Module {
 public:
  AvgPool2d(Size2 kernel_size, OptionalPair<int64_t> stride, Size2 padding = 0, bool ceil_mode = false,
            bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  // A template only so that a positional brace list, AvgPool2d(3, {2, 1}), is the stride
  // above: on an otherwise equal match C++ prefers the non-template constructor.
  template <std::same_as<AvgPool2dOptions> Options = AvgPool2dOptions>
  explicit AvgPool2d(Size2 kernel_size, const Options& options = {})
      : AvgPool2d(kernel_size, options.stride, options.padding, options.ceil_mode, options.count_include_pad,
                  options.divisor_override) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;

  Size2 kernel_size, stride, padding;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor_override;
};

// Averages over PyTorch's adaptive bins to output_size [h, w]: bin i of an input extent H
// covers [floor(i * H / h), ceil((i + 1) * H / h)). AdaptiveAvgPool2d(1) is the global pool.
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;

  Size2 output_size;
};

// The maximum of each adaptive bin; forward_with_indices also returns the argmax positions
// (flat h * W + w inside each input plane, as torch's return_indices=True).
class AdaptiveMaxPool2d : public Module {
 public:
  explicit AdaptiveMaxPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  ValuesIndices forward_with_indices(const Tensor& x) const;
  std::string type_name() const override { return "AdaptiveMaxPool2d"; }
  std::string extra_repr() const override;

  Size2 output_size;
};

// functional::interpolate's options: exactly one of size and scale_factor; mode "nearest" or
// "bilinear"; align_corners (bilinear only) unset means false.
using UpsampleOptions = InterpolateOptions;

// functional::interpolate as a layer: nn::Upsample({.scale_factor = 2.0, .mode = "bilinear"}).
class Upsample : public Module {
 public:
  explicit Upsample(UpsampleOptions options);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;

  UpsampleOptions options;
};

}  // namespace ember::nn
