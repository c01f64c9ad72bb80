// RMSprop (torch.optim.RMSprop) and Adagrad (torch.optim.Adagrad), PyTorch 1.13's
// single-tensor algorithms. For a parameter p with gradient g (g = -g when maximize):
//
// RMSprop:  g += wd * p;  square_avg = alpha * square_avg + (1 - alpha) * g^2
//           centered: grad_avg = alpha * grad_avg + (1 - alpha) * g
//                     avg = sqrt(square_avg - grad_avg^2) + eps;  else avg = sqrt(square_avg) + eps
//           momentum > 0: buf = momentum * buf + g / avg;  p -= lr * buf
//           else:         p -= lr * g / avg
// Adagrad:  g += wd * p;  clr = lr / (1 + (t - 1) * lr_decay)   (t: the step number, >= 1)
//           sum += g^2;   p -= clr * g / (sqrt(sum) + eps)
//
// State (PyTorch's names): RMSprop "step", "square_avg", and "momentum_buffer" only when
// momentum > 0, "grad_avg" only when centered; Adagrad "step", "sum" (starting at
// initial_accumulator_value). Buffers are created at a parameter's first step with a gradient.
// The update is a short sequence of in-place elementwise ops per parameter (no fused kernel):
// on CUDA about ten launches per parameter, all on the current stream, no host sync.
// 16-bit parameters keep f32 state and are updated through f32 arithmetic.
#pragma once

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

class RMSprop : public Optimizer {
 public:
  using Options = RMSpropOptions;
  using Group = ParamGroup<RMSpropOptions>;

  RMSprop(std::vector<Tensor> params, RMSpropOptions options = {});
  explicit RMSprop(std::vector<Group> groups);

  void step() override;
  const RMSpropOptions& options(size_t group = 0) const;
  void set_options(const RMSpropOptions& options, size_t group);

 protected:
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_group_lr(size_t group, double lr) override { options_[group].lr = lr; }
  std::optional<double> group_momentum(size_t group) const override { return options_[group].momentum; }
  void set_group_momentum(size_t group, double m) override { options_[group].momentum = m; }
  void save_group_options(size_t group, StateDict& out, const std::string& prefix) const override;
  void load_group_options(size_t group, const StateDict& in, const std::string& prefix) override;

 private:
  std::vector<RMSpropOptions> options_;
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

class Adagrad : public Optimizer {
 public:
  using Options = AdagradOptions;
  using Group = ParamGroup<AdagradOptions>;

  Adagrad(std::vector<Tensor> params, AdagradOptions options = {});
  explicit Adagrad(std::vector<Group> groups);

  void step() override;
  const AdagradOptions& options(size_t group = 0) const;
  void set_options(const AdagradOptions& options, size_t group);

 protected:
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_group_lr(size_t group, double lr) override { options_[group].lr = lr; }
  void save_group_options(size_t group, StateDict& out, const std::string& prefix) const override;
  void load_group_options(size_t group, const StateDict& in, const std::string& prefix) override;

 private:
  std::vector<AdagradOptions> options_;
};

}  // namespace ember::optim
