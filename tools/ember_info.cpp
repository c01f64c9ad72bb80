// ember-info: what this ember build is and what it can see (version, CUDA compiled in or
// not, CPU threads, CUDA devices). Exits 0 on a machine without a GPU: "no device" is an
// answer, not an error. The CUDA backend issue extends this towards an nvidia-smi-like view.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include <ember/ember.h>

#ifndef EMBER_VERSION_STRING
#define EMBER_VERSION_STRING "unknown"
#endif

int main() {
  try {
    const std::string runtime = ember::cuda::runtime_version();
    const bool cuda_built = runtime != "none";
    std::printf("ember %s\n", EMBER_VERSION_STRING);
    std::printf("build:        CUDA %s%s\n", cuda_built ? "compiled in, runtime " : "not compiled in",
                cuda_built ? runtime.c_str() : "");
    std::printf("CPU threads:  %d OpenMP (max), %u hardware\n", omp_get_max_threads(),
                std::thread::hardware_concurrency());

    const int count = ember::cuda::device_count();
    if (!cuda_built) {
      std::printf("CUDA devices: none (this build is CPU-only)\n");
    } else if (count == 0) {
      std::printf("CUDA devices: none visible (no GPU or no driver): CPU only\n");
    } else {
      std::printf("CUDA devices: %d\n", count);
      for (int i = 0; i < count; ++i)
        std::printf("  cuda:%d  %s\n", i, ember::cuda::device_name(i).c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-info: %s\n", e.what());
    return 1;
  }
}
