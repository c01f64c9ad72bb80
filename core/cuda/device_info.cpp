// CUDA build: device properties and driver/runtime versions for ember-info and users.
//
// CUDA 13 removed clockRate and memoryClockRate (among others) from cudaDeviceProp, so
// clocks come from cudaDeviceGetAttribute, which every CUDA version since 5 has. Library
// versions (cuBLAS, cuDNN, NCCL) are queried in tools/, which links those libraries; core
// links only the CUDA runtime.
#include <string>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"

namespace ember::cuda {

namespace {
std::string version_string(int v) {
  if (v <= 0) return "none";
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

int attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}
}  // namespace

int driver_version_number() {
  int v = 0;
  // Reports 0 (with success) when no driver is installed; an error also means "none".
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return v;
}

int runtime_version_number() {
  int v = 0;
  EMBER_CUDA_CHECK(cudaRuntimeGetVersion(&v));
  return v;
}

std::string driver_version() { return version_string(driver_version_number()); }

DeviceProperties get_device_properties(int device) {
  detail::check_device("get_device_properties", Device::cuda(device));
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

  DeviceProperties p;
  p.index = device;
  p.name = prop.name;
  p.major = prop.major;
  p.minor = prop.minor;
  p.multiprocessor_count = prop.multiProcessorCount;
  p.total_memory = prop.totalGlobalMem;
  p.l2_cache_size = prop.l2CacheSize;
  p.clock_rate_khz = attribute(cudaDevAttrClockRate, device);
  p.memory_clock_rate_khz = attribute(cudaDevAttrMemoryClockRate, device);
  p.memory_bus_width = prop.memoryBusWidth;
  p.max_threads_per_multiprocessor = prop.maxThreadsPerMultiProcessor;
  p.warp_size = prop.warpSize;
  p.shared_memory_per_block = prop.sharedMemPerBlock;
  p.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  p.shared_memory_per_multiprocessor = prop.sharedMemPerMultiprocessor;
  p.ecc_enabled = prop.ECCEnabled != 0;

  char bus_id[32] = {};
  EMBER_CUDA_CHECK(cudaDeviceGetPCIBusId(bus_id, int(sizeof(bus_id)), device));
  p.pci_bus_id = bus_id;

  size_t free_bytes = 0, total_bytes = 0;
  {
    const detail::DeviceGuard guard(device);  // cudaMemGetInfo answers for the current device
    EMBER_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  }
  p.free_memory = free_bytes;
  return p;
}

}  // namespace ember::cuda
