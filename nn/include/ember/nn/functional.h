// nn::functional: the stateless form of every layer (torch.nn.functional). These are the
// differentiable ops of ember/functions.h under their PyTorch names, plus the few losses and
// helpers that are composites of them. Layers call these; so can users.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "ember/functions.h"

namespace ember::nn::functional {

using ember::conv2d;
using ember::cross_entropy;
using ember::CrossEntropyOptions;
using ember::dropout;
using ember::embedding;
using ember::gelu;
using ember::gelu_mlp;
using ember::layer_norm;
using ember::linear;
using ember::linear_cross_entropy;
using ember::LinearCrossEntropyOptions;
using ember::log_softmax;
using ember::max_pool2d;
using ember::Reduction;
using ember::relu;
using ember::residual_layer_norm;
using ember::sigmoid;
using ember::silu;
using ember::scaled_dot_product_attention;
using ember::scaled_dot_product_attention_packed;
using ember::softmax;
using ember::tanh;

// approximate: "none" (erf) or "tanh", as torch.nn.functional.gelu. (The const char*
// overload keeps gelu(x, "tanh") from converting the literal to ember::gelu's bool.)
Tensor gelu(const Tensor& x, const std::string& approximate);
inline Tensor gelu(const Tensor& x, const char* approximate) { return gelu(x, std::string(approximate)); }
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);
// Mean (or sum, or none) of (input - target)^2.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Negative log-likelihood of log-probabilities [N, C] at integer targets [N]; entries equal
// to ignore_index are left out of the loss and of the mean's denominator.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean);

}  // namespace ember::nn::functional
