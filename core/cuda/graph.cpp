// cuda::Graph (ember/cuda_graph.h): stream capture into a private allocator pool, replay on
// the current stream.
//
// Invariants:
// - While capturing, this thread's current stream on the graph's device is the graph's own
//   non-blocking stream (a blocking one would synchronize with the legacy stream, which is
//   illegal during capture), and the caching allocator routes that stream's allocations to
//   the graph's private pool. Both are undone on every way out of a capture: capture_end,
//   a failed capture_end, reset(), the destructor.
// - The private pool is held from capture_begin until reset()/destruction, so the addresses
//   baked into the graph stay reserved for it and are never handed to anyone else.
#include <cstdio>
#include <utility>

#include "ember/cuda.h"
#include "ember/cuda/caching_allocator.h"
#include "ember/cuda/check.h"
#include "ember/cuda/stream_handle.h"
#include "ember/cuda_graph.h"

namespace ember::cuda {

struct Graph::Impl {
  int device = -1;
  cudaStream_t stream = nullptr;    // the capture stream, created on first capture
  cudaStream_t previous = nullptr;  // the thread's current stream before capture_begin
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  CachingAllocator::PoolId pool = 0;
  bool capturing = false;

  ~Impl() {
    if (stream) (void)cudaStreamDestroy(stream);  // releases once its work is done
  }

  // Undoes capture_begin's changes to the thread and the allocator (not the pool hold).
  void leave_capture() {
    capturing = false;
    detail::set_current_stream_handle(previous, device);
    detail::caching_allocator(device).end_allocate_to_pool(pool);
  }
};

namespace {
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

void report(const char* what, cudaError_t err) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "[cuda::Graph] %s failed: %s\n", what, cudaGetErrorString(err));
}
}  // namespace

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
  if (g.stream && g.device != device) {
    DeviceGuard guard(g.device);
    EMBER_CUDA_CHECK(cudaStreamDestroy(g.stream));
    g.stream = nullptr;
  }
  g.device = device;
  if (!g.stream) EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));

  CachingAllocator& alloc = detail::caching_allocator(device);
  g.pool = alloc.create_pool();
  try {
    alloc.begin_allocate_to_pool(g.pool, g.stream);
  } catch (...) {
    alloc.release_pool(g.pool);
    g.pool = 0;
    throw;
  }
  g.previous = detail::current_stream_handle(device);
  detail::set_current_stream_handle(g.stream, device);
  g.capturing = true;
  // Thread-local mode: see ember/cuda_graph.h for why neither global nor relaxed.
  const cudaError_t err = cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    g.leave_capture();
    alloc.release_pool(g.pool);
    g.pool = 0;
    EMBER_CUDA_CHECK(err);
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
  DeviceGuard guard(impl_->device);
  EMBER_CUDA_CHECK(cudaGraphLaunch(impl_->exec, detail::current_stream_handle(impl_->device)));
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
    if (g.pool) {
      const auto pool = std::exchange(g.pool, 0);
      detail::caching_allocator(g.device).release_pool(pool);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[cuda::Graph] reset: %s\n", e.what());
  }
}

}  // namespace ember::cuda
