// CUDA build: cuda::Stream, cuda::Event and StreamGuard over the thread-local current stream
// of stream_handle.h.
//
// Invariants:
// - Every call that needs a device to be current (creating a stream or an event, recording)
//   sets it with a DeviceGuard and puts the caller's device back, so these objects never
//   change which device the calling thread works on.
// - CUstream_st*/CUevent_st* (the public handle types) are cudaStream_t/cudaEvent_t: the
//   static_asserts below keep the header's opaque declarations honest.
//
// Note [stream lifetime]: ember never destroys a CUDA stream it created. The caching
// allocator keys free blocks by stream and, when a block that record_stream marked is freed,
// records an event on each stream that used it, which may happen long after the last
// cuda::Stream handle of that stream is gone. Recording on a destroyed stream fails (and used
// to leave the block in no pool), or, once the driver hands the same handle value to a new
// stream, silently records on an unrelated one; cached blocks of a destroyed stream could
// also be handed to that new stream while the old one's kernels still use them. So, as in
// PyTorch, Stream's constructor hands out streams from a per-device pool that lives as long
// as the process (kPoolSize streams per kind, reused round-robin once all exist), and graph
// captures use pooled capture streams (graph.cpp). The cost is bounded: at most kPoolSize
// streams per (device, flags, priority), created only when asked for.
#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "ember/cuda_stream.h"

static_assert(std::is_same_v<ember::cuda::StreamHandle, cudaStream_t>);
static_assert(std::is_same_v<ember::cuda::EventHandle, cudaEvent_t>);

namespace ember::cuda {

namespace {
// The device `device` names (-1: the current one), after checking it can be used.
int resolve_device(const char* op, int device) {
  if (device < 0) {
    detail::check_device(op, Device::cuda(0));
    return detail::current_device();
  }
  detail::check_device(op, Device::cuda(device));
  return device;
}

using detail::DeviceGuard;

// Destructors report CUDA failures instead of throwing; at exit the runtime may already be
// unloading, which is not a failure.
void report(const char* what, cudaError_t err) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "[cuda] %s failed: %s\n", what, cudaGetErrorString(err));
}

// The per-device stream pool (Note [stream lifetime]).
constexpr size_t kPoolSize = 32;

struct StreamPool {
  struct Kind {
    std::vector<cudaStream_t> streams;
    size_t next = 0;  // round-robin position once all kPoolSize exist
  };
  std::mutex mutex;
  bool have_range = false;
  int least = 0, greatest = 0;  // the device's priority range (lower numbers run first)
  std::map<std::pair<bool, int>, Kind> kinds;  // by (non_blocking, clamped priority)
};

cudaStream_t pooled_stream(int device, bool non_blocking, int priority) {
  static auto* pools = new std::map<int, StreamPool>();  // never destroyed (see the Note)
  static auto* pools_mutex = new std::mutex;
  StreamPool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(*pools_mutex);
    pool = &(*pools)[device];  // std::map: the reference stays valid
  }
  std::lock_guard<std::mutex> lock(pool->mutex);
  const DeviceGuard guard(device);
  if (!pool->have_range) {
    EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&pool->least, &pool->greatest));
    pool->have_range = true;
  }
  // CUDA clamps priorities to the range; so does the pool, so one kind serves them all.
  priority = std::min(std::max(priority, pool->greatest), pool->least);
  StreamPool::Kind& kind = pool->kinds[{non_blocking, priority}];
  if (kind.streams.size() < kPoolSize) {
    cudaStream_t stream = nullptr;
    EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(
        &stream, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority));
    kind.streams.push_back(stream);
    return stream;
  }
  return kind.streams[kind.next++ % kPoolSize];
}
}  // namespace

// ---- Stream ----

Stream::Stream(const StreamOptions& options) {
  device_ = resolve_device("Stream", options.device);
  handle_ = pooled_stream(device_, options.non_blocking, options.priority);
}

Stream Stream::default_stream(int device) {
  return Stream(resolve_device("default_stream", device), nullptr);
}

Stream Stream::from_handle(StreamHandle handle, int device) {
  return Stream(resolve_device("Stream::from_handle", device), handle);
}

std::pair<int, int> Stream::priority_range(int device) {
  const DeviceGuard guard(resolve_device("Stream::priority_range", device));
  int least = 0, greatest = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

int Stream::priority() const {
  const DeviceGuard guard(device_);
  int p = 0;
  EMBER_CUDA_CHECK(cudaStreamGetPriority(handle_, &p));
  return p;
}

bool Stream::non_blocking() const {
  const DeviceGuard guard(device_);
  unsigned flags = 0;
  EMBER_CUDA_CHECK(cudaStreamGetFlags(handle_, &flags));
  return (flags & cudaStreamNonBlocking) != 0;
}

void Stream::synchronize() const {
  const DeviceGuard guard(device_);  // the legacy stream (nullptr) means the current device's
  EMBER_CUDA_CHECK(cudaStreamSynchronize(handle_));
  detail::raise_deferred_errors();  // Note [deferred device checks]: the host waited anyway
}

bool Stream::query() const {
  const DeviceGuard guard(device_);
  return detail::query_completed(cudaStreamQuery(handle_));
}

void Stream::wait(const Event& event) const {
  const DeviceGuard guard(device_);
  // Cross-device waits are allowed: the stream waits for the other device's event.
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(handle_, event.handle(), 0));
}

void Stream::wait_stream(const Stream& other) const {
  if (other == *this) return;
  Event marker(EventOptions{.device = other.device()});
  marker.record(other);
  wait(marker);  // the wait is enqueued; destroying the event afterwards is allowed
}

// ---- current stream ----

Stream current_stream(int device) {
  const int d = resolve_device("current_stream", device);
  return Stream::from_handle(detail::current_stream_handle(d), d);
}

void set_current_stream(const Stream& stream) {
  resolve_device("set_current_stream", stream.device());
  detail::set_current_stream_handle(stream.handle(), stream.device());
}

StreamGuard::StreamGuard(const Stream& stream)
    : stream_(stream), previous_(current_stream(stream.device())) {
  detail::set_current_stream_handle(stream_.handle(), stream_.device());
}

StreamGuard::~StreamGuard() {
  detail::set_current_stream_handle(previous_.handle(), previous_.device());
}

// ---- Event ----

Event::Event(const EventOptions& options) {
  device_ = resolve_device("Event", options.device);
  timing_ = options.enable_timing;
  unsigned flags = cudaEventDefault;
  if (!options.enable_timing) flags |= cudaEventDisableTiming;
  if (options.blocking) flags |= cudaEventBlockingSync;
  const DeviceGuard guard(device_);
  cudaEvent_t event = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, flags));
  handle_ = event;
}

Event::~Event() {
  if (handle_) report("cudaEventDestroy", cudaEventDestroy(handle_));
}

Event::Event(Event&& other) noexcept
    : device_(other.device_), handle_(other.handle_), timing_(other.timing_),
      recorded_(other.recorded_) {
  other.handle_ = nullptr;
  other.recorded_ = false;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_) report("cudaEventDestroy", cudaEventDestroy(handle_));
    device_ = other.device_;
    handle_ = other.handle_;
    timing_ = other.timing_;
    recorded_ = other.recorded_;
    other.handle_ = nullptr;
    other.recorded_ = false;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  EMBER_CHECK(handle_ != nullptr, ValueError, "[Event::record] the event was moved from");
  EMBER_CHECK(stream.device() == device_, DeviceError, "[Event::record] the event is on cuda:",
              device_, " but the stream is on cuda:", stream.device());
  const DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaEventRecord(handle_, stream.handle()));
  recorded_ = true;
}

void Event::record() { record(current_stream(device_)); }

void Event::synchronize() const {
  if (!handle_) return;
  EMBER_CUDA_CHECK(cudaEventSynchronize(handle_));
  detail::raise_deferred_errors();  // Note [deferred device checks]
}

bool Event::query() const {
  if (!handle_) return true;
  return detail::query_completed(cudaEventQuery(handle_));
}

float Event::elapsed_time(const Event& end) const {
  EMBER_CHECK(timing_ && end.timing_, ValueError,
              "[Event::elapsed_time] both events need EventOptions{.enable_timing = true}");
  EMBER_CHECK(recorded_ && end.recorded_, ValueError,
              "[Event::elapsed_time] both events must be recorded first");
  synchronize();  // cudaEventElapsedTime fails with NotReady unless both have completed
  end.synchronize();
  float ms = 0;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, handle_, end.handle_));
  return ms;
}

}  // namespace ember::cuda
