// bench_activation: the elementwise activations, forward and forward+backward, against
// PyTorch in the same run (bench/peers/activation_peer.py), on [2048, 512] f32 (the char GPT
// row's MLP activation: 1M elements). On the CPU these are ember's elementwise functors
// (ops/include/ember/ops/functors.h) in the vectorized loops of ops/cpu/elementwise.cpp, the
// transcendental ones through ops/include/ember/ops/fast_math.h; PyTorch's use SLEEF.
//
//   build/bin/bench_activation [--device cpu|cuda] [--steps 10] [--warmup 2] [--threads N]
//                              [--python PY] [--no-peer]
//
// Timing as bench_pool (bench/bench_harness.h). Ends with one `result: {json}` line whose
// "ratios" are {"<case>_fwd" | "<case>_fwd_bwd": ember speed / peer speed} (> 1: ember faster).
#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"

using namespace ember;

int main(int argc, char** argv) {
  bench::PeerArgs a;
  a.steps = 20, a.warmup = 3;
  CLI::App app{"Elementwise activations forward and backward: ember vs PyTorch"};
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;
  const Shape s{2048, 512};
  namespace F = nn::functional;
  const std::vector<bench::UnaryCase> cases = {
      {"relu", s, [](const Tensor& x) { return relu(x); }},
      {"gelu", s, [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", s, [](const Tensor& x) { return gelu(x, true); }},
      {"tanh", s, [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", s, [](const Tensor& x) { return sigmoid(x); }},
      {"silu", s, [](const Tensor& x) { return silu(x); }},
      {"leaky_relu", s, [](const Tensor& x) { return leaky_relu(x, 0.01); }},
      {"elu", s, [](const Tensor& x) { return elu(x); }},
      {"softplus", s, [](const Tensor& x) { return softplus(x); }},
      {"mish", s, [](const Tensor& x) { return mish(x); }},
      {"hardswish", s, [](const Tensor& x) { return hardswish(x); }},
      {"exp", s, [](const Tensor& x) { return exp(x); }},
  };
  return bench::run_unary_fwd_bwd("activation", "activations [2048, 512]", "activation_peer.py", cases, a);
}
