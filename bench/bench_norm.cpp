// bench_norm: ember's fused normalization ops, forward and forward+backward, against PyTorch
// in the same run (bench/peers/norm_peer.py) with the same thread count.
//
//   build/bin/bench_norm [--device cpu|cuda] [--steps 20] [--warmup 3] [--threads N]
//                        [--python PY] [--no-peer]
//
// Cases (f32): BatchNorm2d in training mode (batch statistics, running-stat update) at
// [128, 32, 28, 28] and [128, 64, 14, 14] (the ResNet-on-MNIST shapes), GroupNorm(8 groups)
// at [128, 64, 14, 14], GroupNorm(32 groups) at [1, 512, 64, 64] (a diffusion model's VAE
// block: 32 rows of 64K elements, fewer rows than a GPU has SMs), RMSNorm over 768 at
// [4096, 768] (the peer: torch 1.13 has no rms_norm, so its composite
// x * rsqrt(mean(x^2) + eps) * w, which is what torch 2.4 runs on the CPU too). Forward under no_grad; forward+backward with x, weight (and bias) requiring
// grad and a fixed output gradient, gradients reset every call.
// Timing: each call timed, the median of --steps (CUDA: events, bench/gpu_timing.h).
// Ends with one `result: {json}` line; "ratios" are ember speed / peer speed (> 1: faster).

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"

using namespace ember;

namespace {

struct Case {
  std::string name;  // kind:shape, as the peer prints it
  char kind;         // 'b' batch norm, 'g' group norm, 'r' rms norm
  Shape shape;
  int64_t groups = 8;  // group norm
};

}  // namespace

int main(int argc, char** argv) {
  bench::PeerArgs a;
  a.steps = 20, a.warmup = 3;
  CLI::App app{"Fused normalization forward/backward: ember vs PyTorch"};
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;
  const Device dev = a.device();
  const int steps = a.steps, warmup = a.warmup, threads = a.threads;
  const std::string& device_name = a.device_name;

  const std::vector<Case> cases = {{"bn2d_128x32x28x28", 'b', {128, 32, 28, 28}},
                                   {"bn2d_128x64x14x14", 'b', {128, 64, 14, 14}},
                                   {"gn8_128x64x14x14", 'g', {128, 64, 14, 14}},
                                   {"gn32_1x512x64x64", 'g', {1, 512, 64, 64}, 32},
                                   {"rms_4096x768", 'r', {4096, 768}}};
  std::printf("normalization on %s, f32, %d threads\n", device_name.c_str(), threads);
  std::vector<std::string> names;
  for (const Case& c : cases) names.push_back(c.name);
  bench::FwdBwdTimes t(names);
  std::vector<double>&e_fwd = t.e_fwd, &e_fb = t.e_fb;  // ember side, filled below
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int64_t C = c.kind == 'r' ? c.shape[1] : c.shape[1];
    const Tensor x = randn(c.shape, dev), dy = randn(c.shape, dev);
    Tensor w = ones({C}, dev), b = zeros({C}, dev), rm = zeros({C}, dev), rv = ones({C}, dev);
    auto run = [&](const Tensor& xv, const Tensor& wv, const Tensor& bv) {
      switch (c.kind) {
        case 'b': return batch_norm(xv, rm, rv, wv, bv, true, 0.1, 1e-5);
        case 'g': return group_norm(xv, c.groups, wv, bv, 1e-5);
        default: return rms_norm(xv, {C}, wv, 1e-6);
      }
    };
    e_fwd[i] = bench::time_calls(
        [&] {
          NoGradGuard no_grad;
          (void)run(x, w, b);
        },
        dev, steps, warmup);
    Tensor xg = x.detach().clone().requires_grad_(), wg = w.detach().clone().requires_grad_(),
           bg = b.detach().clone().requires_grad_();
    e_fb[i] = bench::time_calls(
        [&] {
          run(xg, wg, c.kind == 'r' ? Tensor() : bg).backward(dy);
          xg.set_grad(Tensor());
          wg.set_grad(Tensor());
          bg.set_grad(Tensor());
        },
        dev, steps, warmup);
    std::printf("ember  %-20s forward %8.3f ms   fwd+bwd %8.3f ms\n", c.name.c_str(), 1e3 * e_fwd[i],
                1e3 * e_fb[i]);
    std::fflush(stdout);
  }

  const std::string peer_version = a.no_peer ? "none" : bench::run_fwd_bwd_peer(a, "norm_peer.py", t, 20, 8, true);
  std::string ratios_json, cases_json;
  bench::fwd_bwd_report(t, 20, ratios_json, cases_json);
  std::printf("result: {\"bench\": \"norm\", \"device\": \"%s\", \"dtype\": \"f32\", \"threads\": %d, "
              "\"peer\": \"torch %s\", \"cases\": [%s], \"ratios\": {%s}}\n",
              device_name.c_str(), threads, peer_version.c_str(), cases_json.c_str(), ratios_json.c_str());
  return 0;
}
