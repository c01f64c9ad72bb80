// KV-cache generation (see the invariants in ember/nn/generation.h).
#include "ember/nn/generation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::nn {

std::pair<Tensor, Tensor> KVCache::append(size_t layer, const Tensor& new_k, const Tensor& new_v) {
  if (k.size() <= layer) {
    k.resize(layer + 1);
    v.resize(layer + 1);
  }
  k[layer] = k[layer].defined() ? cat({k[layer], new_k}, 2) : new_k.contiguous();
  v[layer] = v[layer].defined() ? cat({v[layer], new_v}, 2) : new_v.contiguous();
  return {k[layer], v[layer]};
}

namespace {

int64_t first_argmax(std::span<const double> x) {
  return int64_t(std::max_element(x.begin(), x.end()) - x.begin());
}

void check_config(const GenerationConfig& c, int64_t vocab_size) {
  EMBER_CHECK(c.max_new_tokens >= 0, ValueError, "[generate] max_new_tokens must be >= 0, got ",
              c.max_new_tokens);
  EMBER_CHECK(c.top_k >= 0, ValueError, "[generate] top_k must be >= 0 (0: no cut), got ", c.top_k);
  EMBER_CHECK(c.top_p > 0 && c.top_p <= 1, ValueError, "[generate] top_p must be in (0, 1], got ",
              c.top_p);
  EMBER_CHECK(c.stop_token == -1 || (c.stop_token >= 0 && c.stop_token < vocab_size), ValueError,
              "[generate] stop_token ", c.stop_token, " is outside [0, vocab_size ", vocab_size,
              ") (-1: none)");
}

}  // namespace

std::vector<double> sampling_probs(std::span<const double> logits, const GenerationConfig& c) {
  const size_t V = logits.size();
  EMBER_CHECK(V > 0, ValueError, "[generate] no logits to sample from");
  std::vector<double> p(V, 0.0);
  if (c.temperature <= 0) {
    p[size_t(first_argmax(logits))] = 1;
    return p;
  }
  constexpr double kRemoved = -std::numeric_limits<double>::infinity();
  std::vector<double> s(V);
  for (size_t i = 0; i < V; ++i) s[i] = logits[i] / c.temperature;
  if (c.top_k > 0 && size_t(c.top_k) < V) {
    // torch.topk's kth value as the threshold: every token tied with it stays.
    std::vector<double> sorted = s;
    std::nth_element(sorted.begin(), sorted.begin() + (c.top_k - 1), sorted.end(), std::greater<>());
    const double kth = sorted[size_t(c.top_k - 1)];
    for (double& x : s)
      if (x < kth) x = kRemoved;
  }
  const double mx = *std::max_element(s.begin(), s.end());
  if (c.top_p < 1) {
    // TopPLogitsWarper: ascending order, drop the tokens whose cumulative probability (their
    // own included) stays <= 1 - top_p; the largest is always kept. The ascending stable order
    // puts the lower index first among ties, as a stable torch.sort would.
    std::vector<size_t> order(V);
    std::iota(order.begin(), order.end(), size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s[a] < s[b]; });
    double total = 0;
    for (double x : s) total += std::exp(x - mx);
    double cum = 0;
    for (size_t j = 0; j + 1 < V; ++j) {
      cum += std::exp(s[order[j]] - mx) / total;
      if (cum > 1 - c.top_p) break;
      s[order[j]] = kRemoved;
    }
  }
  double total = 0;
  for (size_t i = 0; i < V; ++i) total += p[i] = std::exp(s[i] - mx);
  for (double& x : p) x /= total;
  return p;
}

int64_t sample_token(std::span<const double> logits, const GenerationConfig& c, double u) {
  if (c.temperature <= 0) return first_argmax(logits);
  const std::vector<double> p = sampling_probs(logits, c);
  double acc = 0;
  int64_t last_kept = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    acc += p[i];
    last_kept = int64_t(i);
    if (acc > u) return last_kept;
  }
  // u within rounding of 1 above the accumulated total; or no finite logit at all.
  return last_kept >= 0 ? last_kept : first_argmax(logits);
}

std::vector<std::vector<int64_t>> generate_tokens(const DecodeStep& step, int64_t block_size,
                                                  int64_t vocab_size, Device device,
                                                  const std::vector<std::vector<int64_t>>& prompts,
                                                  const GenerationConfig& config) {
  EMBER_CHECK(block_size >= 1 && vocab_size >= 1, ValueError,
              "[generate] block_size and vocab_size must be positive, got ", block_size, " and ",
              vocab_size);
  check_config(config, vocab_size);
  EMBER_CHECK(!prompts.empty(), ValueError, "[generate] no prompts");
  for (size_t b = 0; b < prompts.size(); ++b) {
    EMBER_CHECK(!prompts[b].empty(), ValueError, "[generate] prompt ", b, " is empty");
    for (int64_t t : prompts[b])
      EMBER_CHECK(t >= 0 && t < vocab_size, ValueError, "[generate] prompt ", b, " has token ", t,
                  " outside [0, vocab_size ", vocab_size, ")");
  }
  std::vector<std::vector<int64_t>> seqs = prompts;
  if (config.max_new_tokens == 0) return seqs;

  NoGradGuard no_grad;
  const int64_t B = int64_t(prompts.size()), V = vocab_size;
  Generator& gen = config.generator ? *config.generator : default_generator(Device::cpu());
  const bool greedy = config.temperature <= 0;
  std::vector<size_t> final_len(size_t(B), 0);  // 0: still generating
  int64_t unfinished = B;
  // Every row holds at least `cur` tokens; the cache holds the tokens before `fed` (the last
  // cache.length() of them), the same positions for every row.
  int64_t cur = int64_t(std::min_element(prompts.begin(), prompts.end(), [](auto& a, auto& b) {
                          return a.size() < b.size();
                        })->size());
  int64_t fed = 0;
  KVCache cache;
  auto columns = [&](int64_t from, int64_t to) {  // tokens [from, to) of every row: [B, to - from]
    std::vector<int64_t> ids;
    ids.reserve(size_t(B * (to - from)));
    for (const auto& s : seqs) ids.insert(ids.end(), s.begin() + from, s.begin() + to);
    return tensor<int64_t>(ids, {B, to - from}).to(device);
  };
  while (true) {
    Tensor idx;
    if (cache.length() + (cur - fed) > block_size) {  // crop and rebuild
      cache.clear();
      idx = columns(std::max<int64_t>(0, cur - block_size), cur);
    } else {
      idx = columns(fed, cur);
    }
    fed = cur;
    const Tensor logits = step(idx, cache);
    const int64_t Tn = idx.sizes()[1];
    EMBER_CHECK(logits.dim() == 3 && logits.sizes()[0] == B && logits.sizes()[1] == Tn &&
                    logits.sizes()[2] >= V,
                ShapeError, "[generate] the decode step returned logits ", logits.sizes(),
                " for tokens ", idx.sizes(), " (expected [", B, ", ", Tn, ", >= ", V, "])");
    const std::vector<double> last = logits.select(1, Tn - 1)
                                         .narrow(1, 0, V)
                                         .to(Device::cpu(), DType::f64)
                                         .contiguous()
                                         .to_vector<double>();
    const std::vector<double> u =
        greedy ? std::vector<double>() : rand({B}, DType::f64, &gen).to_vector<double>();
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t>& s = seqs[size_t(b)];
      if (int64_t(s.size()) > cur) continue;  // still inside its prompt: the sample is dropped
      if (final_len[size_t(b)]) {             // finished: any token keeps the row in step
        s.push_back(s.back());
        continue;
      }
      const int64_t t = sample_token(std::span<const double>(last.data() + b * V, size_t(V)), config,
                                     greedy ? 0.0 : u[size_t(b)]);
      s.push_back(t);
      if (t == config.stop_token ||
          int64_t(s.size() - prompts[size_t(b)].size()) == config.max_new_tokens) {
        final_len[size_t(b)] = s.size();
        --unfinished;
      }
    }
    if (unfinished == 0) break;
    ++cur;
  }
  for (int64_t b = 0; b < B; ++b) seqs[size_t(b)].resize(final_len[size_t(b)]);
  return seqs;
}

}  // namespace ember::nn
