// The CUDA caching allocator at the level of raw handles, for core/cuda and ops/cuda: the
// per-device CachingAllocator (its logic is device-agnostic, core/src/caching_allocator.cpp;
// core/cuda/caching_allocator.cpp plugs in cudaMalloc, cudaFree and events) and
// record_stream on a cudaStream_t. Users see ember/cuda_memory.h instead.
#pragma once

#include <cuda_runtime.h>

#include "ember/caching_allocator.h"

namespace ember {
class Tensor;
}

namespace ember::cuda::detail {

// The caching allocator of `device` (created on first use, never destroyed, so tensors that
// die during static destruction still have an allocator). Throws DeviceError for a device
// that is not visible.
CachingAllocator& caching_allocator(int device);

// `tensor`'s memory is also used by work queued on `stream`: its block is not reused before
// that work has completed (Note [caching allocator]). Call it whenever a kernel or copy on a
// stream other than the one current at the tensor's allocation touches it. Throws
// DeviceError for a CPU tensor; ignores memory that did not come from the allocator.
void record_stream(const Tensor& tensor, cudaStream_t stream);

}  // namespace ember::cuda::detail
