// nn::GPT: the GPT-2 language model (nanoGPT / llm.c's architecture), with KV-cache
// generation and per-block activation recomputation.
//
//   nn::GPT model(nn::GPTConfig::preset("gpt2-small"));
//   model.to(Device::cuda());
//   optim::AdamW opt(model.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 6e-4}));
//   Tensor loss = model.forward(idx, targets);   // idx, targets [B, T] i64
//
// Invariants:
// - Parameter names are GPT-2's (HF "transformer." prefix dropped; nanoGPT's names without
//   it): wte, wpe, h.<i>.ln_1, h.<i>.attn.c_attn, h.<i>.attn.c_proj, h.<i>.ln_2,
//   h.<i>.mlp.c_fc, h.<i>.mlp.c_proj, ln_f. Linear weights are [out, in] (nanoGPT / llm.c
//   layout; HF's Conv1D stores the transpose). The lm_head is tied to wte: there is no
//   lm_head parameter, the logits are x wte^T, and the state dict holds wte.weight once.
// - The vocabulary is padded to padded_vocab_size (a multiple of 64/128 for fast GEMMs, as
//   llm.c): wte has padded_vocab_size rows, forward returns padded logits, and the loss and
//   sampling only ever see the first vocab_size columns, so padded tokens take no
//   probability mass (their rows are initialized to zero and get no gradient).
// - Blocks are pre-LayerNorm: x += attn(ln_1(x)); x += mlp(ln_2(x)); the MLP is 4x with
//   tanh-GELU (one gelu_mlp op); attention is the fused causal attention reading q, k, v out
//   of the packed c_attn output (scaled_dot_product_attention_packed). Without a KV cache or
//   recomputation, each residual add is fused into the layer_norm that follows it
//   (residual_layer_norm), across block boundaries.
// - Init (GPT-2): weights and embeddings ~ N(0, 0.02), the residual projections (c_proj)
//   ~ N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1 / bias 0; drawn from `gen`
//   (the default CPU generator when null), so a seed gives the same model on every device.
// - KV cache (Note [attention causal alignment]): a cached forward appends each layer's new
//   keys and values to the cache and attends with the new tokens as the last queries of the
//   sequence; its logits equal the full forward's at the same positions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/nn/causal_lm.h"
#include "ember/nn/layers.h"
#include "ember/random.h"

namespace ember::nn {

struct GPTConfig {
  int64_t n_layer = 12, n_head = 12, n_embd = 768, block_size = 1024, vocab_size = 50257;
  // Rows of wte / columns of the logits: vocab_size rounded up for GEMM-friendly shapes.
  int64_t padded_vocab_size = 50304;
  float dropout = 0;
  // "gpt2-small" (also "gpt2"): 12 layers, 12 heads, 768 wide, block 1024, vocab 50257
  // padded to 50304. "tiny": 2 layers, 2 heads, 64 wide, block 64, same vocabulary.
  // Throws ValueError for other names.
  static GPTConfig preset(std::string_view name);
};

class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config);
  // x [B, T, C]. With a cache, appends this call's keys/values to (*cache)[layer] first.
  Tensor forward(const Tensor& x, KVCache* cache = nullptr, size_t layer = 0) const;
  std::string type_name() const override { return "CausalSelfAttention"; }

  int64_t n_head, n_embd;
  double dropout;
  Linear c_attn, c_proj;
};

class MLP : public Module {
 public:
  MLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) const;
  std::string type_name() const override { return "MLP"; }

  double dropout;
  Linear c_fc, c_proj;
};

class Block : public Module {
 public:
  Block(const GPTConfig& config);
  Tensor forward(const Tensor& x, KVCache* cache = nullptr, size_t layer = 0) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  std::string type_name() const override { return "Block"; }

  LayerNorm ln_1;
  CausalSelfAttention attn;
  LayerNorm ln_2;
  MLP mlp;
};

// Generation (generate), the optimizer groups (configure_optimizer_groups) and recompute
// come from nn::CausalLM.
class GPT : public CausalLM {
 public:
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);

  using CausalLM::forward;
  // idx [B, T] integer tokens (T <= block_size) -> logits [B, T, padded_vocab_size].
  Tensor forward(const Tensor& idx) const override;
  // Mean cross-entropy of the logits' first vocab_size columns against targets [B, T];
  // targets equal to -1 are ignored (nanoGPT's convention); any other target outside
  // [0, vocab_size) is an IndexError (on CUDA raised at the next synchronization, Note
  // [deferred device checks]). The lm_head GEMM and the loss run as one fused op
  // (linear_cross_entropy): no f32 copy of the logits is made.
  Tensor forward(const Tensor& idx, const Tensor& targets) const override;
  // The new tokens idx [B, T_new] after the cache's T_past tokens (T_past + T_new <=
  // block_size); appends their keys/values to the cache. Logits [B, T_new, padded_vocab].
  Tensor forward(const Tensor& idx, KVCache& cache) const override;

  // Distinct parameter elements; non_embedding leaves out the position embeddings (nanoGPT's
  // get_num_params default). The tied token embedding is always counted (once).
  int64_t num_parameters(bool non_embedding = true) const override;

  int64_t block_size() const override { return config.block_size; }
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t n_layer() const override { return config.n_layer; }
  int64_t n_embd() const override { return config.n_embd; }
  std::string type_name() const override { return "GPT"; }

  GPTConfig config;
  Embedding wte, wpe;
  Module h;  // children "0", "1", ...: the blocks
  std::vector<std::shared_ptr<Block>> blocks;
  LayerNorm ln_f;
  // The classifier over the final hidden states h [B, T, C], when something replaces the tied
  // wte GEMM (tensor parallelism splits it over the vocabulary): logits(h) gives the logits,
  // loss(h [N, C], targets [N]) the mean cross-entropy over the real vocabulary (targets -1
  // ignored). Unset: F::linear(h, wte.weight) and the fused linear_cross_entropy.
  struct Head {
    std::function<Tensor(const Tensor& h)> logits;
    std::function<Tensor(const Tensor& h, const Tensor& targets)> loss;
  };
  Head head;

 private:
  // The final hidden state [B, T, C] = ln_f(blocks(embeddings)); the logits are it times wte^T.
  Tensor trunk(const Tensor& idx, KVCache* cache) const;
};

}  // namespace ember::nn
