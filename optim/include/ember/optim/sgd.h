// SGD with momentum, dampening, weight decay and Nesterov momentum: torch.optim.SGD.
//   d = grad (+ weight_decay * p);  buf = d on the first step, else momentum*buf + (1-dampening)*d
//   d = nesterov ? d + momentum*buf : buf  (momentum != 0);  p -= lr * d
// The update of a group is one fused multi-tensor call (ops::sgd_step_).
#pragma once

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

class SGD : public Optimizer {
 public:
  using Options = SGDOptions;
  using Group = ParamGroup<SGDOptions>;

  SGD(std::vector<Tensor> params, SGDOptions options = {});
  explicit SGD(std::vector<Group> groups);

  void step() override;
  const SGDOptions& options(size_t group = 0) const;
  void set_options(const SGDOptions& options, size_t group);

 protected:
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_group_lr(size_t group, double lr) override { options_[group].lr = lr; }
  std::optional<double> group_momentum(size_t group) const override { return options_[group].momentum; }
  void set_group_momentum(size_t group, double m) override { options_[group].momentum = m; }
  void save_group_options(size_t group, StateDict& out, const std::string& prefix) const override;
  void load_group_options(size_t group, const StateDict& in, const std::string& prefix) override;

 private:
  std::vector<SGDOptions> options_;
};

}  // namespace ember::optim
