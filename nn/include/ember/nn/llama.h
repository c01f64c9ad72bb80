// nn::Llama: the Llama architecture (Meta's Llama 2/3, as Hugging Face's LlamaForCausalLM
// lays it out), trained with the same loop, loss and generation as nn::GPT.
//
//   nn::Llama model(nn::LlamaConfig::preset("llama-100m"));
//   Tensor loss = model.forward(idx, targets);   // idx, targets [B, T] i64
//
// Invariants:
// - Parameter names are Hugging Face's with the "model." prefix dropped: embed_tokens,
//   layers.<i>.input_layernorm, layers.<i>.self_attn.{q,k,v,o}_proj,
//   layers.<i>.post_attention_layernorm, layers.<i>.mlp.{gate,up,down}_proj, norm, lm_head.
//   Linear weights are [out, in] (HF's layout too); no Linear has a bias; the lm_head is its
//   own parameter (untied from embed_tokens).
// - Blocks are pre-RMSNorm: x += o_proj(attn(rope(q), rope(k), v)); x += down_proj(
//   swiglu(gate_proj(h), up_proj(h))) with h = post_attention_layernorm(x). RMSNorm eps is
//   norm_eps (1e-5, Llama 2/3's rms_norm_eps).
// - Rotary embeddings in HF's rotate_half convention (ember::rotary_embedding): position t,
//   pair (i, i + D/2) rotated by t * rope_theta^(-2i/D). The cos/sin tables [block_size, D/2]
//   are computed once per device and dtype class (f32, or f64 for an f64 model) on first use,
//   not part of the state dict (HF's non-persistent inv_freq).
// - Grouped-query attention: n_kv_head divides n_head; head h attends with the keys and
//   values of kv head h / (n_head / n_kv_head). The KV cache keeps only the n_kv_head heads;
//   they are broadcast to n_head (expand + reshape) just before attention.
// - The vocabulary is padded to padded_vocab_size as in nn::GPT: the loss and sampling see
//   only the first vocab_size logits; the padded rows of embed_tokens and lm_head are
//   initialized to zero and get no gradient (never looked up, never in the loss).
// - Init (HF's LlamaPreTrainedModel): every Linear and the embedding ~ N(0, 0.02), RMSNorm
//   weights 1, drawn from `gen` (the default CPU generator when null) in registration order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/nn/causal_lm.h"
#include "ember/nn/layers.h"
#include "ember/nn/normalization.h"
#include "ember/random.h"

namespace ember::nn {

struct LlamaConfig {
  int64_t n_layer = 10, n_head = 10, n_kv_head = 2, n_embd = 640, intermediate_size = 1728;
  int64_t block_size = 1024, vocab_size = 50257, padded_vocab_size = 50304;
  double rope_theta = 10000.0, norm_eps = 1e-5;
  // "llama-100m" (107M parameters, for a GPU): 10 layers, 10 heads of 64, 2 kv heads, 640
  // wide, SwiGLU 1728, block 1024, GPT-2's vocabulary. "llama-tiny" (3.3M, the parameter
  // count of GPT's "tiny", for a CPU; the untied 50K-row lm_head costs it half its width):
  // 4 layers, 2 heads of 16, 1 kv head, 32 wide, SwiGLU 96, block 64. Throws ValueError for other names.
  static LlamaConfig preset(std::string_view name);
};

class LlamaAttention : public Module {
 public:
  explicit LlamaAttention(const LlamaConfig& config);
  // x [B, T, C]; cos/sin [T, D/2] for the positions of x. With a cache, appends this call's
  // keys/values to (*cache)[layer] first.
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, KVCache* cache = nullptr,
                 size_t layer = 0) const;
  std::string type_name() const override { return "LlamaAttention"; }

  int64_t n_head, n_kv_head, head_dim;
  Linear q_proj, k_proj, v_proj, o_proj;
};

class LlamaMLP : public Module {
 public:
  explicit LlamaMLP(const LlamaConfig& config);
  Tensor forward(const Tensor& x) const;  // down_proj(silu(gate_proj(x)) * up_proj(x))
  std::string type_name() const override { return "LlamaMLP"; }

  Linear gate_proj, up_proj, down_proj;
};

class LlamaBlock : public Module {
 public:
  explicit LlamaBlock(const LlamaConfig& config);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, KVCache* cache = nullptr,
                 size_t layer = 0) const;
  std::string type_name() const override { return "LlamaBlock"; }

  RMSNorm input_layernorm;
  LlamaAttention self_attn;
  RMSNorm post_attention_layernorm;
  LlamaMLP mlp;
};

class Llama : public CausalLM {
 public:
  explicit Llama(const LlamaConfig& config, Generator* gen = nullptr);

  using CausalLM::forward;
  // idx [B, T] integer tokens (T <= block_size) -> logits [B, T, padded_vocab_size].
  Tensor forward(const Tensor& idx) const override;
  // Mean cross-entropy over the first vocab_size logits (targets -1 ignored), the lm_head
  // GEMM and the loss fused (linear_cross_entropy), as nn::GPT.
  Tensor forward(const Tensor& idx, const Tensor& targets) const override;
  // The new tokens after the cache's; appends their keys/values. Logits [B, T_new, padded].
  Tensor forward(const Tensor& idx, KVCache& cache) const override;

  int64_t block_size() const override { return config.block_size; }
  int64_t vocab_size() const override { return config.vocab_size; }
  int64_t n_layer() const override { return config.n_layer; }
  int64_t n_embd() const override { return config.n_embd; }
  std::string type_name() const override { return "Llama"; }

  LlamaConfig config;
  Embedding embed_tokens;
  Module layers;  // children "0", "1", ...
  std::vector<std::shared_ptr<LlamaBlock>> blocks;
  RMSNorm norm;
  Linear lm_head;

 private:
  Tensor trunk(const Tensor& idx, KVCache* cache) const;
  // cos/sin [block_size, D/2] on `device`, f64 when `f64` (an f64 model) else f32.
  std::pair<Tensor, Tensor> rope_tables(Device device, bool f64) const;
  mutable std::mutex rope_mutex_;
  mutable std::map<std::pair<std::string, bool>, std::pair<Tensor, Tensor>> rope_;
};

}  // namespace ember::nn
