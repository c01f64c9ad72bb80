// The profiler (torch.profiler's shape): every op dispatch, user range and autograd backward
// node, with CPU time, CUDA time, memory and input shapes; a key_averages() table and a
// Chrome trace.
//
//   profiler::Profiler prof({.record_shapes = true});
//   prof.start();
//   { profiler::record_function r("forward"); loss = model(x); }
//   loss.backward();
//   prof.stop();
//   std::cout << prof.table("cpu_time_total", 20);
//   prof.export_chrome_trace("trace.json");   // chrome://tracing or ui.perfetto.dev
//
// Invariants (Note [profiler hooks]):
// - Off costs one relaxed load of a global atomic bool per dispatch (detail::active()); the
//   recording path is out of line, reached only when it is true. Hooks: EMBER_DISPATCH_KERNEL
//   (ops/kernels/dispatch.h, every kernel of every op), the backward engine (one range per
//   node applied) and RecordFunction.
// - One profiler runs at a time, process-wide; every thread that dispatches while it runs is
//   recorded, each into its own buffer (a per-buffer mutex, uncontended except against stop()).
// - Ranges nest per thread: an event's parent is the innermost range open on its thread when
//   it began. Self time = total minus the total of the direct children.
// - CUDA time comes from a pair of timing events recorded around the kernel on the current
//   stream; they are read only at stop(), so no op ever waits for the device. Kernel intervals
//   are placed on the CPU clock through one anchor event per device, recorded right after a
//   device synchronize when the device is first seen in a session.
// - Results (events(), key_averages(), table(), export_chrome_trace()) stop a running
//   profiler first.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ember/device.h"
#include "ember/shape.h"

namespace ember::profiler {

struct ProfilerOptions {
  bool record_shapes = false;   // shapes of each op's tensor arguments (costs ~100 ns per op)
  bool profile_memory = false;  // net bytes allocated during each range (CPU and CUDA)
  bool with_cuda = true;        // CUDA events around ops on CUDA tensors
  bool emit_nvtx = false;       // also push NVTX ranges (for Nsight Systems), when built in
};

enum class EventKind : uint8_t { op, user, backward };

// One recorded range, after stop(). Times are ns since start(), on the CPU's steady clock.
struct Event {
  std::string name;
  EventKind kind = EventKind::op;
  uint32_t thread = 0;  // small per-thread id (the first thread ember saw is 1)
  int64_t start_ns = 0, end_ns = 0;
  int64_t self_cpu_ns = 0;  // end - start minus the direct children's end - start
  int parent = -1;          // index into events() of the enclosing range, or -1
  int depth = 0;
  std::vector<Shape> shapes;  // tensor arguments, in order (record_shapes)
  // CUDA: the device of an op on CUDA tensors (-1: none); its kernel interval on the CPU clock
  // (cuda_start_ns < 0 when it has none); cuda_ns is the CUDA time of the range (its own
  // events, or else the sum over its children), self_cuda_ns minus the children's.
  int device = -1;
  int stream = -1;  // small stream number for the trace, per session
  int64_t cuda_start_ns = -1, cuda_end_ns = -1;
  int64_t cuda_ns = 0, self_cuda_ns = 0;
  // Net bytes allocated on this thread (CPU) / on the device (CUDA) while the range was open.
  int64_t cpu_memory = 0, self_cpu_memory = 0, cuda_memory = 0, self_cuda_memory = 0;

  int64_t cpu_ns() const { return end_ns - start_ns; }
};

// Events grouped by name (and input shapes), as in torch's key_averages().
struct EventAverage {
  std::string name;
  std::string input_shapes;  // "[[128, 784], [512, 784]]" when grouped by input shape
  int64_t count = 0;
  int64_t cpu_time_total_ns = 0, self_cpu_time_total_ns = 0;
  int64_t cuda_time_total_ns = 0, self_cuda_time_total_ns = 0;
  int64_t cpu_memory = 0, self_cpu_memory = 0, cuda_memory = 0, self_cuda_memory = 0;
  double cpu_time_avg_ns() const { return count ? double(cpu_time_total_ns) / double(count) : 0; }
};

class KeyAverages {
 public:
  std::vector<EventAverage> rows;
  bool grouped_by_input_shape = false;
  bool has_cuda = false, has_memory = false;

  // PyTorch's key_averages().table(). sort_by: cpu_time_total, self_cpu_time_total, cpu_time
  // (average), cuda_time_total, self_cuda_time_total, count, cpu_memory_usage,
  // self_cpu_memory_usage, cuda_memory_usage, self_cuda_memory_usage. row_limit < 0: all.
  std::string table(std::string_view sort_by = "cpu_time_total", int row_limit = 20) const;
};

class Profiler {
 public:
  explicit Profiler(const ProfilerOptions& options = {});
  virtual ~Profiler();  // stops a running profiler
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts recording (clearing earlier results). Throws if another profiler is running.
  void start();
  // Stops recording and resolves CUDA times (waits for the recorded CUDA events).
  void stop();
  bool running() const { return session_ != nullptr; }
  const ProfilerOptions& options() const { return options_; }

  // Events sorted by thread, then start time (a parent before its children).
  const std::vector<Event>& events();
  KeyAverages key_averages(bool group_by_input_shape = false);
  std::string table(std::string_view sort_by = "cpu_time_total", int row_limit = 20);
  // Chrome trace event format: complete ("X") events in microseconds, one track per thread
  // and one per CUDA stream. Throws IOError when the file cannot be written.
  void export_chrome_trace(const std::string& path);

  struct Session;  // recording state (core/src/profiler.cpp)

 private:
  ProfilerOptions options_;
  std::shared_ptr<Session> session_;  // non-null while running
  std::vector<Event> events_;
};

// RAII: profiles from construction to destruction (or an explicit stop()).
//   { profiler::Profile prof({.record_shapes = true}); run(); prof.stop(); print(prof.table()); }
class Profile : public Profiler {
 public:
  explicit Profile(const ProfilerOptions& options = {}) : Profiler(options) { start(); }
};

namespace detail {
extern std::atomic<bool> g_active;         // a profiler is running
extern std::atomic<bool> g_memory_active;  // ... with profile_memory
inline bool active() noexcept { return g_active.load(std::memory_order_relaxed); }

// An open range: where it was recorded, checked again when it ends.
struct Range {
  void* buffer = nullptr;
  uint64_t generation = 0;
  int32_t index = -1;
};

// Tensor arguments of an op, for its shapes and devices: a callback over a caller's pack.
class ShapeSink {
 public:
  virtual void add(const Shape& shape) = 0;
  virtual void add_undefined() = 0;

 protected:
  ~ShapeSink() = default;
};
using ShapeFill = void (*)(ShapeSink&, const void* ctx);

// The op path (EMBER_DISPATCH_KERNEL): begin records the name and shapes, start_clock the
// start time and CUDA start event (so the bookkeeping is not counted), end the rest.
Range begin_op(std::string_view static_name, Device device, ShapeFill fill, const void* ctx);
void start_clock(const Range& r);
void end(Range& r) noexcept;
Range begin_range(std::string_view name, EventKind kind, bool copy_name);
Range begin_backward(const char* node_name);  // "<node name>_backward"

// CPU allocator hook (core/src/storage.cpp): net bytes per thread, counted while profiling
// memory.
void count_host_bytes(int64_t delta) noexcept;
inline void note_host_alloc(int64_t nbytes) noexcept {
  if (g_memory_active.load(std::memory_order_relaxed)) [[unlikely]] count_host_bytes(nbytes);
}
}  // namespace detail

// A user range (torch.profiler.record_function): times the scope it lives in; ranges nest.
class RecordFunction {
 public:
  explicit RecordFunction(std::string_view name) {
    if (detail::active()) [[unlikely]] range_ = detail::begin_range(name, EventKind::user, true);
  }
  ~RecordFunction() {
    if (range_.buffer) [[unlikely]] detail::end(range_);
  }
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

  // The range of an autograd node's backward: "<node name>_backward" (the engine's hook).
  static RecordFunction backward(const char* node_name) { return RecordFunction(node_name, 0); }

 private:
  RecordFunction(const char* node_name, int) {
    if (detail::active()) [[unlikely]] range_ = detail::begin_backward(node_name);
  }
  detail::Range range_;
};
using record_function = RecordFunction;

// True when this build can emit NVTX ranges (CUDA builds: the header-only nvtx3 that ships
// with the toolkit); ProfilerOptions::emit_nvtx then pushes one per recorded range.
bool nvtx_available();

}  // namespace ember::profiler
