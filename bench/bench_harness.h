// The harness the per-op benchmarks share (bench_indexing, bench_pool, bench_norm, bench_sort,
// bench_transformer): their common flags, the per-call timing, launching the PyTorch peer in
// the same run and reading its `peer: ...` lines, and the fwd / fwd+bwd ratio rows and JSON.
// GPU timing itself stays in gpu_timing.h, which this builds on.
#pragma once

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
#include <ember/profiler.h>

#include "gpu_timing.h"
#include "../examples/common/cli_checks.h"

namespace ember::bench {

// Resident memory of this process from /proc/self/status (Linux): field "VmRSS" is now,
// "VmHWM" the peak since the start or the last reset_peak_rss(); 0 where unreadable. The
// peers read the same fields (bench/peers/peer_harness.py), so the two sides' peaks of one
// step compare like for like (the interpreter and libtorch's resident code included).
inline int64_t proc_status_bytes(const char* field) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  const std::string prefix = std::string(field) + ":";
  while (std::fgets(line, sizeof line, f))
    if (std::string(line).rfind(prefix, 0) == 0) {
      std::sscanf(line + prefix.size(), "%lld", &kb);
      break;
    }
  std::fclose(f);
  return int64_t(kb) * 1024;
}
// Starts VmHWM over from the current RSS (Linux >= 4.0: "5" to /proc/self/clear_refs).
inline void reset_peak_rss() {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

// The true median (the mean of the middle two for an even count), unlike gpu_timing.h's
// upper median: the CPU benches and their peers (statistics.median) compute the same number.
// --profile N of the training-step benchmarks: runs step(i) for N more steps under the
// profiler (after the timed ones) and prints the op table, by self CUDA time on a GPU.
inline void print_step_profile(int64_t steps, int64_t first, Device dev, const std::function<void(int64_t)>& step,
                               int rows) {
  if (steps <= 0) return;
  profiler::Profiler prof;
  prof.start();
  for (int64_t i = 0; i < steps; ++i) step(first + i);
  if (dev.is_cuda()) cuda::synchronize();
  prof.stop();
  std::printf("ember profile of %lld steps:\n%s", (long long)steps,
              prof.key_averages().table(dev.is_cuda() ? "self_cuda_time_total" : "self_cpu_time_total", rows).c_str());
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Seconds per call: CPU, the median of `steps` timed calls; CUDA, time_gpu's event batches.
inline double time_calls(const std::function<void()>& f, Device dev, int steps, int warmup) {
  if (dev.is_cuda()) return time_gpu(f, steps, warmup);
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < steps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median_of(t);
}

// ember speed / peer speed from seconds (0 when either side did not run).
inline double speed_ratio(double peer_s, double ember_s) {
  return peer_s > 0 && ember_s > 0 ? peer_s / ember_s : 0.0;
}

// $EMBER_PYTHON, else Debian's python3 (which has python3-torch).
inline std::string default_python() {
  const char* env = std::getenv("EMBER_PYTHON");
  return env && *env ? env : "/usr/bin/python3";
}

// The flags every peer benchmark takes; steps/warmup defaults are the bench's own.
struct PeerArgs {
  std::string device_name = "cpu";
  std::string python = default_python();
  int steps = 10, warmup = 2, threads = omp_get_max_threads();
  bool no_peer = false;
  Device device() const { return device_name == "cuda" ? Device::cuda(0) : Device::cpu(); }
};

inline void add_device_option(CLI::App& app, PeerArgs& a) {
  app.add_option("--device", a.device_name)->check(CLI::IsMember({"cpu", "cuda"}));
}
inline void add_timing_options(CLI::App& app, PeerArgs& a) {
  app.add_option("--steps", a.steps)->check(ember::examples::PositiveNumber);
  app.add_option("--warmup", a.warmup)->check(ember::examples::NonNegativeNumber);
}
inline void add_peer_options(CLI::App& app, PeerArgs& a) {
  app.add_option("--threads", a.threads, "CPU threads for both sides")->check(ember::examples::PositiveNumber);
  app.add_option("--python", a.python, "the Python whose torch is the peer");
  app.add_flag("--no-peer", a.no_peer);
}

// The whole command line of a per-op bench: --device, --steps, --warmup, --threads, --python,
// --no-peer, then OpenMP set to --threads. Returns -1 to go on, else main's exit code (--help,
// a bad flag), as CLI11_PARSE would.
inline int parse_peer_bench_args(CLI::App& app, PeerArgs& a, int argc, char** argv) {
  add_device_option(app, a);
  add_timing_options(app, a);
  add_peer_options(app, a);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  omp_set_num_threads(a.threads);
  return -1;
}

// " --device D --steps S --warmup W --threads T", the peers' common arguments.
inline std::string peer_common_args(const PeerArgs& a) {
  return " --device " + a.device_name + " --steps " + std::to_string(a.steps) + " --warmup " +
         std::to_string(a.warmup) + " --threads " + std::to_string(a.threads);
}

// Runs `env python bench/peers/<script> <args>` (stderr merged) and hands every line to
// `on_line`; a line it does not take (returns false) is echoed to `rest`, so the peer's
// warnings reach the user. False when the peer could not be started.
inline bool run_peer(const std::string& python, const std::string& script, const std::string& args,
                     const std::function<bool(const char*)>& on_line, const std::string& env = "",
                     FILE* rest = stdout) {
  const std::string cmd = env + python + " " + std::string(EMBER_SOURCE_DIR) + "/bench/peers/" + script + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return false;
  char line[1024];
  while (std::fgets(line, sizeof line, p))
    if (!on_line(line)) std::fputs(line, rest);
  pclose(p);
  return true;
}

inline void say_peer_missing(const std::string& peer_version, const std::string& python) {
  if (peer_version == "none") std::printf("torch  peer did not run (is torch importable by %s?)\n", python.c_str());
}

// Per-case forward and forward+backward seconds of both sides, by case name.
struct FwdBwdTimes {
  std::vector<std::string> names;
  std::vector<double> e_fwd, e_fb, p_fwd, p_fb;
  explicit FwdBwdTimes(std::vector<std::string> n)
      : names(std::move(n)), e_fwd(names.size()), e_fb(names.size()), p_fwd(names.size()), p_fb(names.size()) {}
};

// Reads the peer's `peer: <case> <fwd ms> <fwd+bwd ms> <version>` lines into `t`, printing a
// `torch` row for each (name column `width`, numbers `num_width` wide, the version when asked).
// Returns the torch version, "none" when the peer printed nothing.
inline std::string run_fwd_bwd_peer(const PeerArgs& a, const std::string& script, FwdBwdTimes& t, int width,
                                    int num_width, bool show_version) {
  std::string version_seen = "none";
  run_peer(a.python, script, peer_common_args(a), [&](const char* line) {
    char name[128], version[128];
    double f = 0, fb = 0;
    if (std::sscanf(line, "peer: %127s %lf %lf %127s", name, &f, &fb, version) != 4) return false;
    for (size_t i = 0; i < t.names.size(); ++i)
      if (t.names[i] == name) t.p_fwd[i] = f * 1e-3, t.p_fb[i] = fb * 1e-3;
    version_seen = version;
    std::printf("torch  %-*s forward %*.3f ms   fwd+bwd %*.3f ms", width, name, num_width, f, num_width, fb);
    if (show_version) std::printf(" (%s)", version);
    std::printf("\n");
    return true;
  });
  say_peer_missing(version_seen, a.python);
  return version_seen;
}

// Prints a `ratio` row per case and builds the result line's "ratios" ({"<case>_fwd": r,
// "<case>_fwd_bwd": r, ...}) and "cases" ([{case, ember/peer ms}, ...]) JSON bodies.
inline void fwd_bwd_report(const FwdBwdTimes& t, int width, std::string& ratios, std::string& cases_json) {
  for (size_t i = 0; i < t.names.size(); ++i) {
    const std::string& n = t.names[i];
    const double rf = speed_ratio(t.p_fwd[i], t.e_fwd[i]), rb = speed_ratio(t.p_fb[i], t.e_fb[i]);
    std::printf("ratio  %-*s forward %.3f, fwd+bwd %.3f (ember/peer speed)\n", width, n.c_str(), rf, rb);
    char buf[512];
    std::snprintf(buf, sizeof buf, "%s\"%s_fwd\": %.3f, \"%s_fwd_bwd\": %.3f", i ? ", " : "", n.c_str(), rf,
                  n.c_str(), rb);
    ratios += buf;
    std::snprintf(buf, sizeof buf,
                  "%s{\"case\": \"%s\", \"ember_fwd_ms\": %.4f, \"ember_fwd_bwd_ms\": %.4f, \"peer_fwd_ms\": %.4f, "
                  "\"peer_fwd_bwd_ms\": %.4f}",
                  i ? ", " : "", n.c_str(), 1e3 * t.e_fwd[i], 1e3 * t.e_fb[i], 1e3 * t.p_fwd[i], 1e3 * t.p_fb[i]);
    cases_json += buf;
  }
}

// A one-input op timed forward (under NoGradGuard) and forward+backward (input requiring grad,
// a fixed output gradient, the input gradient reset every call), the whole run of
// bench_indexing and bench_pool: ember rows, the peer, ratio rows, the result line.
struct UnaryCase {
  std::string name;  // as the peer names it
  Shape x;
  std::function<Tensor(const Tensor&)> op;
};

inline int run_unary_fwd_bwd(const char* bench, const char* title, const std::string& peer_script,
                             const std::vector<UnaryCase>& cases, const PeerArgs& a) {
  const Device dev = a.device();
  std::printf("%s on %s, f32, %d threads\n", title, a.device_name.c_str(), a.threads);
  std::vector<std::string> names;
  for (const UnaryCase& c : cases) names.push_back(c.name);
  FwdBwdTimes t(names);
  manual_seed(0);
  for (size_t i = 0; i < cases.size(); ++i) {
    const UnaryCase& c = cases[i];
    const Tensor x = randn(c.x, TensorOptions(DType::f32).device(dev));
    Tensor y0;
    {
      NoGradGuard ng;
      y0 = c.op(x);
    }
    const Tensor dy = randn(y0.sizes(), TensorOptions(DType::f32).device(dev));
    t.e_fwd[i] = time_calls([&] {
      NoGradGuard ng;
      (void)c.op(x);
    }, dev, a.steps, a.warmup);
    Tensor xg = x.detach().clone().requires_grad_();
    t.e_fb[i] = time_calls([&] {
      c.op(xg).backward(dy);
      xg.set_grad(Tensor());
    }, dev, a.steps, a.warmup);
    std::printf("ember  %-26s forward %9.3f ms   fwd+bwd %9.3f ms\n", c.name.c_str(), 1e3 * t.e_fwd[i], 1e3 * t.e_fb[i]);
    std::fflush(stdout);
  }
  const std::string peer_version = a.no_peer ? "none" : run_fwd_bwd_peer(a, peer_script, t, 26, 9, false);
  std::string ratios, cases_json;
  fwd_bwd_report(t, 26, ratios, cases_json);
  std::printf("result: {\"bench\": \"%s\", \"device\": \"%s\", \"dtype\": \"f32\", \"threads\": %d, \"peer\": \"torch %s\", "
              "\"ratios\": {%s}, \"cases\": [%s]}\n",
              bench, a.device_name.c_str(), a.threads, peer_version.c_str(), ratios.c_str(), cases_json.c_str());
  return 0;
}

}  // namespace ember::bench
