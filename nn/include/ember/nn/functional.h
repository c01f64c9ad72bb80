// nn::functional: the stateless form of every layer (torch.nn.functional). These are the
// differentiable ops of ember/functions.h under their PyTorch names, plus the few losses and
// helpers that are composites of them. Layers call these; so can users.
#pragma once

#include <array>
#include <optional>
#include <string>

#include "ember/functions.h"
#include "ember/nn/loss.h"  // the losses (mse_loss, l1_loss, ..., cross_entropy, nll_loss)

namespace ember::nn::functional {

using ember::adaptive_avg_pool2d;
using ember::adaptive_max_pool2d;
using ember::adaptive_max_pool2d_with_indices;
using ember::avg_pool2d;
using ember::conv1d;
using ember::conv2d;
using ember::conv_transpose2d;
using ember::interpolate;
using ember::InterpolateOptions;
using ember::pad;
using ember::cross_entropy;
using ember::CrossEntropyOptions;
using ember::dropout;
using ember::embedding;
using ember::gelu;
using ember::gelu_mlp;
using ember::layer_norm;
using ember::batch_norm;
using ember::group_norm;
using ember::rms_norm;
using ember::rotary_embedding;
using ember::rope_cos_sin;
using ember::swiglu;
using ember::linear;
using ember::lstm_cell_pointwise;
using ember::gru_cell_pointwise;
using ember::linear_cross_entropy;
using ember::LinearCrossEntropyOptions;
using ember::log_softmax;
using ember::one_hot;
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
using ember::leaky_relu;
using ember::elu;
using ember::softplus;
using ember::mish;
using ember::hardswish;
using ember::hardsigmoid;

// approximate: "none" (erf) or "tanh", as torch.nn.functional.gelu. (The const char*
// overload keeps gelu(x, "tanh") from converting the literal to ember::gelu's bool.)
Tensor gelu(const Tensor& x, const std::string& approximate);
inline Tensor gelu(const Tensor& x, const char* approximate) { return gelu(x, std::string(approximate)); }
Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1);

}  // namespace ember::nn::functional
