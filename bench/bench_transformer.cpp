// bench_transformer: one nn::TransformerEncoderLayer, forward and forward+backward, against
// torch.nn.TransformerEncoderLayer in the same run (bench/peers/torch_transformer.py).
//
//   build/bin/bench_transformer [--device cpu|cuda] [--batch 32] [--seq 64] [--d-model 256]
//                               [--heads 8] [--ff 2048] [--dropout 0.1] [--no-padding]
//                               [--steps 20] [--warmup 3] [--threads N] [--python PY] [--no-peer]
//
// Both sides: batch_first, post-norm (PyTorch's default), ReLU, f32, training mode (dropout
// on), the same src_key_padding_mask (batch b keeps its first T - (b % 4) T / 8 tokens; off
// with --no-padding), input [B, T, d_model] and a fixed output gradient. ember runs the masked
// fused attention (MultiheadAttention with need_weights = false); Debian's torch 1.13 runs its
// composite (no SDPA there). The forward is timed under no-grad, forward+backward with the
// parameter gradients dropped every call; on the CPU the median of --steps timed calls, on
// CUDA CUDA events (bench/gpu_timing.h). On a CPU the peer runs with and without
// OPENBLAS_NUM_THREADS=1 and each of its times is the faster one.
//
// Ends with one `result: {json}` line whose "ratios" are {"fwd", "fwd_bwd"}: ember speed /
// peer speed (> 1: ember faster).
#include <omp.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"
#include "../examples/common/cli_checks.h"

using namespace ember;

int main(int argc, char** argv) {
  bench::PeerArgs a;
  a.steps = 20, a.warmup = 3;
  int64_t B = 32, T = 64, d_model = 256, heads = 8, ff = 2048;
  double dropout = 0.1;
  bool no_padding = false;
  CLI::App app{"TransformerEncoderLayer forward/backward: ember vs PyTorch"};
  bench::add_device_option(app, a);
  app.add_option("--batch", B)->check(ember::examples::PositiveNumber);
  app.add_option("--seq", T)->check(ember::examples::PositiveNumber);
  app.add_option("--d-model", d_model)->check(ember::examples::PositiveNumber);
  app.add_option("--heads", heads)->check(ember::examples::PositiveNumber);
  app.add_option("--ff", ff)->check(ember::examples::PositiveNumber);
  app.add_option("--dropout", dropout)->check(CLI::Range(0.0, 0.99));
  app.add_flag("--no-padding", no_padding, "no src_key_padding_mask");
  bench::add_timing_options(app, a);
  bench::add_peer_options(app, a);
  CLI11_PARSE(app, argc, argv);
  if (d_model % heads != 0) {
    std::fprintf(stderr, "bench_transformer: --heads must divide --d-model\n");
    return 2;
  }
  omp_set_num_threads(a.threads);
  const Device dev = a.device();
  const int steps = a.steps, warmup = a.warmup, threads = a.threads;
  const std::string& device_name = a.device_name;

  manual_seed(0);
  nn::TransformerEncoderLayer layer(d_model, heads,
                                    {.dim_feedforward = ff, .dropout = dropout, .batch_first = true});
  layer.to(dev);
  const Tensor x = randn({B, T, d_model}, TensorOptions(DType::f32).device(dev));
  const Tensor dy = randn({B, T, d_model}, TensorOptions(DType::f32).device(dev));
  Tensor padding;  // true = padded
  if (!no_padding) {
    std::vector<double> pad(size_t(B * T));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) pad[size_t(b * T + t)] = t >= T - (b % 4) * T / 8;
    padding = tensor<double>(pad, {B, T}).gt(0.5).to(dev);
  }
  const double fwd = bench::time_calls(
      [&] {
        NoGradGuard no_grad;
        (void)layer(x, Tensor(), padding);
      },
      dev, steps, warmup);
  const double fwd_bwd = bench::time_calls(
      [&] {
        layer(x, Tensor(), padding).backward(dy);
        layer.zero_grad();
      },
      dev, steps, warmup);
  std::printf("ember  encoder layer B %lld T %lld d_model %lld heads %lld ff %lld%s, %d threads: "
              "forward %.3f ms, fwd+bwd %.3f ms\n",
              (long long)B, (long long)T, (long long)d_model, (long long)heads, (long long)ff,
              no_padding ? "" : " (key padding)", threads, 1e3 * fwd, 1e3 * fwd_bwd);
  std::fflush(stdout);

  double peer_fwd = 0, peer_fb = 0;
  std::string peer_version = "none", peer_blas = "unknown", env_fwd, env_fb;
  if (!a.no_peer) {
    std::vector<std::string> envs = {""};
    if (!dev.is_cuda()) envs.push_back("OPENBLAS_NUM_THREADS=1 ");
    const std::string args = " --batch " + std::to_string(B) + " --seq " + std::to_string(T) + " --d-model " +
                             std::to_string(d_model) + " --heads " + std::to_string(heads) + " --ff " +
                             std::to_string(ff) + " --dropout " + std::to_string(dropout) +
                             (no_padding ? " --no-padding" : "") + bench::peer_common_args(a);
    for (const std::string& env : envs) {
      const std::string env_name = env.empty() ? "" : env.substr(0, env.size() - 1);
      bench::run_peer(a.python, "torch_transformer.py", args, [&](const char* line) {
        char version[128], blas[64];
        double f_ms = 0, fb_ms = 0;
        if (std::sscanf(line, "peer: %lf %lf %127s", &f_ms, &fb_ms, version) == 3) {
          if (peer_fwd == 0 || f_ms * 1e-3 < peer_fwd) peer_fwd = f_ms * 1e-3, env_fwd = env_name;
          if (peer_fb == 0 || fb_ms * 1e-3 < peer_fb) peer_fb = fb_ms * 1e-3, env_fb = env_name;
          peer_version = version;
          std::printf("torch  %s%s%s: forward %.3f ms, fwd+bwd %.3f ms\n", version, env_name.empty() ? "" : " ",
                      env_name.c_str(), f_ms, fb_ms);
          return true;
        }
        if (std::sscanf(line, "peer_blas: %63s", blas) == 1) {
          peer_blas = blas;
          return true;
        }
        return false;
      }, env);
    }
    bench::say_peer_missing(peer_version, a.python);
  }
  const double r_fwd = bench::speed_ratio(peer_fwd, fwd), r_fb = bench::speed_ratio(peer_fb, fwd_bwd);
  std::printf("ratio  forward %.3f, fwd+bwd %.3f (ember/peer speed)\n", r_fwd, r_fb);
  std::printf("result: {\"bench\": \"transformer\", \"device\": \"%s\", \"threads\": %d, \"B\": %lld, \"T\": %lld, "
              "\"d_model\": %lld, \"heads\": %lld, \"ff\": %lld, \"dropout\": %g, \"key_padding\": %s, "
              "\"peer\": \"torch %s\", \"peer_blas\": \"%s\", \"ember_fwd_ms\": %.4f, \"ember_fwd_bwd_ms\": %.4f, "
              "\"peer_fwd_ms\": %.4f, \"peer_fwd_bwd_ms\": %.4f, \"peer_env_fwd\": \"%s\", "
              "\"peer_env_fwd_bwd\": \"%s\", \"ratios\": {\"fwd\": %.3f, \"fwd_bwd\": %.3f}}\n",
              device_name.c_str(), threads, (long long)B, (long long)T, (long long)d_model, (long long)heads,
              (long long)ff, dropout, no_padding ? "false" : "true", peer_version.c_str(), peer_blas.c_str(),
              1e3 * fwd, 1e3 * fwd_bwd, 1e3 * peer_fwd, 1e3 * peer_fb, env_fwd.c_str(), env_fb.c_str(), r_fwd,
              r_fb);
  return 0;
}
