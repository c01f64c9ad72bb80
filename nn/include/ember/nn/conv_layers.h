// Convolution layers beyond Conv2d (layers.h): Conv1d and ConvTranspose2d, with PyTorch's
// parameter names, shapes and default initialization (kaiming_uniform_(a = sqrt(5)) on the
// weight, bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with PyTorch's fan_in of the weight).
#pragma once

#include <string>

#include "ember/nn/functional.h"
#include "ember/nn/layers.h"

namespace ember::nn {

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// x [N, C, L] (or unbatched [C, L]) -> [N, O, Lo]; weight [out, in / groups, kernel_size].
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {});
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels, kernel_size;
  Conv1dOptions options;
  Tensor weight, bias;
};

struct ConvTranspose2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
};

// The adjoint of Conv2d (the "deconvolution"): weight [in, out / groups, kh, kw]; output
// extent (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                  ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  ConvTranspose2dOptions options;
  Tensor weight, bias;
};

}  // namespace ember::nn
