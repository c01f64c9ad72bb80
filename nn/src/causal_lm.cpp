// nn::CausalLM (see ember/nn/causal_lm.h).
#include "ember/nn/causal_lm.h"

#include <algorithm>

#include "ember/factory.h"

namespace ember::nn {

std::vector<std::vector<int64_t>> CausalLM::generate(const std::vector<std::vector<int64_t>>& prompts,
                                                     const GenerationConfig& config) const {
  const Device device = parameters().empty() ? Device::cpu() : parameters().front().device();
  return generate_tokens([this](const Tensor& idx, KVCache& cache) { return forward(idx, cache); },
                         block_size(), vocab_size(), device, prompts, config);
}

Tensor CausalLM::generate(const Tensor& prompt, int64_t max_new_tokens, double temperature,
                          int64_t top_k, Generator* gen) const {
  EMBER_CHECK((prompt.dim() == 1 || prompt.dim() == 2) && is_integral(prompt.dtype()) &&
                  prompt.numel() > 0,
              ShapeError, "[generate] expects integer token ids [B, T] or [T], got ",
              prompt.dtype(), " ", prompt.sizes());
  EMBER_CHECK(max_new_tokens >= 0, ValueError, "[generate] max_new_tokens must be >= 0");
  const bool batched = prompt.dim() == 2;
  const Tensor p = batched ? prompt : prompt.unsqueeze(0);
  const int64_t B = p.sizes()[0], T = p.sizes()[1];
  const std::vector<int64_t> flat = p.to(Device::cpu(), DType::i64).contiguous().to_vector<int64_t>();
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    prompts[size_t(b)].assign(flat.begin() + b * T, flat.begin() + (b + 1) * T);
  const auto seqs = generate(prompts, {.max_new_tokens = max_new_tokens,
                                       .temperature = temperature,
                                       .top_k = std::max<int64_t>(top_k, 0),
                                       .generator = gen});
  std::vector<int64_t> all;  // no stop token: every row has T + max_new_tokens tokens
  for (const auto& s : seqs) all.insert(all.end(), s.begin(), s.end());
  Tensor out = tensor<int64_t>(all, {B, T + max_new_tokens}).to(prompt.device());
  return batched ? out : out.squeeze(0);
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> CausalLM::decay_and_no_decay_parameters() const {
  std::pair<std::vector<Tensor>, std::vector<Tensor>> out;
  for (const Tensor& p : parameters()) (p.dim() >= 2 ? out.first : out.second).push_back(p);
  return out;
}

}  // namespace ember::nn
