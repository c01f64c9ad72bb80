// cuda::Graph: record the GPU work of a region once, replay it with one launch (PyTorch's
// torch.cuda.CUDAGraph). Defined in core/cuda/graph.cpp; in a CPU-only build every member
// but the constructor, destructor and is_captured() throws DeviceError.
//
//   cuda::Graph g;
//   { cuda::GraphCapture capture(g);   // or g.capture_begin(); ... g.capture_end();
//     y = (x * 2 + 1).exp(); }         // x, y: CUDA tensors; nothing runs here
//   x.copy_(new_input);                // update the static input in place
//   g.replay();                         // y now holds the result for new_input
//
// How it works: capture_begin switches this thread's current stream on the current device to
// a private non-blocking stream and starts capturing it (cudaStreamCaptureModeThreadLocal:
// an illegal call made by this thread fails the capture with a clear error, while other
// threads, e.g. DataLoader workers pinning and copying, are left alone, which global mode
// would not allow); every allocation made on that stream meanwhile comes from a private
// memory pool of the caching allocator, whose segments stay reserved while the graph lives,
// so each replay reads and writes the same addresses the capture saw. capture_end restores
// the previous stream and instantiates the graph; replay() launches it on the current stream.
//
// Rules for the captured region (as in PyTorch):
// - No device->host synchronization: no item(), no printing a CUDA tensor, no to(cpu) or
//   other blocking copy, no cuda::synchronize(). These make capture_end throw Error.
// - Shapes, dtypes and control flow must be static: replay repeats exactly the recorded
//   kernels with the recorded pointers. Feed new inputs by writing into the tensors the
//   capture read (copy_, fill_, ...), and read results from the tensors it wrote.
// - Keep every tensor the capture used alive while the graph may replay; tensors allocated
//   inside stay valid (their memory belongs to the graph's pool).
// - Work must stay on the capture stream (the current stream); CPU work is not recorded.
#pragma once

#include <exception>
#include <memory>

namespace ember::cuda {

class Graph {
 public:
  Graph();
  ~Graph();  // aborts an unfinished capture; never throws
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing this thread's work on its current device. Throws ValueError when the
  // graph is capturing or already holds a capture (reset() first).
  void capture_begin();
  // Ends the capture and instantiates the graph; throws Error (and leaves the graph empty)
  // when the capture was invalidated by an illegal operation.
  void capture_end();
  // Launches the captured work on the current stream (asynchronous, like any kernel).
  void replay();
  // Drops the captured graph (abandoning a capture under way) and gives its memory pool
  // back. Never throws: a CUDA failure on the way is reported on stderr.
  void reset() noexcept;
  bool is_captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// RAII capture: capture_begin() now, capture_end() at the end of the scope. When the scope
// is left by an exception the capture is abandoned quietly (the graph stays empty) so the
// original exception propagates; otherwise a failing capture_end throws from the destructor,
// which is why that destructor is noexcept(false).
class GraphCapture {
 public:
  explicit GraphCapture(Graph& graph) : graph_(graph), uncaught_(std::uncaught_exceptions()) {
    graph_.capture_begin();
  }
  ~GraphCapture() noexcept(false) {
    if (std::uncaught_exceptions() > uncaught_) graph_.reset();  // reset() never throws
    else graph_.capture_end();
  }
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

 private:
  Graph& graph_;
  int uncaught_ = 0;
};

}  // namespace ember::cuda
