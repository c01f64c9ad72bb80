// CPU 3x3 convolution: the Winograd F(2x2, 3x3) path against im2col + GEMM, the same op
// with ops::set_conv_winograd(false), in the same run (Note [Winograd convolution],
// ops/cpu/winograd.cpp). Times the three passes (forward, input gradient, weight gradient)
// through the ops front, as the autograd backward calls them, f32, on every OpenMP thread.
// Samples of the two paths alternate (a noisy neighbour slows both alike); each time is the
// median of --samples. Also prints the largest difference between the two paths' outputs
// relative to the output's largest magnitude (the Winograd rounding, ~1e-6 in f32).
//
// Shapes: N,C,H,W,O,padding; the default is the MNIST CNN's second convolution and two
// ResNet-style layers.
//
//   bench_conv [--shapes "128,32,26,26,64,0;32,64,56,56,64,1"] [--samples 7]
//              [--only winograd|im2col] [--pass forward|"grad in"|"grad w"]
//              (one path or pass, to profile it: no speedups with --only)
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>
#include <ember/ops/conv.h>
#include "../examples/common/cli_checks.h"

using namespace ember;

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Case {
  int64_t N, C, H, W, O, pad;
};

std::vector<Case> parse_cases(const std::string& s) {
  std::vector<Case> out;
  std::stringstream all(s);
  std::string one;
  while (std::getline(all, one, ';')) {
    Case c{};
    char sep;
    std::stringstream f(one);
    if (!(f >> c.N >> sep >> c.C >> sep >> c.H >> sep >> c.W >> sep >> c.O >> sep >> c.pad))
      throw std::runtime_error("bench_conv: bad shape '" + one + "' (want N,C,H,W,O,padding)");
    out.push_back(c);
  }
  return out;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < av.size(); ++i) {
    diff = std::max(diff, std::abs(av[i] - bv[i]));
    scale = std::max(scale, std::abs(bv[i]));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "128,32,26,26,64,0;32,64,56,56,64,1;16,128,28,28,128,1";
  int samples = 7;
  std::string only, pass_name;
  CLI::App app{"CPU 3x3 convolution: Winograd F(2x2,3x3) vs im2col + GEMM"};
  app.add_option("--shapes", shapes, "N,C,H,W,O,padding;...");
  app.add_option("--samples", samples)->check(ember::examples::PositiveNumber);
  app.add_option("--only", only, "time one path only (for a profiler)")->check(CLI::IsMember({"winograd", "im2col"}));
  app.add_option("--pass", pass_name, "time one pass only")->check(CLI::IsMember({"forward", "grad in", "grad w"}));
  CLI11_PARSE(app, argc, argv);

  std::printf("%-26s %-8s %10s %10s %8s %10s\n", "x -> O (pad)", "pass", "im2col ms", "winograd ms", "speedup",
              "rel diff");
  std::string json = "[";
  double total_im2col = 0, total_winograd = 0;
  for (const Case& c : parse_cases(shapes)) {
    const ops::Conv2dParams p{{1, 1}, {c.pad, c.pad}, {1, 1}, 1};
    Tensor x = randn({c.N, c.C, c.H, c.W});
    Tensor w = randn({c.O, c.C, 3, 3}).mul(1.0 / std::sqrt(9.0 * double(c.C)));
    Tensor gy = randn({c.N, c.O, c.H + 2 * c.pad - 2, c.W + 2 * c.pad - 2});
    const char* names[3] = {"forward", "grad in", "grad w"};
    auto run = [&](int pass) {
      if (pass == 0) return ops::conv2d(x, w, Tensor(), p);
      if (pass == 1) return ops::conv2d_backward_input(gy, w, x.sizes(), p);
      return ops::conv2d_backward_weight(gy, x, w.sizes(), p);
    };
    for (int pass = 0; pass < 3; ++pass) {
      if (!pass_name.empty() && pass_name != names[pass]) continue;
      std::vector<double> t_on, t_off;
      Tensor out_on, out_off;
      for (int s = 0; s < samples + 1; ++s) {  // the first sample of each is a warm-up
        for (bool on : {true, false}) {
          if (!only.empty() && on != (only == "winograd")) continue;
          ops::set_conv_winograd(on);
          const auto t0 = Clock::now();
          Tensor out = run(pass);
          const double ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
          if (s == 0) continue;
          (on ? t_on : t_off).push_back(ms);
          (on ? out_on : out_off) = out;
        }
      }
      ops::set_conv_winograd(true);
      if (!only.empty()) {
        const double ms = median(only == "winograd" ? t_on : t_off);
        std::printf("%-26s %-8s %s %.2f ms\n", "", names[pass], only.c_str(), ms);
        continue;
      }
      const double on = median(t_on), off = median(t_off), diff = max_rel_diff(out_on, out_off);
      total_im2col += off;
      total_winograd += on;
      char label[64];
      std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld->%lld (%lld)", (long long)c.N, (long long)c.C,
                    (long long)c.H, (long long)c.W, (long long)c.O, (long long)c.pad);
      std::printf("%-26s %-8s %10.2f %10.2f %7.2fx %10.1e\n", label, names[pass], off, on, off / on, diff);
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s{\"shape\": \"%s\", \"pass\": \"%s\", \"im2col_ms\": %.3f, \"winograd_ms\": %.3f, "
                    "\"speedup\": %.3f, \"rel_diff\": %.2e}",
                    json.size() > 1 ? ", " : "", label, names[pass], off, on, off / on, diff);
      json += buf;
    }
  }
  std::printf("result: {\"bench\": \"conv_cpu\", \"threads\": %d, \"speedup_total\": %.3f, \"rows\": %s]}\n",
              omp_get_max_threads(), total_im2col / total_winograd, json.c_str());
  return 0;
}
