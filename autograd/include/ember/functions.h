// The differentiable op API: ember::exp(x), ember::matmul(a, b), ember::cat({a, b}, 1), ...
// Each op is defined once in autograd/src/<family>.cpp with its forward (an ops:: kernel
// call) and its VJP side by side; Tensor's methods forward here (Note [Tensor methods]).
#pragma once

#include <array>
#include <optional>

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
// Normalizes over the trailing dims given by normalized_shape; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// weight [V, D], indices of any shape (i64 or i32) -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Fused attention softmax(scale * q k^T [+ causal mask]) v over q [B, H, Tq, D] and k, v
// [B, H, Tk, D], never materializing the scores; scale defaults to 1/sqrt(D). causal hides
// key j from query i when j > i + Tk - Tq (PyTorch's is_causal for Tq == Tk; the last Tq
// positions of the sequence for a KV-cache step: Note [attention causal alignment]).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, std::optional<double> scale = std::nullopt);
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
