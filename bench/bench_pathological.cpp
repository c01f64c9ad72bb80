// bench_pathological: shapes that defeat a naive CUDA kernel, each timed against a
// device-to-device copy of the bytes it must move (the ceiling of a memory-bound op, measured
// in the same run), with a bound: an op slower than kBound times its copy fails the row.
// These are the shapes where one thread used to get a whole line or a whole run of equal
// indices (Note [ordered index sums], ops/cuda/index.cu), or a reduction had too little
// parallelism along the reduced dim:
//   scatter_add 1-d: 10M sources into 1000 bins        (one line: all sources in one thread)
//   embedding backward, 50% padding: [16, 1024] tokens  (one run of 8192 equal indices)
//   softmax over dim 0 of [1e5, 4096]                    (rows strided by 4096)
//   sum(-1) of [1e7, 3]                                  (ten million 3-element rows)
// Without a CUDA device it says so and prints a skipped result line.
//
//   build/bin/bench_pathological [--samples N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <ember/ops/index.h>

#include "gpu_timing.h"

using namespace ember;
using ember::bench::time_gpu;

namespace {

// An op within this factor of a copy of its bytes is not pathological any more (memory-bound
// kernels of ember reach 40-90% of the copy's bandwidth; the naive versions were 100-10000x).
constexpr double kBound = 10.0;

struct Case {
  std::string name;
  double bytes;  // the least the op must read and write
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  int samples = 5;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[++i]));
  if (!cuda::is_available()) {
    std::printf("bench_pathological: no CUDA device, nothing to measure\n");
    std::printf("result: {\"bench\": \"pathological\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  const Device dev = Device::cuda(0);
  manual_seed(0);
  NoGradGuard no_grad;
  // scatter_add: 10M f32 sources and i64 indices into 1000 bins.
  const int64_t ns = 10'000'000;
  Tensor src = randn({ns}, dev), idx = randint(0, 1000, {ns}, TensorOptions(DType::i64).device(dev));
  Tensor bins = zeros({1000}, dev);
  // embedding backward: GPT-2's vocabulary and width, half the tokens one padding id.
  Tensor tok = randint(0, 50257, {16, 1024}, TensorOptions(DType::i64).device(dev));
  tok.narrow(1, 512, 512).fill_(50256);
  Tensor g = randn({16, 1024, 768}, dev);
  // softmax over dim 0 and a sum over a short last dim.
  Tensor tall = randn({100'000, 4096}, dev);
  Tensor thin = randn({10'000'000, 3}, dev);
  Tensor out;
  std::vector<Case> cases = {
      {"scatter_add 1-d 10M -> 1000", 12.0 * double(ns), [&] { out = scatter_add(bins, 0, idx, src); }},
      {"embedding backward [16, 1024] x 768, 50% padding", 4.0 * double(g.numel()) + 8.0 * 16 * 1024 +
                                                              4.0 * 50257 * 768,
       [&] { out = ops::embedding_backward(g, tok, 50257); }},
      {"softmax dim 0 of [1e5, 4096]", 8.0 * double(tall.numel()), [&] { out = softmax(tall, 0); }},
      {"sum(-1) of [1e7, 3]", 4.0 * double(thin.numel()) + 4.0 * 10'000'000, [&] { out = thin.sum({1}); }},
  };
  std::string json = "{\"bench\": \"pathological\", \"device\": \"" + cuda::device_name(0) + "\", \"bound\": " +
                     std::to_string(kBound) + ", \"rows\": [";
  bool all_within = true;
  std::printf("%-52s %10s %10s %10s %8s\n", "op", "ms", "GB/s", "copy ms", "x copy");
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const int64_t copy_elems = int64_t(c.bytes / 8.0);  // read + write of half the bytes each
    Tensor a = empty({copy_elems}, dev), b = empty({copy_elems}, dev);
    const double t_copy = time_gpu([&] { b.copy_(a); }, samples, 1);
    const double t = time_gpu(c.run, samples, 1);
    const double ratio = t / t_copy;
    const bool within = ratio <= kBound;
    all_within = all_within && within;
    std::printf("%-52s %10.3f %10.1f %10.3f %8.2f%s\n", c.name.c_str(), t * 1e3, c.bytes / t / 1e9, t_copy * 1e3,
                ratio, within ? "" : "  OVER THE BOUND");
    json += std::string(i ? ", " : "") + "{\"op\": \"" + c.name + "\", \"ms\": " + std::to_string(t * 1e3) +
            ", \"copy_ms\": " + std::to_string(t_copy * 1e3) + ", \"ratio_to_copy\": " + std::to_string(ratio) +
            ", \"within_bound\": " + (within ? "true" : "false") + "}";
  }
  json += std::string("], \"all_within_bound\": ") + (all_within ? "true" : "false") + "}";
  std::printf("result: %s\n", json.c_str());
  return all_within ? 0 : 1;
}
