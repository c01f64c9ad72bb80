// The one launch point of ember's kernels: every kernel in ops/cuda is started through
// launch_kernel, never with a triple-chevron at the call site. On the GPU it is that launch;
// in the CUDA simulation build (EMBER_CUDA_SIM, issue 39) the same call runs the kernel on
// the CPU through the SIMT layer (ember/cuda_sim/simt.h), with the launch checked as an H100
// checks it. Only code in core/cuda and ops/cuda includes this header.
//
// The arguments convert to the kernel's parameter types as in a call; a failed launch is
// reported by the EMBER_CUDA_CHECK_LAUNCH that follows every launch. Kernels declare their
// dynamic shared memory with EMBER_DYNAMIC_SHARED_MEMORY for the same reason.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#ifdef EMBER_CUDA_SIM
#include "ember/cuda_sim/simt.h"
#endif

// Declares `name`, the running block's dynamic shared memory (the bytes the launch asked for),
// as a 16-byte-aligned unsigned char array: `extern __shared__` on the GPU, the simulation's
// per-launch buffer in a simulation build (host C++ has no extern shared arrays).
#ifdef EMBER_CUDA_SIM
#define EMBER_DYNAMIC_SHARED_MEMORY(name) unsigned char* const name = ::ember::cuda::sim::dynamic_shared_memory()
#else
#define EMBER_DYNAMIC_SHARED_MEMORY(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace ember::cuda {

template <class... Params, class... Args>
inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_shared,
                          cudaStream_t stream, Args&&... args) {
#ifdef EMBER_CUDA_SIM
  try {
    ::ember::cuda::sim::launch(kernel, grid, block, dynamic_shared, stream, std::forward<Args>(args)...);
  } catch (const ::ember::cuda::sim::LaunchError& e) {  // refused, as the GPU would: the code is latched
    ::ember::cuda::sim::set_last_error(e.error);
  }
#else
  kernel<<<grid, block, dynamic_shared, stream>>>(std::forward<Args>(args)...);
#endif
}

}  // namespace ember::cuda
