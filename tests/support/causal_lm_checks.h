// The checks every decoder-only language model (nn::CausalLM: nn::GPT, nn::Llama) must pass,
// one body each, called by the model's own tests (tests/nn/test_gpt.cpp, test_llama.cpp,
// test_generation.cpp) with a model of that architecture.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/test_support.h"

namespace ember::test {

// Greedy continuation of one prompt by full (no-cache) forwards of the context cropped to
// block_size, the argmax over the real vocabulary: the reference for the cached sampler.
inline std::vector<int64_t> greedy_reference(const nn::CausalLM& model, std::vector<int64_t> seq, int64_t n) {
  NoGradGuard ng;
  const int64_t bs = model.block_size(), V = model.vocab_size();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = int64_t(seq.size()), L = std::min(T, bs);
    Tensor ctx = tensor<int64_t>(std::vector<int64_t>(seq.end() - L, seq.end()), {1, L});
    seq.push_back(model.forward(ctx).select(1, L - 1).narrow(1, 0, V).argmax(1).item<int64_t>());
  }
  return seq;
}

// idx [B, block_size] through the KV cache as a prompt of 5 tokens, then one token at a time,
// then the last 3 at once: the logits equal the full forward's, and the full cache refuses one
// more token. Returns the cache, for the model's own checks of what it holds.
inline nn::KVCache expect_kv_cache_matches_full_forward(const nn::CausalLM& model, const Tensor& idx) {
  NoGradGuard ng;
  const int64_t T = idx.sizes()[1];
  Tensor full = model.forward(idx);
  nn::KVCache cache;
  std::vector<Tensor> parts;
  parts.push_back(model.forward(idx.narrow(1, 0, 5), cache));
  for (int64_t t = 5; t < T - 3; ++t) parts.push_back(model.forward(idx.narrow(1, t, 1), cache));
  parts.push_back(model.forward(idx.narrow(1, T - 3, 3), cache));
  EXPECT_EQ(cache.length(), T);
  EXPECT_TRUE(all_close(cat(parts, 1), full, 1e-11, 1e-12));
  EXPECT_THROW(model.forward(idx.narrow(1, 0, 1), cache), ShapeError);
  return cache;
}

// The loss and every gradient of an f64 model with recompute off and on, the same dropout
// masks replayed by one seed. The forward is the same computation (bit-identical loss); the
// gradients are summed in another order inside the recomputed blocks, so they agree to f64
// rounding (a wrong mask or a missing path would differ by O(1)).
inline void expect_recompute_matches_plain_graph(nn::CausalLM& model, const Tensor& idx, const Tensor& targets) {
  std::vector<Tensor> grads[2];
  double losses[2];
  for (int r = 0; r < 2; ++r) {
    model.recompute = r == 1;
    model.zero_grad();
    manual_seed(99);
    Tensor loss = model.forward(idx, targets);
    loss.backward();
    losses[r] = loss.item<double>();
    for (const Tensor& p : model.parameters()) grads[r].push_back(p.grad().clone());
  }
  model.recompute = false;
  EXPECT_EQ(losses[0], losses[1]);
  for (size_t i = 0; i < grads[0].size(); ++i)
    EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-12, 1e-15)) << i;
}

// A freshly initialized model predicts near-uniformly (loss log(vocab) within 0.1); five AdamW
// steps (lr 1e-2, the model's own optimizer groups) on one batch lower its loss by over 0.5.
inline void expect_adamw_steps_fit_one_batch(nn::CausalLM& model, const Tensor& idx, const Tensor& targets) {
  optim::AdamW opt(model.configure_optimizer_groups<optim::AdamWOptions>(0.1, {.lr = 1e-2}));
  Tensor l0 = model.forward(idx, targets);
  EXPECT_NEAR(l0.item<double>(), std::log(double(model.vocab_size())), 0.1);
  for (int i = 0; i < 5; ++i) {
    opt.zero_grad();
    model.forward(idx, targets).backward();
    opt.step();
  }
  EXPECT_LT(model.forward(idx, targets).item<double>(), l0.item<double>() - 0.5);
}

// `gpu` (a model of cpu's config) takes cpu's weights and moves to the GPU; then one batch's
// loss and every gradient on both, f32 with TF32 off (tight) and bf16 autocast (the
// tensor-core attention path wants head dim 64) against the f32 CPU run at a bf16 tolerance.
inline void expect_cuda_matches_cpu(nn::CausalLM& cpu, nn::CausalLM& gpu, const Tensor& idx, const Tensor& targets) {
  gpu.load_state_dict(cpu.state_dict());
  gpu.to(Device::cuda());
  cpu.zero_grad();
  Tensor loss_cpu = cpu.forward(idx, targets);
  loss_cpu.backward();
  const auto cpu_params = cpu.named_parameters();
  const Tensor idx_d = idx.to(Device::cuda()), targets_d = targets.to(Device::cuda());
  cuda::AllowTF32Guard exact_f32(false);  // CPU-exact f32 matmuls, restored on any exit
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "f32");
    gpu.zero_grad();
    Tensor loss_gpu;
    {
      amp::autocast ac(Device::cuda(), DType::bf16, bf16);
      loss_gpu = gpu.forward(idx_d, targets_d);
    }
    loss_gpu.backward();
    const double tol = bf16 ? 3e-2 : 1e-4;
    EXPECT_NEAR(loss_gpu.item<double>(), loss_cpu.item<double>(), tol * std::fabs(loss_cpu.item<double>()));
    const auto gpu_params = gpu.named_parameters();
    ASSERT_EQ(gpu_params.size(), cpu_params.size());
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      const Tensor& gc = cpu_params[i].second.grad();
      const Tensor gg = gpu_params[i].second.grad().to(Device::cpu()).to(DType::f32);
      const double scale = std::max(1e-3, gc.abs().max().item<double>());
      EXPECT_TRUE(all_close(gg, gc, 0, (bf16 ? 5e-2 : 1e-4) * scale)) << cpu_params[i].first;
    }
  }
}

// A forward and backward on CUDA wait for the host nowhere (positions made on the device,
// index and target checks deferred), so the whole pass captures into a CUDA graph, which
// refuses any synchronization; its replay gives the eager loss and gradients. idx and targets
// are on the model's device.
inline void expect_graph_replay_matches_eager(nn::CausalLM& model, const Tensor& idx, const Tensor& targets) {
  model.zero_grad();
  Tensor eager = model.forward(idx, targets);  // also the warm-up (library handles, workspaces)
  eager.backward();
  std::vector<Tensor> eager_grads;
  for (const Tensor& p : model.parameters()) eager_grads.push_back(p.grad().cpu());
  model.zero_grad();  // to none: the captured backward allocates the gradients in the graph's pool
  cuda::Graph g;
  Tensor loss;
  {
    cuda::GraphCapture capture(g);
    loss = model.forward(idx, targets);
    loss.backward();
  }
  g.replay();
  EXPECT_EQ(loss.item<double>(), eager.item<double>());
  const auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_TRUE(all_close(params[i].grad().cpu(), eager_grads[i], 1e-6, 1e-7)) << i;
}

}  // namespace ember::test
