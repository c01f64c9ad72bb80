// The differentiable op API: ember::exp(x), ember::matmul(a, b), ember::cat({a, b}, 1), ...
// Each op is defined once in autograd/src/<family>.cpp with its forward (an ops:: kernel
// call) and its VJP side by side; Tensor's methods forward here (Note [Tensor methods]).
#pragma once

#include <array>
#include <optional>
#include <utility>

#include "ember/tensor.h"

namespace ember {

// ---- elementwise ----
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor gelu(const Tensor& x, bool tanh_approximation = false);
Tensor silu(const Tensor& x);
// Either bound may be absent (clamp(x, {}, 1.0) clamps from above only).
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, Scalar b);
Tensor where(const Tensor& cond, Scalar a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value);
// Comparisons (not differentiable; bool results).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Differentiable cast (the VJP casts the gradient back).
Tensor to(const Tensor& x, Device device, DType dtype, bool non_blocking = false);

// ---- views and shape ----
Tensor view(const Tensor& x, const Shape& shape);
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor permute(const Tensor& x, const Shape& dims);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = std::nullopt);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
// Sums `g` down to `shape` over the dims that broadcasting expanded: the VJP of broadcasting.
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---- reductions (empty dims = all dims) ----
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor norm(const Tensor& x, double p = 2, const Shape& dims = {}, bool keepdim = false);

// ---- linear algebra ----
// matmul with NumPy/PyTorch semantics: 1-D promotion, batched with broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// x @ w^T + b (w is [out, in]), as nn.Linear computes it.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// GPT-2's MLP, fused: linear(gelu(linear(x, fc_weight, fc_bias), tanh), proj_weight, proj_bias)
// with the GELU in the first GEMM's epilogue and the bias gradients in the backward GEMMs'
// (Note [gelu_mlp] in autograd/src/linalg.cpp). Autocast: linear's policy.
Tensor gelu_mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                const Tensor& proj_bias);

// ---- nn ops ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
enum class Reduction { none, mean, sum };
struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
};
// logits [N, C] (or [C]) and integer class targets [N] (or []), fused log_softmax + NLL.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// ember's fused classifier (PyTorch has no such op): equals
//   cross_entropy(linear(x, weight)[..., :V].reshape({N, V}), target.reshape({N}), {ignore_index, reduction})
// for x [..., C], weight [Vp, C] (no bias), integer target [...] (x's leading dims). The loss
// is 0-dim f32 (f64 for f64 inputs). Peak memory: ONE [N, Vp] buffer in the compute dtype
// (bf16 under autocast), holding the logits, then softmax - onehot for the backward; never an
// f32 copy (Note [fused classifier memory], ember/ops/classifier.h). Double backward throws.
// GPT: linear_cross_entropy(h.reshape({N, C}), wte, targets.reshape({N}), {.ignore_index = -1, .num_classes = V}).
struct LinearCrossEntropyOptions {
  int64_t ignore_index = -100;
  // V, the classes that take part: the first V rows of weight (-1 = all). The others (a
  // vocabulary padded to a multiple of 64) get no probability and a zero gradient.
  int64_t num_classes = -1;
  Reduction reduction = Reduction::mean;  // mean or sum; none throws NotImplementedError
};
Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& options = {});
// Normalizes over the trailing dims given by normalized_shape; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// ember's fused pre-LN residual step (PyTorch has no such op): {sum, y} with sum = x + delta
// (same shape, dtype promote(x, delta)) and y = layer_norm(sum, normalized_shape, weight,
// bias, eps), in one pass over x and delta. y's dtype: sum's; but when autocast is on for the
// inputs' device type and sum is f32, the autocast dtype (y's consumers are GEMMs that would
// cast it: the fused op writes it in 16 bits at once; the norm itself runs in f32, 16-bit
// weight/bias cast up as layer_norm's). An f64 sum is never cast; a 16-bit sum under autocast
// runs as the composite to(layer_norm(x + delta), autocast dtype). Equals that composite
// (add, layer_norm, cast) bit for bit, forward and backward; x and delta get their gradients
// in their own dtypes. GPT: std::tie(x, h) = residual_layer_norm(x, attn_out, {C}, w, b).
std::pair<Tensor, Tensor> residual_layer_norm(const Tensor& x, const Tensor& delta,
                                              const Shape& normalized_shape,
                                              const Tensor& weight = Tensor(),
                                              const Tensor& bias = Tensor(), double eps = 1e-5);
// weight [V, D], indices of any shape (i64 or i32) -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Fused attention softmax(scale * q k^T [+ causal mask]) v over q [B, H, Tq, D] and k, v
// [B, H, Tk, D], never materializing the scores; scale defaults to 1/sqrt(D). causal hides
// key j from query i when j > i + Tk - Tq (PyTorch's is_causal for Tq == Tk; the last Tq
// positions of the sequence for a KV-cache step: Note [attention causal alignment]).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, std::optional<double> scale = std::nullopt);
// The same attention over GPT's packed projection qkv [B, T, 3C] (per token the q, k, v of all
// n_head heads, head h at columns h*D .. h*D+D-1 of each third, C = n_head * D), returning y
// [B, T, C] contiguous (y[b, t, h*D + d], what the output projection reads). Equals splitting
// the heads (view [B, T, 3, H, D], select, transpose(1, 2)), scaled_dot_product_attention and
// merging them (transpose(1, 2), reshape), without copying q, k, v or y; the gradient is one
// dqkv buffer. Note: causal defaults to true here (GPT's use).
Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head, bool causal = true,
                                           std::optional<double> scale = std::nullopt);
// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true);

// ---- joining, indexing ----
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- convolution and pooling (NCHW) ----
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0},  // {0, 0} = kernel_size
                  std::array<int64_t, 2> padding = {0, 0});

}  // namespace ember
