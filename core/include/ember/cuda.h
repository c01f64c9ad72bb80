// Device-agnostic view of the CUDA runtime. Defined in core/cuda (CUDA builds) or
// core/cuda_stub (CPU-only builds, where is_available() is false and the rest throws).
#pragma once

#include <cstddef>
#include <string>

#include "ember/device.h"
#include "ember/storage.h"

namespace ember::cuda {

// True when this build has CUDA and at least one device is visible.
bool is_available();
int device_count();
std::string device_name(int device = 0);
// Waits for all work on `device` (all devices when -1).
void synchronize(int device = -1);
// "CUDA 13.0" style runtime version, or "none" in a CPU-only build.
std::string runtime_version();

namespace detail {
Allocator* allocator(int device);
// Copies nbytes between any two of host and device memory (host memory is pageable or
// pinned). Blocking unless non_blocking and the host side is pinned.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking = false);
// Throws DeviceError naming `op` unless this build and machine can use `device`.
void check_device(const char* op, Device device);
// Page-locked host memory (cudaHostAlloc) for Tensor::pin_memory: copies from it to a GPU
// can be asynchronous. host_alloc returns nullptr for 0 bytes and throws DeviceError when no
// device is visible. host_free never throws (it runs from Storage's destructor): a failure
// is reported on stderr.
void* host_alloc(size_t nbytes);
void host_free(void* ptr);
// True when `ptr` lies in page-locked memory CUDA knows (false without CUDA).
bool is_pinned(const void* ptr);
}  // namespace detail

}  // namespace ember::cuda
