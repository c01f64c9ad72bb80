// nn::GPT against an equivalent nanoGPT-style PyTorch model (tests/fixtures/
// make_gpt_fixtures.py): the state dict loads by GPT-2's parameter names, and the logits, the
// loss over the real vocabulary and every parameter gradient match in f64. Then the KV-cache
// path against the full forward, generation, recompute (checkpointed blocks) against the plain
// graph, the parameter counts nanoGPT and llm.c print for gpt2-small, and the optimizer groups.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "support/causal_lm_checks.h"
#include "support/test_support.h"

using namespace ember;

namespace {

const char* kFixture = "gpt_reference.txt";

nn::GPTConfig fixture_config() {
  nn::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.block_size = 8;
  c.vocab_size = 29;
  c.padded_vocab_size = 32;
  return c;
}

// The fixture's model in `dt`, its weights loaded by name (strict: every name must match).
std::unique_ptr<nn::GPT> fixture_model(DType dt) {
  auto model = std::make_unique<nn::GPT>(fixture_config());
  StateDict sd;
  for (auto& [name, t] : model->state_dict())
    sd.insert(name, test::load_fixture(kFixture, "gpt.state." + name).tensor());
  model->to(dt);
  model->load_state_dict(sd);
  return model;
}

Tensor fixture_ints(const std::string& name) {
  return test::load_fixture(kFixture, name).tensor().to(DType::i64);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  double m = 0;
  for (size_t i = 0; i < va.size(); ++i) m = std::max(m, std::fabs(va[i] - vb[i]));
  return m;
}

nn::GPTConfig small_config(float dropout = 0) {
  nn::GPTConfig c = fixture_config();
  c.n_embd = 16;
  c.block_size = 12;
  c.dropout = dropout;
  return c;
}

}  // namespace

TEST(GPT, StateDictNamesAreGPT2s) {
  nn::GPT model(fixture_config());
  std::vector<std::string> names;
  for (auto& [name, t] : model.state_dict()) names.push_back(name);
  ASSERT_EQ(names.size(), 4u + 2 * 12);
  EXPECT_EQ(names[0], "wte.weight");
  EXPECT_EQ(names[1], "wpe.weight");
  EXPECT_EQ(names[2], "h.0.ln_1.weight");
  EXPECT_EQ(names[4], "h.0.attn.c_attn.weight");
  EXPECT_EQ(names[6], "h.0.attn.c_proj.weight");
  EXPECT_EQ(names[10], "h.0.mlp.c_fc.weight");
  EXPECT_EQ(names[12], "h.0.mlp.c_proj.weight");
  EXPECT_EQ(names.back(), "ln_f.bias");
  EXPECT_EQ(model.wte.weight.sizes(), (Shape{32, 8}));
  EXPECT_EQ(model.blocks[1]->attn.c_attn.weight.sizes(), (Shape{24, 8}));
}

TEST(GPT, MatchesPyTorchLogitsLossAndGradients) {
  auto model = fixture_model(DType::f64);
  Tensor idx = fixture_ints("gpt.idx"), targets = fixture_ints("gpt.targets");
  Tensor logits = model->forward(idx);
  EXPECT_EQ(logits.sizes(), (Shape{2, 8, 32}));
  const Tensor ref_logits = test::load_fixture(kFixture, "gpt.logits").tensor();
  EXPECT_TRUE(test::all_close(logits, ref_logits, 1e-10, 1e-12));
  Tensor loss = model->forward(idx, targets);
  const Tensor ref_loss = test::load_fixture(kFixture, "gpt.loss").tensor();
  EXPECT_TRUE(test::all_close(loss, ref_loss, 1e-12, 1e-12));
  loss.backward();
  double worst = 0;
  for (auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(p.grad().defined());
    const Tensor ref = test::load_fixture(kFixture, "gpt.grad." + name).tensor();
    EXPECT_TRUE(test::all_close(p.grad(), ref, 1e-9, 1e-12));
    worst = std::max(worst, max_abs_diff(p.grad(), ref));
  }
  // The padded vocabulary rows take no gradient (no probability mass, never looked up).
  EXPECT_EQ(max_abs_diff(model->wte.weight.grad().narrow(0, 29, 3), zeros({3, 8}, DType::f64)), 0.0);
  std::printf("[gpt vs PyTorch, f64] logits %.3g, loss %.3g, worst gradient %.3g (max abs diff)\n",
              max_abs_diff(logits, ref_logits), max_abs_diff(loss, ref_loss), worst);
}

TEST(GPT, MatchesPyTorchInF32) {
  auto model = fixture_model(DType::f32);
  Tensor idx = fixture_ints("gpt.idx"), targets = fixture_ints("gpt.targets");
  const Tensor ref_logits = test::load_fixture(kFixture, "gpt.logits").tensor();
  Tensor logits = model->forward(idx);
  EXPECT_TRUE(test::all_close(logits.to(DType::f64), ref_logits, 1e-4, 1e-5));
  Tensor loss = model->forward(idx, targets);
  loss.backward();
  double worst = 0;
  for (auto& [name, p] : model->named_parameters()) {
    SCOPED_TRACE(name);
    const Tensor ref = test::load_fixture(kFixture, "gpt.grad." + name).tensor();
    EXPECT_TRUE(test::all_close(p.grad().to(DType::f64), ref, 1e-3, 1e-5));
    worst = std::max(worst, max_abs_diff(p.grad().to(DType::f64), ref));
  }
  std::printf("[gpt vs PyTorch, f32] logits %.3g, loss %.3g, worst gradient %.3g (max abs diff)\n",
              max_abs_diff(logits.to(DType::f64), ref_logits),
              max_abs_diff(loss.to(DType::f64), test::load_fixture(kFixture, "gpt.loss").tensor()), worst);
}

TEST(GPT, KVCacheLogitsEqualTheFullForward) {
  Generator gen(21);
  nn::GPT model(small_config(), &gen);
  model.to(DType::f64);
  test::expect_kv_cache_matches_full_forward(model, randint(0, 29, {2, 12}, DType::i64, &gen));
}

TEST(GPT, GenerateGreedyEqualsFullForwardArgmax) {
  Generator gen(22);
  nn::GPT model(small_config(), &gen);
  model.to(DType::f64);
  model.eval();
  Tensor prompt = randint(0, 29, {2, 3}, DType::i64, &gen);
  // 14 new tokens: past block_size (12), so the crop-and-rebuild path runs too.
  Tensor out = model.generate(prompt, 14, /*temperature=*/0.0);
  ASSERT_EQ(out.sizes(), (Shape{2, 17}));
  for (int64_t b = 0; b < 2; ++b)
    EXPECT_EQ(out.select(0, b).to_vector<int64_t>(),
              test::greedy_reference(model, prompt.select(0, b).to_vector<int64_t>(), 14))
        << "row " << b;
}

TEST(GPT, GenerateSamplesReproduciblyWithinTopK) {
  Generator init(23);
  nn::GPT model(small_config(), &init);
  model.eval();
  Tensor prompt = tensor<int64_t>({1, 2, 3}, {3});
  Generator g1(5), g2(5);
  Tensor a = model.generate(prompt, 8, 1.0, 1, &g1);  // top_k = 1 is greedy
  Tensor greedy = model.generate(prompt, 8, 0.0);
  EXPECT_EQ(a.to_vector<int64_t>(), greedy.to_vector<int64_t>());
  Tensor s1 = model.generate(prompt, 8, 2.0, 5, &g1), s2 = model.generate(prompt, 8, 2.0, 5, &g2);
  Tensor s2b = model.generate(prompt, 8, 2.0, 5, &g2);
  EXPECT_EQ(s1.sizes(), (Shape{11}));
  g1.manual_seed(5);
  EXPECT_EQ(model.generate(prompt, 8, 2.0, 5, &g1).to_vector<int64_t>(), s2.to_vector<int64_t>());
  // Every sampled token is among the 5 largest logits of its context (recomputed by the full
  // forward), and never a padded one.
  for (const Tensor& s : {s1, s2, s2b}) {
    const std::vector<int64_t> seq = s.to_vector<int64_t>();
    for (size_t t = 3; t < seq.size(); ++t) {
      NoGradGuard ng;
      Tensor ctx = tensor<int64_t>(std::vector<int64_t>(seq.begin(), seq.begin() + int64_t(t)), {1, int64_t(t)});
      const std::vector<double> logits =
          model.forward(ctx).select(1, int64_t(t) - 1).narrow(1, 0, 29).to(DType::f64).to_vector<double>();
      ASSERT_LT(seq[t], 29);
      int64_t larger = 0;  // logits above the sampled token's: < 5 means it is in the top 5
      for (double l : logits) larger += l > logits[size_t(seq[t])];
      EXPECT_LT(larger, 5) << "position " << t << " token " << seq[t];
    }
  }
}

// The distribution generate() samples from, checked statistically: for each (temperature,
// top_k), 6000 one-token samples from one context against softmax(logits / temperature) over
// the top_k largest logits (a chi-square test at a 1e-4 false-alarm rate; the generator is
// seeded, so the outcome is fixed). Tokens outside the top_k never appear. The head's
// weights are scaled so that the logits spread over several units and a wrong temperature or
// cut changes the distribution far beyond sampling noise.
TEST(GPT, GenerateSamplesSoftmaxOfLogitsOverTemperatureWithinTopK) {
  Generator init(31);
  nn::GPT model(small_config(), &init);
  model.eval();
  const int64_t V = 29, kRows = 3000;
  Tensor prompt = full({kRows, 2}, 4, DType::i64);
  std::vector<double> logits;
  auto spread_of_logits = [&] {
    NoGradGuard ng;
    logits = model.forward(prompt.narrow(0, 0, 1)).select(1, 1).narrow(1, 0, V).to(DType::f64).to_vector<double>();
    return *std::max_element(logits.begin(), logits.end()) - *std::min_element(logits.begin(), logits.end());
  };
  // The tied head's logits scale about linearly with wte (the trunk normalizes its input):
  // bring their spread to about 6, where every temperature below leaves several tokens likely.
  const double initial = spread_of_logits();
  {
    NoGradGuard ng;
    for (auto& [name, p] : model.named_parameters())
      if (name == "wte.weight") p.mul_(6.0 / initial);
  }
  const double spread = spread_of_logits();
  ASSERT_GT(spread, 3.0) << "the logits must spread for the test to tell temperatures apart";
  ASSERT_LT(spread, 12.0) << "too spread: a few tokens would take all the mass";
  struct Config {
    double temperature;
    int64_t top_k;
  };
  for (Config c : {Config{1.0, 0}, Config{0.5, 0}, Config{2.0, 0}, Config{1.0, 5}, Config{3.0, 3}}) {
    SCOPED_TRACE(str("temperature ", c.temperature, " top_k ", c.top_k));
    // Expected probabilities.
    std::vector<double> p(size_t(V), 0.0);
    std::vector<double> sorted = logits;
    std::sort(sorted.begin(), sorted.end(), std::greater<double>());
    const double cut = c.top_k > 0 ? sorted[size_t(c.top_k - 1)] : -INFINITY;
    double total = 0;
    for (int64_t v = 0; v < V; ++v)
      if (logits[size_t(v)] >= cut) total += p[size_t(v)] = std::exp((logits[size_t(v)] - sorted[0]) / c.temperature);
    for (double& x : p) x /= total;
    // Observed counts.
    Generator g(1234);
    std::vector<int64_t> count(size_t(V), 0);
    int64_t n = 0;
    for (int rep = 0; rep < 2; ++rep) {
      Tensor out = model.generate(prompt, 1, c.temperature, c.top_k, &g);
      for (int64_t t : out.select(1, 2).to_vector<int64_t>()) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, V);
        ++count[size_t(t)];
        ++n;
      }
    }
    // Chi-square over bins with an expected count >= 5 (the rest pooled into one bin).
    double chi2 = 0, pooled_e = 0, pooled_o = 0;
    int bins = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double e = p[size_t(v)] * double(n);
      if (p[size_t(v)] == 0) {
        EXPECT_EQ(count[size_t(v)], 0) << "token " << v << " is outside the top " << c.top_k;
      } else if (e >= 5) {
        chi2 += (double(count[size_t(v)]) - e) * (double(count[size_t(v)]) - e) / e;
        ++bins;
      } else {
        pooled_e += e;
        pooled_o += double(count[size_t(v)]);
      }
    }
    if (pooled_e >= 5) {
      chi2 += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
      ++bins;
    }
    ASSERT_GE(bins, 3) << "too few bins for a meaningful test";
    // The chi-square critical value at 1e-4 for df = bins - 1 (Wilson-Hilferty approximation).
    const double df = bins - 1, z = 3.719;
    const double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
    EXPECT_LT(chi2, critical) << "df " << df;
  }
}

TEST(GPT, RecomputeGivesIdenticalGradients) {
  for (float dropout : {0.0f, 0.2f}) {
    SCOPED_TRACE(str("dropout ", dropout));
    Generator gen(24);
    nn::GPT model(small_config(dropout), &gen);
    model.to(DType::f64);
    Tensor idx = randint(0, 29, {2, 12}, DType::i64, &gen);
    Tensor targets = randint(0, 29, {2, 12}, DType::i64, &gen);
    test::expect_recompute_matches_plain_graph(model, idx, targets);
  }
}

// Blocks with forward hooks (fully_shard's units) run one by one through them, without the
// fused residual-add + layer_norm across block boundaries: the same loss and gradients.
TEST(GPT, BlocksWithHooksRunThroughThemWithTheSameResults) {
  for (bool recompute : {false, true}) {
    SCOPED_TRACE(str("recompute ", recompute));
    Generator g1(25), g2(25);
    nn::GPT plain(small_config(0), &g1), hooked(small_config(0), &g2);
    plain.to(DType::f64);
    hooked.to(DType::f64);
    hooked.recompute = recompute;
    int pre = 0, post = 0;
    for (auto& b : hooked.blocks) {
      b->register_forward_pre_hook([&](const nn::Module& m, const Tensor& in) {
        EXPECT_EQ(m.type_name(), "Block");
        EXPECT_EQ(in.dim(), 3);
        ++pre;
        return Tensor();
      });
      b->register_forward_hook([&](const nn::Module&, const Tensor& out) {
        EXPECT_EQ(out.dim(), 3);
        ++post;
        return Tensor();
      });
    }
    Generator gen(26);
    Tensor idx = randint(0, 29, {2, 12}, DType::i64, &gen), targets = randint(0, 29, {2, 12}, DType::i64, &gen);
    Tensor a = plain.forward(idx, targets), b = hooked.forward(idx, targets);
    EXPECT_EQ(pre, int(hooked.blocks.size()));
    EXPECT_EQ(post, pre);
    EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-12);
    a.backward();
    b.backward();
    // recompute runs each block again in backward: its hooks run again.
    EXPECT_EQ(pre, int(hooked.blocks.size()) * (recompute ? 2 : 1));
    const auto pa = plain.parameters(), pb = hooked.parameters();
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_TRUE(pa[i].grad().allclose(pb[i].grad(), 1e-12, 1e-12)) << i;
  }
}

TEST(GPT, Gpt2SmallParameterCountsAndOptimizerGroups) {
  nn::GPTConfig c = nn::GPTConfig::preset("gpt2-small");
  EXPECT_EQ(c.n_layer, 12);
  EXPECT_EQ(c.padded_vocab_size, 50304);
  nn::GPT model(c);
  // llm.c prints num_parameters: 124475904 (padded vocab, tied head, wpe included); nanoGPT's
  // get_num_params() leaves wpe out: 123.69M.
  EXPECT_EQ(model.Module::num_parameters(), 124475904);
  EXPECT_EQ(model.num_parameters(false), 124475904);
  EXPECT_EQ(model.num_parameters(), 124475904 - 1024 * 768);
  // nanoGPT's configure_optimizers: 50 decayed tensors (124,354,560 parameters), 98 not
  // (121,344).
  auto groups = model.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 6e-4});
  ASSERT_EQ(groups.size(), 2u);
  auto count = [](const std::vector<Tensor>& ps) {
    int64_t n = 0;
    for (const Tensor& p : ps) n += p.numel();
    return n;
  };
  EXPECT_EQ(groups[0].params.size(), 50u);
  EXPECT_EQ(count(groups[0].params), 124354560);
  EXPECT_EQ(groups[1].params.size(), 98u);
  EXPECT_EQ(count(groups[1].params), 121344);
  EXPECT_EQ(groups[0].options.weight_decay, 0.1);
  EXPECT_EQ(groups[1].options.weight_decay, 0.0);
  EXPECT_EQ(groups[1].options.lr, 6e-4);
  // GPT-2 init: N(0, 0.02), residual projections 0.02 / sqrt(24), zero biases, padded rows 0.
  EXPECT_NEAR(model.wte.weight.narrow(0, 0, 50257).std().item<double>(), 0.02, 2e-4);
  EXPECT_NEAR(model.blocks[3]->mlp.c_proj.weight.std().item<double>(), 0.02 / std::sqrt(24.0), 2e-4);
  EXPECT_EQ(model.blocks[3]->attn.c_attn.bias.abs().max().item<double>(), 0.0);
  EXPECT_EQ(model.wte.weight.narrow(0, 50257, 47).abs().max().item<double>(), 0.0);
}

TEST(GPT, TinyPresetTrainsOneAdamWStep) {
  nn::GPTConfig c = nn::GPTConfig::preset("tiny");
  EXPECT_EQ(c.n_embd, 64);
  c.vocab_size = 100;  // a small vocabulary keeps the test fast
  c.padded_vocab_size = 128;
  manual_seed(3);
  nn::GPT model(c);
  Tensor idx = randint(0, 100, {2, 16}, DType::i64);
  Tensor targets = randint(0, 100, {2, 16}, DType::i64);
  test::expect_adamw_steps_fit_one_batch(model, idx, targets);
  EXPECT_THROW(nn::GPTConfig::preset("gpt5"), ValueError);
}

// The same GPT on the GPU and on the CPU: loss and every gradient in f32 and under bf16
// autocast (support/causal_lm_checks.h).
TEST(GPTCuda, MatchesCpuInF32AndUnderBf16Autocast) {
  EMBER_SKIP_WITHOUT_CUDA();
  nn::GPTConfig c = nn::GPTConfig::preset("tiny");
  c.n_embd = 128;
  c.n_head = 2;  // head dim 64
  c.vocab_size = 100;
  c.padded_vocab_size = 128;
  manual_seed(11);
  nn::GPT cpu(c), gpu(c);
  Tensor idx = randint(0, 100, {2, 40}, DType::i64);
  Tensor targets = randint(0, 100, {2, 40}, DType::i64);
  test::expect_cuda_matches_cpu(cpu, gpu, idx, targets);
}

TEST(GPTCuda, ForwardAndBackwardCaptureInAGraphWithoutAHostWait) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  Generator gen(41);
  nn::GPT model(small_config(), &gen);
  model.to(dev);
  Tensor idx = randint(0, 29, {2, 12}, DType::i64, &gen).to(dev);
  Tensor targets = randint(0, 29, {2, 12}, DType::i64, &gen).to(dev);
  test::expect_graph_replay_matches_eager(model, idx, targets);
}
