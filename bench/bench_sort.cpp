// bench_sort: ember's topk, sort and cumsum against PyTorch in the same run
// (bench/peers/sort_peer.py): topk(k=50) of [64, 50304] (sampling from GPT-2 logits), sort
// of [4096, 1024] along the last dim, cumsum of [4096, 1024] along the last dim; f32,
// forward only (under NoGradGuard: these are index-producing ops whose backward is a scatter).
//
//   build/bin/bench_sort [--device cpu|cuda] [--steps 10] [--warmup 2] [--threads N]
//                        [--python PY] [--no-peer]
//
// Timing: on the CPU the median of --steps timed calls; on CUDA, CUDA events around
// back-to-back calls, the median of --steps batches (bench/gpu_timing.h); the peer does the same.
// Ends with one `result: {json}` line whose "ratios" are {"<case>": ember speed / peer speed}
// (> 1: ember faster).
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
  std::string name;  // as the peer names it
  Shape x;
  std::function<void(const Tensor&)> op;
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu";
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int steps = 10, warmup = 2, threads = omp_get_max_threads();
  bool no_peer = false;
  CLI::App app{"topk / sort / cumsum: ember vs PyTorch"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for both sides")->check(CLI::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();

  const std::vector<Case> cases = {
      {"topk50_64x50304", {64, 50304}, [](const Tensor& x) { (void)topk(x, 50); }},
      {"sort_4096x1024", {4096, 1024}, [](const Tensor& x) { (void)sort(x); }},
      {"cumsum_4096x1024", {4096, 1024}, [](const Tensor& x) { (void)cumsum(x, -1); }},
  };

  std::printf("sort family on %s, f32, %d threads\n", device_name.c_str(), threads);
  std::vector<double> e(cases.size()), p(cases.size());
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Tensor x = randn(cases[i].x, TensorOptions(DType::f32).device(dev));
    NoGradGuard ng;
    e[i] = time_calls([&] { cases[i].op(x); }, dev, steps, warmup);
    std::printf("ember  %-20s %9.3f ms\n", cases[i].name.c_str(), 1e3 * e[i]);
    std::fflush(stdout);
  }

  std::string peer_version = "none";
  if (!no_peer) {
    const std::string cmd = python + " " + std::string(EMBER_SOURCE_DIR) + "/bench/peers/sort_peer.py --device " +
                            device_name + " --steps " + std::to_string(steps) + " --warmup " +
                            std::to_string(warmup) + " --threads " + std::to_string(threads) + " 2>&1";
    if (FILE* pp = popen(cmd.c_str(), "r")) {
      char line[1024], name[128], version[128];
      double ms = 0;
      while (std::fgets(line, sizeof line, pp)) {
        if (std::sscanf(line, "peer: %127s %lf %127s", name, &ms, version) == 3) {
          for (size_t i = 0; i < cases.size(); ++i)
            if (cases[i].name == name) p[i] = ms * 1e-3;
          peer_version = version;
          std::printf("torch  %-20s %9.3f ms\n", name, ms);
        } else {
          std::fputs(line, stdout);
        }
      }
      pclose(pp);
    }
    if (peer_version == "none") std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
  }

  std::string ratios, cases_json;
  for (size_t i = 0; i < cases.size(); ++i) {
    const double r = p[i] > 0 && e[i] > 0 ? p[i] / e[i] : 0.0;
    std::printf("ratio  %-20s %.3f (ember/peer speed)\n", cases[i].name.c_str(), r);
    ratios += str(i ? ", " : "", "\"", cases[i].name, "\": ", r);
    cases_json += str(i ? ", " : "", "{\"case\": \"", cases[i].name, "\", \"ember_ms\": ", 1e3 * e[i],
                      ", \"peer_ms\": ", 1e3 * p[i], "}");
  }
  std::printf("result: {\"bench\": \"sort\", \"device\": \"%s\", \"dtype\": \"f32\", \"threads\": %d, \"peer\": \"torch %s\", "
              "\"ratios\": {%s}, \"cases\": [%s]}\n",
              device_name.c_str(), threads, peer_version.c_str(), ratios.c_str(), cases_json.c_str());
  return 0;
}
