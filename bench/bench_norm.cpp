// bench_norm: ember's fused normalization ops, forward and forward+backward, against PyTorch
// in the same run (bench/peers/norm_peer.py) with the same thread count.
//
//   build/bin/bench_norm [--device cpu|cuda] [--steps 20] [--warmup 3] [--threads N]
//                        [--python PY] [--no-peer]
//
// Cases (f32): BatchNorm2d in training mode (batch statistics, running-stat update) at
// [128, 32, 28, 28] and [128, 64, 14, 14] (the ResNet-on-MNIST shapes), GroupNorm(8 groups)
// at [128, 64, 14, 14], RMSNorm over 768 at [4096, 768] (the peer: torch 1.13 has no
// rms_norm, so its composite x * rsqrt(mean(x^2) + eps) * w, which is what torch 2.4 runs on
// the CPU too). Forward under no_grad; forward+backward with x, weight (and bias) requiring
// grad and a fixed output gradient, gradients reset every call.
// Timing: each call timed, the median of --steps (CUDA: events, bench/gpu_timing.h).
// Ends with one `result: {json}` line; "ratios" are ember speed / peer speed (> 1: faster).
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

struct Case {
  std::string name;  // kind:shape, as the peer prints it
  char kind;         // 'b' batch norm, 'g' group norm, 'r' rms norm
  Shape shape;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int steps = 20, warmup = 3, threads = omp_get_max_threads();
  bool no_peer = false;
  CLI::App app{"Fused normalization forward/backward: ember vs PyTorch"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for both sides")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

  const std::vector<Case> cases = {{"bn2d_128x32x28x28", 'b', {128, 32, 28, 28}},
                                   {"bn2d_128x64x14x14", 'b', {128, 64, 14, 14}},
                                   {"gn8_128x64x14x14", 'g', {128, 64, 14, 14}},
                                   {"rms_4096x768", 'r', {4096, 768}}};
  std::printf("normalization on %s, f32, %d threads\n", device_name.c_str(), threads);
  std::vector<double> e_fwd(cases.size()), e_fb(cases.size()), p_fwd(cases.size()), p_fb(cases.size());
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int64_t C = c.kind == 'r' ? c.shape[1] : c.shape[1];
    const Tensor x = randn(c.shape, dev), dy = randn(c.shape, dev);
    Tensor w = ones({C}, dev), b = zeros({C}, dev), rm = zeros({C}, dev), rv = ones({C}, dev);
    auto run = [&](const Tensor& xv, const Tensor& wv, const Tensor& bv) {
      switch (c.kind) {
        case 'b': return batch_norm(xv, rm, rv, wv, bv, true, 0.1, 1e-5);
        case 'g': return group_norm(xv, 8, wv, bv, 1e-5);
        default: return rms_norm(xv, {C}, wv, 1e-6);
      }
    };
    e_fwd[i] = time_calls(
        [&] {
          NoGradGuard no_grad;
          (void)run(x, w, b);
        },
        dev, steps, warmup);
    Tensor xg = x.detach().clone().requires_grad_(), wg = w.detach().clone().requires_grad_(),
           bg = b.detach().clone().requires_grad_();
    e_fb[i] = time_calls(
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

  std::string peer_version = "none";
  if (!no_peer) {
    const std::string cmd = python + " " + std::string(EMBER_SOURCE_DIR) + "/bench/peers/norm_peer.py --device " +
                            device_name + " --steps " + std::to_string(steps) + " --warmup " +
                            std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char line[1024], name[128], version[128];
      double fwd_ms = 0, fb_ms = 0;
      while (std::fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "peer: %127s %lf %lf %127s", name, &fwd_ms, &fb_ms, version) == 4) {
          for (size_t i = 0; i < cases.size(); ++i)
            if (cases[i].name == name) p_fwd[i] = fwd_ms * 1e-3, p_fb[i] = fb_ms * 1e-3;
          peer_version = version;
          std::printf("torch  %-20s forward %8.3f ms   fwd+bwd %8.3f ms (%s)\n", name, fwd_ms, fb_ms, version);
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(p);
    }
    if (peer_version == "none") std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }

  auto ratio = [](double peer_s, double ember_s) { return peer_s > 0 && ember_s > 0 ? peer_s / ember_s : 0.0; };
  std::string cases_json, ratios_json;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& n = cases[i].name;
    const double rf = ratio(p_fwd[i], e_fwd[i]), rb = ratio(p_fb[i], e_fb[i]);
    std::printf("ratio  %-20s forward %.3f, fwd+bwd %.3f (ember/peer speed)\n", n.c_str(), rf, rb);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\": \"%s\", \"ember_fwd_ms\": %.4f, \"ember_fwd_bwd_ms\": %.4f, "
                  "\"peer_fwd_ms\": %.4f, \"peer_fwd_bwd_ms\": %.4f}",
                  i ? ", " : "", n.c_str(), 1e3 * e_fwd[i], 1e3 * e_fb[i], 1e3 * p_fwd[i], 1e3 * p_fb[i]);
    cases_json += buf;
    std::snprintf(buf, sizeof buf, "%s\"%s_fwd\": %.3f, \"%s_fwd_bwd\": %.3f", i ? ", " : "", n.c_str(), rf,
                  n.c_str(), rb);
    ratios_json += buf;
  }
  std::printf("result: {\"bench\": \"norm\", \"device\": \"%s\", \"dtype\": \"f32\", \"threads\": %d, "
              "\"peer\": \"torch %s\", \"cases\": [%s], \"ratios\": {%s}}\n",
              device_name.c_str(), threads, peer_version.c_str(), cases_json.c_str(), ratios_json.c_str());
  return 0;
}
