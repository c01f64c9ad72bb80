// nn::CausalLM: what a training loop and a sampler need from a decoder-only language model
// (nn::GPT, nn::Llama), so examples/gpt.cpp trains and samples either through one interface.
//
// Invariants:
// - forward(idx) gives logits [B, T, padded vocab]; only the first vocab_size() columns are
//   real tokens. forward(idx, targets) is the mean cross-entropy over them (targets -1
//   ignored). forward(idx, cache) runs the tokens after the cache's and appends their keys
//   and values, with logits equal to the full forward's at the same positions.
// - generate() is the same sampler for every model (ember/nn/generation.h): it only calls
//   forward(idx, cache), block_size() and vocab_size().
// - Parameters of two or more dims (matrices, embeddings) take weight decay, the others
//   (biases, norm weights) do not (nanoGPT's configure_optimizers).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ember/nn/generation.h"
#include "ember/nn/module.h"

namespace ember::optim {
template <class Options>
struct ParamGroup;  // ember/optim/optimizer.h (optim sits beside nn, not below it)
}

namespace ember::nn {

class CausalLM : public Module {
 public:
  using Module::forward;
  Tensor forward(const Tensor& idx) const override = 0;
  virtual Tensor forward(const Tensor& idx, const Tensor& targets) const = 0;
  virtual Tensor forward(const Tensor& idx, KVCache& cache) const = 0;

  virtual int64_t block_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  // For the FLOP count of a step (6 N + 12 n_layer n_embd T per token, PaLM's appendix B).
  virtual int64_t n_layer() const = 0;
  virtual int64_t n_embd() const = 0;

  // Distinct parameter elements; non_embedding leaves out position embeddings (nanoGPT's
  // get_num_params default); a model without them counts everything.
  virtual int64_t num_parameters(bool non_embedding = true) const {
    (void)non_embedding;
    return Module::num_parameters();
  }

  // Appends max_new_tokens sampled tokens to prompt [B, T] (or [T]) and returns [B, T + n]
  // (or [T + n]): temperature, top_k as GenerationConfig; temperature <= 0 is greedy. Runs
  // without grad through the KV cache. Dropout applies in training mode: call eval() first.
  Tensor generate(const Tensor& prompt, int64_t max_new_tokens, double temperature = 1.0,
                  int64_t top_k = 0, Generator* gen = nullptr) const;
  // Each prompt followed by its sampled tokens (see generate_tokens: ragged prompts, top-k,
  // top-p, a stop token).
  std::vector<std::vector<int64_t>> generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const GenerationConfig& config) const;

  // Parameters that take weight decay (2-D and up) and those that do not, each tensor once.
  std::pair<std::vector<Tensor>, std::vector<Tensor>> decay_and_no_decay_parameters() const;
  // Two optimizer groups from `options`: the decayed parameters with weight_decay, the others
  // with 0. Options is an optim options struct (optim::AdamWOptions, ...); include
  // <ember/optim.h> where this is called.
  template <class Options>
  std::vector<optim::ParamGroup<Options>> configure_optimizer_groups(double weight_decay,
                                                                     Options options = {}) const {
    auto [decay, no_decay] = decay_and_no_decay_parameters();
    Options with = options, without = options;
    with.weight_decay = weight_decay;
    without.weight_decay = 0;
    std::vector<optim::ParamGroup<Options>> groups;
    groups.push_back({std::move(decay), with});
    groups.push_back({std::move(no_decay), without});
    return groups;
  }

  // Wrap each block in autograd::checkpoint: activations inside a block are recomputed in
  // backward instead of kept (less memory, one more forward of each block).
  bool recompute = false;
};

}  // namespace ember::nn
