// CUDA build: device queries, the device allocator (the caching allocator of
// core/cuda/caching_allocator.cpp) and byte copies. Every device switch is a DeviceGuard,
// which puts the caller's device back (pinned memory: core/cuda/host_allocator.cpp).
#include <cuda.h>

#include <atomic>
#include <cstring>
#include <utility>

#include "ember/cuda.h"
#include "ember/cuda/caching_allocator.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/host_allocator.h"
#include "ember/cuda/stream_handle.h"

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

bool is_simulated() {
#ifdef EMBER_CUDA_SIM
  return true;
#else
  return false;
#endif
}

std::string device_name(int device) {
  detail::check_device("device_name", Device::cuda(device));
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

void synchronize(int device) {
  if (!is_available()) return;
  if (device >= 0) detail::check_device("synchronize", Device::cuda(device));
  // Every device first, then a recorded fault (Note [deferred device checks]): raising after
  // the first would leave the others unwaited.
  for (int d = device < 0 ? 0 : device; d < (device < 0 ? device_count() : device + 1); ++d) {
    // All devices: only those this process has a context on, the only ones that can have work.
    // Synchronizing another would create its context (~0.5 GB, and an error on a GPU in
    // exclusive-process mode that another rank holds): issue 40, item 6.
    if (device < 0 && !detail::primary_context_active(d)) continue;
    const detail::DeviceGuard guard(d);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  }
  detail::raise_deferred_errors();
}

std::string runtime_version() {
  int v = 0;
  EMBER_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

namespace detail {

bool primary_context_active(int device) noexcept {
  static std::atomic<uint64_t> known_active{0};  // devices 0..63 seen with a context
  if (device >= 0 && device < 64 && (known_active.load(std::memory_order_relaxed) >> device & 1u)) return true;
  // The driver API through the runtime's entry points: no link to libcuda.
  using GetFn = CUresult (*)(CUdevice*, int);
  using StateFn = CUresult (*)(CUdevice, unsigned int*, int*);
  static const std::pair<GetFn, StateFn> fns = [] {
    void* get = nullptr;
    void* state = nullptr;
    cudaDriverEntryPointQueryResult q1{}, q2{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 12000, cudaEnableDefault, &q1) != cudaSuccess ||
        cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000, cudaEnableDefault, &q2) !=
            cudaSuccess ||
        q1 != cudaDriverEntryPointSuccess || q2 != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return std::pair<GetFn, StateFn>{nullptr, nullptr};
    }
    return std::pair<GetFn, StateFn>{reinterpret_cast<GetFn>(get), reinterpret_cast<StateFn>(state)};
  }();
  if (fns.first == nullptr || fns.second == nullptr) return true;  // cannot tell: restore
  CUdevice dev{};
  unsigned int flags = 0;
  int active = 0;
  if (fns.first(&dev, device) != CUDA_SUCCESS || fns.second(dev, &flags, &active) != CUDA_SUCCESS) return true;
  if (active && device >= 0 && device < 64) known_active.fetch_or(uint64_t(1) << device, std::memory_order_relaxed);
  return active != 0;
}

void check_device(const char* op, Device device) {
  if (device.is_cpu()) return;
  EMBER_CHECK(visible_devices() > 0, DeviceError, "[", op, "] ", device,
              " requested but no CUDA device is visible");
  // Negative only when `index` was written directly (the constructor refuses it); it would
  // index the per-device tables out of bounds.
  EMBER_CHECK(device.index >= 0 && device.index < visible_devices(), DeviceError, "[", op, "] ",
              device, " requested but only ", visible_devices(), " CUDA device(s) are visible");
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
// too early. An asynchronous copy that touches a block of the pinned-memory cache records its
// stream on the block, so that the block is not reused before the copy has completed.
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
  const DeviceGuard guard(device);
  note_device_in_use(device);
  const Stream stream = current_stream(device);
  const bool cross_device = dst_device.is_cuda() && src_device.is_cuda() &&
                            dst_device.index != src_device.index;
  if (cross_device) stream.wait_stream(current_stream(src_device.index));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream.handle()));
  if (cross_device) current_stream(src_device.index).wait_stream(stream);
  if (dst_device.is_cuda() && src_device.is_cuda()) return;  // stream order suffices
  const void* host = dst_device.is_cpu() ? dst : src;
  if (non_blocking &&
      (host_allocator().record_use(host, device, stream.handle()) || is_pinned(host)))
    return;
  stream.synchronize();
}

}  // namespace detail
}  // namespace ember::cuda
