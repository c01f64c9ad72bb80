// CPU matmul throughput: ember::matmul against Eigen called directly, f32, square sizes, in
// the same process with the same threads (Eigen's OpenMP threads: OMP_NUM_THREADS).
// Each size is warmed up, then timed as the median of several samples; ember and Eigen
// samples alternate so that a noisy neighbour slows both alike. ember's time includes what
// a user pays per call (output allocation, dispatch); Eigen's writes into a preallocated
// matrix. Prints a table and ends with one `result: {json}` line.
//
//   bench_matmul [--sizes 256,512,1024] [--samples 9]
// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace {

using Clock = std::chrono::steady_clock;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Repetitions per sample so that one sample takes ~50 ms (timer noise stays negligible).
int reps_for(double seconds_per_call) { return std::max(1, int(0.05 / std::max(seconds_per_call, 1e-9))); }

std::vector<int64_t> parse_sizes(const char* s) {
  std::vector<int64_t> out;
  for (const char* p = s; *p;) {
    out.push_back(std::strtoll(p, const_cast<char**>(&p), 10));
    if (*p == ',') ++p;
  }
  return out;
}

std::string json_list(const std::vector<double>& v, int precision) {
  std::string s = "[";
  char buf[64];
  for (size_t i = 0; i < v.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.*f", i ? "," : "", precision, v[i]);
    s += buf;
  }
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes{256, 512, 1024};
  int samples = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--sizes")) sizes = parse_sizes(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[i + 1]));
  }
  ember::manual_seed(0);
  const int threads = Eigen::nbThreads();
  std::printf("matmul f32 (CPU, %d threads), median of %d samples\n", threads, samples);
  std::printf("%8s %14s %14s %8s\n", "n", "ember GFLOP/s", "Eigen GFLOP/s", "ratio");

  std::vector<double> ember_gflops, eigen_gflops, ratios, size_list;
  for (int64_t n : sizes) {
    ember::Tensor a = ember::randn({n, n}), b = ember::randn({n, n});
    // Eigen gets the same values, row-major like ember's tensors.
    RowMatrix A = Eigen::Map<const RowMatrix>(a.data_ptr<float>(), n, n);
    RowMatrix B = Eigen::Map<const RowMatrix>(b.data_ptr<float>(), n, n);
    RowMatrix C(n, n);

    auto run_ember = [&] {
      ember::Tensor c = ember::matmul(a, b);
      return c.data_ptr<float>()[0];
    };
    auto run_eigen = [&] {
      C.noalias() = A * B;
      return C(0, 0);
    };
    // Warm-up (thread pool, page faults, caches) and a check that both compute the same.
    volatile float sink = 0;
    for (int w = 0; w < 3; ++w) sink = sink + run_ember() + run_eigen();
    ember::Tensor check = ember::matmul(a, b);
    const float diff = (Eigen::Map<const RowMatrix>(check.data_ptr<float>(), n, n) - C).cwiseAbs().maxCoeff();
    if (!(diff <= 1e-3f * float(n))) {
      std::fprintf(stderr, "bench_matmul: ember and Eigen disagree at n=%lld (max diff %g)\n", (long long)n,
                   double(diff));
      return 1;
    }
    auto t0 = Clock::now();
    run_ember();
    const int reps = reps_for(seconds_since(t0));

    std::vector<double> te, tg;
    for (int s = 0; s < samples; ++s) {
      t0 = Clock::now();
      for (int r = 0; r < reps; ++r) sink = sink + run_ember();
      te.push_back(seconds_since(t0) / reps);
      t0 = Clock::now();
      for (int r = 0; r < reps; ++r) sink = sink + run_eigen();
      tg.push_back(seconds_since(t0) / reps);
    }
    const double flop = 2.0 * double(n) * double(n) * double(n);
    const double ge = flop / median(te) * 1e-9, gg = flop / median(tg) * 1e-9;
    ember_gflops.push_back(ge);
    eigen_gflops.push_back(gg);
    ratios.push_back(ge / gg);
    size_list.push_back(double(n));
    std::printf("%8lld %14.1f %14.1f %8.3f\n", (long long)n, ge, gg, ge / gg);
  }
  std::printf("result: {\"bench\":\"matmul_cpu\",\"dtype\":\"f32\",\"threads\":%d,\"sizes\":%s,"
              "\"ember_gflops\":%s,\"eigen_gflops\":%s,\"ratio\":%s}\n",
              threads, json_list(size_list, 0).c_str(), json_list(ember_gflops, 2).c_str(),
              json_list(eigen_gflops, 2).c_str(), json_list(ratios, 3).c_str());
  return 0;
}
