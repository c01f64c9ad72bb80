// The built-in layers. Each is a Module with a forward() (also callable as layer(x)) that
// calls the matching nn::functional op, and PyTorch's default initialization drawn from the
// default CPU generator (so manual_seed(s) makes a model's initial weights reproducible).
// Parameters are created on the CPU in f32; move them with Module::to().
#pragma once

#include <array>
#include <concepts>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/nn/module.h"
#include "ember/optional_pair.h"

namespace ember::nn {

// A pair of sizes that reads as one number when both are equal: `.stride = 2` or
// `.stride = {2, 1}` (height, width).
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  Size2(const std::array<int64_t, 2>& hw) : h(hw[0]), w(hw[1]) {}
  std::array<int64_t, 2> array() const { return {h, w}; }
  // Where a pair is optional (a pooling stride, Upsample's size).
  operator OptionalPair<int64_t>() const { return array(); }
};

// y = x W^T + b, W [out_features, in_features]. Init: W, b ~ U(-1/sqrt(in), 1/sqrt(in)),
// PyTorch's kaiming_uniform_(a = sqrt(5)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  int64_t in_features, out_features;
  Tensor weight, bias;  // bias is undefined without one
};

struct Conv2dOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// NCHW convolution, W [out, in / groups, kh, kw]. Init as Linear with fan_in = in/groups*kh*kw.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Conv2dOptions options;
  Tensor weight, bias;
};

// torch.nn.MaxPool2d's arguments after kernel_size, in its order (no dilation or ceil_mode yet).
struct MaxPool2dOptions {
  OptionalPair<int64_t> stride{};  // unset: kernel_size, as in PyTorch
  Size2 padding = 0;
};

// Either form: MaxPool2d(3, 2, 1) or MaxPool2d(3, {.stride = 2, .padding = 1}).
class MaxPool2d : public Module {
 public:
  MaxPool2d(Size2 kernel_size, OptionalPair<int64_t> stride, Size2 padding = 0);
  // A template only so that a positional brace list, MaxPool2d(3, {2, 1}), is the stride
  // above: on an otherwise equal match C++ prefers the non-template constructor.
  template <std::same_as<MaxPool2dOptions> Options = MaxPool2dOptions>
  explicit MaxPool2d(Size2 kernel_size, const Options& options = {})
      : MaxPool2d(kernel_size, options.stride, options.padding) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;

  Size2 kernel_size, stride, padding;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

  int64_t start_dim, end_dim;
};

// Splits dim into sizes: nn.Unflatten(dim, unflattened_size).
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape unflattened_size) : dim(dim), unflattened_size(std::move(unflattened_size)) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;

  int64_t dim;
  Shape unflattened_size;
};

// Parameter-free activations.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "ReLU"; }
};

class GELU : public Module {
 public:
  // approximate: "none" (erf) or "tanh", as torch.nn.GELU.
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;

  std::string approximate;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Tanh"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Sigmoid"; }
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "SiLU"; }
};

// Zeroes elements with probability p in training mode; the identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;

  double p;
};

// Normalizes over the trailing normalized_shape dims; weight = 1, bias = 0 initially.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  // nn::LayerNorm(768), as PyTorch's LayerNorm(768): the last dim.
  explicit LayerNorm(int64_t normalized_size, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(Shape{normalized_size}, eps, elementwise_affine, bias) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  Shape normalized_shape;
  double eps;
  Tensor weight, bias;
};

// A lookup table [num_embeddings, embedding_dim] ~ N(0, 1), indexed by integer tensors.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) const;
  Tensor operator()(const Tensor& indices) const { return call(indices, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

// Runs its modules in order, each one's output feeding the next. Modules are named "0", "1",
// ... as in PyTorch and may be any module with `Tensor forward(const Tensor&)`.
//
//   nn::Sequential mlp(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
class Sequential : public Module {
 public:
  Sequential() = default;
  template <class... Ms>
    // (A single Sequential argument is the move constructor's, not a one-layer Sequential.)
    requires(sizeof...(Ms) > 1 || (sizeof...(Ms) == 1 && (!std::is_same_v<std::decay_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // Takes a module by value (moved into shared ownership) or as a shared_ptr.
  template <class M>
  auto push_back(M&& module) {
    if constexpr (requires { typename std::decay_t<M>::element_type; }) {
      return push_shared(module);
    } else {
      return push_shared(std::make_shared<std::decay_t<M>>(std::forward<M>(module)));
    }
  }
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  size_t size() const { return steps_.size(); }
  Module& operator[](size_t i) const;
  std::string type_name() const override { return "Sequential"; }

 private:
  template <class M>
  std::shared_ptr<M> push_shared(std::shared_ptr<M> module) {
    register_module(std::to_string(steps_.size()), module);
    M* raw = module.get();
    steps_.push_back({raw, [raw](const Tensor& x) { return raw->forward(x); }});
    return module;
  }
  struct Step {
    Module* module;
    std::function<Tensor(const Tensor&)> forward;
  };
  std::vector<Step> steps_;
};

}  // namespace ember::nn
