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

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <utility>

#include "ember/error.h"

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

// Whole-step CUDA graphs in one call: wraps a static-shape training step (forward, backward,
// GradScaler, optimizer) so that calling it runs the step eagerly `warmup_steps` times, then
// captures it and replays the capture (so every call performs exactly one step), and from
// then on only replays: one launch per step instead of hundreds.
//
//   Tensor x_static = ..., y_static = ..., loss;              // on the GPU
//   optim::AdamW opt(params, {.lr = 1e-3, .capturable = true});
//   cuda::GraphedStep train_step([&] {
//     opt.zero_grad();
//     loss = model.loss(x_static, y_static);                   // results: tensors it writes
//     scaler.scale(loss).backward();
//     scaler.step(opt);                                         // skip decided on the device
//     scaler.update();
//   });
//   for (auto& [x, y] : loader) {
//     x_static.copy_(x); y_static.copy_(y);                     // new inputs, same addresses
//     train_step();
//     if (step % 100 == 0) print(loss.item<double>());          // a read between replays
//   }
//
// Why warm-up: optimizer state, master weights, autocast's weight casts and cuBLAS/cuDNN
// workspaces are created at a step's first run, and allocating them under capture would tie
// them to the graph's pool. What the step must do to replay correctly (Graph's rules, above):
// read its inputs from tensors that the caller overwrites in place; leave its results in
// tensors that are read after the call (variables assigned inside the step hold the graph's
// outputs after the capturing call); no host reads (item(), printing) inside; an optimizer
// whose step counts and lr live on the device (AdamW/Adam with capturable = true: set_lr
// between calls takes effect); and shapes that never change (run a differently-shaped batch,
// e.g. an epoch's last, through `step()` eagerly instead).
class GraphedStep {
 public:
  // warmup_steps >= 1: a first run under capture would record the creation of state (e.g.
  // the optimizer's zero-filled moments) and every replay would redo it.
  explicit GraphedStep(std::function<void()> step, int warmup_steps = 3)
      : step_(std::move(step)), warmup_steps_(warmup_steps) {
    EMBER_CHECK(warmup_steps >= 1, ValueError, "[GraphedStep] warmup_steps must be at least 1, got ", warmup_steps);
  }
  // One training step: eager, capture + replay, or replay.
  void operator()() {
    if (calls_++ < warmup_steps_) {
      step_();
      return;
    }
    if (!graph_.is_captured()) {
      GraphCapture capture(graph_);
      step_();
    }
    graph_.replay();
  }
  // The step run eagerly, outside the graph (e.g. for a batch of another shape).
  void step() { step_(); }
  bool is_captured() const { return graph_.is_captured(); }

 private:
  std::function<void()> step_;
  int warmup_steps_;
  int64_t calls_ = 0;
  Graph graph_;
};

}  // namespace ember::cuda
