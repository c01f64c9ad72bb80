#include "ember/nn/activation.h"

#include "ember/functions.h"

namespace ember::nn {

Tensor LeakyReLU::forward(const Tensor& x) const { return leaky_relu(x, negative_slope); }
std::string LeakyReLU::extra_repr() const { return str("negative_slope=", negative_slope); }

Tensor ELU::forward(const Tensor& x) const { return elu(x, alpha); }
std::string ELU::extra_repr() const { return str("alpha=", alpha); }

Softplus::Softplus(double beta, double threshold) : beta(beta), threshold(threshold) {
  EMBER_CHECK(beta != 0, ValueError, "[Softplus] beta must be nonzero");
}
Tensor Softplus::forward(const Tensor& x) const { return softplus(x, beta, threshold); }
std::string Softplus::extra_repr() const { return str("beta=", beta, ", threshold=", threshold); }

Tensor Mish::forward(const Tensor& x) const { return mish(x); }
Tensor Hardswish::forward(const Tensor& x) const { return hardswish(x); }
Tensor Hardsigmoid::forward(const Tensor& x) const { return hardsigmoid(x); }

Tensor Softmax::forward(const Tensor& x) const { return softmax(x, dim); }
std::string Softmax::extra_repr() const { return str("dim=", dim); }

Tensor LogSoftmax::forward(const Tensor& x) const { return log_softmax(x, dim); }
std::string LogSoftmax::extra_repr() const { return str("dim=", dim); }

}  // namespace ember::nn
