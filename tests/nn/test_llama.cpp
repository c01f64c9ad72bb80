// nn::Llama: Hugging Face's parameter names, the KV-cache path against the full forward with
// grouped-query attention, generation through the shared sampler, recompute against the plain
// graph, the presets' parameter counts and init, and the GPU against the CPU. Logits, loss and
// every gradient against an independent PyTorch twin are in test_gpt_torch.cpp.
#include <algorithm>
#include <cmath>

#include "support/causal_lm_checks.h"
#include "support/test_support.h"

using namespace ember;

namespace {

// 4 query heads over 2 kv heads (head dim 4), a 12-token block, a padded vocabulary.
nn::LlamaConfig small_config() {
  nn::LlamaConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.intermediate_size = 40;
  c.block_size = 12;
  c.vocab_size = 29;
  c.padded_vocab_size = 32;
  return c;
}

int64_t count(const std::vector<Tensor>& ps) {
  int64_t n = 0;
  for (const Tensor& p : ps) n += p.numel();
  return n;
}

}  // namespace

TEST(Llama, StateDictNamesAreHuggingFaces) {
  nn::Llama model(small_config());
  std::vector<std::string> names;
  for (auto& [name, t] : model.state_dict()) names.push_back(name);
  const std::vector<std::string> layer0 = {
      "layers.0.input_layernorm.weight",   "layers.0.self_attn.q_proj.weight",
      "layers.0.self_attn.k_proj.weight",  "layers.0.self_attn.v_proj.weight",
      "layers.0.self_attn.o_proj.weight",  "layers.0.post_attention_layernorm.weight",
      "layers.0.mlp.gate_proj.weight",     "layers.0.mlp.up_proj.weight",
      "layers.0.mlp.down_proj.weight"};
  ASSERT_EQ(names.size(), 1 + 2 * layer0.size() + 2);
  EXPECT_EQ(names.front(), "embed_tokens.weight");
  EXPECT_TRUE(std::equal(layer0.begin(), layer0.end(), names.begin() + 1));
  EXPECT_EQ(names[names.size() - 2], "norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_EQ(model.blocks[1]->self_attn.k_proj.weight.sizes(), (Shape{8, 16}));  // 2 kv heads x 4
  EXPECT_FALSE(model.blocks[1]->self_attn.k_proj.bias.defined());
}

TEST(Llama, KVCacheLogitsEqualTheFullForward) {
  Generator gen(21);
  nn::Llama model(small_config(), &gen);
  model.to(DType::f64);
  const nn::KVCache cache = test::expect_kv_cache_matches_full_forward(model, randint(0, 29, {2, 12}, DType::i64, &gen));
  ASSERT_EQ(cache.k.size(), 2u);
  EXPECT_EQ(cache.k[0].sizes(), (Shape{2, 2, 12, 4}));  // only the kv heads are cached
}

TEST(Llama, GenerateRaggedGreedyEqualsFullForwardArgmax) {
  Generator gen(22);
  nn::Llama model(small_config(), &gen);
  model.to(DType::f64);
  model.eval();
  const std::vector<std::vector<int64_t>> prompts = {{3, 7, 1}, {5}, {2, 8, 9, 4, 11}};
  // 11 new tokens: past block_size (12) for the longest prompt, so the crop path runs too.
  const auto out = model.generate(prompts, {.max_new_tokens = 11, .temperature = 0.0});
  ASSERT_EQ(out.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b)
    EXPECT_EQ(out[b], test::greedy_reference(model, prompts[b], 11)) << "prompt " << b;
}

TEST(Llama, RecomputeGivesIdenticalGradients) {
  Generator gen(24);
  nn::Llama model(small_config(), &gen);
  model.to(DType::f64);
  Tensor idx = randint(0, 29, {2, 12}, DType::i64, &gen);
  Tensor targets = randint(0, 29, {2, 12}, DType::i64, &gen);
  test::expect_recompute_matches_plain_graph(model, idx, targets);
}

TEST(Llama, PresetParameterCountsInitAndOptimizerGroups) {
  nn::LlamaConfig c = nn::LlamaConfig::preset("llama-100m");
  nn::Llama model(c);
  // Per layer: q and o 640^2, k and v 640 x (2 heads x 64), three SwiGLU matrices 640 x 1728,
  // two RMSNorm weights; untied embedding and head 50304 x 640 each; the final norm.
  const int64_t C = 640, kv = 128, F = 1728, V = 50304;
  const int64_t layer = 2 * C * C + 2 * C * kv + 3 * C * F + 2 * C;
  EXPECT_EQ(model.num_parameters(), 10 * layer + 2 * V * C + C);
  EXPECT_EQ(model.num_parameters(false), model.num_parameters());  // no position embedding
  auto groups = model.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 3e-4});
  EXPECT_EQ(groups[0].params.size(), 10u * 7 + 2);  // every matrix and both embeddings
  EXPECT_EQ(count(groups[1].params), 21 * C);       // the RMSNorm weights
  EXPECT_EQ(groups[1].options.weight_decay, 0.0);
  // HF's init: N(0, 0.02) everywhere, norms 1, padded rows of the embedding and head 0.
  EXPECT_NEAR(model.blocks[4]->mlp.down_proj.weight.std().item<double>(), 0.02, 2e-4);
  EXPECT_NEAR(model.lm_head.weight.narrow(0, 0, 50257).std().item<double>(), 0.02, 2e-4);
  EXPECT_EQ(model.blocks[4]->post_attention_layernorm.weight.min().item<double>(), 1.0);
  EXPECT_EQ(model.embed_tokens.weight.narrow(0, 50257, 47).abs().max().item<double>(), 0.0);
  EXPECT_EQ(model.lm_head.weight.narrow(0, 50257, 47).abs().max().item<double>(), 0.0);
  // The tiny preset has GPT tiny's parameter count within 2%.
  nn::Llama tiny(nn::LlamaConfig::preset("llama-tiny"));
  nn::GPT gpt_tiny(nn::GPTConfig::preset("tiny"));
  EXPECT_NEAR(double(tiny.num_parameters()) / double(gpt_tiny.num_parameters(false)), 1.0, 0.02);
}

TEST(Llama, TinyPresetTrainsAndBadConfigsThrow) {
  nn::LlamaConfig c = nn::LlamaConfig::preset("llama-tiny");
  c.vocab_size = 100;
  c.padded_vocab_size = 128;
  manual_seed(3);
  nn::Llama model(c);
  Tensor idx = randint(0, 100, {2, 16}, DType::i64);
  Tensor targets = randint(0, 100, {2, 16}, DType::i64);
  test::expect_adamw_steps_fit_one_batch(model, idx, targets);

  EXPECT_THROW(nn::LlamaConfig::preset("llama-7b"), ValueError);
  nn::LlamaConfig bad = small_config();
  bad.n_kv_head = 3;  // 4 query heads do not split into 3 groups
  EXPECT_THROW(nn::Llama{bad}, ValueError);
  bad = small_config();
  bad.n_embd = 12;  // head size 3: rotary embeddings need an even one
  EXPECT_THROW(nn::Llama{bad}, ValueError);
  nn::Llama ok(small_config());
  EXPECT_THROW(ok.forward(randint(0, 29, {1, 13}, DType::i64)), ShapeError);  // past block_size
}

// The same Llama on the GPU and on the CPU: loss and every gradient, f32 (TF32 off) and bf16
// autocast; then the forward and backward captured in a CUDA graph (no host wait inside).
TEST(LlamaCuda, MatchesCpuInF32AndUnderBf16AutocastAndCaptures) {
  EMBER_SKIP_WITHOUT_CUDA();
  nn::LlamaConfig c = nn::LlamaConfig::preset("llama-tiny");
  c.n_embd = 128;
  c.n_head = 2;  // head dim 64
  c.vocab_size = 100;
  c.padded_vocab_size = 128;
  manual_seed(11);
  nn::Llama cpu(c), gpu(c);
  Tensor idx = randint(0, 100, {2, 40}, DType::i64);
  Tensor targets = randint(0, 100, {2, 40}, DType::i64);
  test::expect_cuda_matches_cpu(cpu, gpu, idx, targets);
  test::expect_graph_replay_matches_eager(gpu, idx.to(Device::cuda()), targets.to(Device::cuda()));
}
