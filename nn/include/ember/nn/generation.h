// Autoregressive generation with a KV cache, shared by the language models (nn::GPT, nn::Llama):
// batched prompts of different lengths, temperature / top-k / top-p sampling and a stop token.
//
//   nn::GenerationConfig cfg{.max_new_tokens = 64, .temperature = 0.8, .top_k = 50,
//                            .top_p = 0.95, .stop_token = 50256, .generator = &gen};
//   auto out = nn::generate_tokens(
//       [&](const Tensor& idx, nn::KVCache& c) { return model.forward(idx, c); },
//       config.block_size, config.vocab_size, device, prompts, cfg);
//
// Invariants:
// - Ragged prompts follow Meta's Llama reference generation: the first step runs every row on
//   the shortest prompt's length, then every row advances one position per step; a row still
//   inside its own prompt is fed its next prompt token and the token sampled for it is dropped.
//   All rows therefore sit at the same cache length and need no padding or attention mask.
// - Past block_size the context is cropped to its last block_size tokens and the cache is
//   rebuilt from them (nanoGPT's crop; positions restart at 0), every step from then on.
// - Sampling matches Hugging Face's logits warpers applied in order: temperature, top-k, top-p,
//   then one inverse-CDF draw in token order with one u ~ U[0, 1) per row per step from the
//   generator (the default CPU generator when null), in f64 on the CPU. Greedy
//   (temperature <= 0) takes the first largest logit and draws nothing.
// - Only the logits' first vocab_size columns are ever seen (padded vocabularies take no mass).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include "ember/random.h"
#include "ember/tensor.h"

namespace ember::nn {

// Per-layer keys and values [B, H, T_past, D] of the tokens seen so far.
struct KVCache {
  std::vector<Tensor> k, v;
  int64_t length() const { return k.empty() || !k[0].defined() ? 0 : k[0].sizes()[2]; }
  void clear() {
    k.clear();
    v.clear();
  }
  // Appends `layer`'s keys and values of the new tokens, [B, H, T_new, D] each, and returns
  // that layer's whole cache {k, v} [B, H, T_past + T_new, D].
  std::pair<Tensor, Tensor> append(size_t layer, const Tensor& new_k, const Tensor& new_v);
};

struct GenerationConfig {
  int64_t max_new_tokens = 0;
  double temperature = 1.0;  // <= 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no top-k cut; else the k largest logits (ties at the kth kept)
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus cut
  int64_t stop_token = -1;   // -1: none; else a sequence ends after sampling it (it is kept)
  Generator* generator = nullptr;  // nullptr: the default CPU generator
};

// One forward through the model: the new tokens idx [B, T_new] (i64, on the model's device)
// after the cache's tokens; appends their keys/values to the cache and returns logits
// [B, T_new, >= vocab_size].
using DecodeStep = std::function<Tensor(const Tensor& idx, KVCache& cache)>;

// Each prompt followed by its new tokens: max_new_tokens of them, or fewer when the stop token
// is sampled (it ends the row and is included). Runs without grad; call the model's eval()
// first (dropout). Throws ValueError "[generate] ..." for an empty prompt list or prompt, a
// prompt token outside [0, vocab_size), max_new_tokens < 0, top_k < 0, top_p outside (0, 1],
// a stop_token outside [0, vocab_size) other than -1, or block_size / vocab_size < 1.
std::vector<std::vector<int64_t>> generate_tokens(const DecodeStep& step, int64_t block_size,
                                                  int64_t vocab_size, Device device,
                                                  const std::vector<std::vector<int64_t>>& prompts,
                                                  const GenerationConfig& config);

// The distribution one row is sampled from: the logits through temperature, top-k and top-p
// (Hugging Face's TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper), softmaxed;
// removed tokens have probability 0. Greedy (temperature <= 0) is one-hot on the first largest
// logit. Does not validate the config (generate_tokens does).
std::vector<double> sampling_probs(std::span<const double> logits, const GenerationConfig& config);

// The token sampling_probs' distribution gives for the uniform draw u in [0, 1): the first
// token (in index order) whose cumulative probability exceeds u (inverse CDF).
int64_t sample_token(std::span<const double> logits, const GenerationConfig& config, double u);

}  // namespace ember::nn
