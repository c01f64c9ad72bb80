// GPU timing shared by the GPU benchmarks: seconds per call of a function, from CUDA events
// around enough back-to-back calls for about 20 ms (so launch gaps and event resolution do
// not count), the median over `samples` such batches, after a warm-up.
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include <ember/ember.h>

namespace ember::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline double time_gpu(const std::function<void()>& f, int samples, int warmup = 3) {
  cuda::Event start({.enable_timing = true}), stop({.enable_timing = true});
  for (int w = 0; w < warmup; ++w) f();
  cuda::synchronize();
  auto run = [&](int reps) {
    start.record();
    for (int r = 0; r < reps; ++r) f();
    stop.record();
    stop.synchronize();
    return double(start.elapsed_time(stop)) * 1e-3 / reps;
  };
  const int reps = std::max(1, int(0.02 / std::max(run(1), 1e-7)));
  std::vector<double> t;
  for (int s = 0; s < samples; ++s) t.push_back(run(reps));
  return median(t);
}

}  // namespace ember::bench
