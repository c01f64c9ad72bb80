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
// a non-blocking capture stream (one capture at a time uses it) and starts capturing it
// (cudaStreamCaptureModeThreadLocal: an illegal call made by this thread fails the capture
// with a clear error, while other threads, e.g. DataLoader workers pinning and copying, are
// left alone, which global mode would not allow); every allocation made on that stream meanwhile comes from a private
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

#include <concepts>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>

#include "ember/error.h"
#include "ember/grad_mode.h"
#include "ember/tensor.h"

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
//   Tensor x_static = ..., y_static = ...;                       // on the GPU
//   optim::AdamW opt(params, {.lr = 1e-3, .capturable = true});
//   cuda::GraphedStep train_step([&] {
//     opt.zero_grad();
//     Tensor loss = model.loss(x_static, y_static);
//     scaler.scale(loss).backward();
//     scaler.step(opt);                                          // skip decided on the device
//     scaler.update();
//     return loss;                                               // or a TensorList of results
//   }, {.parameters = params});
//   for (auto& [x, y] : loader) {
//     x_static.copy_(x); y_static.copy_(y);                      // new inputs, same addresses
//     Tensor loss = train_step()[0];                             // this step's results
//     if (step % 100 == 0) print(loss.item<double>());           // a read between replays
//   }
//
// Results: each call returns the tensors the step returned. From the capture on, those are
// the graph's outputs, the same tensors at every call, which each replay overwrites.
//
// Eager steps between replays (`step()`, e.g. for a batch of another shape): the eager run
// allocates new results and new gradients, while the graph keeps writing the ones it
// captured. So that the tensors the caller holds keep following the replays after it,
// step() copies each result into the graph's output of the same shape and dtype (and returns
// that output; a result of another shape is returned as it is), and binds each parameter in
// options.parameters back to the gradient the graph writes, holding this step's values. A
// step that returns nothing leaves its results in variables it assigns, which an eager call
// would rebind for good: step() refuses it after the capture (call the step function itself,
// and keep the graph's results in variables only the capture assigns).
//
// Why warm-up: optimizer state, master weights and autocast's weight casts are created at a
// step's first run (and cuDNN's algorithm searches run then), and creating them under capture
// would tie them to the graph's pool (and a replay would redo their creation). Warm-up does
// not create the capture's cuBLASLt workspace: warm-up runs on the caller's stream, the
// capture on its own, so the capture gets a workspace of its own from the graph's pool, which
// lives exactly as long as the graph (Note [capture resources] in ember/cuda/graph_capture.h).
// What the step must do to replay correctly (Graph's rules, above): read its inputs from
// tensors that the caller overwrites in place; no host reads (item(), printing) inside; an
// optimizer whose step counts and lr live on the device (AdamW/Adam with capturable = true:
// set_lr between calls takes effect); and shapes that never change (run a differently-shaped
// batch, e.g. an epoch's last, through `step()` eagerly instead).
struct GraphedStepOptions {
  // >= 1: a first run under capture would record the creation of state (e.g. the
  // optimizer's zero-filled moments) and every replay would redo it.
  int warmup_steps = 3;
  // The parameters whose gradients the step computes (see "Eager steps" above).
  TensorList parameters = {};
};

class GraphedStep {
 public:
  // `step` returns its results (a Tensor or a TensorList), or nothing (void).
  template <class F>
    requires std::invocable<F&>
  explicit GraphedStep(F step, GraphedStepOptions options = {})
      : options_(std::move(options)) {
    EMBER_CHECK(options_.warmup_steps >= 1, ValueError,
                "[GraphedStep] warmup_steps must be at least 1, got ", options_.warmup_steps);
    using R = std::invoke_result_t<F&>;
    if constexpr (std::is_void_v<R>) {
      step_ = [f = std::move(step)]() mutable {
        f();
        return TensorList{};
      };
      returns_results_ = false;
    } else if constexpr (std::is_convertible_v<R, Tensor>) {
      step_ = [f = std::move(step)]() mutable { return TensorList{Tensor(f())}; };
    } else {
      static_assert(std::is_convertible_v<R, TensorList>,
                    "a GraphedStep's step returns void, a Tensor or a TensorList");
      step_ = [f = std::move(step)]() mutable { return TensorList(f()); };
    }
  }
  template <class F>
    requires std::invocable<F&>
  GraphedStep(F step, int warmup_steps)
      : GraphedStep(std::move(step), GraphedStepOptions{.warmup_steps = warmup_steps}) {}

  // One training step: eager, capture + replay, or replay. Returns the step's results.
  TensorList operator()() {
    if (calls_ < options_.warmup_steps) {
      ++calls_;
      return step_();
    }
    if (!graph_.is_captured()) {
      {
        GraphCapture capture(graph_);
        outputs_ = step_();
      }
      captured_grads_.clear();
      for (const Tensor& p : options_.parameters) captured_grads_.push_back(p.grad());
    }
    ++calls_;
    graph_.replay();
    return outputs_;
  }

  // The step run eagerly, outside the graph (e.g. for a batch of another shape); after the
  // capture it leaves the graph's outputs and gradients bound (see "Eager steps" above).
  TensorList step() {
    if (!graph_.is_captured()) return step_();
    EMBER_CHECK(returns_results_, ValueError,
                "[GraphedStep] step() after the capture: this step keeps its results in "
                "variables it assigns, which an eager call would rebind to its own tensors "
                "while the replays after it keep writing the graph's; return the results from "
                "the step instead (they are then copied into the graph's outputs), or call the "
                "step function itself");
    TensorList results = step_();
    NoGradGuard no_grad;
    for (size_t i = 0; i < results.size() && i < outputs_.size(); ++i) {
      Tensor& out = outputs_[i];
      if (!results[i].defined() || !out.defined() || results[i].is_same(out)) continue;
      if (results[i].sizes() != out.sizes() || results[i].dtype() != out.dtype() ||
          results[i].device() != out.device())
        continue;
      out.copy_(results[i]);
      results[i] = out;
    }
    for (size_t i = 0; i < options_.parameters.size() && i < captured_grads_.size(); ++i) {
      Tensor& param = options_.parameters[i];
      Tensor& graph_grad = captured_grads_[i];
      if (!graph_grad.defined()) continue;
      const Tensor& grad = param.grad();
      if (grad.defined() && grad.is_same(graph_grad)) continue;
      if (grad.defined() && grad.sizes() == graph_grad.sizes()) graph_grad.copy_(grad);
      else graph_grad.zero_();  // the eager step left no gradient (or another shape)
      param.set_grad(graph_grad);
    }
    return results;
  }

  bool is_captured() const { return graph_.is_captured(); }

 private:
  std::function<TensorList()> step_;
  bool returns_results_ = true;
  GraphedStepOptions options_;
  int64_t calls_ = 0;
  Graph graph_;
  TensorList outputs_;         // the capture's results: the graph writes them
  TensorList captured_grads_;  // options_.parameters' gradients as the capture left them
};

}  // namespace ember::cuda
