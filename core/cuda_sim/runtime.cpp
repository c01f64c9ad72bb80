// The CUDA runtime of the simulation (issue 39): the cudart functions ember calls, implemented
// on the host, so that ember's CUDA side (core/cuda, ops/cuda) runs unchanged in CI. Linked
// instead of libcudart in a simulation build; never together with it.
//
// Invariants:
// - One simulated device by default (EMBER_SIM_DEVICES: more), reporting an H100's properties.
//   Device memory is host memory (ASan sees every access), filled with 0xFF bytes (NaN in every
//   float type) when allocated, so a kernel reading what nothing wrote shows NaN.
// - Work waits on its stream until something needs it (EMBER_SIM_STREAMS=deferred, the
//   default): the host synchronizing with the stream, an event recorded after it, or the device;
//   a stream waiting on an event (cudaStreamWaitEvent) runs the event's stream up to it first;
//   the legacy stream and the blocking streams of its device wait for each other's earlier
//   work, as CUDA's implicit synchronization makes them; cudaFree and cudaFreeHost synchronize
//   the device. So the host runs ahead of the "GPU" as far as CUDA allows, and work two streams
//   share without an event between them runs in whichever order the host's waits happen to
//   demand: a missing wait_stream or record_stream reads memory another stream has not written
//   yet, or has already reused. A copy to pageable host memory returns once done, and one from
//   pageable memory reads its source at the call (the card stages it), as cudart does.
//   EMBER_SIM_STREAMS=eager runs all work when issued (every stream always idle).
// - What must still fail fails as on the GPU: an unknown pointer freed, a sync or a blocking
//   call on a capturing stream, a cudaMalloc during a thread-local capture (unless the thread
//   relaxed its mode), an invalid launch.
// - Graph capture records instead of running: launches, async copies (all through simt.h's submit)
//   and memsets on a capturing stream, or on a stream joined to the capture by waiting on an
//   event recorded in it, become the graph's nodes, in issue order; parameters and copy
//   arguments are fixed at capture. A replay runs the nodes in that order.
// - Errors are returned and latched as the thread's last error, as cudart does
//   (cudaGetLastError returns and clears it, cudaPeekAtLastError only returns it).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <string>
#include <vector>

#include "ember/cuda_sim/simt.h"

struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace ember::cuda::sim {
namespace {

struct Capture {
  unsigned long long id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::vector<std::function<void()>> nodes;
  bool invalidated = false;
  cudaStream_t origin = nullptr;
  std::thread::id thread;  // that began it (a thread-local capture restricts only this one)
};

// A stream's work not yet run, in issue order. Item i (counting from 0 over the stream's life)
// has run once done > i.
struct Queue {
  std::deque<std::function<void()>> pending;
  uint64_t issued = 0;
  uint64_t done = 0;
  bool running = false;
};

struct StreamState {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  std::shared_ptr<Capture> capture;  // while it takes part in one
  Queue queue;
};
struct EventState {
  unsigned flags = 0;
  bool recorded = false;
  double time_ms = 0;
  std::shared_ptr<Capture> capture;  // recorded inside a capture: waiting on it joins that capture
  // Where it was recorded: complete once that stream has run `position` items.
  cudaStream_t stream = nullptr;
  int device = 0;
  uint64_t position = 0;
};

struct Allocation {
  size_t bytes = 0;
  int device = 0;
  bool host = false;    // pinned host memory (cudaHostAlloc)
  bool mapped = false;  // a large allocation mapped lazily (mmap), unpoisoned
};

// Allocations from 1 GiB up are mapped lazily and not poisoned (poisoning would touch every
// page): a test can make a tensor past 2^31 elements and touch only a few pages of it, so
// 64-bit indexing runs in simulation without tens of GB of memory. They read 0 where unwritten.
constexpr size_t kLazyBytes = size_t(1) << 30;

constexpr size_t kDeviceBytes = size_t(80) << 30;  // an H100's 80 GB

std::recursive_mutex g_mutex;
std::map<const void*, Allocation> g_allocations;
std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;
std::vector<size_t> g_used;            // device bytes in use, per device
std::map<int, Queue> g_legacy;         // the legacy (null) stream's work, per device
std::vector<bool> g_context_active;    // per device: touched by this process
std::atomic<unsigned long long> g_next_capture_id{1};

thread_local cudaError_t t_last_error = cudaSuccess;
thread_local int t_device = 0;
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

int device_count() {
  static const int n = [] {
    const char* e = std::getenv("EMBER_SIM_DEVICES");
    return std::max(1, e ? std::atoi(e) : 1);
  }();
  return n;
}

void touch(int device) {
  if (g_context_active.empty()) g_context_active.assign(size_t(device_count()), false), g_used.assign(size_t(device_count()), 0);
  g_context_active[size_t(device)] = true;
}

cudaError_t fail(cudaError_t e) {
  t_last_error = e;
  return e;
}

StreamState* state_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return nullptr;
  return reinterpret_cast<StreamState*>(s);
}
bool known_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread ||
         g_streams.count(reinterpret_cast<CUstream_st*>(s)) != 0;
}

bool deferred_streams() {
  static const bool deferred = [] {
    const char* e = std::getenv("EMBER_SIM_STREAMS");
    return !(e && std::string(e) == "eager");
  }();
  return deferred;
}

// The queue of `s` (the legacy stream: the one of `device`); null for a stream destroyed since
// (its work all ran when it was destroyed).
Queue* queue_of(cudaStream_t s, int device) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy[device];
  if (!g_streams.count(reinterpret_cast<CUstream_st*>(s))) return nullptr;
  return &reinterpret_cast<StreamState*>(s)->queue;
}

// Runs the queue's items up to (not including) item `target`. An item may run other streams'
// items first (an event wait, the legacy stream's implicit synchronization); those only ever
// name work issued before it, so the recursion ends. Thrown errors (a kernel's SimError)
// propagate to whoever waited, as a sticky error reaches the next synchronizing call.
void run_until(Queue* q, uint64_t target) {
  if (q == nullptr) return;
  while (q->done < target && !q->pending.empty()) {
    if (q->running) throw SimError("[cuda_sim] a stream waits for its own later work (a dependency cycle)");
    std::function<void()> work = std::move(q->pending.front());
    q->pending.pop_front();
    ++q->done;
    q->running = true;
    struct Reset {
      Queue* q;
      ~Reset() { q->running = false; }
    } reset{q};
    work();
  }
}
void run_all(Queue* q) {
  if (q) run_until(q, q->issued);
}
// cudaDeviceSynchronize, cudaFree: every stream's work, the legacy streams last (their items
// wait for the blocking streams anyway).
void run_everything() {
  for (CUstream_st* s : std::vector<CUstream_st*>(g_streams.begin(), g_streams.end()))
    run_all(queue_of(s, 0));
  for (auto& [device, q] : g_legacy) run_all(&q);
}
void enqueue(Queue* q, std::function<void()> work) {
  q->pending.push_back(std::move(work));
  ++q->issued;
}
// An item making `q` wait until stream `s` (of `device`) has run `position` items.
void enqueue_wait(Queue* q, cudaStream_t s, int device, uint64_t position) {
  enqueue(q, [s, device, position] { run_until(queue_of(s, device), position); });
}

// The capture `s` takes part in, if any.
std::shared_ptr<Capture> capture_of(cudaStream_t s) {
  StreamState* st = state_of(s);
  return st ? st->capture : nullptr;
}

// Any capture in progress that a blocking call from this thread would break (global mode).
bool any_global_capture() {
  for (CUstream_st* s : g_streams) {
    auto c = reinterpret_cast<StreamState*>(s)->capture;
    if (c && c->mode == cudaStreamCaptureModeGlobal) return true;
  }
  return false;
}

// A capture that forbids a potentially unsafe call (cudaMalloc, a device-wide sync) on this
// thread: any global capture, a thread-local one begun by this thread; none once this thread
// relaxed its mode.
std::shared_ptr<Capture> capture_forbidding_unsafe_calls() {
  if (t_capture_mode == cudaStreamCaptureModeRelaxed) return nullptr;
  for (CUstream_st* s : g_streams) {
    const auto& c = reinterpret_cast<StreamState*>(s)->capture;
    if (c && c->mode != cudaStreamCaptureModeRelaxed &&
        (c->mode == cudaStreamCaptureModeGlobal || c->thread == std::this_thread::get_id()))
      return c;
  }
  return nullptr;
}

// A call that is illegal while `s` captures: invalidates the capture, as the GPU does.
cudaError_t refuse_during_capture(const std::shared_ptr<Capture>& c) {
  c->invalidated = true;
  return fail(cudaErrorStreamCaptureUnsupported);
}

// Every launch, copy, memset and library call: recorded by a capture, or queued on its stream.
bool submit_hook(cudaStream_t stream, std::function<void()>& work) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (auto c = capture_of(stream)) {
    c->nodes.push_back(std::move(work));
    return true;
  }
  if (!deferred_streams()) return false;
  StreamState* st = state_of(stream);
  const int device = st ? st->device : t_device;
  Queue* q = queue_of(stream, device);
  if (q == nullptr) return false;  // unknown stream: the caller reported it already
  if (st == nullptr) {
    // The legacy stream waits for the earlier work of every blocking stream of its device.
    for (CUstream_st* other : g_streams) {
      const StreamState* o = reinterpret_cast<const StreamState*>(other);
      if (o->device == device && !(o->flags & cudaStreamNonBlocking) && o->queue.issued > o->queue.done)
        enqueue_wait(q, other, device, o->queue.issued);
    }
  } else if (!(st->flags & cudaStreamNonBlocking)) {
    // A blocking stream waits for the legacy stream's earlier work.
    Queue& legacy = g_legacy[device];
    if (legacy.issued > legacy.done) enqueue_wait(q, nullptr, device, legacy.issued);
  }
  enqueue(q, std::move(work));
  return true;
}
const bool g_hook_installed = [] {
  detail::set_submit_hook(submit_hook);
  return true;
}();

// The allocation (device or pinned host) that holds `p`, if any: pageable host memory has none.
const std::pair<const void* const, Allocation>* allocation_of(const void* p) {
  auto it = g_allocations.upper_bound(p);
  if (it == g_allocations.begin()) return nullptr;
  --it;
  const bool inside =
      static_cast<const char*>(p) < static_cast<const char*>(it->first) + std::max<size_t>(it->second.bytes, 1);
  return inside ? &*it : nullptr;
}
bool runtime_allocated(const void* p) { return allocation_of(p) != nullptr; }
// A range that starts in an allocation must end in it: cudart refuses a copy or memset that
// runs past it (cudaErrorInvalidValue) rather than touching what follows.
bool range_fits(const void* p, size_t bytes) {
  const auto* a = allocation_of(p);
  if (a == nullptr) return true;  // pageable host memory: the caller's business
  const size_t offset = size_t(static_cast<const char*>(p) - static_cast<const char*>(a->first));
  return bytes <= a->second.bytes - offset;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

}  // namespace
}  // namespace ember::cuda::sim

struct CUstream_st : ember::cuda::sim::StreamState {};
struct CUevent_st : ember::cuda::sim::EventState {};
struct CUgraph_st {
  std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
  std::vector<std::function<void()>> nodes;
};

using namespace ember::cuda::sim;

extern "C" {

// ---- errors, versions, devices

cudaError_t cudaGetLastError(void) { return std::exchange(t_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorSymbolNotFound: return "named symbol not found";
    default: return "unknown error (simulated runtime)";
  }
}
cudaError_t cudaRuntimeGetVersion(int* v) { return v ? (*v = CUDART_VERSION, cudaSuccess) : fail(cudaErrorInvalidValue); }
cudaError_t cudaDriverGetVersion(int* v) { return v ? (*v = CUDART_VERSION, cudaSuccess) : fail(cudaErrorInvalidValue); }
// CUDA_VISIBLE_DEVICES="" (or "-1") hides every device, as it does on a GPU machine: the count
// is 0 with cudaErrorNoDevice (scripts/test.sh runs the CPU suite so in the simulation build).
cudaError_t cudaGetDeviceCount(int* n) {
  if (n == nullptr) return fail(cudaErrorInvalidValue);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && (*visible == '\0' || *visible == '-')) {
    *n = 0;
    return fail(cudaErrorNoDevice);
  }
  *n = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) { return d ? (*d = t_device, cudaSuccess) : fail(cudaErrorInvalidValue); }
cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  t_device = d;
  touch(d);  // CUDA 12+: setting a device initializes its primary context
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (!p) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "ember simulated H100 (cuda_sim)");
  p->major = 9, p->minor = 0;
  p->totalGlobalMem = kDeviceBytes;
  p->multiProcessorCount = 132;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->memoryBusWidth = 5120;
  p->totalConstMem = 65536;
  p->pciBusID = d, p->pciDeviceID = 0, p->pciDomainID = 0;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 2;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  if (!value) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMultiProcessorCount: *value = 132; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = 228 * 1024; break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; break;
    case cudaDevAttrMemoryClockRate: *value = 2619000; break;
    case cudaDevAttrClockRate: *value = 1980000; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; break;
    default: *value = 0; break;
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int d) {
  if (!id || len <= 0) return fail(cudaErrorInvalidValue);
  if (d < 0 || d >= device_count()) return fail(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "0000:%02x:00.0", d);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (auto c = capture_forbidding_unsafe_calls()) return refuse_during_capture(c);
  run_everything();
  return cudaSuccess;
}

// cuDeviceGet / cuDevicePrimaryCtxGetState through the entry-point query: whether this
// process has touched a device (ember's primary_context_active).
namespace {
CUresult sim_cu_device_get(CUdevice* dev, int ordinal) {
  if (!dev || ordinal < 0 || ordinal >= device_count()) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}
CUresult sim_cu_primary_ctx_state(CUdevice dev, unsigned* flags, int* active) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (flags) *flags = 0;
  if (active) *active = !g_context_active.empty() && g_context_active[size_t(dev)];
  return CUDA_SUCCESS;
}
}  // namespace

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !fn) return fail(cudaErrorInvalidValue);
  if (std::strcmp(symbol, "cuDeviceGet") == 0) *fn = reinterpret_cast<void*>(&sim_cu_device_get);
  else if (std::strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0) *fn = reinterpret_cast<void*>(&sim_cu_primary_ctx_state);
  else *fn = nullptr;
  if (status) *status = *fn ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return *fn ? cudaSuccess : fail(cudaErrorSymbolNotFound);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (!func) return fail(cudaErrorInvalidDeviceFunction);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kMaxDynamicSharedOptIn) return fail(cudaErrorInvalidValue);
    set_max_dynamic_shared_memory(func, size_t(value));
  }
  return cudaSuccess;
}

// ---- memory

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (!p) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (auto c = capture_forbidding_unsafe_calls()) return refuse_during_capture(c);
  touch(t_device);
  if (bytes == 0) return (*p = nullptr, cudaSuccess);
  if (g_used[size_t(t_device)] + bytes > kDeviceBytes) return fail(cudaErrorMemoryAllocation);
  const bool lazy = bytes >= kLazyBytes;
  void* m = nullptr;
  if (lazy) {
    m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
  } else {
    m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
    if (!m) return fail(cudaErrorMemoryAllocation);
    std::memset(m, 0xFF, bytes);  // NaN: reads of what nothing wrote show
  }
  g_allocations[m] = Allocation{bytes, t_device, false, lazy};
  g_used[size_t(t_device)] += bytes;
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = g_allocations.find(p);
  if (it == g_allocations.end() || it->second.host) return fail(cudaErrorInvalidValue);
  run_everything();  // cudaFree synchronizes the device
  g_used[size_t(it->second.device)] -= it->second.bytes;
  if (it->second.mapped) munmap(p, it->second.bytes);
  else std::free(p);
  g_allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  if (!p) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  void* m = std::aligned_alloc(256, std::max<size_t>(256, (bytes + 255) / 256 * 256));
  if (!m) return fail(cudaErrorMemoryAllocation);
  g_allocations[m] = Allocation{bytes, t_device, true};
  *p = m;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = g_allocations.find(p);
  if (it == g_allocations.end() || !it->second.host) return fail(cudaErrorInvalidValue);
  run_everything();  // as cudaFree
  g_allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host, unsigned int) {
  if (!device_ptr) return fail(cudaErrorInvalidValue);
  *device_ptr = host;  // unified addressing: the same address
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  touch(t_device);
  if (free_bytes) *free_bytes = kDeviceBytes - g_used[size_t(t_device)];
  if (total) *total = kDeviceBytes;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  if (!a) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  *a = cudaPointerAttributes{};
  a->type = cudaMemoryTypeUnregistered;
  a->device = -2;
  if (const auto* it = allocation_of(p)) {
    a->type = it->second.host ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    a->device = it->second.device;
    a->devicePointer = const_cast<void*>(p);
    a->hostPointer = it->second.host ? const_cast<void*>(p) : nullptr;
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (!range_fits(dst, bytes) || !range_fits(src, bytes)) return fail(cudaErrorInvalidValue);
  if (!capture_of(stream) && deferred_streams()) {
    if (!runtime_allocated(dst)) {
      // To pageable memory: cudart returns once the copy is done (queued first, so that it
      // also waits for what the legacy stream's implicit synchronization orders before it).
      detail::submit(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
      StreamState* st = state_of(stream);
      run_all(queue_of(stream, st ? st->device : t_device));
      return cudaSuccess;
    }
    if (!runtime_allocated(src)) {
      // From pageable memory: the source is staged at the call; the caller may reuse it.
      auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                                   static_cast<const unsigned char*>(src) + bytes);
      detail::submit(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
      return cudaSuccess;
    }
  }
  detail::submit(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!dst) return fail(cudaErrorInvalidValue);
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    if (!known_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (!range_fits(dst, bytes)) return fail(cudaErrorInvalidValue);
  }
  detail::submit(stream, [dst, value, bytes] { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

// ---- streams

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  if (!s) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  touch(t_device);
  auto* st = new CUstream_st;
  st->device = t_device;
  st->flags = flags;
  st->priority = std::clamp(priority, -5, 0);
  g_streams.insert(st);
  *s = st;
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = g_streams.find(reinterpret_cast<CUstream_st*>(s));
  if (it == g_streams.end()) return fail(cudaErrorInvalidResourceHandle);
  run_all(queue_of(s, 0));  // its work still completes
  g_streams.erase(it);
  delete reinterpret_cast<CUstream_st*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamGetPriority(cudaStream_t s, int* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!p || !known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  *p = state_of(s) ? state_of(s)->priority : 0;
  return cudaSuccess;
}
cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int* f) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!f || !known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  *f = state_of(s) ? state_of(s)->flags : 0;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (auto c = capture_of(s)) return refuse_during_capture(c);
  StreamState* st = state_of(s);
  run_all(queue_of(s, st ? st->device : t_device));
  return cudaSuccess;
}
// A query finds the stream's work done: the simulation runs it now (a GPU that is fast enough),
// so a caller polling for completion makes progress.
cudaError_t cudaStreamQuery(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!known_stream(s) || !g_events.count(reinterpret_cast<CUevent_st*>(e))) return fail(cudaErrorInvalidResourceHandle);
  auto* ev = reinterpret_cast<CUevent_st*>(e);
  if (ev->capture) {  // waiting on an event of a capture joins it
    StreamState* st = state_of(s);
    if (!st) return fail(cudaErrorStreamCaptureImplicit);
    if (st->capture && st->capture != ev->capture) return fail(cudaErrorStreamCaptureIsolation);
    st->capture = ev->capture;
    return cudaSuccess;
  }
  if (deferred_streams() && ev->recorded) {
    StreamState* st = state_of(s);
    if (Queue* q = queue_of(s, st ? st->device : t_device)) enqueue_wait(q, ev->stream, ev->device, ev->position);
  }
  return cudaSuccess;
}

// ---- events

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (!e) return fail(cudaErrorInvalidValue);
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  touch(t_device);
  auto* ev = new CUevent_st;
  ev->flags = flags;
  g_events.insert(ev);
  *e = ev;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto it = g_events.find(reinterpret_cast<CUevent_st*>(e));
  if (it == g_events.end()) return fail(cudaErrorInvalidResourceHandle);
  g_events.erase(it);
  delete reinterpret_cast<CUevent_st*>(e);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto* ev = reinterpret_cast<CUevent_st*>(e);
  if (!g_events.count(ev) || !known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  ev->capture = capture_of(s);
  if (!ev->capture) {
    StreamState* st = state_of(s);
    // An empty item first: it carries the implicit waits (legacy and blocking streams) that
    // order the record after other streams' earlier work.
    if (deferred_streams()) detail::submit(s, [] {});
    ev->recorded = true;
    ev->time_ms = now_ms();
    ev->stream = s;
    ev->device = st ? st->device : t_device;
    ev->position = queue_of(s, ev->device)->issued;
  }
  return cudaSuccess;
}
// As cudaStreamQuery: the work before the event runs now.
cudaError_t cudaEventQuery(cudaEvent_t e) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto* ev = reinterpret_cast<CUevent_st*>(e);
  if (!g_events.count(ev)) return fail(cudaErrorInvalidResourceHandle);
  if (ev->capture) return refuse_during_capture(ev->capture);
  if (ev->recorded) run_until(queue_of(ev->stream, ev->device), ev->position);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return cudaEventQuery(e); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  auto *a = reinterpret_cast<CUevent_st*>(start), *b = reinterpret_cast<CUevent_st*>(end);
  if (!ms || !g_events.count(a) || !g_events.count(b)) return fail(cudaErrorInvalidResourceHandle);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return fail(cudaErrorInvalidResourceHandle);
  if (!a->recorded || !b->recorded) return fail(cudaErrorInvalidResourceHandle);
  *ms = float(b->time_ms - a->time_ms);
  return cudaSuccess;
}

// ---- graphs

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue);
  std::swap(*mode, t_capture_mode);
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  StreamState* st = state_of(s);
  if (!st) return fail(s == nullptr || s == cudaStreamLegacy ? cudaErrorStreamCaptureUnsupported
                                                             : cudaErrorInvalidResourceHandle);
  if (!known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (st->capture) return fail(cudaErrorIllegalState);
  st->capture = std::make_shared<Capture>();
  st->capture->id = g_next_capture_id++;
  st->capture->mode = mode;
  st->capture->origin = s;
  st->capture->thread = std::this_thread::get_id();
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (!status || !known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  if (!state_of(s) && any_global_capture()) return fail(cudaErrorStreamCaptureImplicit);
  auto c = capture_of(s);
  *status = !c ? cudaStreamCaptureStatusNone
               : c->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t s, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps,
                                     const cudaGraphEdgeData** edges, size_t* num_deps) {
  const cudaError_t e = cudaStreamIsCapturing(s, status);
  if (e != cudaSuccess) return e;
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (id) *id = capture_of(s) ? capture_of(s)->id : 0;
  if (graph) *graph = nullptr;
  if (deps) *deps = nullptr;
  if (edges) *edges = nullptr;
  if (num_deps) *num_deps = 0;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  StreamState* st = state_of(s);
  if (!graph || !st || !known_stream(s)) return fail(cudaErrorInvalidValue);
  auto c = st->capture;
  if (!c || c->origin != s) return fail(cudaErrorIllegalState);
  for (CUstream_st* other : g_streams)  // every stream of the capture leaves it
    if (other->capture == c) other->capture = nullptr;
  for (CUevent_st* ev : g_events)
    if (ev->capture == c) ev->capture = nullptr;
  if (c->invalidated) {
    *graph = nullptr;
    return fail(cudaErrorStreamCaptureInvalidated);
  }
  *graph = new CUgraph_st{std::move(c->nodes)};
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (!exec || !graph) return fail(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  if (!exec) return fail(cudaErrorInvalidValue);
  {
    std::lock_guard<std::recursive_mutex> lock(g_mutex);
    if (!known_stream(s)) return fail(cudaErrorInvalidResourceHandle);
  }
  detail::submit(s, [nodes = exec->nodes] {
    for (const auto& node : nodes) node();
  });
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
  delete g;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
  delete g;
  return cudaSuccess;
}

}  // extern "C"

namespace ember::cuda::sim {
// Latches a refused launch as the thread's last error (ember/cuda/launch.h in a simulation
// build), where the EMBER_CUDA_CHECK_LAUNCH after the launch reports it.
void set_last_error(cudaError_t e) { t_last_error = e; }
}  // namespace ember::cuda::sim
