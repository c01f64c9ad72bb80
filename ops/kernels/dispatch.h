// Private to ops/: picks the backend namespace for a device. Every family declares its kernel
// signatures once in ops/kernels/<family>.h, for both ember::ops::cpu and ember::ops::cuda;
// a CPU-only build links ops/cuda_stub/<family>.cpp, whose kernels throw.
#pragma once

#include "ember/cuda.h"

#define EMBER_DISPATCH_KERNEL(device, kernel, ...)                \
  ((device).is_cuda() ? ::ember::ops::cuda::kernel(__VA_ARGS__)   \
                      : ::ember::ops::cpu::kernel(__VA_ARGS__))

// Declares a family's kernels in both backend namespaces from one list.
#define EMBER_DECLARE_KERNELS(LIST)  \
  namespace ember::ops::cpu {        \
  LIST                               \
  }                                  \
  namespace ember::ops::cuda {       \
  LIST                               \
  }

// Body of a stub kernel in a build without CUDA.
#define EMBER_NO_CUDA(op)                                                         \
  throw ::ember::NotImplementedError("[" op "] has no CUDA implementation in this build")
