// cuBLAS peer of bench_matmul: square GEMMs through cublasGemmEx called directly (f32
// accumulation, default algorithm), timed with CUDA events. Built only in CUDA builds
// (bench/peers/CMakeLists.txt) and run by bench_matmul as a subprocess, so ember's own
// sources stay free of CUDA conditionals.
//
//   cublas_gemm --dtypes bf16,f16 --sizes 4096,8192 --samples 9
//
// Prints one line per case: "peer: <dtype> <n> <TFLOP/s> cublas-<version>".
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK_CUDA(expr)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "cublas_gemm: %s failed: %s\n", #expr, cudaGetErrorString(e_));   \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_CUBLAS(expr)                                                                    \
  do {                                                                                        \
    cublasStatus_t s_ = (expr);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "cublas_gemm: %s failed: %s\n", #expr, cublasGetStatusString(s_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

static std::vector<std::string> split(const char* s) {
  std::vector<std::string> out;
  std::string cur;
  for (; *s; ++s) {
    if (*s == ',') out.push_back(cur), cur.clear();
    else cur += *s;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int main(int argc, char** argv) {
  std::vector<std::string> dtypes{"bf16", "f16"}, sizes{"4096", "8192"};
  int samples = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--dtypes")) dtypes = split(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--sizes")) sizes = split(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--samples")) samples = std::max(1, std::atoi(argv[i + 1]));
  }
  int version = 0;
  cublasHandle_t handle = nullptr;
  CHECK_CUBLAS(cublasCreate(&handle));
  CHECK_CUBLAS(cublasGetVersion(handle, &version));
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  for (const std::string& dt : dtypes) {
    const cudaDataType type = dt == "bf16" ? CUDA_R_16BF : CUDA_R_16F;
    for (const std::string& size : sizes) {
      const int n = std::atoi(size.c_str());
      const size_t bytes = size_t(n) * size_t(n) * 2;
      void *a = nullptr, *b = nullptr, *c = nullptr;
      CHECK_CUDA(cudaMalloc(&a, bytes));
      CHECK_CUDA(cudaMalloc(&b, bytes));
      CHECK_CUDA(cudaMalloc(&c, bytes));
      // 0x3c00 is 1.0 in f16 and a small normal number in bf16: finite, non-zero inputs.
      CHECK_CUDA(cudaMemset(a, 0x3c, bytes));
      CHECK_CUDA(cudaMemset(b, 0x3c, bytes));
      const float alpha = 1, beta = 0;
      auto gemm = [&] {
        CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b, type, n, a, type, n,
                                  &beta, c, type, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      };
      for (int w = 0; w < 3; ++w) gemm();
      CHECK_CUDA(cudaDeviceSynchronize());
      // Repetitions so one sample takes ~50 ms.
      CHECK_CUDA(cudaEventRecord(start));
      gemm();
      CHECK_CUDA(cudaEventRecord(stop));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      const int reps = std::max(1, int(50.0 / std::max(ms, 1e-3f)));
      std::vector<double> t;
      for (int s = 0; s < samples; ++s) {
        CHECK_CUDA(cudaEventRecord(start));
        for (int r = 0; r < reps; ++r) gemm();
        CHECK_CUDA(cudaEventRecord(stop));
        CHECK_CUDA(cudaEventSynchronize(stop));
        CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
        t.push_back(double(ms) * 1e-3 / reps);
      }
      std::sort(t.begin(), t.end());
      const double flop = 2.0 * double(n) * double(n) * double(n);
      std::printf("peer: %s %d %.2f cublas-%d\n", dt.c_str(), n, flop / t[t.size() / 2] * 1e-12, version);
      CHECK_CUDA(cudaFree(a));
      CHECK_CUDA(cudaFree(b));
      CHECK_CUDA(cudaFree(c));
    }
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUBLAS(cublasDestroy(handle));
  return 0;
}
