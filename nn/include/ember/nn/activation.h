// The activation modules beyond layers.h's ReLU/GELU/Tanh/Sigmoid/SiLU, under PyTorch's names
// and defaults, each calling its ember:: elementwise op (nn::functional::leaky_relu, ...), plus
// Softmax/LogSoftmax over a dim and Identity. Parameter-free: nothing to register or move.
#pragma once

#include <string>

#include "ember/nn/module.h"

namespace ember::nn {

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;

  double negative_slope;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;

  double alpha;
};

// log1p(exp(beta x)) / beta, and x where beta x > threshold.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;

  double beta, threshold;
};

class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Mish"; }
};

class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Hardswish"; }
};

class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Hardsigmoid"; }
};

// PyTorch's implicit-dim default is deprecated there; here the dim is required.
class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;

  int64_t dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& x) const override;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;

  int64_t dim;
};

// Returns its input (the same tensor handle), as torch.nn.Identity.
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return x; }
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Identity"; }
};

}  // namespace ember::nn
