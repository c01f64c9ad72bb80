// Matmul throughput, CPU and GPU, each against a peer in the same process / run.
//
// CPU: ember::matmul against Eigen called directly, f32, square sizes, with the same threads
// (Eigen's OpenMP threads: OMP_NUM_THREADS). Each size is warmed up, then timed as the
// median of several samples; ember and Eigen samples alternate so that a noisy neighbour
// slows both alike. ember's time includes what a user pays per call (output allocation,
// dispatch); Eigen's writes into a preallocated matrix.
//
// GPU (only when a CUDA device is visible): bf16 and f16 square matmul (4096 and 8192 by
// default) through ember::matmul (cuBLASLt), against cuBLAS called directly (cublasGemmEx,
// f32 accumulation, preallocated output) and against torch.matmul (bench/peers/torch_matmul.py
// under --python, the GPU machine's own PyTorch). Timed with CUDA events around back-to-back
// calls on the default stream, median of samples, ember and cuBLAS samples alternating.
//
// CPU first: the machine's f32 FMA peak (chains of 256-bit FMAs on every thread), the ceiling
// each GEMM row is then stated against ("% of peak").
//
// Prints tables and ends with one `result: {json}` line: the CPU fields at the top level and
// a "gpu" object (null without a device) with TFLOP/s and ratios ember/cuBLAS, ember/torch.
//
//   bench_matmul [--sizes 256,512,1024] [--samples 9] [--gpu-sizes 4096,8192]
//                [--python python3] [--no-peer]
// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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


// ---- GPU section ----

struct GpuRow {
  std::string dtype;
  double n, ember, cublas, torch;  // TFLOP/s; torch 0 when the peer did not run
};

// A peer's TFLOP/s per (dtype, n), from its "peer: <dtype> <n> <TFLOP/s> <version>" lines:
// torch.matmul (bench/peers/torch_matmul.py) or cuBLAS called directly (cublas_gemm, built
// next to this binary in CUDA builds).
std::vector<GpuRow> run_peer(const std::string& cmd, std::string& version) {
  std::vector<GpuRow> rows;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return rows;
  char line[512], dt[16], ver[128];
  long long n = 0;
  double tflops = 0;
  while (std::fgets(line, sizeof line, p)) {
    if (std::sscanf(line, "peer: %15s %lld %lf %127s", dt, &n, &tflops, ver) == 4) {
      rows.push_back({dt, double(n), 0, 0, tflops});
      version = ver;
    } else {
      std::fputs(line, stdout);
    }
  }
  pclose(p);
  return rows;
}

std::string join(const std::vector<int64_t>& sizes) {
  std::string s;
  for (int64_t n : sizes) {
    if (!s.empty()) s += ',';
    s += std::to_string(n);
  }
  return s;
}

// ember's matmul TFLOP/s on the GPU, timed with CUDA events (median over samples), with the
// cuBLAS peer's figures filled in when it ran.
std::vector<GpuRow> run_gpu(const std::vector<int64_t>& sizes, int samples) {
  std::vector<GpuRow> rows;
  const ember::Device dev = ember::Device::cuda(0);
  ember::cuda::Event start({.enable_timing = true}), stop({.enable_timing = true});
  auto gpu_seconds = [&](auto&& f, int reps) {
    start.record();
    for (int r = 0; r < reps; ++r) f();
    stop.record();
    stop.synchronize();
    return double(start.elapsed_time(stop)) * 1e-3 / reps;
  };
  for (ember::DType dt : {ember::DType::bf16, ember::DType::f16}) {
    for (int64_t n : sizes) {
      ember::Tensor a = ember::randn({n, n}).to(dt).to(dev), b = ember::randn({n, n}).to(dt).to(dev);
      ember::Tensor e;
      auto run_ember = [&] { e = ember::matmul(a, b); };
      for (int w = 0; w < 3; ++w) run_ember();
      ember::cuda::synchronize();
      const int reps = std::max(1, int(0.05 / gpu_seconds(run_ember, 1)));
      std::vector<double> te;
      for (int s = 0; s < samples; ++s) te.push_back(gpu_seconds(run_ember, reps));
      const double flop = 2.0 * double(n) * double(n) * double(n);
      rows.push_back({ember::dtype_name(dt), double(n), flop / median(te) * 1e-12, 0, 0});
    }
  }
  return rows;
}

// The "gpu" JSON object, or null.
std::string gpu_json(const std::vector<GpuRow>& rows, const std::string& device, const std::string& torch_version) {
  if (rows.empty()) return "null";
  std::string s = "{\"device\":\"" + device + "\",\"peer\":\"" +
                  (torch_version.empty() ? std::string("none") : "torch " + torch_version) + "\"";
  for (const char* dt : {"bf16", "f16"}) {
    std::vector<double> sizes, ember, cublas, torch, r_cublas, r_torch;
    bool have_torch = true;
    for (const GpuRow& r : rows) {
      if (r.dtype != dt) continue;
      sizes.push_back(r.n), ember.push_back(r.ember), cublas.push_back(r.cublas), torch.push_back(r.torch);
      r_cublas.push_back(r.cublas > 0 ? r.ember / r.cublas : 0);
      r_torch.push_back(r.torch > 0 ? r.ember / r.torch : 0);
      have_torch = have_torch && r.torch > 0;
    }
    s += std::string(",\"") + dt + "\":{\"sizes\":" + json_list(sizes, 0) + ",\"ember_tflops\":" + json_list(ember, 1) +
         ",\"cublas_tflops\":" + json_list(cublas, 1) + ",\"ratio_cublas\":" + json_list(r_cublas, 3) +
         ",\"torch_tflops\":" + (have_torch ? json_list(torch, 1) : "null") +
         ",\"ratio_torch\":" + (have_torch ? json_list(r_torch, 3) : "null") + "}";
  }
  return s + "}";
}

// f32 FMA throughput in GFLOP/s of `threads` threads running at once: every thread runs chains
// of 256-bit FMAs, 12 independent ones (more than latency x pipes on current x86 cores), timed
// by itself; the rate is threads x the slowest thread's, best of 5 after a first region has
// started the team. 0 where the build has no FMA (not -march=native). AVX-512 would not raise
// it on the AMD Zen 4 CI machines (their 512-bit FMAs are double-pumped 256-bit units) and
// ember's build leaves it off (CMakeLists.txt); on an Intel server core with two 512-bit FMA
// units the machine's true peak is twice this. The machine's peak is threads x the 1-thread
// rate: on the 2-vCPU CI VMs the two threads at once read either that or exactly half of it,
// phase by phase (the host sometimes runs both vCPUs on one physical core's two hyperthreads,
// which share its FMA units), one cause of those machines' run-to-run swings.
double fma_gflops(int threads) {
#ifdef __FMA__
  constexpr int kChains = 12;
  constexpr int64_t kIters = 1 << 22;
  double best = 0;
#pragma omp parallel num_threads(threads)
  { (void)omp_get_thread_num(); }
  for (int sample = 0; sample < 5; ++sample) {
    float sink = 0;
    double slowest = 0;
#pragma omp parallel num_threads(threads) reduction(+ : sink) reduction(max : slowest)
    {
      const auto t0 = Clock::now();
      __m256 acc[kChains];
      for (int k = 0; k < kChains; ++k) acc[k] = _mm256_set1_ps(float(k + omp_get_thread_num()) * 1e-3f);
      const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
      for (int64_t i = 0; i < kIters; ++i)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm256_fmadd_ps(acc[k], m, a);
      __m256 total = acc[0];
      for (int k = 1; k < kChains; ++k) total = _mm256_add_ps(total, acc[k]);
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, total);
      for (float v : lanes) sink += v;
      slowest = std::max(slowest, seconds_since(t0));
    }
    const double flop = double(threads) * double(kIters) * kChains * 8 * 2;
    if (std::isfinite(sink) && slowest > 0) best = std::max(best, flop / slowest * 1e-9);
  }
  return best;
#else
  (void)threads;
  return 0;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes{256, 512, 1024}, gpu_sizes{4096, 8192};
  int samples = 9;
  std::string python = "python3";
  bool no_peer = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--no-peer")) no_peer = true;
    else if (i + 1 >= argc) break;
    else if (!std::strcmp(argv[i], "--sizes")) sizes = parse_sizes(argv[++i]);
    else if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--gpu-sizes")) gpu_sizes = parse_sizes(argv[++i]);
    else if (!std::strcmp(argv[i], "--python")) python = argv[++i];
  }
  ember::manual_seed(0);
  const int threads = Eigen::nbThreads();
  const double one = fma_gflops(1), concurrent = fma_gflops(threads), peak = threads * one;
  std::printf("f32 FMA peak (256-bit FMA chains): %.1f GFLOP/s = %d x %.1f (1 thread); %d threads at once now: "
              "%.1f%s\n",
              peak, threads, one, threads, concurrent,
              threads > 1 && concurrent < 0.75 * peak ? " (threads sharing a physical core: expect slow runs)" : "");
  std::printf("matmul f32 (CPU, %d threads), median of %d samples\n", threads, samples);
  std::printf("%8s %14s %14s %8s %10s\n", "n", "ember GFLOP/s", "Eigen GFLOP/s", "ratio", "% of peak");

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
    std::printf("%8lld %14.1f %14.1f %8.3f %9.1f%%\n", (long long)n, ge, gg, ge / gg, peak > 0 ? 100 * ge / peak : 0.0);
  }

  // GPU: ember (cuBLASLt) vs cuBLAS directly vs torch.matmul.
  std::vector<GpuRow> gpu_rows;
  std::string device_name, torch_version;
  if (ember::cuda::is_available() && !gpu_sizes.empty()) {
    device_name = ember::cuda::device_name(0);
    gpu_rows = run_gpu(gpu_sizes, samples);
    std::string cublas_version;
    const std::string cublas_bin = std::string(EMBER_BINARY_DIR) + "/bin/cublas_gemm";
    for (const GpuRow& c : run_peer(cublas_bin + " --dtypes bf16,f16 --sizes " + join(gpu_sizes) +
                                        " --samples " + std::to_string(samples), cublas_version))
      for (GpuRow& r : gpu_rows)
        if (r.dtype == c.dtype && r.n == c.n) r.cublas = c.torch;
    if (cublas_version.empty()) std::printf("cuBLAS peer (%s) did not run\n", cublas_bin.c_str());
    if (!no_peer) {
      for (const GpuRow& t : run_peer(python + " " + EMBER_SOURCE_DIR + "/bench/peers/torch_matmul.py "
                                          "--dtypes bf16,f16 --sizes " + join(gpu_sizes) + " --samples " +
                                          std::to_string(samples), torch_version))
        for (GpuRow& r : gpu_rows)
          if (r.dtype == t.dtype && r.n == t.n) r.torch = t.torch;
      if (torch_version.empty()) std::printf("torch peer did not run (is torch importable by %s?)\n", python.c_str());
    }
    std::printf("\nmatmul on %s, median of %d samples (TFLOP/s)\n", device_name.c_str(), samples);
    std::printf("%6s %8s %10s %10s %10s %12s %12s\n", "dtype", "n", "ember", "cuBLAS", "torch", "ember/cuBLAS",
                "ember/torch");
    for (const GpuRow& r : gpu_rows)
      std::printf("%6s %8.0f %10.1f %10.1f %10.1f %12.3f %12.3f\n", r.dtype.c_str(), r.n, r.ember, r.cublas, r.torch,
                  r.cublas > 0 ? r.ember / r.cublas : 0.0, r.torch > 0 ? r.ember / r.torch : 0.0);
  } else {
    std::printf("\nno CUDA device: GPU section skipped\n");
  }
  std::printf("result: {\"bench\":\"matmul\",\"dtype\":\"f32\",\"threads\":%d,\"cpu_fma_peak_gflops\":%.1f,\"cpu_fma_concurrent_gflops\":%.1f,"
              "\"sizes\":%s,\"ember_gflops\":%s,\"eigen_gflops\":%s,\"ratio\":%s,\"gpu\":%s}\n",
              threads, peak, concurrent, json_list(size_list, 0).c_str(), json_list(ember_gflops, 2).c_str(),
              json_list(eigen_gflops, 2).c_str(), json_list(ratios, 3).c_str(),
              gpu_json(gpu_rows, device_name, torch_version).c_str());
  return 0;
}
