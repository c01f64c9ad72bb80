// bench_pool: ember's pooling and resampling kernels, forward and forward+backward, against
// PyTorch in the same run (bench/peers/pool_peer.py): avg_pool2d 3x3 / stride 2 / padding 1,
// adaptive_avg_pool2d(1) (the ResNet head) and interpolate(bilinear, scale 2), each at
// [128, 64, 7, 7] and [128, 256, 14, 14] (ResNet's late-stage activations).
//
//   build/bin/bench_pool [--device cpu|cuda] [--steps 10] [--warmup 2] [--threads N]
//                        [--python PY] [--no-peer]
//
// Timing as bench_attention: on the CPU the median of --steps timed calls; on CUDA, CUDA events
// around back-to-back calls (bench/gpu_timing.h). Forward under NoGradGuard; forward+backward
// with the input requiring grad and a fixed output gradient, the input gradient reset every
// call. f32. Ends with one `result: {json}` line whose "ratios" are
// {"<case>_fwd" | "<case>_fwd_bwd": ember speed / peer speed} (> 1: ember faster).
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
  std::string name;  // <op>_<N>x<C>x<H>x<W>, as the peer names it
  Shape x;
  std::function<Tensor(const Tensor&)> op;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int steps = 10, warmup = 2, threads = omp_get_max_threads();
  bool no_peer = false;
  CLI::App app{"Pooling / resampling forward and backward: ember vs PyTorch"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for both sides")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

  std::vector<Case> cases;
  for (const Shape& s : {Shape{128, 64, 7, 7}, Shape{128, 256, 14, 14}}) {
    const std::string dims = str(s[0], "x", s[1], "x", s[2], "x", s[3]);
    cases.push_back({"avg3s2_" + dims, s, [](const Tensor& x) { return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }});
    cases.push_back({"gap_" + dims, s, [](const Tensor& x) { return adaptive_avg_pool2d(x, 1); }});
    cases.push_back({"bilinear2_" + dims, s, [](const Tensor& x) {
                       return interpolate(x, {.scale_factor = {{2.0, 2.0}}, .mode = "bilinear"});
                     }});
  }

  std::printf("pooling on %s, f32, %d threads\n", device_name.c_str(), threads);
  std::vector<double> e_fwd(cases.size()), e_fb(cases.size()), p_fwd(cases.size()), p_fb(cases.size());
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Tensor x = randn(c.x, TensorOptions(DType::f32).device(dev));
    Tensor y0;
    {
      NoGradGuard ng;
      y0 = c.op(x);
    }
    const Tensor dy = randn(y0.sizes(), TensorOptions(DType::f32).device(dev));
    e_fwd[i] = time_calls([&] {
      NoGradGuard ng;
      (void)c.op(x);
    }, dev, steps, warmup);
    Tensor xg = x.detach().clone().requires_grad_();
    e_fb[i] = time_calls([&] {
      c.op(xg).backward(dy);
      xg.set_grad(Tensor());
    }, dev, steps, warmup);
    std::printf("ember  %-26s forward %9.3f ms   fwd+bwd %9.3f ms\n", c.name.c_str(), 1e3 * e_fwd[i], 1e3 * e_fb[i]);
    std::fflush(stdout);
  }

  std::string peer_version = "none";
  if (!no_peer) {
    const std::string cmd = python + " " + std::string(EMBER_SOURCE_DIR) + "/bench/peers/pool_peer.py --device " +
                            device_name + " --steps " + std::to_string(steps) + " --warmup " +
                            std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char line[1024], name[128], version[128];
      double f = 0, fb = 0;
      while (std::fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "peer: %127s %lf %lf %127s", name, &f, &fb, version) == 4) {
          for (size_t i = 0; i < cases.size(); ++i)
            if (cases[i].name == name) p_fwd[i] = f * 1e-3, p_fb[i] = fb * 1e-3;
          peer_version = version;
          std::printf("torch  %-26s forward %9.3f ms   fwd+bwd %9.3f ms\n", name, f, fb);
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(p);
    }
    if (peer_version == "none") std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }

  auto ratio = [](double peer_s, double ember_s) { return peer_s > 0 && ember_s > 0 ? peer_s / ember_s : 0.0; };
  std::string ratios, cases_json;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string& n = cases[i].name;
    std::printf("ratio  %-26s forward %.3f, fwd+bwd %.3f (ember/peer speed)\n", n.c_str(), ratio(p_fwd[i], e_fwd[i]),
                ratio(p_fb[i], e_fb[i]));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s\"%s_fwd\": %.3f, \"%s_fwd_bwd\": %.3f", i ? ", " : "", n.c_str(),
                  ratio(p_fwd[i], e_fwd[i]), n.c_str(), ratio(p_fb[i], e_fb[i]));
    ratios += buf;
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\": \"%s\", \"ember_fwd_ms\": %.4f, \"ember_fwd_bwd_ms\": %.4f, \"peer_fwd_ms\": %.4f, "
                  "\"peer_fwd_bwd_ms\": %.4f}",
                  i ? ", " : "", n.c_str(), 1e3 * e_fwd[i], 1e3 * e_fb[i], 1e3 * p_fwd[i], 1e3 * p_fb[i]);
    cases_json += buf;
  }
  std::printf("result: {\"bench\": \"pool\", \"device\": \"%s\", \"dtype\": \"f32\", \"threads\": %d, \"peer\": \"torch %s\", "
              "\"ratios\": {%s}, \"cases\": [%s]}\n",
              device_name.c_str(), threads, peer_version.c_str(), ratios.c_str(), cases_json.c_str());
  return 0;
}
