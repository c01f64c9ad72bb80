// Device-agnostic view of the CUDA runtime. Defined in core/cuda (CUDA builds) or
// core/cuda_stub (CPU-only builds, where is_available() is false and the rest throws).
#pragma once

#include <cstddef>
#include <string>

#include "ember/cuda_stream.h"
#include "ember/device.h"
#include "ember/storage.h"

namespace ember::cuda {

// True when this build has CUDA and at least one device is visible.
bool is_available();
int device_count();
// True in the CUDA simulation build (CMake EMBER_CUDA_SIM, issue 39): the "device" is the CPU
// running ember's kernels through core/cuda_sim. Tests shrink shapes and skip timing by it.
bool is_simulated();
std::string device_name(int device = 0);
// Waits for all work on `device` (all devices when -1).
void synchronize(int device = -1);
// "CUDA 13.0" style runtime version, or "none" in a CPU-only build.
std::string runtime_version();
// The newest CUDA version the installed driver supports ("CUDA 13.0"), or "none" when this
// build has no CUDA or the machine has no driver. Never throws.
std::string driver_version();
// The same versions as numbers (1000 * major + 10 * minor, e.g. 13000); 0 for "none".
int runtime_version_number();
int driver_version_number();

// What ember-info shows about a device. Memory sizes in bytes, clocks in kHz.
struct DeviceProperties {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;              // compute capability
  int multiprocessor_count = 0;
  size_t total_memory = 0;
  size_t free_memory = 0;                // cudaMemGetInfo at the time of the query
  int l2_cache_size = 0;
  int clock_rate_khz = 0;                // peak SM clock
  int memory_clock_rate_khz = 0;         // peak memory clock
  int memory_bus_width = 0;              // bits
  int max_threads_per_multiprocessor = 0;
  int warp_size = 0;
  size_t shared_memory_per_block = 0;         // without opt-in
  size_t shared_memory_per_block_optin = 0;   // with cudaFuncAttributeMaxDynamicSharedMemorySize
  size_t shared_memory_per_multiprocessor = 0;
  bool ecc_enabled = false;
  std::string pci_bus_id;                // "0000:65:00.0"

  // Peak DRAM bandwidth in bytes/s: double data rate x bus width.
  double peak_memory_bandwidth() const {
    return 2.0 * memory_clock_rate_khz * 1e3 * (memory_bus_width / 8.0);
  }
};
// Throws DeviceError when `device` is not visible (always in a CPU-only build).
DeviceProperties get_device_properties(int device = 0);

// Note [deferred device checks] (core/cuda/include/ember/cuda/device_checks.h): CUDA kernels
// check index bounds and cross-entropy targets themselves, and the IndexError is raised at the
// next point where the host waits for the device anyway (item(), cpu(), synchronize()), so a
// training step never waits for a check. set_sync_checks(true), or EMBER_CUDA_SYNC_CHECKS=1 in
// the environment, makes each checked op wait and raise at once instead (for debugging).
void set_sync_checks(bool on);
bool sync_checks();

namespace detail {
// Whether `device`'s primary context exists (the driver's cuDevicePrimaryCtxGetState; true
// when that cannot be asked; false in a CPU-only build). Never throws; once true for a device,
// answered from a cache. DeviceGuard restores only devices that have one.
bool primary_context_active(int device) noexcept;
// Throws the first fault a CUDA kernel recorded since the last call (IndexError naming the
// op), clearing it; a no-op when there is none, while this thread holds a
// DeferredErrorsHeld, and in a CPU-only build. The synchronization points call it.
void raise_deferred_errors();
// For library code that synchronizes for its own purposes and catches Error around it (the
// profiler's clock anchors, a checkpoint loader's fallback): while one is alive on a thread,
// its synchronizations leave a recorded fault pending for the user's next synchronization,
// instead of raising it into a catch that would swallow it.
class DeferredErrorsHeld {
 public:
  DeferredErrorsHeld();
  ~DeferredErrorsHeld();
  DeferredErrorsHeld(const DeferredErrorsHeld&) = delete;
  DeferredErrorsHeld& operator=(const DeferredErrorsHeld&) = delete;
};
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
