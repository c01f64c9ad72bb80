// bench_sort: ember's topk, sort and cumsum against PyTorch in the same run
// (bench/peers/sort_peer.py): topk(k=50) of [64, 50304] (sampling from GPT-2 logits), sort
// of [4096, 1024] along the last dim, cumsum of [4096, 1024] along the last dim, and one long
// row each: sort of [1, 4194304], cumsum of [1, 16777216] (a flattened tensor); f32, forward
// only (under NoGradGuard: these are index-producing ops whose backward is a scatter).
//
//   build/bin/bench_sort [--device cpu|cuda] [--steps 10] [--warmup 2] [--threads N]
//                        [--python PY] [--no-peer]
//
// Timing: on the CPU the median of --steps timed calls; on CUDA, CUDA events around
// back-to-back calls, the median of --steps batches (bench/gpu_timing.h); the peer does the same.
// Ends with one `result: {json}` line whose "ratios" are {"<case>": ember speed / peer speed}
// (> 1: ember faster).

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
  std::string name;  // as the peer names it
  Shape x;
  std::function<void(const Tensor&)> op;
};

}  // namespace

int main(int argc, char** argv) {
  bench::PeerArgs a;
  CLI::App app{"topk / sort / cumsum: ember vs PyTorch"};
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;
  const Device dev = a.device();
  const int steps = a.steps, warmup = a.warmup, threads = a.threads;
  const std::string& device_name = a.device_name;

  const std::vector<Case> cases = {
      {"topk50_64x50304", {64, 50304}, [](const Tensor& x) { (void)topk(x, 50); }},
      {"sort_4096x1024", {4096, 1024}, [](const Tensor& x) { (void)sort(x); }},
      {"cumsum_4096x1024", {4096, 1024}, [](const Tensor& x) { (void)cumsum(x, -1); }},
      // One long row (a flattened tensor): on CUDA the cases a block per row leaves on one SM.
      {"sort_1x4194304", {1, 4194304}, [](const Tensor& x) { (void)sort(x); }},
      {"cumsum_1x16777216", {1, 16777216}, [](const Tensor& x) { (void)cumsum(x, -1); }},
  };

  std::printf("sort family on %s, f32, %d threads\n", device_name.c_str(), threads);
  std::vector<double> e(cases.size()), p(cases.size());
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Tensor x = randn(cases[i].x, TensorOptions(DType::f32).device(dev));
    NoGradGuard ng;
    e[i] = bench::time_calls([&] { cases[i].op(x); }, dev, steps, warmup);
    std::printf("ember  %-20s %9.3f ms\n", cases[i].name.c_str(), 1e3 * e[i]);
    std::fflush(stdout);
  }

  std::string peer_version = "none";
  if (!a.no_peer) {
    bench::run_peer(a.python, "sort_peer.py", bench::peer_common_args(a), [&](const char* line) {
      char name[128], version[128];
      double ms = 0;
      if (std::sscanf(line, "peer: %127s %lf %127s", name, &ms, version) != 3) return false;
      for (size_t i = 0; i < cases.size(); ++i)
        if (cases[i].name == name) p[i] = ms * 1e-3;
      peer_version = version;
      std::printf("torch  %-20s %9.3f ms\n", name, ms);
      return true;
    });
    bench::say_peer_missing(peer_version, a.python);
  }

  std::string ratios, cases_json;
  for (size_t i = 0; i < cases.size(); ++i) {
    const double r = bench::speed_ratio(p[i], e[i]);
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
