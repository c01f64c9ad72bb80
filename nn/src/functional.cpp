#include "ember/nn/functional.h"

#include "ember/factory.h"

namespace ember::nn::functional {

Tensor gelu(const Tensor& x, const std::string& approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", ValueError,
              "[gelu] approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  return ember::gelu(x, approximate == "tanh");
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return ember::flatten(x, start_dim, end_dim);
}

}  // namespace ember::nn::functional
