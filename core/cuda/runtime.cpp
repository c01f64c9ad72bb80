// CUDA build: device queries, a plain cudaMalloc allocator and byte copies. The caching
// allocator, streams and graphs arrive with the CUDA backend issue; until then every
// allocation goes straight to cudaMalloc and copies use the legacy default stream.
#include <cstring>

#include "ember/cuda.h"
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

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError(str("[allocate] CUDA out of memory on cuda:", device_,
                                 " requesting ", uint64_t(nbytes), " bytes"));
    }
    EMBER_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (ptr) EMBER_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  int device_;
};
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
  check_device("allocate", Device::cuda(index));
  static CudaAllocator* allocators[128] = {};
  if (!allocators[index]) allocators[index] = new CudaAllocator(index);  // lives forever
  return allocators[index];
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool non_blocking) {
  if (nbytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, nbytes);
    return;
  }
  check_device("copy", dst_device);
  check_device("copy", src_device);
  EMBER_CUDA_CHECK(cudaSetDevice(dst_device.is_cuda() ? dst_device.index : src_device.index));
  if (non_blocking) {
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, nullptr));
  } else {
    EMBER_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault));
  }
}
}  // namespace detail
}  // namespace ember::cuda
