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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "gpu_timing.h"

using namespace ember;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double time_calls(const std::function<void()>& f, Device dev, int steps, int warmup) {
  if (dev.is_cuda()) return bench::time_gpu(f, steps, warmup);
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int64_t B = 32, T = 64, d_model = 256, heads = 8, ff = 2048;
  double dropout = 0.1;
  int steps = 20, warmup = 3, threads = omp_get_max_threads();
  bool no_peer = false, no_padding = false;
  CLI::App app{"TransformerEncoderLayer forward/backward: ember vs PyTorch"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--batch", B)->check(CLI::PositiveNumber);
  app.add_option("--seq", T)->check(CLI::PositiveNumber);
  app.add_option("--d-model", d_model)->check(CLI::PositiveNumber);
  app.add_option("--heads", heads)->check(CLI::PositiveNumber);
  app.add_option("--ff", ff)->check(CLI::PositiveNumber);
  app.add_option("--dropout", dropout)->check(CLI::Range(0.0, 0.99));
  app.add_flag("--no-padding", no_padding, "no src_key_padding_mask");
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for both sides")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  CLI11_PARSE(app, argc, argv);
  if (d_model % heads != 0) {
    std::fprintf(stderr, "bench_transformer: --heads must divide --d-model\n");
    return 2;
  }
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

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
  const double fwd = time_calls(
      [&] {
        NoGradGuard no_grad;
        (void)layer(x, Tensor(), padding);
      },
      dev, steps, warmup);
  const double fwd_bwd = time_calls(
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
  if (!no_peer) {
    const std::string script = std::string(EMBER_SOURCE_DIR) + "/bench/peers/torch_transformer.py";
    std::vector<std::string> envs = {""};
    if (!dev.is_cuda()) envs.push_back("OPENBLAS_NUM_THREADS=1 ");
    for (const std::string& env : envs) {
      const std::string cmd =
          env + python + " " + script + " --device " + device_name + " --batch " + std::to_string(B) +
          " --seq " + std::to_string(T) + " --d-model " + std::to_string(d_model) + " --heads " +
          std::to_string(heads) + " --ff " + std::to_string(ff) + " --dropout " + std::to_string(dropout) +
          (no_padding ? " --no-padding" : "") + " --steps " + std::to_string(steps) + " --warmup " +
          std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      if (!p) continue;
      const std::string env_name = env.empty() ? "" : env.substr(0, env.size() - 1);
      char line[1024], version[128], blas[64];
      double f_ms = 0, fb_ms = 0;
      while (std::fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "peer: %lf %lf %127s", &f_ms, &fb_ms, version) == 3) {
          if (peer_fwd == 0 || f_ms * 1e-3 < peer_fwd) peer_fwd = f_ms * 1e-3, env_fwd = env_name;
          if (peer_fb == 0 || fb_ms * 1e-3 < peer_fb) peer_fb = fb_ms * 1e-3, env_fb = env_name;
          peer_version = version;
          std::printf("torch  %s%s%s: forward %.3f ms, fwd+bwd %.3f ms\n", version, env_name.empty() ? "" : " ",
                      env_name.c_str(), f_ms, fb_ms);
        } else if (std::sscanf(line, "peer_blas: %63s", blas) == 1) {
          peer_blas = blas;
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(p);
    }
    if (peer_version == "none") std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }
  auto ratio = [](double peer_s, double ember_s) { return peer_s > 0 && ember_s > 0 ? peer_s / ember_s : 0.0; };
  const double r_fwd = ratio(peer_fwd, fwd), r_fb = ratio(peer_fb, fwd_bwd);
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
