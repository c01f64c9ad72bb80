// bench_attention: ember's fused scaled_dot_product_attention, forward and forward+backward,
// against PyTorch in the same run (bench/peers/torch_attention.py): on CUDA torch's
// F.scaled_dot_product_attention with the FlashAttention backend forced; on the CPU the
// matmul-softmax-matmul composite (Debian's torch 1.13 has no SDPA).
//
//   build/bin/bench_attention [--device cpu|cuda] [--dtype f32|bf16|f16] [--shapes LIST]
//                             [--steps 20] [--warmup 3] [--threads N] [--python PY] [--no-peer]
//                             [--dq-atomics]
//
// A shape is BxHxTxD for q, k, v of shape [B, H, T, D] (contiguous), with a trailing "c" for
// causal attention, "p" for a bool key padding mask [B, 1, 1, T] (batch b keeps its first
// T - (b % 4) T / 8 keys) or "m" for a bool [T, T] attn_mask (lower-triangular: a causal mask
// spelled out, as models that build their own masks pass it); LIST is comma-separated.
// Masked cases run ember's attn_mask path (Note [attention masks and dropout]) against the
// peer's composite with masked_fill. Defaults: CPU f32 32x4x64x32c,8x12x256x64c (the
// MNIST-sized and GPT-small-sized cases), 32x4x64x32p,8x12x256x64p,8x12x256x64m (masked);
// CUDA bf16 16x12x1024x64c (GPT-2 124M), 8x16x2048x128c, 16x12x1024x64 (not causal),
// 16x12x1024x64p, 16x12x1024x64m, 8x16x2048x128p (masked: the tensor-core kernels with the
// mask read per score; the peer's SDPA picks its memory-efficient kernel, flash takes no mask).
//
// FLOPs: 4*B*H*T*T*D for the forward (two GEMMs), 2.5x that for the backward (five GEMMs, one
// of them the forward's recomputed scores), both halved for causal attention (masked cases
// count the full T^2: their kernels visit every block); forward+backward is 3.5x. The backward alone is timed as (forward+backward) - forward, on both sides.
// Timing (bench_harness.h's time_calls): on the CPU each call is timed and the median of --steps
// taken (as bench_gpt); on CUDA, CUDA events around back-to-back calls, the median of --steps
// batches (bench/gpu_timing.h); the peer uses the same methods. The forward runs under NoGradGuard; forward+backward with q, k, v
// requiring grad and a fixed output gradient, their gradients reset every call. On a CPU the
// peer runs twice, with and without OPENBLAS_NUM_THREADS=1 (see bench_mnist), and each of its
// times is the faster of the two.
//
// --dq-atomics: ember's tensor-core backward adds dQ with f32 atomics from its dK/dV kernel
// (ops::set_attention_dq_atomics, Note [attention dQ atomics]) instead of its deterministic dQ
// kernel; the peer's FlashAttention backward always does. Reported as "dq_atomics" in the result.
//
// Ends with one `result: {json}` line: per shape the times and TFLOP/s of both sides, and
// "ratios" {"<shape>_fwd" | "<shape>_bwd" | "<shape>_fwd_bwd": ember speed / peer speed}
// (> 1: ember faster).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/ember.h>
#include <ember/ops/attention.h>

#include "bench_harness.h"
#include "../examples/common/cli_checks.h"

using namespace ember;

namespace {

struct Case {
  std::string spec;  // as given, e.g. "16x12x1024x64c"
  int64_t B = 0, H = 0, T = 0, D = 0;
  bool causal = false;
  char mask = 0;  // 0, 'p' (key padding [B, 1, 1, T]) or 'm' (bool [T, T])
  double flops_fwd() const { return 4.0 * double(B * H) * double(T) * double(T) * double(D) * (causal ? 0.5 : 1.0); }
};

bool parse_case(const std::string& s, Case& c) {
  c.spec = s;
  std::string body = s;
  const char last = body.empty() ? 0 : body.back();
  c.causal = last == 'c';
  c.mask = last == 'p' || last == 'm' ? last : 0;
  if (c.causal || c.mask) body.pop_back();
  long long b, h, t, d;
  char tail;
  if (std::sscanf(body.c_str(), "%lldx%lldx%lldx%lld%c", &b, &h, &t, &d, &tail) != 4) return false;
  c.B = b, c.H = h, c.T = t, c.D = d;
  return b > 0 && h > 0 && t > 0 && d > 0;
}

// The keep-mask (true = take part) of a masked case, or undefined.
Tensor keep_mask(const Case& c, Device dev) {
  if (c.mask == 'p') {
    std::vector<double> keep(size_t(c.B * c.T));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t j = 0; j < c.T; ++j) keep[size_t(b * c.T + j)] = j < c.T - (b % 4) * c.T / 8;
    return tensor<double>(keep, {c.B, 1, 1, c.T}).gt(0.5).to(dev);
  }
  if (c.mask == 'm') {
    const Tensor i = arange(c.T).reshape({c.T, 1}), j = arange(c.T).reshape({1, c.T});
    return j.le(i).to(dev);
  }
  return Tensor();
}

struct Times {
  double fwd = 0, fwd_bwd = 0;  // seconds; 0 = not measured
  std::string env_fwd, env_fwd_bwd, impl = "none";
  double bwd() const { return fwd_bwd - fwd; }
};

}  // namespace

int main(int argc, char** argv) {
  std::string device_name = "cpu", dtype_name_arg, shapes;
  const char* env_python = std::getenv("EMBER_PYTHON");
  std::string python = env_python && *env_python ? env_python : "/usr/bin/python3";
  int steps = 20, warmup = 3, threads = omp_get_max_threads();
  bool no_peer = false, dq_atomics = false;
  CLI::App app{"Fused attention forward/backward: ember vs PyTorch"};
  app.add_option("--device", device_name)->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--dtype", dtype_name_arg, "f32 (CPU default), bf16 (CUDA default), f16")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--shapes", shapes, "comma-separated BxHxTxD[c] (c: causal)");
  app.add_option("--steps", steps)->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", warmup)->check(ember::examples::NonNegativeNumber);
  app.add_option("--threads", threads, "CPU threads for both sides")->check(ember::examples::PositiveNumber);
  app.add_option("--python", python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", no_peer);
  app.add_flag("--dq-atomics", dq_atomics, "CUDA backward: dQ by f32 atomics (nondeterministic, as the peer)");
  CLI11_PARSE(app, argc, argv);
  omp_set_num_threads(threads);
  ops::set_attention_dq_atomics(dq_atomics);
  const Device dev = device_name == "cuda" ? Device::cuda(0) : Device::cpu();
  if (dtype_name_arg.empty()) dtype_name_arg = dev.is_cuda() ? "bf16" : "f32";
  if (shapes.empty())
    shapes = dev.is_cuda() ? "16x12x1024x64c,8x16x2048x128c,16x12x1024x64,16x12x1024x64p,16x12x1024x64m,8x16x2048x128p"
                           : "32x4x64x32c,8x12x256x64c,32x4x64x32p,8x12x256x64p,8x12x256x64m";
  const DType dtype = dtype_name_arg == "bf16" ? DType::bf16 : dtype_name_arg == "f16" ? DType::f16 : DType::f32;

  std::vector<Case> cases;
  {
    std::stringstream ss(shapes);
    std::string item;
    while (std::getline(ss, item, ',')) {
      Case c;
      if (!parse_case(item, c)) {
        std::fprintf(stderr, "bench_attention: bad shape '%s' (want BxHxTxD[c|p|m])\n", item.c_str());
        return 2;
      }
      cases.push_back(c);
    }
  }

  std::printf("attention on %s, %s, %d threads%s; FLOPs 4BHT^2D forward, 2.5x backward, halved when causal\n",
              device_name.c_str(), dtype_name_arg.c_str(), threads, dq_atomics ? ", dQ by atomics" : "");
  std::vector<Times> ember_times(cases.size()), peer_times(cases.size());
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const TensorOptions o = TensorOptions(dtype).device(dev);
    const Tensor q = randn({c.B, c.H, c.T, c.D}, o), k = randn({c.B, c.H, c.T, c.D}, o),
                 v = randn({c.B, c.H, c.T, c.D}, o), dy = randn({c.B, c.H, c.T, c.D}, o);
    const Tensor mask = keep_mask(c, dev);
    Times& t = ember_times[i];
    t.fwd = bench::time_calls(
        [&] {
          NoGradGuard no_grad;
          (void)scaled_dot_product_attention(q, k, v, mask, 0.0, c.causal);
        },
        dev, steps, warmup);
    Tensor qg = q.detach().clone().requires_grad_(), kg = k.detach().clone().requires_grad_(),
           vg = v.detach().clone().requires_grad_();
    t.fwd_bwd = bench::time_calls(
        [&] {
          scaled_dot_product_attention(qg, kg, vg, mask, 0.0, c.causal).backward(dy);
          qg.set_grad(Tensor());
          kg.set_grad(Tensor());
          vg.set_grad(Tensor());
        },
        dev, steps, warmup);
    const double f = c.flops_fwd();
    std::printf("ember  %-16s forward %9.3f ms %7.3f TFLOP/s   backward %9.3f ms %7.3f TFLOP/s   "
                "fwd+bwd %9.3f ms %7.3f TFLOP/s\n",
                c.spec.c_str(), 1e3 * t.fwd, f / t.fwd / 1e12, 1e3 * t.bwd(), 2.5 * f / t.bwd() / 1e12,
                1e3 * t.fwd_bwd, 3.5 * f / t.fwd_bwd / 1e12);
    std::fflush(stdout);
  }

  std::string peer_version = "none", peer_blas = "unknown";
  if (!no_peer) {
    const std::string script = std::string(EMBER_SOURCE_DIR) + "/bench/peers/torch_attention.py";
    std::vector<std::string> envs = {""};
    if (!dev.is_cuda()) envs.push_back("OPENBLAS_NUM_THREADS=1 ");
    for (const std::string& env : envs) {
      const std::string cmd = env + python + " " + script + " --device " + device_name + " --dtype " +
                              dtype_name_arg + " --shapes " + shapes + " --steps " + std::to_string(steps) +
                              " --warmup " + std::to_string(warmup) + " --threads " + std::to_string(threads) +
                              " 2>&1";
      FILE* p = popen(cmd.c_str(), "r");
      if (!p) continue;
      const std::string env_name = env.empty() ? "" : env.substr(0, env.size() - 1);
      char line[1024], spec[128], version[128], impl[64], blas[64];
      double fwd_ms = 0, fb_ms = 0;
      while (std::fgets(line, sizeof line, p)) {
        if (std::sscanf(line, "peer: %127s %lf %lf %127s %63s", spec, &fwd_ms, &fb_ms, version, impl) == 5) {
          for (size_t i = 0; i < cases.size(); ++i) {
            if (cases[i].spec != spec) continue;
            Times& t = peer_times[i];
            // Each time is the faster of the environments (the peer at its best).
            if (t.fwd == 0 || fwd_ms * 1e-3 < t.fwd) t.fwd = fwd_ms * 1e-3, t.env_fwd = env_name;
            if (t.fwd_bwd == 0 || fb_ms * 1e-3 < t.fwd_bwd) t.fwd_bwd = fb_ms * 1e-3, t.env_fwd_bwd = env_name;
            t.impl = impl;
          }
          peer_version = version;
          std::printf("torch  %s %s%s%s: forward %.3f ms, fwd+bwd %.3f ms (%s)\n", version, spec,
                      env_name.empty() ? "" : " ", env_name.c_str(), fwd_ms, fb_ms, impl);
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

  // Ratios of speeds (= peer time / ember time); 0 where the peer did not run.
  auto ratio = [](double peer_s, double ember_s) { return peer_s > 0 && ember_s > 0 ? peer_s / ember_s : 0.0; };
  std::string cases_json, ratios_json;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const Times &e = ember_times[i], &p = peer_times[i];
    const double f = c.flops_fwd();
    auto tflops = [](double flops, double s) { return s > 0 ? flops / s / 1e12 : 0.0; };
    const double r_fwd = ratio(p.fwd, e.fwd), r_bwd = ratio(p.bwd(), e.bwd()), r_fb = ratio(p.fwd_bwd, e.fwd_bwd);
    std::printf("ratio  %-16s forward %.3f, backward %.3f, fwd+bwd %.3f (ember/peer speed)\n", c.spec.c_str(), r_fwd,
                r_bwd, r_fb);
    char buf[1536];
    std::snprintf(
        buf, sizeof buf,
        "%s{\"shape\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"D\": %lld, \"causal\": %s, "
        "\"ember_fwd_ms\": %.4f, \"ember_bwd_ms\": %.4f, \"ember_fwd_bwd_ms\": %.4f, "
        "\"ember_fwd_tflops\": %.4f, \"ember_bwd_tflops\": %.4f, \"ember_fwd_bwd_tflops\": %.4f, "
        "\"peer_fwd_ms\": %.4f, \"peer_bwd_ms\": %.4f, \"peer_fwd_bwd_ms\": %.4f, "
        "\"peer_fwd_tflops\": %.4f, \"peer_bwd_tflops\": %.4f, \"peer_fwd_bwd_tflops\": %.4f, "
        "\"peer_impl\": \"%s\", \"peer_env_fwd\": \"%s\", \"peer_env_fwd_bwd\": \"%s\"}",
        i ? ", " : "", c.spec.c_str(), (long long)c.B, (long long)c.H, (long long)c.T, (long long)c.D,
        c.causal ? "true" : "false", 1e3 * e.fwd, 1e3 * e.bwd(), 1e3 * e.fwd_bwd, tflops(f, e.fwd),
        tflops(2.5 * f, e.bwd()), tflops(3.5 * f, e.fwd_bwd), 1e3 * p.fwd, 1e3 * p.bwd(), 1e3 * p.fwd_bwd,
        tflops(f, p.fwd), tflops(2.5 * f, p.bwd()), tflops(3.5 * f, p.fwd_bwd), p.impl.c_str(), p.env_fwd.c_str(),
        p.env_fwd_bwd.c_str());
    cases_json += buf;
    std::snprintf(buf, sizeof buf, "%s\"%s_fwd\": %.3f, \"%s_bwd\": %.3f, \"%s_fwd_bwd\": %.3f", i ? ", " : "",
                  c.spec.c_str(), r_fwd, c.spec.c_str(), r_bwd, c.spec.c_str(), r_fb);
    ratios_json += buf;
  }
  std::printf("result: {\"bench\": \"attention\", \"device\": \"%s\", \"dtype\": \"%s\", \"threads\": %d, "
              "\"dq_atomics\": %s, \"peer\": \"torch %s\", \"peer_blas\": \"%s\", \"ratios\": {%s}, \"cases\": [%s]}\n",
              device_name.c_str(), dtype_name_arg.c_str(), threads, dq_atomics ? "true" : "false",
              peer_version.c_str(), peer_blas.c_str(),
              ratios_json.c_str(), cases_json.c_str());
  return 0;
}
