// MultiheadAttention and the Transformer layers (nn/include/ember/nn/transformer.h), written
// with ember's differentiable ops: projections are Linear GEMMs, heads are strided views of
// them (no copy into [N, H, T, D]), and attention is the fused scaled_dot_product_attention
// unless the caller asks for the weights.
#include "ember/nn/transformer.h"

#include <cmath>
#include <limits>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

constexpr const char* kMha = "MultiheadAttention";

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

void check_dropout(const char* layer, double p) {
  EMBER_CHECK(p >= 0 && p < 1, ValueError, "[", layer, "] dropout must be in [0, 1), got ", p);
}

// A torch.nn mask (bool: true = not allowed; floating: added to the scores) as an additive
// floating mask in `dt`, in its own shape (PyTorch's _canonical_mask).
Tensor additive_mask(const Tensor& m, DType dt) {
  if (m.dtype() == DType::b8)
    return masked_fill(zeros(m.sizes(), TensorOptions(dt).device(m.device())), m,
                       -std::numeric_limits<double>::infinity());
  EMBER_CHECK(is_floating(m.dtype()), DTypeError, "[", kMha,
              "] masks must be bool or floating, got ", m.dtype());
  return m.dtype() == dt ? m : to(m, m.device(), dt);
}

// PyTorch's top-left causal mask [L, S], bool, true where key j > query i (hidden).
Tensor causal_mask(int64_t L, int64_t S, Device dev) {
  const Tensor i = arange(L, TensorOptions(DType::i64).device(dev)).reshape({L, 1});
  const Tensor j = arange(S, TensorOptions(DType::i64).device(dev)).reshape({1, S});
  return gt(j, i);
}

// [N, T, H * D] -> [N, H, T, D], a view when the last dim splits in place.
Tensor split_heads(const Tensor& x, int64_t H) {
  const int64_t N = x.sizes()[0], T = x.sizes()[1], D = x.sizes()[2] / H;
  return transpose(reshape(x, {N, T, H, D}), 1, 2);
}

Tensor activate(const std::string& activation, const Tensor& x) {
  return activation == "relu" ? relu(x) : gelu(x);
}

void check_activation(const char* layer, const std::string& activation) {
  EMBER_CHECK(activation == "relu" || activation == "gelu", ValueError, "[", layer,
              "] activation should be relu or gelu, not ", activation);
}

}  // namespace

// ---- MultiheadAttention ----

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_,
                                       MultiheadAttentionOptions options_)
    : embed_dim(embed_dim_),
      num_heads(num_heads_),
      head_dim(num_heads_ > 0 ? embed_dim_ / num_heads_ : 0),
      kdim(options_.kdim > 0 ? options_.kdim : embed_dim_),
      vdim(options_.vdim > 0 ? options_.vdim : embed_dim_),
      options(options_),
      out_proj(embed_dim_ > 0 ? embed_dim_ : 1, embed_dim_ > 0 ? embed_dim_ : 1, options_.bias) {
  check_positive(kMha, "embed_dim", embed_dim);
  check_positive(kMha, "num_heads", num_heads);
  EMBER_CHECK(embed_dim % num_heads == 0, ValueError, "[", kMha, "] embed_dim (", embed_dim,
              ") must be divisible by num_heads (", num_heads, ")");
  EMBER_CHECK(!options.add_bias_kv && !options.add_zero_attn, NotImplementedError, "[", kMha,
              "] add_bias_kv and add_zero_attn are not supported");
  check_dropout(kMha, options.dropout);
  EMBER_CHECK(options.kdim >= 0 && options.vdim >= 0, ValueError, "[", kMha,
              "] kdim and vdim must be positive (or 0 for embed_dim), got ", options.kdim,
              " and ", options.vdim);
  if (kdim == embed_dim && vdim == embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({embed_dim, embed_dim}));
    k_proj_weight = register_parameter("k_proj_weight", empty({embed_dim, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({embed_dim, vdim}));
  }
  if (options.bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * embed_dim}));
  register_module("out_proj", out_proj);
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) init::zeros_(in_proj_bias);
  if (out_proj.bias.defined()) init::zeros_(out_proj.bias);
}

std::string MultiheadAttention::extra_repr() const {
  return str("embed_dim=", embed_dim, ", num_heads=", num_heads, ", dropout=", options.dropout,
             ", batch_first=", options.batch_first);
}

std::pair<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                      const Tensor& value,
                                                      const Tensor& key_padding_mask,
                                                      bool need_weights, const Tensor& attn_mask,
                                                      bool average_attn_weights,
                                                      bool is_causal) const {
  ember::detail::check_defined(kMha, query, "query");
  ember::detail::check_defined(kMha, key, "key");
  ember::detail::check_defined(kMha, value, "value");
  const bool batched = query.dim() == 3;
  EMBER_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() &&
                  value.dim() == query.dim(),
              ShapeError, "[", kMha, "] expects batched (3-D) or unbatched (2-D) query, key and "
              "value of the same rank, got ", query.sizes(), ", ", key.sizes(), " and ",
              value.sizes());
  // Everything batch-first [N, T, E] from here on (views, no copies).
  auto batch_first_view = [&](const Tensor& x) {
    if (!batched) return unsqueeze(x, 0);
    return options.batch_first ? x : transpose(x, 0, 1);
  };
  const Tensor q_in = batch_first_view(query), k_in = batch_first_view(key),
               v_in = batch_first_view(value);
  const int64_t N = q_in.sizes()[0], L = q_in.sizes()[1], S = k_in.sizes()[1];
  EMBER_CHECK(q_in.sizes()[2] == embed_dim && k_in.sizes()[2] == kdim &&
                  v_in.sizes()[2] == vdim,
              ShapeError, "[", kMha, "] query, key and value feature sizes must be embed_dim ",
              embed_dim, ", kdim ", kdim, " and vdim ", vdim, ", got shapes ", query.sizes(),
              ", ", key.sizes(), " and ", value.sizes());
  EMBER_CHECK(k_in.sizes()[0] == N && v_in.sizes()[0] == N && v_in.sizes()[1] == S, ShapeError,
              "[", kMha, "] query ", query.sizes(), ", key ", key.sizes(), " and value ",
              value.sizes(), " disagree in batch size or key length");

  // ---- projections
  const int64_t E = embed_dim;
  auto bias_part = [&](int64_t part) {
    return in_proj_bias.defined() ? narrow(in_proj_bias, 0, part * E, E) : Tensor();
  };
  Tensor q, k, v;
  if (in_proj_weight.defined() && query.is_same(key) && key.is_same(value)) {
    // Self-attention: one GEMM, q, k, v are column blocks of its output.
    const Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    q = narrow(qkv, 2, 0, E);
    k = narrow(qkv, 2, E, E);
    v = narrow(qkv, 2, 2 * E, E);
  } else if (in_proj_weight.defined()) {
    q = linear(q_in, narrow(in_proj_weight, 0, 0, E), bias_part(0));
    k = linear(k_in, narrow(in_proj_weight, 0, E, E), bias_part(1));
    v = linear(v_in, narrow(in_proj_weight, 0, 2 * E, E), bias_part(2));
  } else {
    q = linear(q_in, q_proj_weight, bias_part(0));
    k = linear(k_in, k_proj_weight, bias_part(1));
    v = linear(v_in, v_proj_weight, bias_part(2));
  }
  const Tensor q4 = split_heads(q, num_heads), k4 = split_heads(k, num_heads),
               v4 = split_heads(v, num_heads);

  // ---- masks: one additive mask broadcastable to [N, H, L, S], or the kernel's causal flag
  const DType mdt = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor am = attn_mask;
  bool fused_causal = false;
  if (is_causal) {
    // PyTorch's hint: attn_mask is the causal mask, so the kernel may apply it itself when
    // nothing else needs the explicit mask (no padding, no weights) and it is square.
    if (!key_padding_mask.defined() && !need_weights && L == S) {
      fused_causal = true;
      am = Tensor();
    } else if (!am.defined()) {
      am = causal_mask(L, S, q.device());
    }
  }
  Tensor mask;
  if (am.defined()) {
    EMBER_CHECK(am.dim() == 2 || am.dim() == 3, ShapeError, "[", kMha,
                "] attn_mask must be 2-D [L, S] or 3-D [N * num_heads, L, S], got ", am.sizes());
    if (am.dim() == 2) {
      EMBER_CHECK(am.sizes() == Shape({L, S}), ShapeError, "[", kMha, "] attn_mask ", am.sizes(),
                  " should be ", Shape({L, S}));
    } else {
      EMBER_CHECK(am.sizes() == Shape({N * num_heads, L, S}), ShapeError, "[", kMha,
                  "] attn_mask ", am.sizes(), " should be ", Shape({N * num_heads, L, S}));
      am = reshape(am, {N, num_heads, L, S});
    }
    mask = additive_mask(am, mdt);
  }
  if (key_padding_mask.defined()) {
    const Shape want = batched ? Shape({N, S}) : Shape({S});
    EMBER_CHECK(key_padding_mask.sizes() == want, ShapeError, "[", kMha, "] key_padding_mask ",
                key_padding_mask.sizes(), " should be ", want);
    const Tensor kp = reshape(additive_mask(key_padding_mask, mdt), {N, 1, 1, S});
    mask = mask.defined() ? add(mask, kp) : kp;
  }

  // ---- attention
  const double p = is_training() ? options.dropout : 0.0;
  Tensor o, weights;
  if (need_weights) {
    // As PyTorch: scale q, then the scores, mask, softmax, dropout, product.
    Tensor s = matmul(q4.mul(1.0 / std::sqrt(double(head_dim))), transpose(k4, 2, 3));
    if (mask.defined()) s = add(s, mask);
    weights = softmax(s, 3);
    if (p > 0) weights = dropout(weights, p, true);
    o = matmul(weights, v4);
    if (average_attn_weights) weights = mean(weights, {1});
    if (!batched) weights = squeeze(weights, 0);
  } else {
    o = scaled_dot_product_attention(q4, k4, v4, mask, p, fused_causal);
  }
  Tensor out = out_proj(reshape(transpose(o, 1, 2), {N, L, E}));
  if (!batched) out = squeeze(out, 0);
  else if (!options.batch_first) out = transpose(out, 0, 1);
  return {out, weights};
}

// ---- TransformerEncoderLayer ----

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model_, int64_t nhead_,
                                                 TransformerLayerOptions options_)
    : d_model(d_model_),
      nhead(nhead_),
      options(std::move(options_)),
      self_attn(d_model_, nhead_,
                {.dropout = options.dropout, .bias = options.bias,
                 .batch_first = options.batch_first}),
      linear1(d_model_, options.dim_feedforward, options.bias),
      linear2(options.dim_feedforward, d_model_, options.bias),
      norm1({d_model_}, options.layer_norm_eps, true, options.bias),
      norm2({d_model_}, options.layer_norm_eps, true, options.bias) {
  check_activation("TransformerEncoderLayer", options.activation);
  check_dropout("TransformerEncoderLayer", options.dropout);
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask,
                                        const Tensor& src_key_padding_mask,
                                        bool is_causal) const {
  ember::detail::check_defined("TransformerEncoderLayer", src, "src");
  const bool training = is_training();
  const double p = options.dropout;
  auto sa = [&](const Tensor& x) {
    return dropout(self_attn(x, x, x, src_key_padding_mask, false, src_mask, true, is_causal).first,
                   p, training);
  };
  auto ff = [&](const Tensor& x) {
    return dropout(linear2(dropout(activate(options.activation, linear1(x)), p, training)), p,
                   training);
  };
  Tensor x = src;
  if (options.norm_first) {
    x = x + sa(norm1(x));
    x = x + ff(norm2(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + ff(x));
  }
  return x;
}

std::shared_ptr<TransformerEncoderLayer> TransformerEncoderLayer::clone() const {
  auto c = std::make_shared<TransformerEncoderLayer>(d_model, nhead, options);
  const Tensor& ref = linear1.weight;
  c->to(ref.device(), ref.dtype());
  c->load_state_dict(state_dict());
  c->train(is_training());
  return c;
}

// ---- TransformerDecoderLayer ----

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d_model_, int64_t nhead_,
                                                 TransformerLayerOptions options_)
    : d_model(d_model_),
      nhead(nhead_),
      options(std::move(options_)),
      self_attn(d_model_, nhead_,
                {.dropout = options.dropout, .bias = options.bias,
                 .batch_first = options.batch_first}),
      multihead_attn(d_model_, nhead_,
                     {.dropout = options.dropout, .bias = options.bias,
                      .batch_first = options.batch_first}),
      linear1(d_model_, options.dim_feedforward, options.bias),
      linear2(options.dim_feedforward, d_model_, options.bias),
      norm1({d_model_}, options.layer_norm_eps, true, options.bias),
      norm2({d_model_}, options.layer_norm_eps, true, options.bias),
      norm3({d_model_}, options.layer_norm_eps, true, options.bias) {
  check_activation("TransformerDecoderLayer", options.activation);
  check_dropout("TransformerDecoderLayer", options.dropout);
  register_module("self_attn", self_attn);
  register_module("multihead_attn", multihead_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("norm3", norm3);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const Tensor& tgt_mask, const Tensor& memory_mask,
                                        const Tensor& tgt_key_padding_mask,
                                        const Tensor& memory_key_padding_mask, bool tgt_is_causal,
                                        bool memory_is_causal) const {
  ember::detail::check_defined("TransformerDecoderLayer", tgt, "tgt");
  ember::detail::check_defined("TransformerDecoderLayer", memory, "memory");
  const bool training = is_training();
  const double p = options.dropout;
  auto sa = [&](const Tensor& x) {
    return dropout(
        self_attn(x, x, x, tgt_key_padding_mask, false, tgt_mask, true, tgt_is_causal).first, p,
        training);
  };
  auto mha = [&](const Tensor& x) {
    return dropout(multihead_attn(x, memory, memory, memory_key_padding_mask, false, memory_mask,
                                  true, memory_is_causal)
                       .first,
                   p, training);
  };
  auto ff = [&](const Tensor& x) {
    return dropout(linear2(dropout(activate(options.activation, linear1(x)), p, training)), p,
                   training);
  };
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + sa(norm1(x));
    x = x + mha(norm2(x));
    x = x + ff(norm3(x));
  } else {
    x = norm1(x + sa(x));
    x = norm2(x + mha(x));
    x = norm3(x + ff(x));
  }
  return x;
}

// ---- TransformerEncoder ----

void detail::TransformerLayerList::push_back(std::shared_ptr<TransformerEncoderLayer> layer) {
  register_module(std::to_string(layers_.size()), layer);
  layers_.push_back(std::move(layer));
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& encoder_layer,
                                       int64_t num_layers_, std::shared_ptr<LayerNorm> norm_)
    : num_layers(num_layers_), norm(std::move(norm_)) {
  check_positive("TransformerEncoder", "num_layers", num_layers);
  for (int64_t i = 0; i < num_layers; ++i) layers.push_back(encoder_layer.clone());
  register_module("layers", layers);
  if (norm) register_module("norm", norm);
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask,
                                   const Tensor& src_key_padding_mask, bool is_causal) const {
  Tensor x = src;
  for (size_t i = 0; i < layers.size(); ++i) x = layers[i](x, mask, src_key_padding_mask, is_causal);
  return norm ? (*norm)(x) : x;
}

}  // namespace ember::nn
