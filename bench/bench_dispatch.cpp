// bench_dispatch: per-op overhead of ember's dispatch, measured as the time of `a + b` on
// 1-element CPU tensors, where the arithmetic is free and everything else (argument checks,
// dtype/broadcast resolution, output allocation, autograd recording) is what is timed.
//   no_grad: neither input requires grad (no graph is recorded)
//   grad:    `a` requires grad (each add records a node, freed with its output)
// Reported as ns/op, the median of `rounds` rounds of `iters` iterations, in thread CPU time
// (robust on a loaded machine; on a quiet one it equals wall time, also reported).
//
// When the LibTorch peer (bench/peers/libtorch_dispatch, built when CMake finds Torch) sits
// next to this binary, it runs as a subprocess in the same run and ratios are reported
// (ember / LibTorch: below 1 means ember is faster). Goals: <= 150 ns and <= 300 ns.
//
// Also measured: the no-grad add while a profiler runs (ember/profiler.h), plain and with
// record_shapes, in rounds of `iters / 10` ops, each round its own profiling session.
//
//   build/bin/bench_dispatch [--iters N] [--rounds R]
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <ember/ember.h>

using namespace ember;

namespace {

// Median over `rounds` of the ns per call of `op` run `iters` times.
// Thread CPU time in ns: unlike wall time it does not count the time this thread waits
// for a core, so a loaded machine (CI, parallel builds) inflates it far less.
inline double thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e9 + double(ts.tv_nsec);
}

struct Timing {
  double cpu_ns;   // median over rounds of thread CPU ns per call
  double wall_ns;  // median over rounds of wall ns per call
};

// Runs `op` `iters` times per round for `rounds` rounds (after a warm-up).
template <class F>
Timing median_ns(F&& op, long iters, int rounds) {
  for (long i = 0; i < iters / 10; ++i) op();  // warm up caches and allocator
  std::vector<double> cpu, wall;
  for (int r = 0; r < rounds; ++r) {
    const double c0 = thread_cpu_ns();
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) op();
    const auto t1 = std::chrono::steady_clock::now();
    cpu.push_back((thread_cpu_ns() - c0) / double(iters));
    wall.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / double(iters));
  }
  std::sort(cpu.begin(), cpu.end());
  std::sort(wall.begin(), wall.end());
  return {cpu[cpu.size() / 2], wall[wall.size() / 2]};
}

// Like median_ns, with each round inside its own profiling session (stop() not timed).
template <class F>
double profiled_median_ns(F&& op, long iters, int rounds, bool shapes) {
  std::vector<double> cpu;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    profiler::Profiler p({.record_shapes = shapes});
    p.start();
    const double c0 = thread_cpu_ns();
    for (long i = 0; i < iters; ++i) op();
    const double c1 = thread_cpu_ns();
    p.stop();
    if (r > 0) cpu.push_back((c1 - c0) / double(iters));
  }
  std::sort(cpu.begin(), cpu.end());
  return cpu[cpu.size() / 2];
}

struct PeerResult {
  Timing no_grad, grad;
  std::string version;
};

// Runs the LibTorch peer if it was built next to this binary (see bench/peers/).
std::optional<PeerResult> run_peer(long iters, int rounds) {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return std::nullopt;
  auto peer = self.parent_path() / "libtorch_dispatch";
  if (!std::filesystem::exists(peer)) return std::nullopt;
  std::string cmd = peer.string() + " " + std::to_string(iters) + " " + std::to_string(rounds);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return std::nullopt;
  std::optional<PeerResult> result;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    PeerResult r;
    char version[128] = {0};
    if (std::sscanf(line, "peer: %lf %lf %lf %lf %127s", &r.no_grad.cpu_ns, &r.grad.cpu_ns,
                    &r.no_grad.wall_ns, &r.grad.wall_ns, version) == 5) {
      r.version = version;
      result = r;
    }
  }
  if (pclose(p) != 0) return std::nullopt;
  return result;
}

std::string fmt(std::optional<double> v, const char* f = "%.1f") {
  if (!v) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, *v);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  long iters = 1000000;
  int rounds = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters")) iters = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
  }

  Tensor a = ones({1}), b = ones({1});
  Tensor ag = ones({1}).requires_grad_();
  const Timing no_grad = median_ns([&] { Tensor c = a + b; }, iters, rounds);
  const Timing grad = median_ns([&] { Tensor c = ag + b; }, iters, rounds);
  const long prof_iters = std::max(1L, iters / 10);
  const double prof_on = profiled_median_ns([&] { Tensor c = a + b; }, prof_iters, rounds, false);
  const double prof_shapes = profiled_median_ns([&] { Tensor c = a + b; }, prof_iters, rounds, true);
  std::printf("1-element add, ns/op (median of %d rounds x %ld; thread CPU time, wall in ())\n",
              rounds, iters);
  std::printf("  ember     no autograd %7.1f (%7.1f)   autograd %7.1f (%7.1f)\n", no_grad.cpu_ns,
              no_grad.wall_ns, grad.cpu_ns, grad.wall_ns);
  std::printf("  profiler on: no autograd %7.1f, with record_shapes %7.1f (+%.1f, +%.1f ns/op)\n",
              prof_on, prof_shapes, prof_on - no_grad.cpu_ns, prof_shapes - no_grad.cpu_ns);

  const auto peer = run_peer(iters, rounds);
  std::optional<double> t_no_grad, t_grad, r_no_grad, r_grad, r_no_grad_wall, r_grad_wall;
  if (peer) {
    t_no_grad = peer->no_grad.cpu_ns;
    t_grad = peer->grad.cpu_ns;
    r_no_grad = no_grad.cpu_ns / peer->no_grad.cpu_ns;
    r_grad = grad.cpu_ns / peer->grad.cpu_ns;
    r_no_grad_wall = no_grad.wall_ns / peer->no_grad.wall_ns;
    r_grad_wall = grad.wall_ns / peer->grad.wall_ns;
    std::printf("  libtorch  no autograd %7.1f (%7.1f)   autograd %7.1f (%7.1f)   LibTorch %s\n",
                peer->no_grad.cpu_ns, peer->no_grad.wall_ns, peer->grad.cpu_ns,
                peer->grad.wall_ns, peer->version.c_str());
    std::printf("  ratio ember/libtorch: %.3f no autograd, %.3f autograd (below 1: ember faster)\n",
                *r_no_grad, *r_grad);
  } else {
    std::printf("  libtorch  peer not built (install libtorch-dev and reconfigure to compare)\n");
  }

  const bool ok = no_grad.cpu_ns <= 150 && grad.cpu_ns <= 300;
  std::printf(
      "result: {\"bench\": \"dispatch\", \"op\": \"add 1-element f32 cpu\", \"iters\": %ld, "
      "\"rounds\": %d, \"clock\": \"thread_cpu\", "
      "\"ember_ns\": {\"no_grad\": %.1f, \"grad\": %.1f}, "
      "\"libtorch_ns\": {\"no_grad\": %s, \"grad\": %s}, "
      "\"ratio_vs_libtorch\": {\"no_grad\": %s, \"grad\": %s}, "
      "\"ember_wall_ns\": {\"no_grad\": %.1f, \"grad\": %.1f}, "
      "\"ratio_vs_libtorch_wall\": {\"no_grad\": %s, \"grad\": %s}, "
      "\"profiler_on_ns\": {\"no_grad\": %.1f, \"record_shapes\": %.1f}, "
      "\"goal_ns\": {\"no_grad\": 150, \"grad\": 300}, \"goal_met\": %s}\n",
      iters, rounds, no_grad.cpu_ns, grad.cpu_ns, fmt(t_no_grad).c_str(), fmt(t_grad).c_str(),
      fmt(r_no_grad, "%.3f").c_str(), fmt(r_grad, "%.3f").c_str(), no_grad.wall_ns,
      grad.wall_ns, fmt(r_no_grad_wall, "%.3f").c_str(), fmt(r_grad_wall, "%.3f").c_str(),
      prof_on, prof_shapes, ok ? "true" : "false");
  return 0;
}
