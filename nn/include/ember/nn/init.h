// Parameter initialization, in place and outside the graph, as torch.nn.init. Each draws from
// `gen` (the default CPU generator when null) on the CPU in f64 and copies into the tensor, so
// a seed gives the same weights on every device and dtype.
#pragma once

#include <string>
#include <utility>

#include "ember/random.h"
#include "ember/tensor.h"

namespace ember::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity {
  linear, relu, leaky_relu, tanh, sigmoid, selu,
  conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
};

// (fan_in, fan_out) of a weight: [out, in, k...] -> (in * prod(k), out * prod(k)).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// torch.nn.init.calculate_gain; `param` is leaky_relu's negative slope.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
// Normal(mean, std) truncated to [a, b], by PyTorch's inverse-CDF method: u uniform in
// [cdf(a), cdf(b)], then mean + std * sqrt(2) * erfinv(2u - 1), clamped to [a, b]. Any window
// works (no rejection loop), as long as it has probability mass in f64.
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                      double b = 2.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                         Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator* gen = nullptr);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// torch.nn.init.orthogonal_: t viewed as [rows, numel / rows] becomes gain * Q, Q the
// orthonormal factor (with R's diagonal made positive) of the QR of a standard normal matrix:
// orthonormal rows when rows <= cols, orthonormal columns otherwise. The QR is a Householder
// factorization in f64 on the CPU. Needs dim() >= 2.
Tensor& orthogonal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

// While one is alive on this thread, every function above validates its arguments and then
// leaves the tensor as allocated (uninitialized memory) and draws no random numbers; so do the
// layers' constructors and reset_parameters, which call them. For models whose every weight is
// loaded right after construction (io::gpt2_from_pretrained): a 124M GPT-2 is built in a
// fraction of the time, and the random stream does not move (transformers' no_init_weights).
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;

 private:
  bool previous_;
};
bool init_skipped();  // whether a SkipInitGuard is alive on this thread

}  // namespace ember::nn::init
