#include "ember/nn/layers.h"

#include <cmath>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/nn/functional.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

std::string size2_str(Size2 s) {
  return str("(", s.h, ", ", s.w, ")");
}

// PyTorch's Linear/Conv reset_parameters: kaiming_uniform_(a = sqrt(5)) on the weight, which
// is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias from the same range.
void reset_affine(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias)
    : in_features(in_features), out_features(out_features) {
  check_positive("Linear", "in_features", in_features);
  check_positive("Linear", "out_features", out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (with_bias) bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters() { reset_affine(weight, bias); }

Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return str("in_features=", in_features, ", out_features=", out_features,
             ", bias=", detail::py_bool(bias.defined()));
}

// ---- Conv2d ----

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options)
    : in_channels(in_channels), out_channels(out_channels), kernel_size(kernel_size), options(options) {
  check_positive("Conv2d", "in_channels", in_channels);
  check_positive("Conv2d", "out_channels", out_channels);
  check_positive("Conv2d", "kernel height", kernel_size.h);
  check_positive("Conv2d", "kernel width", kernel_size.w);
  check_positive("Conv2d", "groups", options.groups);
  EMBER_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0, ValueError,
              "[Conv2d] in_channels ", in_channels, " and out_channels ", out_channels,
              " must both be divisible by groups ", options.groups);
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (options.bias) bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters() { reset_affine(weight, bias); }

Tensor Conv2d::forward(const Tensor& x) const {
  return conv2d(x, weight, bias, options.stride.array(), options.padding.array(),
                options.dilation.array(), options.groups);
}

std::string Conv2d::extra_repr() const {
  std::string s = str(in_channels, ", ", out_channels, ", kernel_size=", size2_str(kernel_size),
                      ", stride=", size2_str(options.stride));
  if (options.padding.h || options.padding.w) s += ", padding=" + size2_str(options.padding);
  if (options.dilation.h != 1 || options.dilation.w != 1) s += ", dilation=" + size2_str(options.dilation);
  if (options.groups != 1) s += str(", groups=", options.groups);
  if (!options.bias) s += ", bias=False";
  return s;
}

// ---- pooling, reshaping, activations ----

MaxPool2d::MaxPool2d(Size2 kernel_size, OptionalPair<int64_t> stride, Size2 padding)
    : kernel_size(kernel_size), stride(stride ? Size2(*stride) : kernel_size), padding(padding) {
  check_positive("MaxPool2d", "kernel height", kernel_size.h);
  check_positive("MaxPool2d", "kernel width", kernel_size.w);
  check_positive("MaxPool2d", "stride height", this->stride.h);
  check_positive("MaxPool2d", "stride width", this->stride.w);
}

Tensor MaxPool2d::forward(const Tensor& x) const {
  return max_pool2d(x, kernel_size.array(), stride.array(), padding.array());
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + size2_str(kernel_size) + ", stride=" + size2_str(stride) +
         ", padding=" + size2_str(padding);
}

Tensor Flatten::forward(const Tensor& x) const { return x.flatten(start_dim, end_dim); }
std::string Flatten::extra_repr() const { return str("start_dim=", start_dim, ", end_dim=", end_dim); }
Tensor Unflatten::forward(const Tensor& x) const { return x.unflatten(dim, unflattened_size); }
std::string Unflatten::extra_repr() const {
  return str("dim=", dim, ", unflattened_size=", detail::py_tuple(unflattened_size));
}

Tensor ReLU::forward(const Tensor& x) const { return relu(x); }
Tensor Tanh::forward(const Tensor& x) const { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) const { return sigmoid(x); }
Tensor SiLU::forward(const Tensor& x) const { return silu(x); }

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  EMBER_CHECK(this->approximate == "none" || this->approximate == "tanh", ValueError,
              "[GELU] approximate must be \"none\" or \"tanh\", got \"", this->approximate, "\"");
}
Tensor GELU::forward(const Tensor& x) const { return functional::gelu(x, approximate); }
std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Dropout::Dropout(double p) : p(p) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, ValueError, "[Dropout] p must be in [0, 1], got ", p);
}
Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, is_training()); }
std::string Dropout::extra_repr() const { return str("p=", p); }

// ---- LayerNorm ----

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool with_bias)
    : normalized_shape(std::move(normalized_shape)), eps(eps) {
  EMBER_CHECK(!this->normalized_shape.empty(), ValueError, "[LayerNorm] normalized_shape is empty");
  for (int64_t s : this->normalized_shape) check_positive("LayerNorm", "normalized_shape size", s);
  if (elementwise_affine) {
    weight = register_parameter("weight", empty(this->normalized_shape));
    if (with_bias) bias = register_parameter("bias", empty(this->normalized_shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layer_norm(x, normalized_shape, weight, bias, eps);
}

std::string LayerNorm::extra_repr() const {
  return str(detail::py_tuple(normalized_shape), ", eps=", eps, ", elementwise_affine=", detail::py_bool(weight.defined()));
}

// ---- Embedding ----

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  check_positive("Embedding", "num_embeddings", num_embeddings);
  check_positive("Embedding", "embedding_dim", embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  reset_parameters();
}

void Embedding::reset_parameters() { init::normal_(weight); }

Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight, indices); }

std::string Embedding::extra_repr() const { return str(num_embeddings, ", ", embedding_dim); }

// ---- Sequential ----

Tensor Sequential::forward(const Tensor& x) const {
  Tensor h = x;
  for (const Step& step : steps_) h = step.forward(h);
  return h;
}

Module& Sequential::operator[](size_t i) const {
  EMBER_CHECK(i < steps_.size(), IndexError, "[Sequential] index ", i, " out of range for ",
              steps_.size(), " modules");
  return *steps_[i].module;
}

}  // namespace ember::nn
