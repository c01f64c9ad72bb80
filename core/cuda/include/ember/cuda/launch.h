// The one launch point of ember's kernels: every kernel in ops/cuda is started through
// launch_kernel, never with a triple-chevron at the call site. On the GPU it is that launch;
// in the CUDA simulation build (EMBER_CUDA_SIM, issue 39) the same call runs the kernel on
// the CPU through the SIMT layer (ember/cuda_sim/simt.h), with the launch checked as an H100
// checks it. Only code in core/cuda and ops/cuda includes this header.
//
// The arguments convert to the kernel's parameter types as in a call; a failed launch is
// reported by the EMBER_CUDA_CHECK_LAUNCH that follows every launch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#ifdef EMBER_CUDA_SIM
#include "ember/cuda_sim/simt.h"
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
