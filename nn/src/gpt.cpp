// nn::GPT (see the invariants in ember/nn/gpt.h).
#include "ember/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <tuple>

#include "ember/autograd/engine.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/nn/functional.h"
#include "ember/nn/init.h"

namespace ember::nn {

namespace F = functional;

GPTConfig GPTConfig::preset(std::string_view name) {
  GPTConfig c;
  if (name == "gpt2-small" || name == "gpt2") return c;
  if (name == "tiny") {
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 64;
    c.block_size = 64;
    return c;
  }
  throw ValueError(str("[GPTConfig] unknown preset '", std::string(name),
                       "' (known: gpt2-small, gpt2, tiny)"));
}

namespace {

void check_config(const GPTConfig& c) {
  EMBER_CHECK(c.n_layer >= 1 && c.n_head >= 1 && c.n_embd >= 1 && c.block_size >= 1 &&
                  c.vocab_size >= 1,
              ValueError, "[GPT] sizes must be positive: n_layer ", c.n_layer, ", n_head ",
              c.n_head, ", n_embd ", c.n_embd, ", block_size ", c.block_size, ", vocab_size ",
              c.vocab_size);
  EMBER_CHECK(c.n_embd % c.n_head == 0, ValueError, "[GPT] n_embd ", c.n_embd,
              " is not a multiple of n_head ", c.n_head);
  EMBER_CHECK(c.padded_vocab_size >= c.vocab_size, ValueError, "[GPT] padded_vocab_size ",
              c.padded_vocab_size, " is smaller than vocab_size ", c.vocab_size);
  EMBER_CHECK(c.dropout >= 0 && c.dropout < 1, ValueError, "[GPT] dropout must be in [0, 1), got ",
              c.dropout);
}

Tensor maybe_dropout(const Tensor& x, double p, bool training) {
  return p > 0 && training ? F::dropout(x, p, true) : x;
}

// {x + delta, ln(x + delta)} in one pass; under autocast the normalized output is written in
// the autocast dtype (the GEMM after it would cast it anyway).
std::pair<Tensor, Tensor> add_and_norm(const Tensor& x, const Tensor& delta,
                                       const LayerNorm& ln) {
  return F::residual_layer_norm(x, delta, ln.normalized_shape, ln.weight, ln.bias, ln.eps);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : n_head(c.n_head), n_embd(c.n_embd), dropout(c.dropout), c_attn(c.n_embd, 3 * c.n_embd),
      c_proj(c.n_embd, c.n_embd) {
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
}

Tensor CausalSelfAttention::forward(const Tensor& x, KVCache* cache, size_t layer) const {
  if (!cache) {
    // The fused attention reads q, k, v by strides out of the [B, T, 3C] projection and
    // writes y as [B, T, C]; its gradient is one [B, T, 3C] buffer (no copies, no select
    // backwards).
    Tensor y = F::scaled_dot_product_attention_packed(c_attn(x), n_head, /*causal=*/true);
    return maybe_dropout(c_proj(y), dropout, is_training());
  }
  const int64_t B = x.sizes()[0], T = x.sizes()[1], D = n_embd / n_head;
  // [B, T, 3C] viewed as [B, T, 3, H, D]; q, k, v are [B, H, T, D] views of it.
  Tensor qkv = c_attn(x).view({B, T, 3, n_head, D});
  Tensor q = qkv.select(2, 0).transpose(1, 2);
  Tensor k = qkv.select(2, 1).transpose(1, 2);
  Tensor v = qkv.select(2, 2).transpose(1, 2);
  if (cache) std::tie(k, v) = cache->append(layer, k, v);
  Tensor y = F::scaled_dot_product_attention(q, k, v, /*causal=*/true);
  y = y.transpose(1, 2).reshape({B, T, n_embd});
  return maybe_dropout(c_proj(y), dropout, is_training());
}

MLP::MLP(const GPTConfig& c)
    : dropout(c.dropout), c_fc(c.n_embd, 4 * c.n_embd), c_proj(4 * c.n_embd, c.n_embd) {
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
}

Tensor MLP::forward(const Tensor& x) const {
  // linear -> tanh-GELU -> linear as one op: the GELU and the bias gradients ride in the
  // GEMMs' epilogues (Note [gelu_mlp]).
  return maybe_dropout(F::gelu_mlp(x, c_fc.weight, c_fc.bias, c_proj.weight, c_proj.bias), dropout,
                       is_training());
}

Block::Block(const GPTConfig& c) : ln_1(Shape{c.n_embd}), attn(c), ln_2(Shape{c.n_embd}), mlp(c) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

Tensor Block::forward(const Tensor& x, KVCache* cache, size_t layer) const {
  // attn and mlp through their forward hooks (tensor parallelism's collectives).
  auto [h, normed] = add_and_norm(
      x, attn.call(ln_1(x), [&](const Tensor& in) { return attn.forward(in, cache, layer); }), ln_2);
  return h + mlp(normed);
}

GPT::GPT(const GPTConfig& c, Generator* gen)
    : config((check_config(c), c)),
      wte(c.padded_vocab_size, c.n_embd),
      wpe(c.block_size, c.n_embd),
      ln_f(Shape{c.n_embd}) {
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("h", h);
  for (int64_t i = 0; i < c.n_layer; ++i)
    blocks.push_back(h.register_module(std::to_string(i), std::make_shared<Block>(c)));
  register_module("ln_f", ln_f);

  // GPT-2 init, in registration order from one generator.
  const double std = 0.02, proj_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  NoGradGuard no_grad;
  init::normal_(wte.weight, 0.0, std, gen);
  if (c.padded_vocab_size > c.vocab_size)  // padded tokens: never looked up, never predicted
    wte.weight.narrow(0, c.vocab_size, c.padded_vocab_size - c.vocab_size).fill_(0);
  init::normal_(wpe.weight, 0.0, std, gen);
  for (auto& b : blocks) {
    for (Linear* l : {&b->attn.c_attn, &b->attn.c_proj, &b->mlp.c_fc, &b->mlp.c_proj}) {
      const bool residual = l == &b->attn.c_proj || l == &b->mlp.c_proj;
      init::normal_(l->weight, 0.0, residual ? proj_std : std, gen);
      init::zeros_(l->bias);
    }
  }
}

Tensor GPT::trunk(const Tensor& idx, KVCache* cache) const {
  EMBER_CHECK(idx.dim() == 2 && is_integral(idx.dtype()), ShapeError,
              "[GPT] expects integer token ids [B, T], got ", idx.dtype(), " ", idx.sizes());
  const int64_t T = idx.sizes()[1];
  const int64_t past = cache ? cache->length() : 0;
  EMBER_CHECK(T >= 1 && past + T <= config.block_size, ShapeError, "[GPT] sequence of ", past + T,
              " tokens (", past, " cached + ", T, " new) does not fit block_size ",
              config.block_size);
  Tensor pos = arange(past, past + T, 1, TensorOptions(idx.device()).dtype(DType::i64));
  Tensor x = maybe_dropout(wte(idx) + wpe(pos), config.dropout, is_training());
  // Block by block (each through its forward hooks) for the cache, recompute, and blocks
  // with hooks (fully_shard's units: the fused loop below reads the next block's ln_1 early).
  const bool hooked = std::any_of(blocks.begin(), blocks.end(),
                                  [](const auto& b) { return b->has_forward_hooks(); });
  if (cache || (recompute && GradMode::is_enabled()) || hooked) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      const Block* b = blocks[i].get();
      if (cache) {
        x = b->call(x, [&](const Tensor& in) { return b->forward(in, cache, i); });
      } else if (recompute && GradMode::is_enabled()) {
        x = autograd::checkpoint([b](const TensorList& in) { return (*b)(in[0]); }, {x});
      } else {
        x = (*b)(x);
      }
    }
    return ln_f(x);
  }
  // Each residual add fused into the layer_norm that reads its result: the next block's
  // ln_1 (or ln_f) normalizes x + mlp(...) in the same pass that forms it.
  Tensor h = blocks[0]->ln_1(x);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Block& b = *blocks[i];
    std::tie(x, h) = add_and_norm(x, b.attn.call(h, [&](const Tensor& in) { return b.attn.forward(in); }), b.ln_2);
    std::tie(x, h) = add_and_norm(x, b.mlp(h), i + 1 < blocks.size() ? blocks[i + 1]->ln_1 : ln_f);
  }
  return h;
}

Tensor GPT::forward(const Tensor& idx) const {
  const Tensor h = trunk(idx, nullptr);
  return head.logits ? head.logits(h) : F::linear(h, wte.weight);  // tied lm_head: [B, T, padded_vocab]
}

Tensor GPT::forward(const Tensor& idx, KVCache& cache) const {
  const Tensor h = trunk(idx, &cache);
  return head.logits ? head.logits(h) : F::linear(h, wte.weight);
}

Tensor GPT::forward(const Tensor& idx, const Tensor& targets) const {
  EMBER_CHECK(targets.sizes() == idx.sizes(), ShapeError, "[GPT] targets of shape ",
              targets.sizes(), " do not match the tokens' ", idx.sizes());
  const int64_t N = idx.numel(), V = config.vocab_size;
  // The fused classifier: the lm_head GEMM and the loss over the real vocabulary only (the
  // padded columns take no probability and get a zero gradient), with the logits' gradient
  // formed in place in the GEMM's dtype: no f32 copy of the [N, padded_vocab] logits.
  const Tensor h = trunk(idx, nullptr);
  if (head.loss) return head.loss(h.reshape({N, config.n_embd}), targets.reshape({N}));
  return F::linear_cross_entropy(h.reshape({N, config.n_embd}), wte.weight, targets.reshape({N}),
                                 {.ignore_index = -1, .num_classes = V});
}

int64_t GPT::num_parameters(bool non_embedding) const {
  const int64_t n = Module::num_parameters();
  return non_embedding ? n - wpe.weight.numel() : n;
}

}  // namespace ember::nn
