// The CUDA backend of the pinned-memory cache (Note [caching host allocator]) and the
// functions of ember/cuda.h and ember/cuda_memory.h built on it: host_alloc, host_free,
// is_pinned, host_memory_stats, host_empty_cache.
//
// Invariants:
// - Every CUDA call runs in relaxed capture mode: a thread that captures a graph
//   (thread-local mode) may pin, copy and free pinned tensors meanwhile (the events go on
//   streams that are not capturing) without its capture being invalidated. The cache never
//   frees while any ember capture is under way (capture_under_way), since cudaFreeHost may
//   synchronize the device.
// - Events are created and recorded with the stream's device current (DeviceGuard), which
//   is what makes a recorded event mean "this stream's copies so far" for the legacy stream
//   (handle 0) of that device, and restores the caller's device.
// - A copy on a stream that is capturing into a cuda::Graph (the capture stream or a stream
//   joined into it) ties its block to that graph (hold_for_graph, through
//   call_on_graph_release in ember/cuda/graph_capture.h): the graph's reset hands back the
//   streams it was replayed on, on which the block's events are then recorded.
// - At exit the runtime may unload before the last pinned tensor dies: then nothing is left
//   to wait for, and the backend answers as if every copy had completed, quietly. So every
//   method asks whether the runtime is unloading before anything that would throw on it (the
//   device guard, the capture-mode exchange).
#include "ember/cuda/host_allocator.h"

#include <atomic>
#include <cstdio>
#include <optional>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/graph_capture.h"
#include "ember/cuda_memory.h"

namespace ember::cuda {

namespace {

std::atomic<int> g_device_in_use{-1};

// True (with the latched error cleared) when the runtime is shutting down.
bool unloading(cudaError_t err) {
  if (err != cudaErrorCudartUnloading) return false;
  (void)cudaGetLastError();
  return true;
}

// `device` made current in `guard`, or false (nothing done) when the runtime is unloading.
bool enter_device(std::optional<detail::DeviceGuard>& guard, int device) {
  int current = 0;
  const cudaError_t err = cudaGetDevice(&current);
  if (unloading(err)) return false;
  EMBER_CUDA_CHECK(err);
  guard.emplace(device);
  return true;
}

// Runs `call` with this thread's capture mode relaxed, then restores it. Returns the
// unloading error itself, without calling, when the runtime is shutting down.
template <class F>
cudaError_t relaxed(F&& call) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  const cudaError_t enter = cudaThreadExchangeStreamCaptureMode(&mode);
  if (enter == cudaErrorCudartUnloading) return enter;
  EMBER_CUDA_CHECK(enter);
  const cudaError_t err = call();
  const cudaError_t leave = cudaThreadExchangeStreamCaptureMode(&mode);
  if (leave == cudaErrorCudartUnloading) return leave;
  EMBER_CUDA_CHECK(leave);
  return err;
}

class CudaHostBackend final : public CachingHostAllocator::Backend {
 public:
  void* malloc(size_t nbytes) override {
    const int in_use = g_device_in_use.load(std::memory_order_relaxed);
    const detail::DeviceGuard guard(in_use >= 0 ? in_use : detail::current_device());  // never at exit
    void* p = nullptr;
    // Portable: counted as pinned by every device's context, not only this one.
    const cudaError_t err = relaxed([&] { return cudaHostAlloc(&p, nbytes, cudaHostAllocPortable); });
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();  // an answer ("no page-locked memory left"), not a failure
      return nullptr;
    }
    EMBER_CUDA_CHECK(err);
    return p;
  }

  void free(void* ptr) override {
    const cudaError_t err = relaxed([&] { return cudaFreeHost(ptr); });
    if (unloading(err)) return;
    EMBER_CUDA_CHECK(err);
  }

  CachingHostAllocator::EventHandle event_create(int device) override {
    std::optional<detail::DeviceGuard> guard;
    if (!enter_device(guard, device)) return nullptr;
    cudaEvent_t ev = nullptr;
    const cudaError_t err = relaxed([&] { return cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); });
    if (unloading(err)) return nullptr;
    EMBER_CUDA_CHECK(err);
    return ev;
  }

  void event_destroy(CachingHostAllocator::EventHandle event) override {
    if (!event) return;
    const cudaError_t err = cudaEventDestroy(static_cast<cudaEvent_t>(event));
    if (unloading(err)) return;
    EMBER_CUDA_CHECK(err);
  }

  void event_record(CachingHostAllocator::EventHandle event, int device,
                    CachingHostAllocator::StreamHandle stream) override {
    if (!event) return;  // made while unloading: nothing runs any more
    std::optional<detail::DeviceGuard> guard;
    if (!enter_device(guard, device)) return;
    const cudaError_t err = relaxed([&] {
      return cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream));
    });
    if (unloading(err)) return;
    EMBER_CUDA_CHECK(err);
  }

  bool event_query(CachingHostAllocator::EventHandle event) override {
    if (!event) return true;
    const cudaError_t err = relaxed([&] { return cudaEventQuery(static_cast<cudaEvent_t>(event)); });
    if (unloading(err)) return true;
    return detail::query_completed(err);
  }

  bool stream_capturing(int device, CachingHostAllocator::StreamHandle stream) override {
    std::optional<detail::DeviceGuard> guard;
    if (!enter_device(guard, device)) return false;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t err = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status);
    if (unloading(err)) return false;
    // The legacy stream while a blocking stream of its device captures: it may not be used.
    if (err == cudaErrorStreamCaptureImplicit) {
      (void)cudaGetLastError();
      return true;
    }
    EMBER_CUDA_CHECK(err);
    return status != cudaStreamCaptureStatusNone;
  }

  bool capture_under_way() override { return detail::captures_under_way() > 0; }

  CachingHostAllocator::CaptureHold hold_for_graph(int device, CachingHostAllocator::StreamHandle stream,
                                                   const void* key,
                                                   const CachingHostAllocator::GraphRelease& release) override {
    using Hold = CachingHostAllocator::CaptureHold;
    // Every asynchronous copy comes here: the common answer costs one query, no allocation.
    if (!stream_capturing(device, stream)) return Hold::none;
    std::optional<detail::DeviceGuard> guard;  // the legacy stream (0) means this device's
    if (!enter_device(guard, device)) return Hold::none;
    const auto on_release = [release](int d, const std::vector<cudaStream_t>& streams) {
      release(d, std::vector<CachingHostAllocator::StreamHandle>(streams.begin(), streams.end()));
    };
    switch (detail::call_on_graph_release(static_cast<cudaStream_t>(stream), key, on_release)) {
      case detail::GraphHold::none: return Hold::none;
      case detail::GraphHold::held: return Hold::held;
      case detail::GraphHold::held_before: return Hold::held_before;
      case detail::GraphHold::invalidated: return Hold::invalidated;
      case detail::GraphHold::unknown: return Hold::unknown;
    }
    return Hold::unknown;
  }
};

}  // namespace

namespace detail {

CachingHostAllocator& host_allocator() {
  static auto* allocator = new CachingHostAllocator(std::make_unique<CudaHostBackend>());
  return *allocator;
}

void note_device_in_use(int device) {
  if (g_device_in_use.load(std::memory_order_relaxed) >= 0) return;  // the first one stays
  int none = -1;
  g_device_in_use.compare_exchange_strong(none, device, std::memory_order_relaxed);
}

void* host_alloc(size_t nbytes) {
  check_device("pin_memory", Device::cuda(0));
  return host_allocator().allocate(nbytes, "pin_memory");
}

void host_free(void* ptr) {
  if (!ptr) return;
  try {  // it runs from Storage's destructor
    host_allocator().free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[pin_memory] %s\n", e.what());
  }
}

bool is_pinned(const void* ptr) {
  if (!ptr || !is_available()) return false;
  if (host_allocator().owns(ptr)) return true;
  // Memory pinned elsewhere (cudaHostAlloc or cudaHostRegister by the user or a library).
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {  // memory CUDA has never seen (older runtimes say so)
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return attr.type == cudaMemoryTypeHost;
}

}  // namespace detail

HostMemoryStats host_memory_stats() {
  if (!is_available()) return {};
  return detail::host_allocator().stats();
}

void host_empty_cache() {
  if (!is_available()) return;
  detail::host_allocator().empty_cache();
}

}  // namespace ember::cuda
