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
// - LinearLR is recursive like StepLR; OneCycleLR and WarmupCosineLR are closed forms.
//   step_to(epoch) uses each schedule's closed form (SequentialLR restarts with it).
// - ReduceLROnPlateau is not an LRScheduler (step takes the metric), as in PyTorch.
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

  virtual void step();
  // PyTorch's deprecated step(epoch): jumps to `epoch` and writes the schedule's closed-form
  // value there (SequentialLR restarts a scheduler at its milestone with step_to(0)).
  void step_to(int64_t epoch);
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
  // The lrs at last_epoch_ from base_lrs_ alone (PyTorch's _get_closed_form_lr); schedules
  // whose get_lr is already closed use it.
  virtual std::vector<double> closed_form_lr() const { return get_lr(); }
  void set_last_lr_from_optimizer();

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = -1;

 private:
  friend class SequentialLR;  // rewinds and restarts its schedulers, as PyTorch's does
  std::vector<double> last_lr_;
};

// lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

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
  std::vector<double> closed_form_lr() const override;

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

// lr = base * factor(e), factor going linearly from start_factor (epoch 0) to end_factor
// (epoch total_iters and after), in PyTorch's recursive form. Needs 0 < start_factor <= 1,
// 0 <= end_factor <= 1, total_iters >= 1. Typical use: warmup before another schedule.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  std::vector<double> get_lr() const override;
  std::vector<double> closed_form_lr() const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

enum class AnnealStrategy { cos, linear };

struct OneCycleLROptions {
  // Either total_steps, or epochs and steps_per_epoch (total = epochs * steps_per_epoch).
  int64_t total_steps = 0;
  int64_t epochs = 0;
  int64_t steps_per_epoch = 0;
  double pct_start = 0.3;  // fraction of the steps spent increasing the lr
  AnnealStrategy anneal_strategy = AnnealStrategy::cos;
  // Cycles the optimizer's momentum (SGD/RMSprop momentum, Adam's beta1) inversely to the lr,
  // between base_momentum and max_momentum; the optimizer must have one (ValueError).
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;         // initial lr = max_lr / div_factor
  double final_div_factor = 1e4;    // min lr = initial lr / final_div_factor
  bool three_phase = false;         // up, down to the initial lr, then annihilate to min lr
};

// The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR, called once per batch): the lr goes
// from max_lr / div_factor up to max_lr over pct_start of the steps, then down to
// initial / final_div_factor, by cosine or linear annealing. It sets the optimizer's
// initial_lr to max_lr / div_factor (as PyTorch does), so base_lrs() are those. Stepping past
// total_steps throws ValueError. One difference: at step total_steps, linear annealing
// extrapolates below 0 in PyTorch; here the lr stops at 0 (optimizers reject a negative lr).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleLROptions options);
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleLROptions options);
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() const override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_momentum, end_momentum;  // 0 initial, 1 max, 2 min / 0 max, 1 base
  };
  OneCycleLROptions options_;
  int64_t total_steps_;
  std::vector<Phase> phases_;
  std::vector<double> max_lrs_, min_lrs_;
};

// Runs schedulers one after another: schedulers[i] from milestone i-1 (restarted there at its
// epoch 0) up to milestone i. The schedulers must be built on the same optimizer before this
// one, which undoes their construction steps (torch's SequentialLR); they are not owned and
// must outlive it. state_dict holds this scheduler's own epoch and lrs only.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<std::reference_wrapper<LRScheduler>> schedulers_;
  std::vector<int64_t> milestones_;
};

struct ReduceLROnPlateauOptions {
  enum class Mode { min, max };
  enum class ThresholdMode { rel, abs };
  Mode mode = Mode::min;
  double factor = 0.1;    // new lr = lr * factor; must be < 1
  int64_t patience = 10;  // epochs without improvement tolerated before reducing
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;   // epochs to wait after a reduction before counting bad epochs again
  double min_lr = 0.0;    // per group: min_lrs (when non-empty) overrides it
  std::vector<double> min_lrs = {};
  double eps = 1e-8;      // reductions smaller than eps are skipped
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: step(metric) once per epoch with a validation
// metric; after more than `patience` epochs without an improvement (relative or absolute,
// by threshold) every group's lr is multiplied by factor, down to its min_lr. Not an
// LRScheduler (it has no schedule of its own), exactly as in PyTorch.
class ReduceLROnPlateau {
 public:
  using Options = ReduceLROnPlateauOptions;
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double a, double best) const;
  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace ember::optim
