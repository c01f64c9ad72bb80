// CPU-only build: CUDA is a known device type with no implementation behind it.
#include <atomic>
#include <cstring>

#include "ember/cuda.h"
#include "ember/cuda_graph.h"
#include "ember/cuda_memory.h"
#include "ember/error.h"

namespace ember::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
bool is_simulated() { return false; }
std::string device_name(int) { return "none"; }
void synchronize(int) {}
std::string runtime_version() { return "none"; }

// No kernels, nothing deferred: the setting is kept only so that it reads back.
namespace {
std::atomic<bool> g_sync_checks{false};
}
void set_sync_checks(bool on) { g_sync_checks = on; }
bool sync_checks() { return g_sync_checks; }

namespace detail {
void raise_deferred_errors() {}
bool primary_context_active(int) noexcept { return false; }
DeferredErrorsHeld::DeferredErrorsHeld() = default;
DeferredErrorsHeld::~DeferredErrorsHeld() = default;
void check_device(const char* op, Device device) {
  EMBER_CHECK(device.is_cpu(), DeviceError, "[", op, "] ", device,
              " requested but this build of ember has no CUDA support");
}
Allocator* allocator(int index) {
  check_device("allocate", Device::cuda(index));
  return nullptr;
}
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool) {
  check_device("copy", dst_device);
  check_device("copy", src_device);
  if (nbytes) std::memcpy(dst, src, nbytes);
}
void* host_alloc(size_t) {
  check_device("pin_memory", Device::cuda(0));
  return nullptr;
}
void host_free(void*) {}
bool is_pinned(const void*) { return false; }
}  // namespace detail

// Memory statistics: all zero, nothing to free, nothing to record (ember/cuda_memory.h).
MemoryStats memory_stats(int) { return {}; }
int64_t memory_allocated(int) { return 0; }
int64_t max_memory_allocated(int) { return 0; }
int64_t memory_reserved(int) { return 0; }
int64_t max_memory_reserved(int) { return 0; }
void reset_peak_memory_stats(int) {}
void empty_cache() {}
std::string memory_summary(int) {
  return "ember memory summary: no CUDA (this build of ember has no CUDA support)\n";
}
void record_stream(const Tensor&, void*) {
  detail::check_device("record_stream", Device::cuda(0));
}
HostMemoryStats host_memory_stats() { return {}; }
void host_empty_cache() {}
namespace detail {
Allocator* uncached_allocator(int device) {
  check_device("allocate", Device::cuda(device));
  return nullptr;
}
}  // namespace detail

// Graphs (ember/cuda_graph.h): constructible and destructible, unusable.
struct Graph::Impl {};
Graph::Graph() = default;
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
void Graph::capture_begin() { detail::check_device("cuda::Graph", Device::cuda(0)); }
void Graph::capture_end() { detail::check_device("cuda::Graph", Device::cuda(0)); }
void Graph::replay() { detail::check_device("cuda::Graph", Device::cuda(0)); }
void Graph::reset() noexcept {}
bool Graph::is_captured() const { return false; }

}  // namespace ember::cuda

// ---- streams, events, device properties and versions (ember/cuda_stream.h, ember/cuda.h):
// nothing can be created, so every member of an object is unreachable; each still throws
// the same clear DeviceError rather than pretending.
namespace ember::cuda {
namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(str("[", op, "] this build of ember has no CUDA support"));
}
}  // namespace

std::string driver_version() { return "none"; }
int runtime_version_number() { return 0; }
int driver_version_number() { return 0; }
DeviceProperties get_device_properties(int device) {
  detail::check_device("get_device_properties", Device::cuda(device));
  no_cuda("get_device_properties");
}

Stream::Stream(const StreamOptions&) { no_cuda("Stream"); }
Stream Stream::default_stream(int) { no_cuda("default_stream"); }
Stream Stream::from_handle(StreamHandle, int) { no_cuda("Stream::from_handle"); }
std::pair<int, int> Stream::priority_range(int) { no_cuda("Stream::priority_range"); }
int Stream::priority() const { no_cuda("Stream::priority"); }
bool Stream::non_blocking() const { no_cuda("Stream::non_blocking"); }
void Stream::synchronize() const { no_cuda("Stream::synchronize"); }
bool Stream::query() const { no_cuda("Stream::query"); }
void Stream::wait(const Event&) const { no_cuda("Stream::wait"); }
void Stream::wait_stream(const Stream&) const { no_cuda("Stream::wait_stream"); }
Stream current_stream(int) { no_cuda("current_stream"); }
void set_current_stream(const Stream&) { no_cuda("set_current_stream"); }
StreamGuard::StreamGuard(const Stream& stream) : stream_(stream), previous_(stream) {
  no_cuda("StreamGuard");
}
StreamGuard::~StreamGuard() = default;

Event::Event(const EventOptions&) { no_cuda("Event"); }
Event::~Event() = default;
Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
void Event::record(const Stream&) { no_cuda("Event::record"); }
void Event::record() { no_cuda("Event::record"); }
void Event::synchronize() const { no_cuda("Event::synchronize"); }
bool Event::query() const { no_cuda("Event::query"); }
float Event::elapsed_time(const Event&) const { no_cuda("Event::elapsed_time"); }
}  // namespace ember::cuda
