// amp::GradScaler: dynamic loss scaling for f16 training, with torch.cuda.amp.GradScaler's
// semantics (PyTorch 1.13), usable on CPU and CUDA.
//
//   amp::GradScaler scaler;                       // init_scale 65536, growth every 2000 steps
//   scaler.scale(loss).backward();                // grads are scaled by S
//   scaler.unscale_(opt);                         // optional: grads /= S (e.g. to clip them)
//   optim::clip_grad_norm_(params, 1.0);
//   scaler.step(opt);                             // skipped when any grad was inf/NaN
//   scaler.update();                              // S *= 0.5 on inf; S *= 2 after 2000 clean steps
//
// Invariants:
// - The scale is a one-element f32 tensor and the growth tracker a one-element i32 tensor on
//   the device of the first loss passed to scale() (created then, as PyTorch does lazily).
//   update() runs on the device (ops::amp_update_scale_): it never synchronizes.
// - unscale_(opt) is ONE fused multi-tensor pass per device (ops::amp_unscale_and_check_) that
//   divides every gradient of the optimizer by the scale in place and sets a device-side
//   found_inf flag. step(opt) reads that flag once (the only host synchronization of a step;
//   none with a capturable optimizer, which reads the flag on the device); no per-tensor
//   decision is ever taken on the host.
// - Per optimizer and per step: unscale_ at most once, and before step; step at most once;
//   update() resets that bookkeeping. The optimizer is identified by its address and must stay
//   alive between unscale_/step and update().
// - A skipped step calls nothing on the optimizer: parameters and optimizer state (including
//   step counts) do not move.
// - enabled == false makes every method a pass-through: scale(loss) returns loss, unscale_
//   does nothing, step calls optimizer.step(), update does nothing, get_scale() is 1 and
//   state_dict() is empty.
// - bf16 needs no scaler: bf16 has f32's exponent range, so gradients do not underflow; use
//   autocast with DType::bf16 and no GradScaler (or enabled = false).
// - Unlike PyTorch, 16-bit gradients may be unscaled (PyTorch refuses f16 gradients): the
//   optimizers' master-weight option (optim::AdamWOptions::master_weights) keeps 16-bit
//   parameters whose gradients are 16-bit. Unscaling happens in f32 and is stored rounded.
//
// State dict keys: scale (f64 0-dim), growth_tracker (i64 0-dim), growth_factor,
// backoff_factor (f64 0-dim), growth_interval (i64 0-dim). A fresh scaler reports init_scale
// and 0 (PyTorch's behaviour before the first scale()).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (differentiable; the loss keeps its dtype). Pass-through when disabled.
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records inf/NaN (on device).
  void unscale_(optim::Optimizer& optimizer);
  // Unscales if unscale_ was not called, then calls optimizer.step() unless an inf/NaN was
  // found. Returns whether the step was taken (one host read of the device flag). With an
  // optimizer that can_skip_on_device() (capturable Adam/AdamW) on one device, the flag goes
  // to optimizer.step_unless_found_inf instead and is never read here: step() returns true
  // ("submitted"), the device decides, and the call can be captured in a CUDA graph.
  bool step(optim::Optimizer& optimizer);
  // Adjusts the scale from the steps since the last update (backoff on inf, growth after
  // growth_interval clean updates), on device.
  void update();
  // Sets the scale to new_scale (PyTorch's update(new_scale)), resetting nothing else but the
  // per-step bookkeeping.
  void update(double new_scale);

  // The current scale as a number (a host read when it lives on a device). 1 when disabled.
  double get_scale() const;
  // The scale tensor (undefined before the first scale()).
  const Tensor& scale_tensor() const { return scale_; }
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    std::vector<Tensor> found_inf;  // one f32 flag per gradient device
  };

  void lazy_init(Device device);
  void check_initialized(const char* where) const;

  GradScalerOptions options_;
  Tensor scale_;           // f32 [1] on the device of the first scaled loss
  Tensor growth_tracker_;  // i32 [1], same device
  // Values loaded before the scale tensor exists (PyTorch's _init_scale/_init_growth_tracker).
  double pending_scale_;
  int64_t pending_tracker_ = 0;
  std::unordered_map<const optim::Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace ember::amp
