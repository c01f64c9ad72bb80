// CPU convolution: the three algorithms of Note [CPU convolution algorithms] (ops/cpu/conv.cpp)
// on the same shapes in the same run: im2col + GEMM, Winograd F(2x2, 3x3) (3x3 stride-1 shapes)
// and oneDNN (where the build has it), each forced in turn, beside the measured choice the
// autotune makes ("auto"). Times the three passes (forward, input gradient, weight gradient)
// through the ops front, as the autograd backward calls them, f32, on every OpenMP thread.
// Samples of the algorithms alternate (a noisy neighbour slows all alike); each time is the
// median of --samples. Also prints the largest difference of each algorithm's output from
// im2col's relative to the output's largest magnitude (Winograd's rounding: ~1e-6 in f32).
//
// Shapes: N,C,H,W,O,padding[,kernel,stride]; the default is the MNIST CNN's second
// convolution, two ResNet-style layers and the resnet example's 16-channel 28x28 layer.
//
//   bench_conv [--shapes "128,32,26,26,64,0;32,64,56,56,64,1"] [--samples 7]
//              [--only im2col|winograd|onednn|auto] [--pass forward|"grad in"|"grad w"]
//              (one algorithm or pass, to profile it) [--memory-format contiguous|channels_last]
//
// --memory-format channels_last: the activations (x, and the output gradient) in NHWC (Note
// [Memory format]), which oneDNN reads directly and Winograd and im2col through NCHW copies.
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
  int64_t N, C, H, W, O, pad, kernel = 3, stride = 1;
};

std::vector<Case> parse_cases(const std::string& s) {
  std::vector<Case> out;
  std::stringstream all(s);
  std::string one;
  while (std::getline(all, one, ';')) {
    std::vector<int64_t> v;
    std::stringstream f(one);
    std::string field;
    while (std::getline(f, field, ',')) v.push_back(std::stoll(field));
    if (v.size() != 6 && v.size() != 8)
      throw std::runtime_error("bench_conv: bad shape '" + one + "' (want N,C,H,W,O,padding[,kernel,stride])");
    Case c{v[0], v[1], v[2], v[3], v[4], v[5]};
    if (v.size() == 8) c.kernel = v[6], c.stride = v[7];
    out.push_back(c);
  }
  return out;
}

// Forces one algorithm (or the measured choice, "auto") for the next call.
void use(const std::string& algorithm) {
  ops::set_conv_winograd(algorithm == "winograd" || algorithm == "auto");
  ops::set_conv_onednn(algorithm == "onednn" || algorithm == "auto");
  ops::set_conv_autotune(algorithm == "auto");
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
  std::string shapes = "128,32,26,26,64,0;32,64,56,56,64,1;16,128,28,28,128,1;128,16,28,28,16,1";
  int samples = 7;
  std::string only, pass_name, memory_format = "contiguous";
  CLI::App app{"CPU convolution: im2col + GEMM vs Winograd F(2x2,3x3) vs oneDNN vs the autotune's choice"};
  app.add_option("--shapes", shapes, "N,C,H,W,O,padding[,kernel,stride];...");
  app.add_option("--samples", samples)->check(ember::examples::PositiveNumber);
  app.add_option("--only", only, "time one algorithm only (for a profiler)")
      ->check(CLI::IsMember({"im2col", "winograd", "onednn", "auto"}));
  app.add_option("--pass", pass_name, "time one pass only")->check(CLI::IsMember({"forward", "grad in", "grad w"}));
  app.add_option("--memory-format", memory_format, "the activations' layout")
      ->check(CLI::IsMember({"contiguous", "channels_last"}));
  CLI11_PARSE(app, argc, argv);
  const MemoryFormat format =
      memory_format == "channels_last" ? MemoryFormat::channels_last : MemoryFormat::contiguous;

  const bool onednn = !ops::onednn_version().empty();
  std::vector<std::string> algorithms = {"im2col", "winograd"};
  if (onednn) algorithms.push_back("onednn");
  algorithms.push_back("auto");
  if (!only.empty()) algorithms = {only};
  std::printf("%s, %d threads, %s activations\n", onednn ? ops::onednn_version().c_str() : "no oneDNN in this build",
              omp_get_max_threads(), memory_format.c_str());
  std::printf("%-30s %-8s", "x -> O (pad, kernel, stride)", "pass");
  for (const std::string& a : algorithms) std::printf(" %9s ms", a.c_str());
  std::printf("  %-24s %s\n", "auto chose", "rel diff (winograd, onednn)");
  std::string json = "[";
  std::vector<double> totals(algorithms.size(), 0.0);
  for (const Case& c : parse_cases(shapes)) {
    const ops::Conv2dParams p{{c.stride, c.stride}, {c.pad, c.pad}, {1, 1}, 1};
    Tensor x = randn({c.N, c.C, c.H, c.W}).contiguous(format);
    Tensor w = randn({c.O, c.C, c.kernel, c.kernel}).mul(1.0 / std::sqrt(double(c.kernel * c.kernel * c.C)));
    const int64_t Ho = ops::conv_output_size(c.H, c.kernel, c.stride, c.pad, 1);
    const int64_t Wo = ops::conv_output_size(c.W, c.kernel, c.stride, c.pad, 1);
    Tensor gy = randn({c.N, c.O, Ho, Wo}).contiguous(format);
    const char* names[3] = {"forward", "grad in", "grad w"};
    const ops::ConvPass passes[3] = {ops::ConvPass::forward, ops::ConvPass::backward_input,
                                     ops::ConvPass::backward_weight};
    auto run = [&](int pass) {
      if (pass == 0) return ops::conv2d(x, w, Tensor(), p);
      if (pass == 1) return ops::conv2d_backward_input(gy, w, x.sizes(), p);
      return ops::conv2d_backward_weight(gy, x, w.sizes(), p);
    };
    char label[96];
    std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld->%lld (%lld, %lld, %lld)", (long long)c.N,
                  (long long)c.C, (long long)c.H, (long long)c.W, (long long)c.O, (long long)c.pad,
                  (long long)c.kernel, (long long)c.stride);
    for (int pass = 0; pass < 3; ++pass) {
      if (!pass_name.empty() && pass_name != names[pass]) continue;
      std::vector<std::vector<double>> times(algorithms.size());
      std::vector<Tensor> outs(algorithms.size());
      for (int s = 0; s < samples + 1; ++s) {  // the first sample of each is a warm-up (and auto's measurement)
        for (size_t a = 0; a < algorithms.size(); ++a) {
          use(algorithms[a]);
          const auto t0 = Clock::now();
          Tensor out = run(pass);
          const double ms = 1e3 * std::chrono::duration<double>(Clock::now() - t0).count();
          if (s == 0) continue;
          times[a].push_back(ms);
          outs[a] = out;
        }
      }
      use("auto");
      const std::string chose =
          ops::cpu_conv_algorithm(passes[pass], x.sizes(), w.sizes(), p, DType::f32, false, format);
      std::printf("%-30s %-8s", label, names[pass]);
      std::string row = str(json.size() > 1 ? ", " : "", "{\"shape\": \"", label, "\", \"pass\": \"", names[pass], "\"");
      for (size_t a = 0; a < algorithms.size(); ++a) {
        const double ms = median(times[a]);
        totals[a] += ms;
        std::printf(" %12.2f", ms);
        row += str(", \"", algorithms[a], "_ms\": ", ms);
      }
      std::string diffs;
      for (size_t a = 1; a < algorithms.size(); ++a)
        if (algorithms[a] != "auto" && algorithms[0] == "im2col")
          diffs += str(diffs.empty() ? "" : ", ", max_rel_diff(outs[a], outs[0]));
      std::printf("  %-24s %s\n", chose.c_str(), diffs.c_str());
      json += row + ", \"auto_chose\": \"" + chose + "\"}";
    }
  }
  std::string total_json;
  for (size_t a = 0; a < algorithms.size(); ++a)
    total_json += str(a ? ", " : "", "\"", algorithms[a], "_total_ms\": ", totals[a]);
  std::printf("result: {\"bench\": \"conv_cpu\", \"threads\": %d, \"onednn\": \"%s\", \"memory_format\": \"%s\", %s, "
              "\"rows\": %s]}\n",
              omp_get_max_threads(), ops::onednn_version().c_str(), memory_format.c_str(), total_json.c_str(),
              json.c_str());
  return 0;
}
