// CUDA build: cuda::Stream, cuda::Event and StreamGuard over the thread-local current stream
// of stream_handle.h.
//
// Invariants:
// - Every call that needs a device to be current (creating a stream or an event, recording)
//   sets it with a DeviceScope and puts the caller's device back, so these objects never
//   change which device the calling thread works on.
// - CUstream_st*/CUevent_st* (the public handle types) are cudaStream_t/cudaEvent_t: the
//   static_asserts below keep the header's opaque declarations honest.
//
// Note [stream lifetime]: the last handle of an owned stream synchronizes it before
// cudaStreamDestroy. cudaStreamDestroy alone returns at once and lets queued work finish, but
// the caching allocator keys its pools by stream handle: a new stream could receive the same
// handle value and reuse blocks that kernels of the destroyed stream still read or write.
#include <cstdio>
#include <type_traits>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
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

// Makes `device` current for a scope and restores the previous device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (device != previous_) EMBER_CUDA_CHECK(cudaSetDevice(device));
    changed_ = device != previous_;
  }
  ~DeviceScope() {
    if (changed_) (void)cudaSetDevice(previous_);  // a destructor must not throw
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Destructors report CUDA failures instead of throwing; at exit the runtime may already be
// unloading, which is not a failure.
void report(const char* what, cudaError_t err) {
  if (err == cudaSuccess || err == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "[cuda] %s failed: %s\n", what, cudaGetErrorString(err));
}

// cudaStreamQuery / cudaEventQuery: done, not done, or a real error.
bool ready(cudaError_t err) {
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: do not leave it for the next launch check
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}
}  // namespace

// ---- Stream ----

struct Stream::Owner {
  int device;
  cudaStream_t stream;
  Owner(int d, cudaStream_t s) : device(d), stream(s) {}
  Owner(const Owner&) = delete;  // a copy's destructor would destroy the stream early
  Owner& operator=(const Owner&) = delete;
  ~Owner() {  // Note [stream lifetime]
    int previous = 0;
    report("cudaGetDevice", cudaGetDevice(&previous));
    report("cudaSetDevice", cudaSetDevice(device));
    report("cudaStreamSynchronize", cudaStreamSynchronize(stream));
    report("cudaStreamDestroy", cudaStreamDestroy(stream));
    report("cudaSetDevice", cudaSetDevice(previous));
  }
};

Stream::Stream(const StreamOptions& options) {
  device_ = resolve_device("Stream", options.device);
  DeviceScope scope(device_);
  cudaStream_t stream = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(
      &stream, options.non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, options.priority));
  handle_ = stream;
  owner_ = std::make_shared<Owner>(device_, stream);
}

Stream Stream::default_stream(int device) {
  return Stream(resolve_device("default_stream", device), nullptr);
}

Stream Stream::from_handle(StreamHandle handle, int device) {
  return Stream(resolve_device("Stream::from_handle", device), handle);
}

std::pair<int, int> Stream::priority_range(int device) {
  DeviceScope scope(resolve_device("Stream::priority_range", device));
  int least = 0, greatest = 0;
  EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

int Stream::priority() const {
  DeviceScope scope(device_);
  int p = 0;
  EMBER_CUDA_CHECK(cudaStreamGetPriority(handle_, &p));
  return p;
}

bool Stream::non_blocking() const {
  DeviceScope scope(device_);
  unsigned flags = 0;
  EMBER_CUDA_CHECK(cudaStreamGetFlags(handle_, &flags));
  return (flags & cudaStreamNonBlocking) != 0;
}

void Stream::synchronize() const {
  DeviceScope scope(device_);  // the legacy stream (nullptr) means the current device's
  EMBER_CUDA_CHECK(cudaStreamSynchronize(handle_));
}

bool Stream::query() const {
  DeviceScope scope(device_);
  return ready(cudaStreamQuery(handle_));
}

void Stream::wait(const Event& event) const {
  DeviceScope scope(device_);
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
  DeviceScope scope(device_);
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
  DeviceScope scope(device_);
  EMBER_CUDA_CHECK(cudaEventRecord(handle_, stream.handle()));
  recorded_ = true;
}

void Event::record() { record(current_stream(device_)); }

void Event::synchronize() const {
  if (!handle_) return;
  EMBER_CUDA_CHECK(cudaEventSynchronize(handle_));
}

bool Event::query() const {
  if (!handle_) return true;
  return ready(cudaEventQuery(handle_));
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
