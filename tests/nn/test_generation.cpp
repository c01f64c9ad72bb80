// nn::generate_tokens and the sampler (ember/nn/generation.h). The per-row sampler against
// Hugging Face's temperature / top-k / top-p warpers (tests/fixtures/make_generation_fixtures.py)
// and a hand-computed case; the schedule (ragged prompts, stop token, early exit, crop) against
// a scripted model whose greedy next token is known; then a tiny random GPT: batched ragged
// greedy equals each prompt alone and a no-cache recomputation past block_size.
#include <cmath>

#include "support/causal_lm_checks.h"
#include "support/test_support.h"

using namespace ember;

namespace {

const char* kFixture = "generation_reference.txt";

std::vector<double> fixture(const std::string& name) {
  return test::load_fixture(kFixture, name).values;
}

// A scripted model: at every position the logits peak at (token + 1) % V, and the padded
// columns [V, padded) are larger still (they must never be sampled). Appends one dummy
// key/value column per token to the cache and records the shape of every call.
nn::DecodeStep successor_model(int64_t V, int64_t padded, std::vector<Shape>* calls) {
  return [=](const Tensor& idx, nn::KVCache& cache) {
    calls->push_back(idx.sizes());
    const int64_t B = idx.sizes()[0], T = idx.sizes()[1];
    const Tensor kv = zeros({B, 1, T, 1}, DType::f64);
    if (cache.k.empty()) {
      cache.k = {kv};
      cache.v = {kv};
    } else {
      cache.k[0] = cat({cache.k[0], kv}, 2);
      cache.v[0] = cat({cache.v[0], kv}, 2);
    }
    const std::vector<int64_t> ids = idx.to_vector<int64_t>();
    std::vector<double> logits(size_t(B * T * padded), 0.0);
    for (size_t i = 0; i < ids.size(); ++i) {
      logits[i * size_t(padded) + size_t((ids[i] + 1) % V)] = 1;
      for (int64_t c = V; c < padded; ++c) logits[i * size_t(padded) + size_t(c)] = 5;
    }
    return tensor<double>(logits, {B, T, padded});
  };
}

nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 12;
  c.vocab_size = 29;
  c.padded_vocab_size = 32;
  return c;
}

}  // namespace

TEST(Generation, SamplerMatchesHuggingFaceWarpers) {
  const int cases = int(fixture("gen.cases")[0]);
  ASSERT_EQ(cases, 10);
  for (int i = 0; i < cases; ++i) {
    const std::string p = "gen." + std::to_string(i) + ".";
    const std::vector<double> logits = fixture(p + "logits"), cfg = fixture(p + "config");
    const std::vector<double> probs = fixture(p + "probs"), u = fixture(p + "u"), picks = fixture(p + "picks");
    SCOPED_TRACE(str("case ", i, ": temperature ", cfg[0], " top_k ", cfg[1], " top_p ", cfg[2]));
    const nn::GenerationConfig c{.temperature = cfg[0], .top_k = int64_t(cfg[1]), .top_p = cfg[2]};
    const std::vector<double> got = nn::sampling_probs(logits, c);
    ASSERT_EQ(got.size(), probs.size());
    for (size_t v = 0; v < probs.size(); ++v) {
      EXPECT_EQ(got[v] == 0, probs[v] == 0) << "token " << v << " kept/removed differently";
      EXPECT_NEAR(got[v], probs[v], 1e-14) << "token " << v;
    }
    for (size_t j = 0; j < u.size(); ++j)
      EXPECT_EQ(nn::sample_token(logits, c, u[j]), int64_t(picks[j])) << "u " << u[j];
  }
}

TEST(Generation, TopPByHand) {
  // Probabilities 0.1, 0.2, 0.3, 0.4. top_p 0.5: ascending cumulative 0.1, 0.3, 0.6, 1.0; the
  // first two are <= 1 - 0.5 and go, leaving 3/7 and 4/7.
  const std::vector<double> logits = {std::log(0.1), std::log(0.2), std::log(0.3), std::log(0.4)};
  nn::GenerationConfig c{.top_p = 0.5};
  const std::vector<double> p = nn::sampling_probs(logits, c);
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[1], 0.0);
  EXPECT_NEAR(p[2], 3.0 / 7, 1e-15);
  EXPECT_NEAR(p[3], 4.0 / 7, 1e-15);
  EXPECT_EQ(nn::sample_token(logits, c, 0.0), 2);
  EXPECT_EQ(nn::sample_token(logits, c, 0.42), 2);
  EXPECT_EQ(nn::sample_token(logits, c, 0.43), 3);
  EXPECT_EQ(nn::sample_token(logits, c, 0.999999), 3);
  // A tiny top_p keeps the single most likely token (min_tokens_to_keep = 1).
  c.top_p = 1e-9;
  EXPECT_EQ(nn::sampling_probs(logits, c), (std::vector<double>{0, 0, 0, 1}));
  // Greedy takes the first of tied maxima and ignores u.
  const std::vector<double> tied = {1, 4, 2, 4};
  EXPECT_EQ(nn::sample_token(tied, {.temperature = 0}, 0.99), 1);
}

TEST(Generation, RaggedPromptsFeedTheirOwnTokensThenGenerate) {
  std::vector<Shape> calls;
  const auto out = nn::generate_tokens(successor_model(29, 32, &calls), 64, 29, Device::cpu(),
                                       {{5}, {1, 2, 3, 4}, {7, 9}}, {.max_new_tokens = 3, .temperature = 0});
  // The longer prompts keep their own tokens (2, 3, 4 and 9), not the model's guesses.
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7}, {7, 9, 10, 11, 12}}));
  // One step on the shortest prompt's length, then one token per row per step until the
  // longest prompt has its 3 tokens: (4 - 1) + 3 steps, every row in every call.
  EXPECT_EQ(calls, (std::vector<Shape>(6, Shape{3, 1})));
}

TEST(Generation, StopTokenEndsOneRowWhileAnotherContinues) {
  std::vector<Shape> calls;
  auto step = successor_model(29, 32, &calls);
  const nn::GenerationConfig c{.max_new_tokens = 6, .temperature = 0, .stop_token = 4};
  auto out = nn::generate_tokens(step, 64, 29, Device::cpu(), {{1}, {10}}, c);
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{1, 2, 3, 4}, {10, 11, 12, 13, 14, 15, 16}}));
  EXPECT_EQ(calls.size(), 6u);
  // Every row stopped: no step after the last stop token.
  calls.clear();
  out = nn::generate_tokens(step, 64, 29, Device::cpu(), {{1, 2}, {0, 3}}, {.max_new_tokens = 10, .temperature = 0, .stop_token = 4});
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{1, 2, 3, 4}, {0, 3, 4}}));
  EXPECT_EQ(calls.size(), 2u);
  // A stop token inside a prompt is part of the prompt, not an end.
  calls.clear();
  out = nn::generate_tokens(step, 64, 29, Device::cpu(), {{4, 7}}, {.max_new_tokens = 2, .temperature = 0, .stop_token = 4});
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{4, 7, 8, 9}}));
  // max_new_tokens 0: the prompts, no forward.
  calls.clear();
  out = nn::generate_tokens(step, 64, 29, Device::cpu(), {{4, 7}}, {.max_new_tokens = 0});
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{4, 7}}));
  EXPECT_TRUE(calls.empty());
}

TEST(Generation, CropsToBlockSizeAndRebuildsTheCache) {
  std::vector<Shape> calls;
  const auto out = nn::generate_tokens(successor_model(29, 29, &calls), 4, 29, Device::cpu(), {{0, 1}},
                                       {.max_new_tokens = 5, .temperature = 0});
  EXPECT_EQ(out, (std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4, 5, 6}}));
  // The prompt, two cached tokens (the cache is full at 4), then the last 4 tokens each step.
  EXPECT_EQ(calls, (std::vector<Shape>{{1, 2}, {1, 1}, {1, 1}, {1, 4}, {1, 4}}));
  // A prompt longer than block_size starts cropped.
  calls.clear();
  nn::generate_tokens(successor_model(29, 29, &calls), 4, 29, Device::cpu(), {{0, 1, 2, 3, 4, 5}},
                      {.max_new_tokens = 2, .temperature = 0});
  EXPECT_EQ(calls, (std::vector<Shape>{{1, 4}, {1, 4}}));
}

TEST(Generation, SamplesEachRowWithOneUniformPerRowPerStep) {
  // Fixed logits per row; the rows' draws come from the generator in row order, one per row per
  // step (also for a row still inside its prompt), as rand({B}) would give them.
  const int64_t V = 6;
  const std::vector<std::vector<double>> rows = {{0.5, 1.5, -0.3, 2.0, 0.1, 1.0}, {1.0, 0.2, 0.9, -1.0, 1.1, 0.0}};
  auto step = [&](const Tensor& idx, nn::KVCache& cache) {
    const int64_t B = idx.sizes()[0], T = idx.sizes()[1];
    const Tensor kv = zeros({B, 1, T, 1});
    cache.k = {cache.k.empty() ? kv : cat({cache.k[0], kv}, 2)};
    std::vector<double> l;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) l.insert(l.end(), rows[size_t(b)].begin(), rows[size_t(b)].end());
    return tensor<double>(l, {B, T, V});
  };
  Generator g(77), ref(77);
  const nn::GenerationConfig c{.max_new_tokens = 4, .temperature = 1.3, .top_k = 4, .top_p = 0.8, .generator = &g};
  const auto out = nn::generate_tokens(step, 64, V, Device::cpu(), {{0}, {1, 2}}, c);
  std::vector<std::vector<int64_t>> expected = {{0}, {1, 2}};
  for (int s = 0; s < 5; ++s) {  // 5 steps: row 1 spends its first inside its prompt
    const std::vector<double> u = rand({2}, DType::f64, &ref).to_vector<double>();
    for (size_t b = 0; b < 2; ++b) {
      if (int64_t(expected[b].size()) > s + 1 || expected[b].size() == (b == 0 ? 5u : 6u)) continue;
      expected[b].push_back(nn::sample_token(rows[b], c, u[b]));
    }
  }
  EXPECT_EQ(out, expected);
  EXPECT_EQ(g.get_state().offset, ref.get_state().offset);  // no draw more, none fewer
}

// A tiny random GPT in f64: greedy over a ragged batch equals each prompt generated alone,
// and both equal recomputing the full (cropped) context without a cache; every cached step's
// logits equal the full forward's at the same positions, across the crop past block_size.
TEST(Generation, GPTGreedyRaggedBatchEqualsAloneAndNoCacheRecomputation) {
  Generator init(2207);
  nn::GPT model(tiny_config(), &init);
  model.to(DType::f64);
  model.eval();
  const std::vector<std::vector<int64_t>> prompts = {{3, 17, 8}, {25, 1, 4, 4, 9, 12, 0}, {11}};
  const int64_t n = 9;  // the longest row reaches 16 > block_size 12: the crop path runs
  std::vector<Tensor> context;  // what the cache holds, per call, rebuilt on a crop
  double worst = 0;
  int calls = 0;
  auto checked_step = [&](const Tensor& idx, nn::KVCache& cache) {
    if (cache.length() == 0) context.clear();
    context.push_back(idx);
    const Tensor logits = model.forward(idx, cache);
    const Tensor all = cat(context, 1);
    const int64_t T = all.sizes()[1], Tn = idx.sizes()[1];
    const Tensor full = model.forward(all).narrow(1, T - Tn, Tn);
    worst = std::max(worst, (logits - full).abs().max().item<double>());
    ++calls;
    return logits;
  };
  const nn::GenerationConfig c{.max_new_tokens = n, .temperature = 0};
  const auto batched = nn::generate_tokens(checked_step, 12, 29, Device::cpu(), prompts, c);
  EXPECT_EQ(calls, (7 - 1) + n);
  EXPECT_LT(worst, 1e-12);
  ASSERT_EQ(batched.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    SCOPED_TRACE(str("row ", b));
    EXPECT_EQ(batched[b], test::greedy_reference(model, prompts[b], n));
    EXPECT_EQ(batched[b], model.generate({prompts[b]}, c)[0]);
  }
  EXPECT_EQ(model.generate(prompts, c), batched);
}

TEST(Generation, BadArgumentsThrow) {
  std::vector<Shape> calls;
  auto step = successor_model(29, 32, &calls);
  auto gen = [&](std::vector<std::vector<int64_t>> prompts, nn::GenerationConfig c) {
    return test::message_of<ValueError>([&] { nn::generate_tokens(step, 64, 29, Device::cpu(), prompts, c); });
  };
  const nn::GenerationConfig ok{.max_new_tokens = 2};
  auto bad = [&](auto f) {
    nn::GenerationConfig c = ok;
    f(c);
    return gen({{1, 2}}, c);
  };
  EXPECT_EQ(bad([](auto& c) { c.top_p = 0; }), "[generate] top_p must be in (0, 1], got 0");
  EXPECT_EQ(bad([](auto& c) { c.top_p = 1.5; }), "[generate] top_p must be in (0, 1], got 1.5");
  EXPECT_EQ(bad([](auto& c) { c.top_k = -1; }), "[generate] top_k must be >= 0 (0: no cut), got -1");
  EXPECT_EQ(bad([](auto& c) { c.max_new_tokens = -1; }), "[generate] max_new_tokens must be >= 0, got -1");
  EXPECT_EQ(bad([](auto& c) { c.stop_token = 29; }),
            "[generate] stop_token 29 is outside [0, vocab_size 29) (-1: none)");
  EXPECT_EQ(bad([](auto& c) { c.stop_token = -2; }),
            "[generate] stop_token -2 is outside [0, vocab_size 29) (-1: none)");
  EXPECT_EQ(gen({{1, 2}, {}}, ok), "[generate] prompt 1 is empty");
  EXPECT_EQ(gen({}, ok), "[generate] no prompts");
  EXPECT_EQ(gen({{1, 29}}, ok), "[generate] prompt 0 has token 29 outside [0, vocab_size 29)");
  EXPECT_EQ(gen({{-1}}, ok), "[generate] prompt 0 has token -1 outside [0, vocab_size 29)");
  EXPECT_TRUE(calls.empty());
  // A step whose logits do not cover the vocabulary.
  EXPECT_THROW(nn::generate_tokens(successor_model(29, 20, &calls), 64, 29, Device::cpu(), {{1}}, ok), ShapeError);
}
