// Adam (L2 weight decay added to the gradient) and AdamW (decoupled weight decay), with
// torch.optim.Adam / AdamW's semantics. For step t of a parameter:
//   AdamW: p *= 1 - lr*wd          Adam: g += wd * p
//   m = beta1*m + (1-beta1)*g;  v = beta2*v + (1-beta2)*g^2
//   amsgrad: vmax = max(vmax, v) (state "max_exp_avg_sq"), used for v below
//   p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps)
// The update of a group is ONE fused multi-tensor kernel (ops::adam_step_) over all of its
// parameters; each parameter keeps its own step count (parameters skipped for lack of a
// gradient do not advance).
#pragma once

#include <array>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
  // Note [master weights] (optimizer.h): f16/bf16 parameters are updated through an f32
  // master copy kept in the optimizer state ("state.<i>.master").
  bool master_weights = false;
  // Note [capturable optimizer step] (ops/src/optim.cpp), PyTorch's capturable=True: the
  // group's learning rate and step counts live in device tensors that the update kernel
  // reads, so step() can be captured in a CUDA graph and replayed (set_lr between replays
  // takes effect), and GradScaler skips an inf step on the device without a host read.
  // Every parameter of the group must have a gradient at every step (a captured step
  // updates a fixed set); same results as capturable = false otherwise.
  bool capturable = false;
};

// Same fields; weight_decay defaults to 0.01 as in torch.optim.AdamW.
struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
  bool master_weights = false;  // as AdamOptions::master_weights
  bool capturable = false;      // as AdamOptions::capturable
};

namespace detail {
// The shared implementation; Decoupled selects AdamW's weight decay.
template <class Options, bool Decoupled>
class AdamBase : public Optimizer {
 public:
  using Group = ParamGroup<Options>;

  void step() override;
  bool can_skip_on_device() const override;
  void step_unless_found_inf(const Tensor& found_inf) override;
  const Options& options(size_t group = 0) const;
  void set_options(const Options& options, size_t group);

 protected:
  explicit AdamBase(std::vector<Group> groups);
  double group_lr(size_t group) const override { return options_[group].lr; }
  void set_group_lr(size_t group, double lr) override;
  std::optional<double> group_momentum(size_t group) const override { return options_[group].betas[0]; }
  void set_group_momentum(size_t group, double beta1) override { options_[group].betas[0] = beta1; }
  void save_group_options(size_t group, StateDict& out, const std::string& prefix) const override;
  void load_group_options(size_t group, const StateDict& in, const std::string& prefix) override;

 private:
  void update(const Tensor& found_inf);
  // Group g's update through ops::adam_step_scheduled_ (options.capturable).
  void capturable_update(size_t g, const Tensor& found_inf);

  std::vector<Options> options_;
  // Capturable groups, created at their first step: the lr (f64 [1]) and the step counts
  // (f64 [n], one per parameter of the group) on the group's device.
  std::vector<Tensor> device_lr_, device_steps_;
};
extern template class AdamBase<AdamOptions, false>;
extern template class AdamBase<AdamWOptions, true>;
}  // namespace detail

class Adam : public detail::AdamBase<AdamOptions, false> {
 public:
  using Options = AdamOptions;
  Adam(std::vector<Tensor> params, AdamOptions options = {})
      : AdamBase({Group{std::move(params), options}}) {}
  explicit Adam(std::vector<Group> groups) : AdamBase(std::move(groups)) {}
};

class AdamW : public detail::AdamBase<AdamWOptions, true> {
 public:
  using Options = AdamWOptions;
  AdamW(std::vector<Tensor> params, AdamWOptions options = {})
      : AdamBase({Group{std::move(params), options}}) {}
  explicit AdamW(std::vector<Group> groups) : AdamBase(std::move(groups)) {}
};

}  // namespace ember::optim
