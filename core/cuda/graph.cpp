// cuda::Graph (ember/cuda_graph.h): stream capture into a private allocator pool, replay on
// the current stream.
//
// Invariants:
// - While capturing, this thread's current stream on the graph's device is a capture stream
//   (non-blocking: a blocking one would synchronize with the legacy stream, which is illegal
//   during capture), and the caching allocator routes that stream's allocations to the
//   graph's private pool. Both are undone on every way out of a capture: capture_end, a
//   failed capture_end, reset(), the destructor, a capture_begin that fails half-way.
// - Capture streams come from a per-device list and go back to it when their capture ends;
//   they are never destroyed (Note [stream lifetime] in stream.cpp): the graph pool's blocks
//   are keyed by them, and an event may be recorded on one after its graph is gone. One
//   stream serves one capture at a time; replays do not need it (they launch on the current
//   stream).
// - The private pool is held from capture_begin until reset()/destruction, so the addresses
//   baked into the graph stay reserved for it and are never handed to anyone else. So are
//   the capture's resources (Note [capture resources] in ember/cuda/graph_capture.h), which
//   are dropped just before the pool is released, after the release callbacks ran with the
//   streams the graph was replayed on.
// - The registry finds a capture by CUDA's capture id, so that every stream taking part in
//   it (the capture stream, a side stream joined into it) finds the same resources.
// - captures_under_way() counts captures from just before cudaStreamBeginCapture to their
//   end, on every thread.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "ember/cuda.h"
#include "ember/cuda/caching_allocator.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_checks.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/graph_capture.h"
#include "ember/cuda/stream_handle.h"
#include "ember/cuda_graph.h"
#include "ember/cuda_stream.h"

namespace ember::cuda {

namespace {

// What one capture keeps alive (Note [capture resources]), and what its graph has done.
struct CaptureResources {
  int device = -1;
  cudaStream_t stream = nullptr;  // the capture stream: allocations on it go to the graph's pool
  std::mutex mutex;               // guards the three members below
  std::map<const void*, std::shared_ptr<void>> objects;
  std::map<const void*, detail::GraphRelease> releases;
  std::vector<cudaStream_t> replay_streams;  // every stream the graph was launched on
};

struct CaptureRegistry {
  std::mutex mutex;
  std::map<unsigned long long, std::shared_ptr<CaptureResources>> capturing;  // by capture id
  std::map<int, std::vector<cudaStream_t>> idle_streams;                       // by device
};

CaptureRegistry& registry() {
  static auto* r = new CaptureRegistry;  // never destroyed: graphs may die at exit
  return *r;
}

std::atomic<int> g_captures{0};

// A capture stream of the current device `device`, idle until now.
cudaStream_t acquire_capture_stream(int device) {
  {
    CaptureRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    auto& idle = r.idle_streams[device];
    if (!idle.empty()) {
      cudaStream_t s = idle.back();
      idle.pop_back();
      return s;
    }
  }
  cudaStream_t s = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// Never throws (it runs on the ways out of failed captures): without room in the idle list
// the stream stays unused, not destroyed.
void release_capture_stream(int device, cudaStream_t s) noexcept {
  try {
    CaptureRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.idle_streams[device].push_back(s);
  } catch (...) {
  }
}

void report(const char* what, cudaError_t err) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "[cuda::Graph] %s failed: %s\n", what, cudaGetErrorString(err));
}

// The ember capture that `stream` (of the current device) takes part in, or nullptr; `status`
// receives the stream's capture status.
std::shared_ptr<CaptureResources> find_capture(cudaStream_t stream, cudaStreamCaptureStatus& status) {
  status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  const cudaError_t err = cudaStreamGetCaptureInfo(stream, &status, &id);
  if (err == cudaErrorStreamCaptureImplicit) {
    // The legacy stream while a blocking stream of its device captures: not an ember capture
    // (those use non-blocking streams), and work queued on the legacy stream fails by itself.
    (void)cudaGetLastError();
    status = cudaStreamCaptureStatusActive;
    return nullptr;
  }
  EMBER_CUDA_CHECK(err);
  if (status != cudaStreamCaptureStatusActive) return nullptr;  // the id is valid only then
  CaptureRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.capturing.find(id);
  return it == r.capturing.end() ? nullptr : it->second;
}

}  // namespace

namespace detail {

int captures_under_way() { return g_captures.load(std::memory_order_acquire); }

std::shared_ptr<void> capture_resource(cudaStream_t stream, const void* key,
                                       const std::function<std::shared_ptr<void>()>& make) {
  if (captures_under_way() == 0) return nullptr;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const std::shared_ptr<CaptureResources> resources = find_capture(stream, status);
  // Anything made now would be cached for a graph that will never exist (or, made outside
  // the capture's pool, kept by the caller's eager cache for the process).
  EMBER_CHECK(status != cudaStreamCaptureStatusInvalidated, Error,
              "[cuda::Graph] the graph capture this stream takes part in was invalidated by an "
              "earlier operation that is illegal during capture (a synchronization, a blocking "
              "copy, a query of a capturing stream or event); capture_end will fail");
  if (!resources) return nullptr;
  std::lock_guard<std::mutex> lock(resources->mutex);
  std::shared_ptr<void>& slot = resources->objects[key];
  if (!slot) {
    const StreamGuard on_capture_stream(Stream::from_handle(resources->stream, resources->device));
    slot = make();
  }
  return slot;
}

GraphHold call_on_graph_release(cudaStream_t stream, const void* key, const GraphRelease& release) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const std::shared_ptr<CaptureResources> resources = find_capture(stream, status);
  if (status == cudaStreamCaptureStatusNone) return GraphHold::none;
  if (status == cudaStreamCaptureStatusInvalidated) return GraphHold::invalidated;
  if (!resources) return GraphHold::unknown;
  std::lock_guard<std::mutex> lock(resources->mutex);
  return resources->releases.try_emplace(key, release).second ? GraphHold::held : GraphHold::held_before;
}

}  // namespace detail

struct Graph::Impl {
  int device = -1;
  cudaStream_t stream = nullptr;    // the capture stream, held while capturing
  cudaStream_t previous = nullptr;  // the thread's current stream before capture_begin
  unsigned long long capture_id = 0;  // registered under it (0: not registered)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CachingAllocator::PoolId pool = 0;
  std::shared_ptr<CaptureResources> resources;
  bool capturing = false;

  // Undoes capture_begin's changes to the thread, the registry and the allocator (not the
  // pool hold, nor the resources: replays still need both). Never throws: it runs on the
  // ways out of failed captures, where the original error is what must propagate.
  void leave_capture() noexcept {
    capturing = false;
    detail::set_current_stream_handle(previous, device);
    if (capture_id != 0) {
      CaptureRegistry& r = registry();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.capturing.erase(std::exchange(capture_id, 0));
    }
    g_captures.fetch_sub(1, std::memory_order_acq_rel);
    try {
      detail::caching_allocator(device).end_allocate_to_pool(pool);
    } catch (const std::exception& e) {  // blocks freed meanwhile are back in their pools
      std::fprintf(stderr, "[cuda::Graph] ending the capture's memory pool: %s\n", e.what());
    }
    release_capture_stream(device, stream);
    stream = nullptr;
  }
};

Graph::Graph() : impl_(std::make_unique<Impl>()) {}
Graph::~Graph() {
  if (impl_) reset();
}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (impl_) reset();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

bool Graph::is_captured() const { return impl_ && impl_->exec != nullptr; }

void Graph::capture_begin() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  Impl& g = *impl_;
  EMBER_CHECK(!g.capturing, ValueError, "[cuda::Graph] capture_begin: a capture is already under way");
  EMBER_CHECK(!g.exec, ValueError,
              "[cuda::Graph] capture_begin: this graph already holds a capture; reset() it first");
  detail::check_device("cuda::Graph", Device::cuda(0));
  const int device = detail::current_device();
  g.device = device;
  // Kernels that check values record faults in a per-device record made on first use, with
  // calls a capture forbids (Note [deferred device checks]): make it now.
  detail::prepare_fault_record(device);

  CachingAllocator& alloc = detail::caching_allocator(device);
  auto resources = std::make_shared<CaptureResources>();
  resources->device = device;
  g.previous = detail::current_stream_handle(device);
  // Each step that can throw undoes the ones before it: a pool or a capture stream lost here
  // would stay held (the stream out of the idle list) for the rest of the process.
  const CachingAllocator::PoolId pool = alloc.create_pool();
  cudaStream_t stream = nullptr;
  try {
    stream = acquire_capture_stream(device);
    alloc.begin_allocate_to_pool(pool, stream);
  } catch (...) {
    if (stream) release_capture_stream(device, stream);
    alloc.release_pool(pool);
    throw;
  }
  resources->stream = stream;
  g.pool = pool;
  g.stream = stream;
  g.resources = std::move(resources);
  // Counted before the capture starts, so that no other thread frees memory (which may
  // synchronize the device) once it has.
  g_captures.fetch_add(1, std::memory_order_acq_rel);
  detail::set_current_stream_handle(stream, device);
  g.capturing = true;
  // Thread-local mode: see ember/cuda_graph.h for why neither global nor relaxed.
  const cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    g.leave_capture();
    g.resources.reset();
    alloc.release_pool(std::exchange(g.pool, 0));
    EMBER_CUDA_CHECK(err);
  }
  // Registered by capture id: a side stream joined into this capture finds it too.
  try {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    EMBER_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &id));
    CaptureRegistry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.capturing[id] = g.resources;
    g.capture_id = id;
  } catch (...) {
    reset();  // abandons the capture begun above
    throw;
  }
}

void Graph::capture_end() {
  EMBER_CHECK(impl_ && impl_->capturing, ValueError,
              "[cuda::Graph] capture_end without a capture_begin");
  Impl& g = *impl_;
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(g.stream, &graph);
  g.leave_capture();
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph) report("cudaGraphDestroy", cudaGraphDestroy(graph));
    reset();
    throw Error(str("[cuda::Graph] capture failed: ", cudaGetErrorString(err),
                    ". Something in the captured region is illegal during capture: a "
                    "device->host synchronization (item(), printing a CUDA tensor, to(cpu), "
                    "cuda::synchronize()), a blocking copy, or work on another stream"));
  }
  g.graph = graph;
  const cudaError_t ierr = cudaGraphInstantiate(&g.exec, g.graph, 0);
  if (ierr != cudaSuccess) {
    g.exec = nullptr;
    reset();
    EMBER_CUDA_CHECK(ierr);
  }
}

void Graph::replay() {
  EMBER_CHECK(is_captured(), ValueError, "[cuda::Graph] replay before a successful capture");
  const detail::DeviceGuard guard(impl_->device);
  const cudaStream_t stream = detail::current_stream_handle(impl_->device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(impl_->exec, stream));
  // Whoever waits for this graph's replays before reusing memory it reads (a release
  // callback) must know every stream they ran on. Few distinct streams: a linear search.
  CaptureResources& res = *impl_->resources;
  std::lock_guard<std::mutex> lock(res.mutex);
  if (std::find(res.replay_streams.begin(), res.replay_streams.end(), stream) == res.replay_streams.end())
    res.replay_streams.push_back(stream);
}

void Graph::reset() noexcept {
  if (!impl_) return;
  Impl& g = *impl_;
  try {
    if (g.capturing) {  // abandon: end the capture, drop whatever was recorded
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(g.stream, &partial);
      (void)cudaGetLastError();
      if (partial) report("cudaGraphDestroy", cudaGraphDestroy(partial));
      g.leave_capture();
    }
    if (g.exec) report("cudaGraphExecDestroy", cudaGraphExecDestroy(g.exec));
    if (g.graph) report("cudaGraphDestroy", cudaGraphDestroy(g.graph));
    g.exec = nullptr;
    g.graph = nullptr;
    if (g.resources) {
      // Every replay has been launched by now (the exec is gone), so what the callbacks
      // order after the launches on these streams (events) follows every replay.
      std::map<const void*, detail::GraphRelease> releases;
      std::vector<cudaStream_t> replay_streams;
      {
        std::lock_guard<std::mutex> lock(g.resources->mutex);
        releases.swap(g.resources->releases);
        replay_streams.swap(g.resources->replay_streams);
      }
      for (auto& [key, release] : releases) {
        try {
          release(g.device, replay_streams);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "[cuda::Graph] reset: releasing what the graph read: %s\n", e.what());
        }
      }
    }
    // Before the pool: their blocks return to it, so that it can empty (a replay still
    // running keeps using them; the pool waits for the device before freeing a segment).
    g.resources.reset();
    if (g.pool) {
      const auto pool = std::exchange(g.pool, 0);
      detail::caching_allocator(g.device).release_pool(pool);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[cuda::Graph] reset: %s\n", e.what());
  }
}

}  // namespace ember::cuda
