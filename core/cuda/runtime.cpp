// CUDA build: device queries, the device allocator (the caching allocator of
// core/cuda/caching_allocator.cpp) and byte copies.
#include <cstdio>
#include <cstring>

#include "ember/cuda.h"
#include "ember/cuda/caching_allocator.h"
#include "ember/cuda/check.h"

namespace ember::cuda {

namespace {
int visible_devices() {
  static const int count = [] {
    int n = 0;
    // No driver or no device is an answer ("not available"), not an error.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

}  // namespace

bool is_available() { return visible_devices() > 0; }
int device_count() { return visible_devices(); }

std::string device_name(int device) {
  detail::check_device("device_name", Device::cuda(device));
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void synchronize(int device) {
  if (!is_available()) return;
  if (device < 0) {
    for (int d = 0; d < device_count(); ++d) synchronize(d);
    return;
  }
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
}

std::string runtime_version() {
  int v = 0;
  EMBER_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

namespace detail {
void check_device(const char* op, Device device) {
  if (device.is_cpu()) return;
  EMBER_CHECK(visible_devices() > 0, DeviceError, "[", op, "] ", device,
              " requested but no CUDA device is visible");
  EMBER_CHECK(device.index < visible_devices(), DeviceError, "[", op, "] ", device,
              " requested but only ", visible_devices(), " CUDA device(s) are visible");
}

Allocator* allocator(int index) {
  // The caching allocator (core/cuda/caching_allocator.cpp); it checks the index.
  return &caching_allocator(index);
}

// Copies run on the current stream of the CUDA side (the destination's for device-to-device),
// so they are ordered with the kernels that produce and consume the data. The host waits for
// that stream only when host memory is involved and the caller may touch it at once: always,
// except for a non_blocking copy whose host side is pinned (pageable memory goes through
// CUDA's staging buffers, whose asynchronous completion the caller cannot observe). A copy
// between two devices makes the destination stream wait for the source device's current
// stream first, and the source stream wait for the copy after, so neither side reuses memory
// too early.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  check_device("copy", dst_device);
  check_device("copy", src_device);
  const int device = dst_device.is_cuda() ? dst_device.index : src_device.index;
  EMBER_CUDA_CHECK(cudaSetDevice(device));
  const Stream stream = current_stream(device);
  const bool cross_device = dst_device.is_cuda() && src_device.is_cuda() &&
                            dst_device.index != src_device.index;
  if (cross_device) stream.wait_stream(current_stream(src_device.index));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream.handle()));
  if (cross_device) current_stream(src_device.index).wait_stream(stream);
  if (dst_device.is_cuda() && src_device.is_cuda()) return;  // stream order suffices
  const void* host = dst_device.is_cpu() ? dst : src;
  if (!(non_blocking && is_pinned(host))) stream.synchronize();
}

void* host_alloc(size_t nbytes) {
  check_device("pin_memory", Device::cuda(0));
  if (nbytes == 0) return nullptr;
  void* p = nullptr;
  // Portable: counted as pinned by every device's context, not only the current one.
  cudaError_t err = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw OutOfMemoryError(str("[pin_memory] cannot allocate ", uint64_t(nbytes),
                               " bytes of page-locked host memory"));
  }
  EMBER_CUDA_CHECK(err);
  return p;
}

void host_free(void* ptr) {
  if (!ptr) return;
  // Runs from Storage's destructor, so it reports instead of throwing. At exit the runtime
  // may already be unloading: then there is nothing left to wait for or free.
  auto failed = [](const char* call, cudaError_t err) {
    if (err == cudaSuccess || err == cudaErrorCudartUnloading) return false;
    (void)cudaGetLastError();
    std::fprintf(stderr, "[pin_memory] %s failed: %s\n", call, cudaGetErrorString(err));
    return true;
  };
  // The runtime does not promise that cudaFreeHost waits for an asynchronous copy still
  // reading this block (to(cuda, non_blocking=true)), and it cannot know which device the
  // copy went to: wait for every device, then restore this thread's current device.
  // (A caching host allocator with events will remove this wait once streams exist.)
  int current = 0;
  if (!failed("cudaGetDevice", cudaGetDevice(&current))) {
    for (int d = 0; d < visible_devices(); ++d) {
      if (failed("cudaSetDevice", cudaSetDevice(d))) break;
      if (failed("cudaDeviceSynchronize", cudaDeviceSynchronize())) break;
    }
    failed("cudaSetDevice", cudaSetDevice(current));
  }
  failed("cudaFreeHost", cudaFreeHost(ptr));
}

bool is_pinned(const void* ptr) {
  if (!ptr || !is_available()) return false;
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {  // memory CUDA has never seen (older runtimes say so)
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return attr.type == cudaMemoryTypeHost;
}
}  // namespace detail
}  // namespace ember::cuda
