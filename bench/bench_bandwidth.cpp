// bench_bandwidth: memory-bound kernels on the GPU in GB/s against a device-to-device copy of
// the same bytes in the same run (the ceiling a memory-bound kernel can approach): elementwise
// add (contiguous and broadcast), softmax and layer_norm forward over rows. Without a CUDA
// device it says so and prints a skipped result line.
//
//   build/bin/bench_bandwidth [--samples N]
//
// Bytes counted are the minimum each op must move (read inputs once, write outputs once).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

#include "gpu_timing.h"

using namespace ember;
using ember::bench::time_gpu;

namespace {

struct Case {
  std::string name;
  double bytes;
  std::function<void()> run;
};

}  // namespace

int main(int argc, char** argv) {
  int samples = 9;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[++i]));
  if (!cuda::is_available()) {
    std::printf("bench_bandwidth: no CUDA device, nothing to measure\n");
    std::printf("result: {\"bench\": \"bandwidth\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  const Device dev = Device::cuda(0);
  manual_seed(0);
  const int64_t n = int64_t(1) << 26;  // 64M elements: far beyond L2
  Tensor x = randn({n}, dev), y = randn({n}, dev), out = empty({n}, dev);
  Tensor xb = x.to(DType::bf16), yb = y.to(DType::bf16);
  Tensor rows = randn({n / 4096, 4096}, dev), rows_b = rows.to(DType::bf16);
  Tensor wide = randn({n / 50304 + 1, 50304}, dev);
  Tensor ln_x = randn({n / 768, 768}, dev), ln_w = randn({768}, dev), ln_b = randn({768}, dev);
  Tensor bias_row = randn({4096}, dev);
  NoGradGuard no_grad;
  std::vector<Case> cases = {
      {"copy f32", 8.0 * double(n), [&] { out.copy_(x); }},
      {"add f32", 12.0 * double(n), [&] { out = x + y; }},
      {"add bf16", 6.0 * double(n), [&] { out = xb + yb; }},
      {"add f32 broadcast row", 8.0 * double(n), [&] { out = rows + bias_row; }},
      {"softmax f32 [16K, 4096]", 8.0 * double(rows.numel()), [&] { out = softmax(rows, 1); }},
      {"softmax bf16 [16K, 4096]", 4.0 * double(rows.numel()), [&] { out = softmax(rows_b, 1); }},
      {"log_softmax f32 [1335, 50304]", 8.0 * double(wide.numel()), [&] { out = log_softmax(wide, 1); }},
      {"layer_norm f32 [87K, 768]", 8.0 * double(ln_x.numel()),
       [&] { out = layer_norm(ln_x, {768}, ln_w, ln_b); }},
  };
  std::printf("%-32s %10s %10s %8s\n", "op", "ms", "GB/s", "/copy");
  double copy_gbs = 0;
  std::string json;
  for (const Case& c : cases) {
    const double s = time_gpu(c.run, samples);
    const double gbs = c.bytes / s * 1e-9;
    if (copy_gbs == 0) copy_gbs = gbs;
    std::printf("%-32s %10.3f %10.1f %8.3f\n", c.name.c_str(), s * 1e3, gbs, gbs / copy_gbs);
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s\"%s\": {\"gbs\": %.1f, \"ratio_copy\": %.3f}", json.empty() ? "" : ", ",
                  c.name.c_str(), gbs, gbs / copy_gbs);
    json += buf;
  }
  std::printf("result: {\"bench\": \"bandwidth\", \"device\": \"%s\", %s}\n", cuda::device_name(0).c_str(),
              json.c_str());
  return 0;
}
