// LibTorch peer of bench_dispatch: the same 1-element CPU add, without and with autograd
// recording, timed the same way (median of `rounds` rounds of `iters` iterations). Run by
// bench_dispatch as a subprocess; prints one line
// `peer: <no_grad_cpu_ns> <grad_cpu_ns> <no_grad_wall_ns> <grad_wall_ns> <version>`.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <vector>

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

int main(int argc, char** argv) {
  long iters = argc > 1 ? std::atol(argv[1]) : 1000000;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  torch::Tensor a = torch::ones({1}), b = torch::ones({1});
  torch::Tensor ag = torch::ones({1}).requires_grad_(true);
  Timing no_grad = median_ns([&] { torch::Tensor c = a + b; }, iters, rounds);
  Timing grad = median_ns([&] { torch::Tensor c = ag + b; }, iters, rounds);
  std::printf("peer: %.1f %.1f %.1f %.1f %s\n", no_grad.cpu_ns, grad.cpu_ns, no_grad.wall_ns,
              grad.wall_ns, TORCH_VERSION);
  return 0;
}
