// nn::Llama (see the invariants in ember/nn/llama.h).
#include "ember/nn/llama.h"

#include <string>
#include <tuple>

#include "ember/autograd/engine.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/nn/functional.h"
#include "ember/nn/init.h"

namespace ember::nn {

namespace F = functional;

LlamaConfig LlamaConfig::preset(std::string_view name) {
  LlamaConfig c;
  if (name == "llama-100m") return c;
  if (name == "llama-tiny") {
    c.n_layer = 4;
    c.n_head = 2;
    c.n_kv_head = 1;
    c.n_embd = 32;
    c.intermediate_size = 96;
    c.block_size = 64;
    return c;
  }
  throw ValueError(str("[LlamaConfig] unknown preset '", std::string(name),
                       "' (known: llama-100m, llama-tiny)"));
}

namespace {

void check_config(const LlamaConfig& c) {
  EMBER_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_kv_head >= 1 && c.n_embd >= 1 &&
                  c.intermediate_size >= 1 && c.block_size >= 1 && c.vocab_size >= 1,
              ValueError, "[Llama] sizes must be positive: n_layer ", c.n_layer, ", n_head ",
              c.n_head, ", n_kv_head ", c.n_kv_head, ", n_embd ", c.n_embd,
              ", intermediate_size ", c.intermediate_size, ", block_size ", c.block_size,
              ", vocab_size ", c.vocab_size);
  EMBER_CHECK(c.n_embd % c.n_head == 0 && (c.n_embd / c.n_head) % 2 == 0, ValueError,
              "[Llama] n_embd ", c.n_embd, " must be n_head ", c.n_head,
              " times an even head size (rotary embeddings rotate pairs)");
  EMBER_CHECK(c.n_head % c.n_kv_head == 0, ValueError, "[Llama] n_head ", c.n_head,
              " is not a multiple of n_kv_head ", c.n_kv_head);
  EMBER_CHECK(c.padded_vocab_size >= c.vocab_size, ValueError, "[Llama] padded_vocab_size ",
              c.padded_vocab_size, " is smaller than vocab_size ", c.vocab_size);
  EMBER_CHECK(c.rope_theta > 0 && c.norm_eps > 0, ValueError,
              "[Llama] rope_theta and norm_eps must be positive, got ", c.rope_theta, " and ",
              c.norm_eps);
}

// [B, Hkv, T, D] -> [B, Hkv * rep, T, D], kv head g serving query heads g*rep .. g*rep+rep-1.
Tensor repeat_kv(const Tensor& x, int64_t rep) {
  if (rep == 1) return x;
  const Shape s = x.sizes();
  return x.unsqueeze(2).expand({s[0], s[1], rep, s[2], s[3]}).reshape({s[0], s[1] * rep, s[2], s[3]});
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c)
    : n_head(c.n_head), n_kv_head(c.n_kv_head), head_dim(c.n_embd / c.n_head),
      q_proj(c.n_embd, c.n_embd, /*bias=*/false),
      k_proj(c.n_embd, c.n_kv_head * (c.n_embd / c.n_head), false),
      v_proj(c.n_embd, c.n_kv_head * (c.n_embd / c.n_head), false),
      o_proj(c.n_embd, c.n_embd, false) {
  register_module("q_proj", q_proj);
  register_module("k_proj", k_proj);
  register_module("v_proj", v_proj);
  register_module("o_proj", o_proj);
}

Tensor LlamaAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                               KVCache* cache, size_t layer) const {
  const int64_t B = x.sizes()[0], T = x.sizes()[1], D = head_dim;
  // Rotated in [B, T, H, D] (the projections' own layout), then viewed as [B, H, T, D].
  Tensor q = F::rotary_embedding(q_proj(x).view({B, T, n_head, D}), cos, sin).transpose(1, 2);
  Tensor k = F::rotary_embedding(k_proj(x).view({B, T, n_kv_head, D}), cos, sin).transpose(1, 2);
  Tensor v = v_proj(x).view({B, T, n_kv_head, D}).transpose(1, 2);
  if (cache) std::tie(k, v) = cache->append(layer, k, v);
  const int64_t rep = n_head / n_kv_head;
  Tensor y = F::scaled_dot_product_attention(q, repeat_kv(k, rep), repeat_kv(v, rep), /*causal=*/true);
  return o_proj(y.transpose(1, 2).reshape({B, T, n_head * D}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c)
    : gate_proj(c.n_embd, c.intermediate_size, false),
      up_proj(c.n_embd, c.intermediate_size, false),
      down_proj(c.intermediate_size, c.n_embd, false) {
  register_module("gate_proj", gate_proj);
  register_module("up_proj", up_proj);
  register_module("down_proj", down_proj);
}

Tensor LlamaMLP::forward(const Tensor& x) const {
  return down_proj(F::swiglu(gate_proj(x), up_proj(x)));
}

LlamaBlock::LlamaBlock(const LlamaConfig& c)
    : input_layernorm(Shape{c.n_embd}, c.norm_eps),
      self_attn(c),
      post_attention_layernorm(Shape{c.n_embd}, c.norm_eps),
      mlp(c) {
  register_module("input_layernorm", input_layernorm);
  register_module("self_attn", self_attn);
  register_module("post_attention_layernorm", post_attention_layernorm);
  register_module("mlp", mlp);
}

Tensor LlamaBlock::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, KVCache* cache,
                           size_t layer) const {
  // Through the forward hooks of self_attn and mlp (tensor parallelism's collectives).
  Tensor h = x + self_attn.call(input_layernorm(x),
                                [&](const Tensor& in) { return self_attn.forward(in, cos, sin, cache, layer); });
  return h + mlp(post_attention_layernorm(h));
}

Llama::Llama(const LlamaConfig& c, Generator* gen)
    : config((check_config(c), c)),
      embed_tokens(c.padded_vocab_size, c.n_embd),
      norm(Shape{c.n_embd}, c.norm_eps),
      lm_head(c.n_embd, c.padded_vocab_size, /*bias=*/false) {
  register_module("embed_tokens", embed_tokens);
  register_module("layers", layers);
  for (int64_t i = 0; i < c.n_layer; ++i)
    blocks.push_back(layers.register_module(std::to_string(i), std::make_shared<LlamaBlock>(c)));
  register_module("norm", norm);
  register_module("lm_head", lm_head);

  NoGradGuard no_grad;
  for (auto& [name, p] : named_parameters())
    if (p.dim() == 2) init::normal_(p, 0.0, 0.02, gen);  // RMSNorm weights stay 1
  if (c.padded_vocab_size > c.vocab_size) {  // padded tokens: never looked up, never predicted
    const int64_t pad = c.padded_vocab_size - c.vocab_size;
    embed_tokens.weight.narrow(0, c.vocab_size, pad).fill_(0);
    lm_head.weight.narrow(0, c.vocab_size, pad).fill_(0);
  }
}

std::pair<Tensor, Tensor> Llama::rope_tables(Device device, bool f64) const {
  std::lock_guard<std::mutex> lock(rope_mutex_);
  auto key = std::make_pair(device.str(), f64);
  auto it = rope_.find(key);
  if (it == rope_.end()) {
    // Computed in f64, made once in the table dtype on `device`.
    it = rope_.emplace(key, rope_cos_sin(config.block_size, config.n_embd / config.n_head, config.rope_theta,
                                         TensorOptions(f64 ? DType::f64 : DType::f32).device(device)))
             .first;
  }
  return it->second;
}

Tensor Llama::trunk(const Tensor& idx, KVCache* cache) const {
  EMBER_CHECK(idx.dim() == 2 && is_integral(idx.dtype()), ShapeError,
              "[Llama] expects integer token ids [B, T], got ", idx.dtype(), " ", idx.sizes());
  const int64_t T = idx.sizes()[1];
  const int64_t past = cache ? cache->length() : 0;
  EMBER_CHECK(T >= 1 && past + T <= config.block_size, ShapeError, "[Llama] sequence of ",
              past + T, " tokens (", past, " cached + ", T, " new) does not fit block_size ",
              config.block_size);
  Tensor x = embed_tokens(idx);
  auto [cos_all, sin_all] = rope_tables(idx.device(), x.dtype() == DType::f64);
  const Tensor cos = cos_all.narrow(0, past, T), sin = sin_all.narrow(0, past, T);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const LlamaBlock* b = blocks[i].get();
    if (!cache && recompute && GradMode::is_enabled()) {
      x = autograd::checkpoint(
          [b, cos, sin](const TensorList& in) {
            return b->call(in[0], [&](const Tensor& x0) { return b->forward(x0, cos, sin); });
          },
          {x});
    } else {
      x = b->call(x, [&](const Tensor& in) { return b->forward(in, cos, sin, cache, i); });
    }
  }
  return norm(x);
}

Tensor Llama::forward(const Tensor& idx) const { return lm_head(trunk(idx, nullptr)); }

Tensor Llama::forward(const Tensor& idx, KVCache& cache) const { return lm_head(trunk(idx, &cache)); }

Tensor Llama::forward(const Tensor& idx, const Tensor& targets) const {
  EMBER_CHECK(targets.sizes() == idx.sizes(), ShapeError, "[Llama] targets of shape ",
              targets.sizes(), " do not match the tokens' ", idx.sizes());
  const int64_t N = idx.numel();
  const Tensor h = trunk(idx, nullptr);
  return F::linear_cross_entropy(h.reshape({N, config.n_embd}), lm_head.weight, targets.reshape({N}),
                                 {.ignore_index = -1, .num_classes = config.vocab_size});
}

}  // namespace ember::nn
