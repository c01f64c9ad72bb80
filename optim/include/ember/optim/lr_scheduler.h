// Learning-rate schedulers with torch.optim.lr_scheduler's conventions:
// - Constructing a scheduler performs its first step: last_epoch becomes 0 and every group's
//   lr is set to the schedule's value at epoch 0 (for most schedules, the base lr).
// - step() advances last_epoch by one and writes the new lr into every group; call it after
//   optimizer.step(), once per epoch or per iteration, as the schedule is defined.
// - base_lrs are the groups' initial_lr (recorded on the optimizer by the first scheduler, so
//   a second scheduler on the same optimizer starts from the same base).
// - StepLR and CosineAnnealingLR use PyTorch's recursive ("chainable") form, which reads the
//   group's current lr, so their values match torch's to the last bit of the arithmetic.
// - state_dict holds last_epoch, base_lrs and last_lr; loading it does not touch the
//   optimizer (whose own state dict holds the lrs), exactly as in PyTorch.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"

namespace ember::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  // The lr of each group after the latest step.
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Every concrete constructor ends with this (PyTorch's _initial_step): epoch 0.
  void initial_step() { step(); }
  // The lrs for last_epoch_ (already advanced), one per group.
  virtual std::vector<double> get_lr() const = 0;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;

 private:
  std::vector<double> last_lr_;
};

// lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// eta_min + (base - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, continued periodically past
// T_max as PyTorch's recursive form does.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// base * lambda(epoch); one function for every group or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<Lambda> lambdas_;
};

// Linear warmup then cosine decay to min_lr (closed form, from base_lrs), for step e:
//   e <  warmup_steps:            base * (e + 1) / warmup_steps  (never 0; reaches base at
//                                 the last warmup step)
//   warmup_steps <= e < total:    min_lr + (base - min_lr) * (1 + cos(pi * q)) / 2,
//                                 q = (e - warmup_steps) / (total_steps - warmup_steps)
//   e >= total_steps:             min_lr
// Needs 0 <= warmup_steps < total_steps and min_lr >= 0.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                 double min_lr = 0.0);
  // The value of the schedule at step e for base lr `base` (what get_lr uses).
  static double value(int64_t e, double base, int64_t warmup_steps, int64_t total_steps,
                      double min_lr);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t warmup_steps_, total_steps_;
  double min_lr_;
};

}  // namespace ember::optim
