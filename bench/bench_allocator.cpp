// bench_allocator: the cost of one allocate + free pair through ember's CUDA caching
// allocator against cudaMalloc + cudaFree directly (ember's uncached allocator), per size,
// plus a "training step" pattern (64 mixed-size tensors allocated, then freed) that shows
// block reuse with splitting. Reported as ns per pair, the median of `rounds` rounds, and
// the ratio cudaMalloc / cached (above 1 means the cache is faster). The peer is measured in
// the same run on the same device.
//
// Without a CUDA device it prints a note and a skipped result line, and exits 0.
//
//   build/bin/bench_allocator [--iters N] [--rounds R]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <ember/cuda_memory.h>
#include <ember/ember.h>

using namespace ember;

namespace {

template <class F>
double median_ns_per_call(F&& op, long iters, int rounds) {
  for (long i = 0; i < std::max(1L, iters / 10); ++i) op();  // warm up
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) op();
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / double(iters));
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

std::string json_array(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.1f", i ? ", " : "", v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ember caching allocator vs cudaMalloc"};
  long iters = 20000;
  int rounds = 5;
  app.add_option("--iters", iters, "allocate/free pairs per round through the cache");
  app.add_option("--rounds", rounds, "rounds (the median is reported)");
  CLI11_PARSE(app, argc, argv);

  if (!cuda::is_available()) {
    std::printf("bench_allocator: no CUDA device visible; nothing to measure.\n");
    std::printf("result: {\"bench\": \"allocator\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }

  Allocator* cached = cuda::detail::allocator(0);
  Allocator* raw = cuda::detail::uncached_allocator(0);
  const std::vector<size_t> sizes = {512, 64 << 10, 1 << 20, 16 << 20, 256 << 20};
  std::vector<double> cached_ns, raw_ns, speedup;
  std::printf("device: %s\n%12s %14s %14s %10s\n", cuda::device_name(0).c_str(), "bytes",
              "cached ns", "cudaMalloc ns", "ratio");
  for (size_t n : sizes) {
    const double c = median_ns_per_call([&] { cached->deallocate(cached->allocate(n), n); },
                                        iters, rounds);
    // cudaMalloc/cudaFree cost microseconds to milliseconds: fewer iterations.
    const long raw_iters = std::max(10L, iters / 200);
    const double r =
        median_ns_per_call([&] { raw->deallocate(raw->allocate(n), n); }, raw_iters, rounds);
    cached_ns.push_back(c);
    raw_ns.push_back(r);
    speedup.push_back(r / c);
    std::printf("%12zu %14.1f %14.1f %10.1f\n", n, c, r, r / c);
  }

  // A step-like pattern: 64 tensors of mixed sizes alive together, then all freed.
  std::mt19937 rng(0);
  std::vector<size_t> step_sizes;
  for (int i = 0; i < 64; ++i) step_sizes.push_back(size_t(1 + rng() % (4 << 20)));
  std::vector<void*> ptrs(step_sizes.size());
  auto step = [&](Allocator* a) {
    for (size_t i = 0; i < step_sizes.size(); ++i) ptrs[i] = a->allocate(step_sizes[i]);
    for (size_t i = 0; i < step_sizes.size(); ++i) a->deallocate(ptrs[i], step_sizes[i]);
  };
  const double step_cached =
      median_ns_per_call([&] { step(cached); }, std::max(10L, iters / 64), rounds) / 64.0;
  const double step_raw = median_ns_per_call([&] { step(raw); }, 5, rounds) / 64.0;
  std::printf("step pattern (64 mixed sizes up to 4 MiB): cached %.1f ns, cudaMalloc %.1f ns "
              "per pair (ratio %.1f)\n",
              step_cached, step_raw, step_raw / step_cached);
  std::printf("%s", cuda::memory_summary(0).c_str());

  std::string sizes_json = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    sizes_json += (i ? ", " : "") + std::to_string(sizes[i]);
  sizes_json += "]";
  std::printf(
      "result: {\"bench\": \"allocator\", \"device\": \"%s\", \"sizes\": %s, "
      "\"cached_ns\": %s, \"cudamalloc_ns\": %s, \"ratio_cudamalloc_over_cached\": %s, "
      "\"step_cached_ns\": %.1f, \"step_cudamalloc_ns\": %.1f}\n",
      cuda::device_name(0).c_str(), sizes_json.c_str(), json_array(cached_ns).c_str(),
      json_array(raw_ns).c_str(), json_array(speedup).c_str(), step_cached, step_raw);
  return 0;
}
