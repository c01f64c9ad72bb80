// The differentiable op API: ember::exp(x), ember::matmul(a, b), ember::cat({a, b}, 1), ...
// Each op is defined once in autograd/src/<family>.cpp with its forward (an ops:: kernel
// call) and its VJP side by side; Tensor's methods forward here (Note [Tensor methods]).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "ember/optional_pair.h"
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
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor square(const Tensor& x);
// Rounding keeps integer dtypes; round is half to even (decimals as torch.round). Zero gradient.
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor round(const Tensor& x, int64_t decimals = 0);
// PyTorch's activations with their parameters and defaults; softplus is
// log1p(exp(beta x)) / beta, and x itself where beta x > threshold.
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor mish(const Tensor& x);
Tensor hardswish(const Tensor& x);
Tensor hardsigmoid(const Tensor& x);
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
// Splits dim into `sizes` (one may be -1), a view: PyTorch's unflatten, flatten's inverse.
Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes);
Tensor contiguous(const Tensor& x);
Tensor contiguous(const Tensor& x, MemoryFormat format);  // Note [Memory format]
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
// batchmean (the sum over the batch size, input.size(0)) is accepted only by kl_div.
enum class Reduction { none, mean, sum, batchmean };
// Fields in torch.nn.functional.cross_entropy's argument order, so designated initializers
// written in PyTorch's order compile: {.weight = w, .ignore_index = 0, .label_smoothing = 0.1}.
struct CrossEntropyOptions {
  Tensor weight = Tensor();  // optional class weights [C] (not differentiated, as in PyTorch)
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;
};
// torch.nn.functional.cross_entropy over logits [N, C, d1, ...] (or [C]) with integer class
// targets [N, d1, ...] (or []) or class probabilities of the logits' shape (any float dtype;
// label_smoothing mixes them with the uniform distribution; ignore_index does not apply).
// Integer targets without weight: the fused log_softmax + NLL kernel ([N, C, d...] moves the
// class dim last first); with class weights or probability targets: log_softmax and
// nll_loss composites. A weighted mean divides by the sum of the targets' weights.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// In torch.nn.functional.nll_loss's argument order.
struct NLLLossOptions {
  Tensor weight = Tensor();  // optional class weights [C] (not differentiated)
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
};
// torch.nn.functional.nll_loss: input log-probabilities [N, C, d1, ...] (or [C]), integer
// targets [N, d1, ...] (or []); loss = -weight[t] * input[n, t, d...], 0 where t ==
// ignore_index; mean divides by the sum of the non-ignored targets' weights (NaN for none).
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
// torch.nn.functional.binary_cross_entropy: -weight (t log x + (1 - t) log(1 - x)), input and
// target of one shape, each log clamped to >= -100; weight (constant) broadcasts to the input.
// Its VJP is PyTorch's: g weight (x - t) / max(x (1 - x), 1e-12), finite at x = 0 and 1.
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::mean);
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
// ---- normalization (autograd/src/norm.cpp; fused forward and backward kernels) ----
// PyTorch's F.batch_norm over x [N, C, *]: per-channel statistics over N and *. training:
// batch statistics (biased variance to normalize), and running_mean / running_var (optional,
// [C]) updated in place without gradient as r = (1 - momentum) * r + momentum * s (unbiased
// variance); otherwise the running statistics normalize (an affine). weight/bias optional [C].
// A 16-bit x may come with f32 weight, bias and running statistics (autocast's ResNet case).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
// PyTorch's F.group_norm: x [N, C, *] normalized over groups of C / num_groups channels.
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// PyTorch 2.4's F.rms_norm over the trailing dims: x * rsqrt(mean(x^2) + eps) * weight; eps
// nullopt = the machine epsilon of x's dtype. Autocast: layer_norm's policy (f32).
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// ---- Llama ops (autograd/src/rope.cpp, swiglu.cpp; fused forward and backward kernels) ----
// Rotary position embeddings, Hugging Face Llama's rotate_half form: x [B, T, H, D] (any
// strides, D even), cos and sin [T, D/2] (f32, or f64 for an f64 x; narrow the tables to the
// positions of x, e.g. past .. past + T for a KV-cache step). For i < D/2, c = cos[t, i],
// s = sin[t, i]: out[..., i] = x_i c - x_{i+D/2} s, out[..., i+D/2] = x_{i+D/2} c + x_i s.
// Contiguous output in x's dtype. cos/sin are constants: if one requires grad (grad mode on)
// the op throws NotImplementedError. Autocast: runs in x's dtype.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);
// The tables rotary_embedding reads, [max_positions, head_dim / 2]: angle[t, i] = t *
// theta^(-2i / head_dim), computed in f64 and cast to options' dtype on its device.
std::pair<Tensor, Tensor> rope_cos_sin(int64_t max_positions, int64_t head_dim,
                                       double theta = 10000.0, TensorOptions options = {});
// SwiGLU: silu(gate) * up over equal shapes (any strides; different floating dtypes promote),
// in one fused pass; its backward writes both gradients in one pass. Autocast: inputs' dtype.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// weight [V, D], indices of any shape (i64 or i32) -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Fused attention softmax(scale * q k^T [+ causal mask]) v over q [B, H, Tq, D] and k, v
// [B, H, Tk, D], never materializing the scores; scale defaults to 1/sqrt(D). causal hides
// key j from query i when j > i + Tk - Tq (PyTorch's is_causal for Tq == Tk; the last Tq
// positions of the sequence for a KV-cache step: Note [attention causal alignment]).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, std::optional<double> scale = std::nullopt);
// PyTorch's form: attn_mask (undefined, bool with true = take part, or additive float in q's
// dtype or f32) broadcastable to [B, H, Tq, Tk] and read through broadcast strides;
// dropout_p on the probabilities (q's device's default generator; the backward regenerates
// the mask); is_causal with a mask throws, as PyTorch. A fully masked query row gives zeros
// and zero gradients (PyTorch's math path: NaN): Note [attention masks and dropout].
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p = 0.0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);
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

// ---- indexing, masks, einsum and tensor ops (autograd/src/indexing.cpp) ----
// x.index({...}) / x.index_put_({...}, v) as free functions (Note [indexing semantics]).
Tensor index(const Tensor& x, const std::vector<indexing::TensorIndex>& indices);
Tensor& index_put_(Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                   bool accumulate = false);
// Out of place: x with x[indices] replaced by (accumulate: increased by) values.
Tensor index_put(const Tensor& x, const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                 bool accumulate = false);
// [n, x.dim()] i64 coordinates of the nonzero elements (CUDA: one host synchronization).
Tensor nonzero(const Tensor& x);
// The elements of x where mask (bool, broadcast with x) is true, as a 1-D tensor.
Tensor masked_select(const Tensor& x, const Tensor& mask);
// einsum("bij,bjk->bik", {a, b}); implicit output, '...' and broadcasting supported; a
// subscript repeated within one operand takes a diagonal ("ii->i", "ii->" the trace).
Tensor einsum(const std::string& equation, const TensorList& tensors);
Tensor bmm(const Tensor& a, const Tensor& b);  // strictly [B, n, m] x [B, m, p]
// [..., num_classes] i64; num_classes = -1 infers max + 1 (a host synchronization on CUDA).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor tile(const Tensor& x, const Shape& dims);
TensorList unbind(const Tensor& x, int64_t dim = 0);
// 1-D -> the 2-D matrix with x on diagonal `diagonal`; 2-D -> a copy of that diagonal.
Tensor diag(const Tensor& x, int64_t diagonal = 0);
// torch.diagonal: a view of diagonal `offset` of dims dim1, dim2, which it removes, appending
// the diagonal as the last dim.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
Tensor outer(const Tensor& a, const Tensor& b);
TensorList meshgrid(const TensorList& tensors, const std::string& indexing = "ij");
// Logic (bool results, nonzero is true) and bitwise ops (integer and bool tensors).
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& x);
Tensor bitwise_and(const Tensor& a, const Tensor& b);
Tensor bitwise_or(const Tensor& a, const Tensor& b);
Tensor bitwise_xor(const Tensor& a, const Tensor& b);
Tensor bitwise_not(const Tensor& x);

// ---- convolution and pooling (NCHW) ----
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {0, 0},  // {0, 0} = kernel_size
                  std::array<int64_t, 2> padding = {0, 0});

// ---- pooling, resampling, padding, conv variants (autograd/src/pool.cpp; PyTorch's semantics) ----
// stride {0, 0} = kernel_size. divisor_override replaces the window's element count.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = std::nullopt);
// Adaptive bins: bin i of extent H covers [floor(i * H / out), ceil((i + 1) * H / out)).
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t output_size);
Tensor adaptive_max_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
Tensor adaptive_max_pool2d(const Tensor& x, int64_t output_size);
// Values and i64 argmax indices (flat h * W + w inside each input plane; not differentiable).
ValuesIndices adaptive_max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> output_size);
// torch.nn.functional.interpolate for 4-D NCHW: exactly one of size and
// scale_factor; mode "nearest" or "bilinear"; align_corners (bilinear only) unset = false.
// A given scale_factor is used in the source-index formula unless recompute_scale_factor.
// Sizes and scales read as PyTorch's: {.size = {8, 11}}, {.scale_factor = 2.0}.
struct InterpolateOptions {
  OptionalPair<int64_t> size{};  // the {} default keeps GCC quiet on designated initializers
  OptionalPair<double> scale_factor{};
  std::string mode = "nearest";
  std::optional<bool> align_corners{};
  std::optional<bool> recompute_scale_factor{};
};
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);
// torch.nn.functional.pad: pad = {last_lo, last_hi, second_last_lo, ...} for up to 3 trailing
// dims; mode "constant" (value; negative pads crop), "reflect" or "replicate".
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, const std::string& mode = "constant",
           double value = 0);
// x [N, C, L] (or [C, L]), weight [O, C / groups, K]: conv2d over [N, C, 1, L].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1);
// x [N, Cin, H, W], weight [Cin, Cout / groups, kH, kW]: the adjoint of conv2d.
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
                        std::array<int64_t, 2> output_padding = {0, 0}, int64_t groups = 1,
                        std::array<int64_t, 2> dilation = {1, 1});

// ---- recurrent (ember/ops/rnn.h; PyTorch's gate order: LSTM i, f, g, o; GRU r, z, n) ----
// The fused LSTM cell pointwise step: gates = gx + gh ([N, 4H]; gh may be undefined),
// c = sigmoid(f) * c_prev + sigmoid(i) * tanh(g), h = sigmoid(o) * tanh(c) -> {h, c} [N, H]
// (views of one [N, 2H] buffer).
std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gx, const Tensor& gh, const Tensor& c_prev);
// The fused GRU cell pointwise step, gx = W_ih x + b_ih and gh = W_hh h_prev + b_hh ([N, 3H]):
// h = (1 - z) * n + z * h_prev with n = tanh(gx_n + r * gh_n) (PyTorch's GRU).
Tensor gru_cell_pointwise(const Tensor& gx, const Tensor& gh, const Tensor& h_prev);
// One direction of one LSTM / GRU layer over a time-major x [T, N, I]: output [T, N, H] and
// the final states h_n, c_n [N, H] (c_n undefined for the GRU). Biases both or neither; h0,
// c0 [N, H] or undefined (zeros). One autograd node per call (Note [rnn layout]).
struct RnnLayerOutput {
  Tensor output, h_n, c_n;
};
RnnLayerOutput lstm_layer(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                          const Tensor& b_hh, const Tensor& h0, const Tensor& c0, bool reverse = false);
RnnLayerOutput gru_layer(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                         const Tensor& b_hh, const Tensor& h0, bool reverse = false);

// ---- sorting, scans, predicates (autograd/src/sort.cpp; Note [sort order] in ember/ops/sort.h) ----
// Always stable (stable=false may return the stable order, as PyTorch allows); NaN sorts as the
// largest value. Indices are i64; the gradient flows to the selected elements of x.
ValuesIndices sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// The k largest (smallest) along dim, 0 <= k <= size(dim); returned in sorted order either way.
ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// Integer and bool inputs scan in i64.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
// log(sum(exp(x))) over dims (empty = all), stable for large and infinite values.
Tensor logsumexp(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor flip(const Tensor& x, const Shape& dims);
// dims empty: x flattened, rolled by shifts[0], reshaped back.
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims = {});
// bool results (not differentiable); any over nothing is false, all over nothing is true.
Tensor any(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// |a - b| <= atol + rtol |b| elementwise (or a == b, e.g. equal infinities; NaNs equal only
// with equal_nan), broadcasting; a and b must have one dtype. allclose: all of it, on the host.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
               bool equal_nan = false);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);

}  // namespace ember
