// The CUDA backend of the caching allocator (Note [caching allocator]) and the public
// memory API of ember/cuda_memory.h.
//
// Invariants:
// - One CachingAllocator per visible device, created on first use and never destroyed.
// - Every backend call first makes the allocator's device current and restores the caller's
//   device afterwards, so allocating on cuda:1 never moves a thread that works on cuda:0.
// - cudaMalloc may run while this thread captures a graph (a block the capture needs that no
//   cached segment can serve): it is made in relaxed capture mode, which CUDA allows; the
//   new memory is not part of the graph and stays reserved by the graph's private pool.
//   cudaFree never runs during a capture (the allocator refuses to release then).
#include "ember/cuda/caching_allocator.h"

#include <cstdio>
#include <string>
#include <vector>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/host_allocator.h"
#include "ember/cuda/stream_handle.h"
#include "ember/cuda_memory.h"
#include "ember/tensor.h"

namespace ember::cuda {

namespace {

using detail::DeviceGuard;

class CudaBackend final : public CachingAllocator::Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  std::string device_name() const override { return "cuda:" + std::to_string(device_); }

  void* malloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    // Relaxed for this one call (see the file comment): in thread-local capture mode a plain
    // cudaMalloc on the capturing thread would invalidate the capture.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // out of memory is an answer, not a sticky error
      return nullptr;
    }
    EMBER_CUDA_CHECK(err);
    detail::note_device_in_use(device_);
    return p;
  }

  void free(void* ptr) override {
    DeviceGuard guard(device_);
    const cudaError_t err = cudaFree(ptr);
    if (err == cudaErrorCudartUnloading) return;  // at exit: the context is going anyway
    EMBER_CUDA_CHECK(err);
  }

  CachingAllocator::StreamHandle current_stream() override {
    return detail::current_stream_handle(device_);
  }

  CachingAllocator::EventHandle event_create() override {
    DeviceGuard guard(device_);
    cudaEvent_t ev = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
  }

  void event_destroy(CachingAllocator::EventHandle event) override {
    const cudaError_t err = cudaEventDestroy(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorCudartUnloading) return;
    EMBER_CUDA_CHECK(err);
  }

  void event_record(CachingAllocator::EventHandle event,
                    CachingAllocator::StreamHandle stream) override {
    DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }

  bool event_query(CachingAllocator::EventHandle event) override {
    return detail::query_completed(cudaEventQuery(static_cast<cudaEvent_t>(event)));
  }

  void event_synchronize(CachingAllocator::EventHandle event) override {
    EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }

  void synchronize() override {
    DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  }

  uint64_t capture_id(CachingAllocator::StreamHandle stream) override {
    DeviceGuard guard(device_);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    const cudaError_t err = cudaStreamGetCaptureInfo(static_cast<cudaStream_t>(stream), &status, &id);
    if (err == cudaErrorStreamCaptureImplicit) {  // the legacy stream beside a capture: not one
      (void)cudaGetLastError();
      return 0;
    }
    EMBER_CUDA_CHECK(err);
    return status == cudaStreamCaptureStatusActive ? uint64_t(id) : 0;  // the id is valid only then
  }

 private:
  int device_;
};

class UncachedAllocator final : public Allocator {
 public:
  explicit UncachedAllocator(int device) : device_(device) {}
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    DeviceGuard guard(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw OutOfMemoryError(str("[allocate] out of memory on cuda:", device_,
                                 ": tried to allocate ", format_bytes(nbytes),
                                 " (uncached allocator)"));
    }
    EMBER_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* ptr, size_t) override {
    if (!ptr) return;
    try {
      DeviceGuard guard(device_);
      const cudaError_t err = cudaFree(ptr);
      if (err != cudaSuccess && err != cudaErrorCudartUnloading) {
        (void)cudaGetLastError();
        std::fprintf(stderr, "[free] cudaFree failed: %s\n", cudaGetErrorString(err));
      }
    } catch (const std::exception& e) {  // it runs from Storage's destructor
      std::fprintf(stderr, "[free] %s\n", e.what());
    }
  }

 private:
  int device_;
};

// -1 means the current device; no device at all is reported as -1 (all zeros).
int resolve_device(int device) {
  if (!is_available()) return -1;
  if (device < 0) device = detail::current_device();
  detail::check_device("memory", Device::cuda(device));
  return device;
}

}  // namespace

namespace detail {

CachingAllocator& caching_allocator(int device) {
  // Never destroyed, table included (freed at exit, the table would leave the allocators
  // unreachable: a leak to LeakSanitizer in the simulation build's ASan run).
  static const std::vector<CachingAllocator*>& allocators = *[] {
    auto* v = new std::vector<CachingAllocator*>;
    for (int d = 0; d < device_count(); ++d)
      v->push_back(new CachingAllocator(std::make_unique<CudaBackend>(d)));  // lives forever
    return v;
  }();
  check_device("allocate", Device::cuda(device));
  return *allocators[size_t(device)];
}

void record_stream(const Tensor& tensor, cudaStream_t stream) {
  EMBER_CHECK(tensor.is_cuda(), DeviceError, "[record_stream] expects a CUDA tensor, got one on ",
              tensor.device());
  const auto& storage = tensor.storage();
  if (!storage || !storage->data()) return;
  caching_allocator(tensor.device().index).record_stream(storage->data(), stream);
}

Allocator* uncached_allocator(int device) {
  check_device("allocate", Device::cuda(device));
  static const std::vector<UncachedAllocator*>& allocators = *[] {  // never destroyed, as above
    auto* v = new std::vector<UncachedAllocator*>;
    for (int d = 0; d < device_count(); ++d) v->push_back(new UncachedAllocator(d));
    return v;
  }();
  return allocators[size_t(device)];
}

}  // namespace detail

MemoryStats memory_stats(int device) {
  const int d = resolve_device(device);
  return d < 0 ? MemoryStats{} : detail::caching_allocator(d).stats();
}
int64_t memory_allocated(int device) { return memory_stats(device).allocated_bytes; }
int64_t max_memory_allocated(int device) { return memory_stats(device).peak_allocated_bytes; }
int64_t memory_reserved(int device) { return memory_stats(device).reserved_bytes; }
int64_t max_memory_reserved(int device) { return memory_stats(device).peak_reserved_bytes; }

void reset_peak_memory_stats(int device) {
  const int d = resolve_device(device);
  if (d >= 0) detail::caching_allocator(d).reset_peak_stats();
}

void empty_cache() {
  if (!is_available()) return;
  for (int d = 0; d < device_count(); ++d) detail::caching_allocator(d).empty_cache();
}

std::string memory_summary(int device) {
  const int d = resolve_device(device);
  if (d < 0) return "ember memory summary: no CUDA device is visible\n";
  return detail::caching_allocator(d).summary();
}

void record_stream(const Tensor& tensor, void* stream) {
  detail::record_stream(tensor, static_cast<cudaStream_t>(stream));
}

}  // namespace ember::cuda
