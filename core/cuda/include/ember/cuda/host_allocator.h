// The pinned-memory cache behind Tensor::pin_memory at the level of raw handles, for
// core/cuda (Note [caching host allocator] in ember/caching_host_allocator.h; the CUDA
// backend is core/cuda/host_allocator.cpp).
#pragma once

#include <cuda_runtime.h>

#include "ember/caching_host_allocator.h"

namespace ember::cuda::detail {

// The process's pinned-memory cache (created on first use, never destroyed, so pinned
// tensors that die during static destruction still have it).
CachingHostAllocator& host_allocator();

// Records that `device` is in use by this process (a device allocation or a copy happened
// there). Page-locked memory is then allocated in that device's context, so pinning never
// creates a context on another GPU (the memory is portable: every context can use it).
void note_device_in_use(int device);

}  // namespace ember::cuda::detail
