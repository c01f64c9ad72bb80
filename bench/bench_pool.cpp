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
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>

#include "bench_harness.h"

using namespace ember;

int main(int argc, char** argv) {
  bench::PeerArgs a;
  CLI::App app{"Pooling / resampling forward and backward: ember vs PyTorch"};
  if (const int rc = bench::parse_peer_bench_args(app, a, argc, argv); rc >= 0) return rc;

  std::vector<bench::UnaryCase> cases;
  for (const Shape& s : {Shape{128, 64, 7, 7}, Shape{128, 256, 14, 14}}) {
    const std::string dims = str(s[0], "x", s[1], "x", s[2], "x", s[3]);
    cases.push_back({"avg3s2_" + dims, s, [](const Tensor& x) { return avg_pool2d(x, {3, 3}, {2, 2}, {1, 1}); }});
    cases.push_back({"gap_" + dims, s, [](const Tensor& x) { return adaptive_avg_pool2d(x, 1); }});
    cases.push_back({"bilinear2_" + dims, s, [](const Tensor& x) {
                       return interpolate(x, {.scale_factor = {{2.0, 2.0}}, .mode = "bilinear"});
                     }});
  }
  return bench::run_unary_fwd_bwd("pool", "pooling", "pool_peer.py", cases, a);
}
