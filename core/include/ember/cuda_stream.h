// CUDA streams and events, the user-facing side of the thread-local current stream
// (core/cuda/include/ember/cuda/stream_handle.h is the raw side that kernels launch on).
//
// Invariants:
// - Every thread has one current stream per device, initially the device's default stream
//   (the legacy default stream, handle nullptr). current_stream(d) reads it; StreamGuard
//   changes it for a scope and puts the previous one back; nothing else changes it.
// - A Stream is a cheap copyable handle that owns nothing. Its constructor hands out a stream
//   from a per-device pool that lives as long as the process, as PyTorch does: the caching
//   allocator may still record events on a stream after its last handle is gone (Note
//   [stream lifetime] in core/cuda/stream.cpp). The pool holds up to 32 streams of each kind
//   (device, non_blocking, priority); further constructions reuse them round-robin, so two
//   Streams may share a CUDA stream, which only orders their work more than needed.
// - An Event owns its CUDA event and is move-only (two owners could not agree on what it
//   marks).
// - Raw handles are CUstream_st* / CUevent_st*, the very types behind cudaStream_t and
//   cudaEvent_t, declared here opaquely so this header never includes cuda_runtime.h: pass
//   handle() straight to a cuBLAS/NCCL call expecting a cudaStream_t.
// - Without CUDA (a CPU-only build, or no visible device) constructing a Stream or an Event,
//   default_stream(), current_stream() and set_current_stream() throw DeviceError saying so.
#pragma once

#include <memory>
#include <utility>

struct CUstream_st;
struct CUevent_st;

namespace ember::cuda {

using StreamHandle = CUstream_st*;  // == cudaStream_t
using EventHandle = CUevent_st*;    // == cudaEvent_t

class Event;

struct StreamOptions {
  int device = -1;  // -1: this thread's current device
  // CUDA's convention: lower numbers run first; 0 is the default (lowest) priority and
  // Stream::priority_range() gives the usable range. Out-of-range values are clamped by CUDA.
  int priority = 0;
  // Blocking streams (the default) wait for earlier work on the legacy default stream and
  // make it wait for theirs, which keeps the caching allocator's reuse of memory freed on the
  // default stream safe. A non-blocking stream runs concurrently with the default stream:
  // order it explicitly with events (stream.wait(event)).
  bool non_blocking = false;
};

class Stream {
 public:
  // A stream of options.device from the pool (created on first use, never destroyed).
  explicit Stream(const StreamOptions& options = {});
  // The legacy default stream of `device` (-1: the current device).
  static Stream default_stream(int device = -1);
  // A handle to a stream created elsewhere (a library's or the caller's). The caller keeps
  // it alive while the handle is used, and while any tensor it was passed to record_stream
  // for is alive. device must be the stream's device.
  static Stream from_handle(StreamHandle handle, int device);
  // {least, greatest} priority of `device`, e.g. {0, -5}: valid priorities lie in between.
  static std::pair<int, int> priority_range(int device = -1);

  int device() const { return device_; }
  StreamHandle handle() const { return handle_; }
  bool is_default() const { return handle_ == nullptr; }
  int priority() const;
  bool non_blocking() const;

  // Blocks the calling thread until all work queued on this stream so far has finished.
  void synchronize() const;
  // True when all work queued on this stream so far has finished (never blocks).
  bool query() const;
  // Makes work queued on this stream from now on wait until `event` has completed (the
  // host does not wait). An event that was never recorded is complete.
  void wait(const Event& event) const;
  // Makes work queued on this stream from now on wait for the work queued on `other` so far.
  void wait_stream(const Stream& other) const;

  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.handle_ == b.handle_;
  }

 private:
  Stream(int device, StreamHandle handle) : device_(device), handle_(handle) {}

  int device_ = 0;
  StreamHandle handle_ = nullptr;
};

// This thread's current stream on `device` (-1: the current device).
Stream current_stream(int device = -1);
// Makes `stream` current for this thread on stream.device(). Prefer StreamGuard, which
// restores the previous stream. The caller keeps `stream` alive while it is current.
void set_current_stream(const Stream& stream);

// Makes a stream current on its device for this scope; the destructor restores the stream
// that was current before on that device.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

  const Stream& stream() const { return stream_; }
  const Stream& previous() const { return previous_; }

 private:
  Stream stream_;
  Stream previous_;
};

struct EventOptions {
  int device = -1;            // -1: this thread's current device
  bool enable_timing = false;  // needed by elapsed_time (timing events cost a little more)
  bool blocking = false;       // synchronize() sleeps instead of spinning
};

class Event {
 public:
  explicit Event(const EventOptions& options = {});
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the work queued on `stream` so far (default: this thread's current stream on
  // the event's device). The stream must be on the event's device.
  void record(const Stream& stream);
  void record();
  // Blocks the calling thread until the recorded work has completed.
  void synchronize() const;
  // True when the recorded work has completed (or nothing was recorded); never blocks.
  bool query() const;
  // Milliseconds from this event to `end`. Both need enable_timing and a record(); waits
  // for both to complete first.
  float elapsed_time(const Event& end) const;

  int device() const { return device_; }
  EventHandle handle() const { return handle_; }
  bool recorded() const { return recorded_; }
  bool timing_enabled() const { return timing_; }

 private:
  int device_ = 0;
  EventHandle handle_ = nullptr;
  bool timing_ = false;
  bool recorded_ = false;
};

}  // namespace ember::cuda
