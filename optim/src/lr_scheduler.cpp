// Learning-rate schedulers. StepLR and CosineAnnealingLR mirror torch 1.13's recursive
// get_lr expression for expression (same operation order in double), so the lr sequences
// agree with PyTorch's to the last bit; LambdaLR and WarmupCosineLR are closed forms.
#include "ember/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "ember/factory.h"

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    if (!optimizer.initial_lr(g)) optimizer.set_initial_lr(optimizer.lr(g), g);
    base_lrs_.push_back(*optimizer.initial_lr(g));
  }
}

void LRScheduler::step() {
  ++last_epoch_;
  const std::vector<double> lrs = get_lr();
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(lrs[g], g);
  set_last_lr_from_optimizer();
}

void LRScheduler::step_to(int64_t epoch) {
  EMBER_CHECK(epoch >= 0, ValueError, "[LRScheduler.step_to] invalid epoch ", epoch);
  last_epoch_ = epoch;
  const std::vector<double> lrs = closed_form_lr();
  for (size_t g = 0; g < lrs.size(); ++g) optimizer_.set_lr(lrs[g], g);
  set_last_lr_from_optimizer();
}

void LRScheduler::set_last_lr_from_optimizer() {
  last_lr_.clear();
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

StateDict LRScheduler::state_dict() const {
  StateDict out;
  out.set_int("last_epoch", last_epoch_);
  out.insert("base_lrs", tensor(base_lrs_, Shape{int64_t(base_lrs_.size())}));
  out.insert("last_lr", tensor(last_lr_, Shape{int64_t(last_lr_.size())}));
  return out;
}

void LRScheduler::load_state_dict(const StateDict& in) {
  const char* op = "[LRScheduler.load_state_dict] ";
  const Tensor& epoch = in.at("last_epoch");
  const Tensor& base = in.at("base_lrs");
  const Tensor& last = in.at("last_lr");
  const int64_t groups = int64_t(base_lrs_.size());
  EMBER_CHECK(epoch.numel() == 1, ValueError, op, "last_epoch must have one element, got shape ",
              epoch.sizes());
  EMBER_CHECK(base.numel() == groups && last.numel() == groups, ValueError, op,
              "the state dict has lrs for ", base.numel(), " and ", last.numel(),
              " groups but the optimizer has ", groups);
  const int64_t e = epoch.item<int64_t>();
  EMBER_CHECK(e >= 0, ValueError, op, "invalid last_epoch ", e);
  last_epoch_ = e;
  base_lrs_ = base.to_vector<double>();
  last_lr_ = last.to_vector<double>();
}

// ---- StepLR ----

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size >= 1, ValueError, "[StepLR] step_size must be >= 1, got ", step_size);
  EMBER_CHECK(gamma >= 0, ValueError, "[StepLR] gamma must be >= 0, got ", gamma);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> out;
  const bool decay = last_epoch_ != 0 && last_epoch_ % step_size_ == 0;
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    out.push_back(decay ? optimizer_.lr(g) * gamma_ : optimizer_.lr(g));
  return out;
}

std::vector<double> StepLR::closed_form_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_) out.push_back(base * std::pow(gamma_, double(last_epoch_ / step_size_)));
  return out;
}

// ---- CosineAnnealingLR ----

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max >= 1, ValueError, "[CosineAnnealingLR] T_max must be >= 1, got ", T_max);
  EMBER_CHECK(eta_min >= 0, ValueError, "[CosineAnnealingLR] eta_min must be >= 0, got ", eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  constexpr double pi = std::numbers::pi;
  const double e = double(last_epoch_), T = double(t_max_);
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = optimizer_.lr(g);
    if (last_epoch_ == 0) {
      out.push_back(lr);
    } else if ((last_epoch_ - 1 - t_max_) % (2 * t_max_) == 0) {
      // At the restart point the recursive ratio below would divide by 1 + cos(pi) = 0.
      out.push_back(lr + (base_lrs_[g] - eta_min_) * (1 - std::cos(pi / T)) / 2);
    } else {
      out.push_back((1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) *
                        (lr - eta_min_) +
                    eta_min_);
    }
  }
  return out;
}

std::vector<double> CosineAnnealingLR::closed_form_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_)
    out.push_back(eta_min_ + (base - eta_min_) *
                                 (1 + std::cos(std::numbers::pi * double(last_epoch_) / double(t_max_))) / 2);
  return out;
}

// ---- LambdaLR ----

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_param_groups(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  EMBER_CHECK(lambdas_.size() == optimizer.num_param_groups(), ValueError, "[LambdaLR] expected ",
              optimizer.num_param_groups(), " lr_lambdas (one per group), got ", lambdas_.size());
  for (const Lambda& f : lambdas_)
    EMBER_CHECK(bool(f), ValueError, "[LambdaLR] an lr_lambda is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) out.push_back(base_lrs_[g] * lambdas_[g](last_epoch_));
  return out;
}

// ---- WarmupCosineLR ----

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                               double min_lr)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), total_steps_(total_steps), min_lr_(min_lr) {
  EMBER_CHECK(warmup_steps >= 0 && warmup_steps < total_steps, ValueError,
              "[WarmupCosineLR] needs 0 <= warmup_steps < total_steps, got warmup_steps ",
              warmup_steps, " and total_steps ", total_steps);
  EMBER_CHECK(min_lr >= 0, ValueError, "[WarmupCosineLR] min_lr must be >= 0, got ", min_lr);
  initial_step();
}

double WarmupCosineLR::value(int64_t e, double base, int64_t warmup_steps, int64_t total_steps,
                             double min_lr) {
  if (e < warmup_steps) return base * double(e + 1) / double(warmup_steps);
  if (e >= total_steps) return min_lr;
  const double q = double(e - warmup_steps) / double(total_steps - warmup_steps);
  return min_lr + (base - min_lr) * (1 + std::cos(std::numbers::pi * q)) / 2;
}

std::vector<double> WarmupCosineLR::get_lr() const {
  std::vector<double> out;
  for (double base : base_lrs_)
    out.push_back(value(last_epoch_, base, warmup_steps_, total_steps_, min_lr_));
  return out;
}

// ---- LinearLR ----

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1, ValueError,
              "[LinearLR] start_factor must be in (0, 1], got ", start_factor);
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1, ValueError,
              "[LinearLR] end_factor must be in [0, 1], got ", end_factor);
  EMBER_CHECK(total_iters >= 1, ValueError, "[LinearLR] total_iters must be >= 1, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lr = optimizer_.lr(g);
    if (last_epoch_ == 0) {
      out.push_back(lr * start_factor_);
    } else if (last_epoch_ > total_iters_) {
      out.push_back(lr);
    } else {
      out.push_back(lr * (1.0 + (end_factor_ - start_factor_) /
                                    (double(total_iters_) * start_factor_ +
                                     double(last_epoch_ - 1) * (end_factor_ - start_factor_))));
    }
  }
  return out;
}

std::vector<double> LinearLR::closed_form_lr() const {
  std::vector<double> out;
  const double e = double(std::min(total_iters_, last_epoch_));
  for (double base : base_lrs_)
    out.push_back(base * (start_factor_ + (end_factor_ - start_factor_) * e / double(total_iters_)));
  return out;
}

// ---- OneCycleLR ----

namespace {
std::vector<double> per_group(const Optimizer& optimizer, std::vector<double> values, const char* what) {
  if (values.size() == 1 && optimizer.num_param_groups() > 1)
    values.assign(optimizer.num_param_groups(), values[0]);
  EMBER_CHECK(values.size() == optimizer.num_param_groups(), ValueError, "[OneCycleLR] expected ",
              optimizer.num_param_groups(), " values for ", what, ", got ", values.size());
  return values;
}

int64_t one_cycle_total(const OneCycleLROptions& o) {
  if (o.total_steps != 0) {
    EMBER_CHECK(o.total_steps > 0, ValueError, "[OneCycleLR] expected a positive total_steps, got ",
                o.total_steps);
    return o.total_steps;
  }
  EMBER_CHECK(o.epochs > 0 && o.steps_per_epoch > 0, ValueError,
              "[OneCycleLR] define either total_steps or positive epochs and steps_per_epoch (got "
              "epochs ", o.epochs, ", steps_per_epoch ", o.steps_per_epoch, ")");
  return o.epochs * o.steps_per_epoch;
}
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, OneCycleLROptions options)
    : OneCycleLR(optimizer, std::vector<double>{max_lr}, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, OneCycleLROptions options)
    : LRScheduler(optimizer), options_(options), total_steps_(one_cycle_total(options)) {
  const OneCycleLROptions& o = options_;
  EMBER_CHECK(o.pct_start >= 0 && o.pct_start <= 1, ValueError,
              "[OneCycleLR] expected pct_start between 0 and 1, got ", o.pct_start);
  EMBER_CHECK(o.div_factor > 0 && o.final_div_factor > 0, ValueError,
              "[OneCycleLR] div_factor and final_div_factor must be positive, got ", o.div_factor,
              " and ", o.final_div_factor);
  max_lrs_ = per_group(optimizer, std::move(max_lrs), "max_lr");
  const double T = double(total_steps_);
  // Phase indices: lrs 0 initial, 1 max, 2 min; momenta 0 max_momentum, 1 base_momentum.
  if (o.three_phase) {
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1}, {2 * o.pct_start * T - 2, 1, 0, 1, 0}, {T - 1, 0, 2, 0, 0}};
  } else {
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}};
  }
  // PyTorch overwrites initial_lr with max_lr / div_factor: the schedule starts there.
  base_lrs_.clear();
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
    const double initial = max_lrs_[g] / o.div_factor;
    optimizer.set_initial_lr(initial, g);
    base_lrs_.push_back(initial);
    min_lrs_.push_back(initial / o.final_div_factor);
  }
  if (o.cycle_momentum) {
    for (size_t g = 0; g < optimizer.num_param_groups(); ++g) {
      EMBER_CHECK(optimizer.momentum(g).has_value(), ValueError, "[OneCycleLR] the ", optimizer.name(),
                  " optimizer has no momentum to cycle; pass cycle_momentum = false");
      optimizer.set_momentum(o.max_momentum, g);
    }
  }
  initial_step();
}

std::vector<double> OneCycleLR::get_lr() const {
  const int64_t step = last_epoch_;
  EMBER_CHECK(step <= total_steps_, ValueError, "[OneCycleLR] tried to step ", step + 1,
              " times; the specified number of total steps is ", total_steps_);
  const bool cosine = options_.anneal_strategy == AnnealStrategy::cos;
  auto anneal = [cosine](double start, double end, double pct) {
    if (cosine) return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
    return (end - start) * pct + start;
  };
  const double momenta[2] = {options_.max_momentum, options_.base_momentum};
  std::vector<double> out;
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    const double lrs[3] = {base_lrs_[g], max_lrs_[g], min_lrs_[g]};
    double start_step = 0, lr = 0, momentum = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (double(step) <= ph.end_step || i + 1 == phases_.size()) {
        const double pct = (double(step) - start_step) / (ph.end_step - start_step);
        lr = anneal(lrs[ph.start_lr], lrs[ph.end_lr], pct);
        momentum = anneal(momenta[ph.start_momentum], momenta[ph.end_momentum], pct);
        break;
      }
      start_step = ph.end_step;
    }
    // At step == total_steps (the step() after the last batch) linear annealing extrapolates
    // past min_lr, below 0 in PyTorch; the optimizer rejects a negative lr, so it stops at 0.
    out.push_back(std::max(lr, 0.0));
    // A side effect of computing the schedule, as in PyTorch's get_lr.
    if (options_.cycle_momentum) optimizer_.set_momentum(momentum, g);
  }
  return out;
}

// ---- SequentialLR ----

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::reference_wrapper<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedulers_(std::move(schedulers)), milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedulers_.empty(), ValueError, "[SequentialLR] needs at least one scheduler");
  for (size_t i = 0; i < schedulers_.size(); ++i)
    EMBER_CHECK(&schedulers_[i].get().optimizer_ == &optimizer, ValueError,
                "[SequentialLR] expects all schedulers to belong to the same optimizer, but scheduler ", i,
                " belongs to another");
  EMBER_CHECK(milestones_.size() + 1 == schedulers_.size(), ValueError,
              "[SequentialLR] expects one milestone fewer than schedulers, got ", schedulers_.size(),
              " schedulers and ", milestones_.size(), " milestones");
  for (size_t i = 1; i < milestones_.size(); ++i)
    EMBER_CHECK(milestones_[i - 1] <= milestones_[i], ValueError, "[SequentialLR] milestones must be sorted");
  // Undo the construction steps of the schedulers: back to the initial lrs, then only the
  // first scheduler takes its epoch 0.
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) optimizer.set_lr(*optimizer.initial_lr(g), g);
  for (auto& s : schedulers_) --s.get().last_epoch_;
  schedulers_[0].get().step();
  last_epoch_ = 0;
  set_last_lr_from_optimizer();
}

void SequentialLR::step() {
  ++last_epoch_;
  const size_t idx = size_t(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) -
                            milestones_.begin());
  LRScheduler& s = schedulers_[idx].get();
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.step_to(0);
  else s.step();
  set_last_lr_from_optimizer();
}

std::vector<double> SequentialLR::get_lr() const {
  std::vector<double> out;
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) out.push_back(optimizer_.lr(g));
  return out;
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const auto& o = options_;
  EMBER_CHECK(o.factor < 1.0, ValueError, "[ReduceLROnPlateau] factor should be < 1.0, got ", o.factor);
  EMBER_CHECK(o.factor >= 0 && o.patience >= 0 && o.cooldown >= 0 && o.eps >= 0, ValueError,
              "[ReduceLROnPlateau] factor, patience, cooldown and eps must be >= 0");
  if (o.min_lrs.empty()) {
    min_lrs_.assign(optimizer.num_param_groups(), o.min_lr);
  } else {
    EMBER_CHECK(o.min_lrs.size() == optimizer.num_param_groups(), ValueError, "[ReduceLROnPlateau] expected ",
                optimizer.num_param_groups(), " min_lrs, got ", o.min_lrs.size());
    min_lrs_ = o.min_lrs;
  }
  best_ = o.mode == ReduceLROnPlateauOptions::Mode::min ? std::numeric_limits<double>::infinity()
                                                        : -std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < optimizer.num_param_groups(); ++g) last_lr_.push_back(optimizer.lr(g));
}

bool ReduceLROnPlateau::is_better(double a, double best) const {
  using M = ReduceLROnPlateauOptions::Mode;
  using T = ReduceLROnPlateauOptions::ThresholdMode;
  const double th = options_.threshold;
  if (options_.mode == M::min)
    return options_.threshold_mode == T::rel ? a < best * (1 - th) : a < best - th;
  return options_.threshold_mode == T::rel ? a > best * (th + 1) : a > best + th;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (is_better(metric, best_)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs during a cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) {
      const double old_lr = optimizer_.lr(g);
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps) optimizer_.set_lr(new_lr, g);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (size_t g = 0; g < optimizer_.num_param_groups(); ++g) last_lr_.push_back(optimizer_.lr(g));
}

StateDict ReduceLROnPlateau::state_dict() const {
  StateDict out;
  out.set_int("last_epoch", last_epoch_);
  out.set_scalar("best", best_);
  out.set_int("num_bad_epochs", num_bad_epochs_);
  out.set_int("cooldown_counter", cooldown_counter_);
  out.insert("last_lr", tensor(last_lr_, Shape{int64_t(last_lr_.size())}));
  return out;
}

void ReduceLROnPlateau::load_state_dict(const StateDict& in) {
  const char* op = "[ReduceLROnPlateau.load_state_dict] ";
  const Tensor& last = in.at("last_lr");
  EMBER_CHECK(last.numel() == int64_t(last_lr_.size()), ValueError, op, "the state dict has lrs for ",
              last.numel(), " groups but the optimizer has ", last_lr_.size());
  const int64_t epoch = in.at("last_epoch").item<int64_t>();
  const int64_t bad = in.at("num_bad_epochs").item<int64_t>();
  const int64_t cooldown = in.at("cooldown_counter").item<int64_t>();
  EMBER_CHECK(epoch >= 0 && bad >= 0 && cooldown >= 0, ValueError, op, "negative counters");
  last_epoch_ = epoch;
  best_ = in.at("best").item<double>();
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  last_lr_ = last.to_vector<double>();
}

}  // namespace ember::optim
