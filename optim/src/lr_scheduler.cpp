// Learning-rate schedulers. StepLR and CosineAnnealingLR mirror torch 1.13's recursive
// get_lr expression for expression (same operation order in double), so the lr sequences
// agree with PyTorch's to the last bit; LambdaLR and WarmupCosineLR are closed forms.
#include "ember/optim/lr_scheduler.h"

#include <cmath>
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

}  // namespace ember::optim
