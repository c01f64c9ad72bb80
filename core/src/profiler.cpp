// The profiler's recording and its reports. See Note [profiler hooks] in ember/profiler.h.
//
// Recording: each thread owns a ThreadBuffer (shared by the thread and the session) of raw
// events in begin order, i.e. pre-order of the per-thread range tree, so a parent always
// precedes its children. A buffer's mutex is taken by its own thread for each begin/end and by
// stop() once, when it closes the buffer; after that the buffer is read without it. A range
// that is still open at stop() ends at the stop time.
#include "ember/profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <unordered_map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ember/cuda.h"
#include "ember/cuda_memory.h"
#include "ember/cuda_stream.h"
#include "ember/error.h"
#include "ember/macros.h"

namespace ember::profiler {

namespace detail {
std::atomic<bool> g_active{false};
std::atomic<bool> g_memory_active{false};

// core/cuda/nvtx.cpp (CUDA builds) or core/cuda_stub/nvtx.cpp.
void nvtx_push(std::string_view name);
void nvtx_pop();
}  // namespace detail

namespace {
using Clock = std::chrono::steady_clock;

struct RawEvent {
  std::string_view name;
  int64_t start = -1, end = -1;
  int32_t parent = -1;
  int32_t cuda = -1;  // index into ThreadBuffer::cuda
  uint32_t dims_begin = 0, dims_end = 0;
  int64_t host0 = 0, device0 = 0;  // memory counters at the start
  int64_t host_delta = 0, device_delta = 0;
  EventKind kind = EventKind::op;
  int8_t device = -1;       // CUDA device of an op on CUDA tensors
  int8_t memory_device = -2;  // allocator read at the start: a device, -1 current, -2 none
};

struct CudaRange {
  cuda::Event start, end;
  int device = 0;
  void* stream = nullptr;
  bool ended = false;
};

struct ThreadBuffer {
  std::mutex mutex;
  bool closed = false;
  uint32_t thread = 0;
  uint64_t generation = 0;
  ProfilerOptions options;
  bool nvtx = false;
  bool cuda_available = false;
  Clock::time_point t0;
  std::vector<RawEvent> events;
  std::vector<int32_t> stack;  // open ranges, innermost last
  std::vector<int64_t> dims;   // per tensor argument: ndim (-1: undefined) then the sizes
  std::deque<CudaRange> cuda;
  std::deque<std::string> names;  // copies of user range names (stable addresses)
  std::unordered_map<const char*, std::string_view> backward_names;
  std::vector<bool> anchored;  // devices whose anchor exists

  int64_t now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  }
};

struct Anchor {
  cuda::Event event;
  int64_t cpu_ns = 0;
};
}  // namespace

struct Profiler::Session {
  ProfilerOptions options;
  uint64_t generation = 0;
  Clock::time_point t0;
  bool cuda_available = false;
  std::mutex mutex;  // buffers, anchors
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::map<int, Anchor> anchors;
};

namespace {
std::mutex g_mutex;  // g_session; taken before a Session's mutex, never inside a buffer's
Profiler::Session* g_session = nullptr;
std::atomic<uint64_t> g_generation{0};
std::atomic<uint32_t> g_next_thread{1};

EMBER_HOT_TLS thread_local uint32_t t_thread_id = 0;
EMBER_HOT_TLS thread_local int64_t t_host_bytes = 0;
struct ThreadState {
  std::shared_ptr<ThreadBuffer> buffer;
  uint64_t generation = 0;
};
thread_local ThreadState t_state;

uint32_t thread_id() {
  if (t_thread_id == 0) t_thread_id = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  return t_thread_id;
}

// This thread's buffer in the running session (registering it on first use), or null.
ThreadBuffer* buffer() {
  const uint64_t gen = g_generation.load(std::memory_order_acquire);
  if (t_state.buffer && t_state.generation == gen) return t_state.buffer.get();
  std::lock_guard<std::mutex> lock(g_mutex);
  Profiler::Session* s = g_session;
  if (s == nullptr) return nullptr;
  auto b = std::make_shared<ThreadBuffer>();
  b->thread = thread_id();
  b->generation = s->generation;
  b->options = s->options;
  b->cuda_available = s->cuda_available;
  b->t0 = s->t0;
  b->nvtx = s->options.emit_nvtx && nvtx_available();
  {
    std::lock_guard<std::mutex> slock(s->mutex);
    s->buffers.push_back(b);
  }
  t_state.buffer = std::move(b);
  t_state.generation = s->generation;
  return t_state.buffer.get();
}

// The buffer a range was opened in, if it is still this thread's current one.
ThreadBuffer* owner(const detail::Range& r) {
  if (r.buffer == nullptr || t_state.buffer.get() != r.buffer ||
      t_state.generation != r.generation)
    return nullptr;
  return t_state.buffer.get();
}

// Makes sure `device` has its anchor event in the running session (one device synchronize
// per device and session). Called without any buffer lock held.
void ensure_anchor(ThreadBuffer* b, int device) {
  if (size_t(device) < b->anchored.size() && b->anchored[size_t(device)]) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    Profiler::Session* s = g_session;
    if (s == nullptr || s->generation != b->generation) return;
    std::lock_guard<std::mutex> slock(s->mutex);
    if (!s->anchors.count(device)) {
      const cuda::detail::DeferredErrorsHeld held;  // a fault is the user's to see, not this catch's
      cuda::synchronize(device);
      Anchor a{cuda::Event({.device = device, .enable_timing = true}), 0};
      a.event.record();
      a.cpu_ns = b->now();
      s->anchors.emplace(device, std::move(a));
    }
  }
  if (b->anchored.size() <= size_t(device)) b->anchored.resize(size_t(device) + 1, false);
  b->anchored[size_t(device)] = true;
}

class DimSink final : public detail::ShapeSink {
 public:
  explicit DimSink(std::vector<int64_t>& dims) : dims_(dims) {}
  void add(const Shape& shape) override {
    dims_.push_back(int64_t(shape.size()));
    dims_.insert(dims_.end(), shape.begin(), shape.end());
  }
  void add_undefined() override { dims_.push_back(-1); }

 private:
  std::vector<int64_t>& dims_;
};

int64_t device_memory(int device) {
  try {
    return cuda::memory_allocated(device);
  } catch (const Error&) {
    return 0;
  }
}

detail::Range open(ThreadBuffer* b, std::string_view name, EventKind kind, Device device,
                   detail::ShapeFill fill, const void* ctx) {
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->closed) return {};
  RawEvent e;
  e.name = name;
  e.kind = kind;
  e.parent = b->stack.empty() ? -1 : b->stack.back();
  e.device = device.is_cuda() ? int8_t(device.index) : int8_t(-1);
  if (fill && b->options.record_shapes) {
    e.dims_begin = uint32_t(b->dims.size());
    DimSink sink(b->dims);
    fill(sink, ctx);
    e.dims_end = uint32_t(b->dims.size());
  }
  const int32_t index = int32_t(b->events.size());
  b->events.push_back(e);
  b->stack.push_back(index);
  return {b, b->generation, index};
}

// Starts the clock of an open range: memory counters, CUDA start event, then the time.
void arm(ThreadBuffer* b, const detail::Range& r) {
  int device;
  std::string_view name;
  {
    std::lock_guard<std::mutex> lock(b->mutex);
    if (b->closed) return;  // stop() ran since open(): the events may be gone
    device = b->events[size_t(r.index)].device;
    name = b->events[size_t(r.index)].name;
  }
  bool cuda_timing = device >= 0 && b->options.with_cuda;
  if (cuda_timing) {
    try {
      ensure_anchor(b, device);
    } catch (const Error&) {
      cuda_timing = false;  // no CUDA time for this op rather than a failing op
    }
  }
  if (b->nvtx) detail::nvtx_push(name);
  std::lock_guard<std::mutex> lock(b->mutex);
  if (b->closed) return;
  RawEvent& e = b->events[size_t(r.index)];
  if (b->options.profile_memory) {
    e.host0 = t_host_bytes;
    const int mdev = device >= 0 ? device : b->cuda_available ? -1 : -2;
    if (mdev >= -1) {
      e.memory_device = int8_t(mdev);
      e.device0 = device_memory(mdev);
    }
  }
  if (cuda_timing) {
    try {
      CudaRange c{cuda::Event({.device = device, .enable_timing = true}),
                  cuda::Event({.device = device, .enable_timing = true}), device,
                  cuda::current_stream(device).handle(), false};
      c.start.record();
      b->cuda.push_back(std::move(c));
      e.cuda = int32_t(b->cuda.size() - 1);
    } catch (const Error&) {
      // as above
    }
  }
  e.start = b->now();
}
}  // namespace

namespace detail {

Range begin_op(std::string_view name, Device device, ShapeFill fill, const void* ctx) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return {};
  return open(b, name, EventKind::op, device, fill, ctx);
}

void start_clock(const Range& r) {
  if (ThreadBuffer* b = owner(r)) arm(b, r);
}

Range begin_range(std::string_view name, EventKind kind, bool copy_name) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return {};
  if (copy_name) name = b->names.emplace_back(name);  // only this thread touches names
  Range r = open(b, name, kind, Device::cpu(), nullptr, nullptr);
  if (r.buffer) arm(b, r);
  return r;
}

void end(Range& r) noexcept {
  ThreadBuffer* b = owner(r);
  r.buffer = nullptr;
  if (b == nullptr) return;
  const int64_t t = b->now();
  if (b->nvtx) nvtx_pop();
  try {
    std::lock_guard<std::mutex> lock(b->mutex);
    if (b->closed) return;
    RawEvent& e = b->events[size_t(r.index)];
    if (e.start < 0) return;  // never armed
    e.end = t;
    if (e.cuda >= 0) {
      CudaRange& c = b->cuda[size_t(e.cuda)];
      c.end.record();
      c.ended = true;
    }
    if (b->options.profile_memory) {
      e.host_delta = t_host_bytes - e.host0;
      if (e.memory_device >= -1) e.device_delta = device_memory(e.memory_device) - e.device0;
    }
    auto it = std::find(b->stack.rbegin(), b->stack.rend(), r.index);
    if (it != b->stack.rend()) b->stack.erase(std::next(it).base());
  } catch (...) {
    // A failing CUDA event record loses this range's CUDA time, never the program.
  }
}

Range begin_backward(const char* node_name) {
  ThreadBuffer* b = buffer();
  if (b == nullptr) return {};
  std::string_view name;
  if (auto it = b->backward_names.find(node_name); it != b->backward_names.end()) {
    name = it->second;
  } else {
    std::string full = node_name;
    if (full != "AccumulateGrad") full += "_backward";
    name = b->names.emplace_back(std::move(full));
    b->backward_names.emplace(node_name, name);
  }
  Range r = open(b, name, EventKind::backward, Device::cpu(), nullptr, nullptr);
  if (r.buffer) arm(b, r);
  return r;
}

void count_host_bytes(int64_t delta) noexcept { t_host_bytes += delta; }

}  // namespace detail

// ---- Profiler ----

Profiler::Profiler(const ProfilerOptions& options) : options_(options) {}

Profiler::~Profiler() {
  try {
    stop();
  } catch (...) {
  }
}

void Profiler::start() {
  EMBER_CHECK(!session_, Error, "[profiler] start() called on a running profiler");
  auto s = std::make_shared<Session>();
  s->options = options_;
  s->t0 = Clock::now();
  s->cuda_available = cuda::is_available();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    EMBER_CHECK(g_session == nullptr, Error,
                "[profiler] another profiler is already running (one at a time)");
    s->generation = g_generation.load() + 1;
    g_session = s.get();
    g_generation.store(s->generation, std::memory_order_release);
  }
  events_.clear();
  session_ = std::move(s);
  // The current device's anchor now (its device synchronize must not land inside a CUDA
  // graph capture started later); other devices get theirs when first used.
  if (session_->cuda_available) {
    try {
      const int device = cuda::current_stream().device();
      const cuda::detail::DeferredErrorsHeld held;  // a fault is the user's to see, not this catch's
      cuda::synchronize(device);
      Anchor a{cuda::Event({.device = device, .enable_timing = true}), 0};
      a.event.record();
      a.cpu_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - session_->t0)
                     .count();
      std::lock_guard<std::mutex> lock(session_->mutex);
      session_->anchors.emplace(device, std::move(a));
    } catch (const Error&) {
    }
  }
  if (options_.profile_memory) detail::g_memory_active.store(true, std::memory_order_relaxed);
  detail::g_active.store(true, std::memory_order_release);
}

namespace {
std::string format_shapes(const std::vector<Shape>& shapes) {
  std::string s = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) s += ", ";
    s += "[";
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (d) s += ", ";
      s += std::to_string(shapes[i][d]);
    }
    s += "]";
  }
  return s + "]";
}
}  // namespace

void Profiler::stop() {
  if (!session_) return;
  detail::g_active.store(false, std::memory_order_release);
  detail::g_memory_active.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_session = nullptr;
  }
  std::shared_ptr<Session> s = std::move(session_);
  session_.reset();
  const int64_t t_stop =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - s->t0).count();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    buffers = s->buffers;
  }
  for (auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->closed = true;
  }
  std::sort(buffers.begin(), buffers.end(),
            [](const auto& a, const auto& b) { return a->thread < b->thread; });

  std::map<std::pair<int, void*>, int> streams;
  std::vector<Event> out;
  for (auto& b : buffers) {
    const size_t base = out.size();
    std::vector<int32_t> index(b->events.size(), -1);
    for (size_t i = 0; i < b->events.size(); ++i) {
      const RawEvent& r = b->events[i];
      if (r.start < 0) continue;
      Event e;
      e.name = std::string(r.name);
      e.kind = r.kind;
      e.thread = b->thread;
      e.start_ns = r.start;
      e.end_ns = r.end >= 0 ? r.end : std::max(r.start, t_stop);
      e.parent = r.parent >= 0 ? index[size_t(r.parent)] : -1;
      e.depth = e.parent >= 0 ? out[size_t(e.parent)].depth + 1 : 0;
      e.device = r.device;
      for (size_t k = r.dims_begin; k < r.dims_end;) {
        const int64_t nd = b->dims[k++];
        if (nd < 0) {
          e.shapes.emplace_back();
          continue;
        }
        e.shapes.emplace_back(&b->dims[k], size_t(nd));
        k += size_t(nd);
      }
      e.cpu_memory = r.host_delta;
      e.cuda_memory = r.device_delta;
      if (r.cuda >= 0) {
        CudaRange& c = b->cuda[size_t(r.cuda)];
        auto a = s->anchors.find(c.device);
        if (c.ended && a != s->anchors.end()) {
          try {
            const cuda::detail::DeferredErrorsHeld held;
            const double offset_ms = a->second.event.elapsed_time(c.start);
            const double ms = c.start.elapsed_time(c.end);
            e.cuda_start_ns = a->second.cpu_ns + int64_t(offset_ms * 1e6);
            e.cuda_end_ns = e.cuda_start_ns + int64_t(ms * 1e6);
            auto [it, fresh] = streams.emplace(std::pair{c.device, c.stream}, int(streams.size()));
            e.stream = it->second;
          } catch (const Error&) {
            e.cuda_start_ns = e.cuda_end_ns = -1;
          }
        }
      }
      index[i] = int32_t(out.size());
      out.push_back(std::move(e));
    }
    // Children follow their parent: one backward pass sums them into it.
    const size_t n = out.size() - base;
    std::vector<int64_t> child_cpu(n, 0), child_cuda(n, 0), child_host(n, 0), child_dev(n, 0);
    for (size_t k = n; k-- > 0;) {
      Event& e = out[base + k];
      if (e.cuda_start_ns >= 0) e.cuda_ns = e.cuda_end_ns - e.cuda_start_ns;
      else e.cuda_ns = child_cuda[k];
      e.self_cpu_ns = std::max<int64_t>(0, e.cpu_ns() - child_cpu[k]);
      e.self_cuda_ns = std::max<int64_t>(0, e.cuda_ns - child_cuda[k]);
      e.self_cpu_memory = e.cpu_memory - child_host[k];
      e.self_cuda_memory = e.cuda_memory - child_dev[k];
      if (e.parent >= 0) {
        const size_t p = size_t(e.parent) - base;
        child_cpu[p] += e.cpu_ns();
        child_cuda[p] += e.cuda_ns;
        child_host[p] += e.cpu_memory;
        child_dev[p] += e.cuda_memory;
      }
    }
  }
  // Threads keep their buffers until the next session: free what they hold now (CUDA events
  // above all). An open range then ends as a no-op (the buffer is closed).
  for (auto& b : buffers) {
    std::lock_guard<std::mutex> lock(b->mutex);
    b->events.clear();
    b->events.shrink_to_fit();
    b->cuda.clear();
    b->dims.clear();
    b->dims.shrink_to_fit();
  }
  events_ = std::move(out);
}

const std::vector<Event>& Profiler::events() {
  stop();
  return events_;
}

KeyAverages Profiler::key_averages(bool group_by_input_shape) {
  stop();
  KeyAverages k;
  k.grouped_by_input_shape = group_by_input_shape;
  k.has_memory = options_.profile_memory;
  std::map<std::pair<std::string, std::string>, size_t> where;
  for (const Event& e : events_) {
    std::string shapes = group_by_input_shape ? format_shapes(e.shapes) : std::string();
    auto [it, fresh] = where.emplace(std::pair{e.name, shapes}, k.rows.size());
    if (fresh) {
      k.rows.emplace_back();
      k.rows.back().name = e.name;
      k.rows.back().input_shapes = std::move(shapes);
    }
    EventAverage& a = k.rows[it->second];
    a.count += 1;
    a.cpu_time_total_ns += e.cpu_ns();
    a.self_cpu_time_total_ns += e.self_cpu_ns;
    a.cuda_time_total_ns += e.cuda_ns;
    a.self_cuda_time_total_ns += e.self_cuda_ns;
    a.cpu_memory += e.cpu_memory;
    a.self_cpu_memory += e.self_cpu_memory;
    a.cuda_memory += e.cuda_memory;
    a.self_cuda_memory += e.self_cuda_memory;
    if (e.cuda_start_ns >= 0) k.has_cuda = true;
  }
  return k;
}

std::string Profiler::table(std::string_view sort_by, int row_limit) {
  return key_averages(false).table(sort_by, row_limit);
}

// ---- the table ----

namespace {
std::string format_time(double ns) {
  char buf[32];
  const double us = ns / 1e3;
  if (us >= 1e6) std::snprintf(buf, sizeof buf, "%.3fs", us / 1e6);
  else if (us >= 1e3) std::snprintf(buf, sizeof buf, "%.3fms", us / 1e3);
  else std::snprintf(buf, sizeof buf, "%.3fus", us);
  return buf;
}

std::string format_percent(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

std::string format_bytes(int64_t b) {
  char buf[32];
  const double a = double(b < 0 ? -b : b);
  constexpr double kb = 1024.0, mb = kb * kb, gb = mb * kb;
  if (a >= gb) std::snprintf(buf, sizeof buf, "%.2f Gb", double(b) / gb);
  else if (a >= mb) std::snprintf(buf, sizeof buf, "%.2f Mb", double(b) / mb);
  else if (a >= kb) std::snprintf(buf, sizeof buf, "%.2f Kb", double(b) / kb);
  else std::snprintf(buf, sizeof buf, "%lld b", (long long)b);
  return buf;
}

double sort_key(const EventAverage& a, std::string_view key) {
  if (key == "cpu_time_total") return double(a.cpu_time_total_ns);
  if (key == "self_cpu_time_total") return double(a.self_cpu_time_total_ns);
  if (key == "cpu_time") return a.cpu_time_avg_ns();
  if (key == "cuda_time_total") return double(a.cuda_time_total_ns);
  if (key == "self_cuda_time_total") return double(a.self_cuda_time_total_ns);
  if (key == "count") return double(a.count);
  if (key == "cpu_memory_usage") return double(a.cpu_memory);
  if (key == "self_cpu_memory_usage") return double(a.self_cpu_memory);
  if (key == "cuda_memory_usage") return double(a.cuda_memory);
  if (key == "self_cuda_memory_usage") return double(a.self_cuda_memory);
  throw ValueError(str("[profiler] unknown sort_by '", std::string(key),
                       "'; use cpu_time_total, self_cpu_time_total, cpu_time, cuda_time_total, "
                       "self_cuda_time_total, count, cpu_memory_usage, self_cpu_memory_usage, "
                       "cuda_memory_usage or self_cuda_memory_usage"));
}
}  // namespace

std::string KeyAverages::table(std::string_view sort_by, int row_limit) const {
  std::vector<const EventAverage*> sorted;
  for (const auto& r : rows) sorted.push_back(&r);
  if (!sorted.empty()) sort_key(*sorted[0], sort_by);  // validates the key
  else sort_key(EventAverage{}, sort_by);
  std::stable_sort(sorted.begin(), sorted.end(), [&](const EventAverage* a, const EventAverage* b) {
    return sort_key(*a, sort_by) > sort_key(*b, sort_by);
  });
  if (row_limit >= 0 && sorted.size() > size_t(row_limit)) sorted.resize(size_t(row_limit));

  double self_cpu_sum = 0, self_cuda_sum = 0;
  for (const auto& r : rows) {
    self_cpu_sum += double(r.self_cpu_time_total_ns);
    self_cuda_sum += double(r.self_cuda_time_total_ns);
  }

  std::vector<std::string> headers = {"Name", "Self CPU %", "Self CPU", "CPU total %",
                                      "CPU total", "CPU time avg"};
  if (has_cuda) headers.insert(headers.end(), {"Self CUDA", "Self CUDA %", "CUDA total"});
  if (has_memory) headers.insert(headers.end(), {"CPU Mem", "Self CPU Mem"});
  if (has_memory && has_cuda) headers.insert(headers.end(), {"CUDA Mem", "Self CUDA Mem"});
  headers.push_back("# of Calls");
  if (grouped_by_input_shape) headers.push_back("Input Shapes");

  std::vector<std::vector<std::string>> cells;
  for (const EventAverage* r : sorted) {
    std::vector<std::string> c = {r->name,
                                  format_percent(double(r->self_cpu_time_total_ns), self_cpu_sum),
                                  format_time(double(r->self_cpu_time_total_ns)),
                                  format_percent(double(r->cpu_time_total_ns), self_cpu_sum),
                                  format_time(double(r->cpu_time_total_ns)),
                                  format_time(r->cpu_time_avg_ns())};
    if (has_cuda) {
      c.push_back(format_time(double(r->self_cuda_time_total_ns)));
      c.push_back(format_percent(double(r->self_cuda_time_total_ns), self_cuda_sum));
      c.push_back(format_time(double(r->cuda_time_total_ns)));
    }
    if (has_memory) {
      c.push_back(format_bytes(r->cpu_memory));
      c.push_back(format_bytes(r->self_cpu_memory));
    }
    if (has_memory && has_cuda) {
      c.push_back(format_bytes(r->cuda_memory));
      c.push_back(format_bytes(r->self_cuda_memory));
    }
    c.push_back(std::to_string(r->count));
    if (grouped_by_input_shape) c.push_back(r->input_shapes);
    cells.push_back(std::move(c));
  }

  std::vector<size_t> width(headers.size());
  for (size_t i = 0; i < headers.size(); ++i) width[i] = std::max<size_t>(headers[i].size(), 12);
  for (const auto& row : cells)
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  width[0] = std::min<size_t>(width[0], 60);
  const size_t shapes_col = grouped_by_input_shape ? headers.size() - 1 : size_t(-1);

  auto line = [&] {
    std::string s;
    for (size_t w : width) s += std::string(w, '-') + "  ";
    return s + "\n";
  };
  auto row_text = [&](const std::vector<std::string>& row) {
    std::string s;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string cell = row[i];
      if (cell.size() > width[i]) cell = cell.substr(0, width[i] - 3) + "...";
      const std::string pad(width[i] - cell.size(), ' ');
      // Names and shapes read left to right; numbers line up on the right.
      s += (i == 0 || i == shapes_col) ? cell + pad : pad + cell;
      s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };

  std::string out = line() + row_text(headers) + line();
  for (const auto& row : cells) out += row_text(row);
  out += line();
  out += "Self CPU time total: " + format_time(self_cpu_sum) + "\n";
  if (has_cuda) out += "Self CUDA time total: " + format_time(self_cuda_sum) + "\n";
  return out;
}

// ---- Chrome trace ----

void Profiler::export_chrome_trace(const std::string& path) {
  stop();
  using nlohmann::json;
  const int pid = int(::getpid());
  json trace = json::array();
  trace.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                   {"args", {{"name", "ember"}}}});
  std::map<uint32_t, bool> threads;
  std::map<std::pair<int, int>, bool> stream_tracks;  // (device, stream)
  constexpr int kStreamTid = 1000000;
  const char* cat[] = {"cpu_op", "user_annotation", "backward"};
  int flow = 0;
  for (const Event& e : events_) {
    threads[e.thread] = true;
    json args = json::object();
    if (!e.shapes.empty()) {
      json shapes = json::array();
      for (const Shape& s : e.shapes) shapes.push_back(std::vector<int64_t>(s.begin(), s.end()));
      args["Input Shapes"] = std::move(shapes);
    }
    if (e.device >= 0) args["Device"] = "cuda:" + std::to_string(e.device);
    if (options_.profile_memory) {
      args["CPU Mem"] = e.cpu_memory;
      if (e.device >= 0 || e.cuda_memory != 0) args["CUDA Mem"] = e.cuda_memory;
    }
    trace.push_back({{"ph", "X"}, {"cat", cat[int(e.kind)]}, {"name", e.name}, {"pid", pid},
                     {"tid", e.thread}, {"ts", double(e.start_ns) / 1e3},
                     {"dur", double(e.end_ns - e.start_ns) / 1e3}, {"args", std::move(args)}});
    if (e.cuda_start_ns >= 0) {
      const int tid = kStreamTid + e.stream;
      stream_tracks[{e.device, e.stream}] = true;
      trace.push_back({{"ph", "X"}, {"cat", "kernel"}, {"name", e.name}, {"pid", pid},
                       {"tid", tid}, {"ts", double(e.cuda_start_ns) / 1e3},
                       {"dur", double(e.cuda_end_ns - e.cuda_start_ns) / 1e3},
                       {"args", {{"device", e.device}, {"stream", e.stream}}}});
      // A flow arrow from the op to its kernel.
      trace.push_back({{"ph", "s"}, {"cat", "launch"}, {"name", "launch"}, {"id", flow},
                       {"pid", pid}, {"tid", e.thread}, {"ts", double(e.start_ns) / 1e3}});
      trace.push_back({{"ph", "f"}, {"bp", "e"}, {"cat", "launch"}, {"name", "launch"},
                       {"id", flow}, {"pid", pid}, {"tid", tid},
                       {"ts", double(e.cuda_start_ns) / 1e3}});
      ++flow;
    }
  }
  for (auto& [t, _] : threads)
    trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t},
                     {"args", {{"name", "thread " + std::to_string(t)}}}});
  for (auto& [ds, _] : stream_tracks)
    trace.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid},
                     {"tid", kStreamTid + ds.second},
                     {"args", {{"name", "cuda:" + std::to_string(ds.first) + " stream " +
                                            std::to_string(ds.second)}}}});
  json doc = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  EMBER_CHECK(f.good(), IOError, "[export_chrome_trace] cannot open ", path, " for writing");
  f << doc.dump() << "\n";
  f.close();
  EMBER_CHECK(!f.fail(), IOError, "[export_chrome_trace] cannot write ", path);
}

}  // namespace ember::profiler
