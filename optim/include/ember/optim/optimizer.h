// Optimizer: the base of SGD, Adam and AdamW, with PyTorch's torch.optim.Optimizer semantics.
//
// Invariants:
// - Parameters are numbered 0, 1, ... across all groups in order (PyTorch's state_dict ids);
//   per-parameter state is kept by that number, so the optimizer never holds a map keyed by
//   tensor identity and a state dict from one run loads into another of the same layout.
// - A parameter appears in exactly one group, is a floating-point leaf, and is updated in
//   place under NoGradGuard: its identity (and every handle to it) never changes.
// - step() skips parameters without a gradient; their state (and step count) does not move.
// - Optimizer state tensors live on their parameter's device, contiguous, in
//   ops::optim_state_dtype(param dtype) (f32 for 16-bit parameters).
// - Master weights (Note [master weights]): with an optimizer's master_weights option, a f16 or
//   bf16 parameter gets an f32 master copy (created from the parameter at its first step).
//   The update runs on the master with the gradient cast to f32, and the parameter receives
//   the master rounded to its dtype; so updates smaller than half a 16-bit ulp accumulate in
//   the master instead of being lost (llm.c's scheme). f32/f64 parameters ignore the option.
// - state_dict() returns the live state tensors (like PyTorch, no copy); load_state_dict()
//   validates everything before changing anything, then copies the tensors in (so two
//   optimizers never share state) and restores every group's hyperparameters.
//
// State dict keys (Note [optimizer state dict]):
//   state.<i>.step              i64 0-dim, optimizers that count steps (Adam, AdamW)
//   state.<i>.<buffer>          exp_avg, exp_avg_sq / momentum_buffer / square_avg,
//                               grad_avg (RMSprop) / sum (Adagrad) (absent before step 1)
//   state.<i>.master            f32 master copy of a 16-bit parameter (master_weights option;
//                               absent otherwise and before step 1)
//   param_groups.<g>.params     i64 [n]: the parameter numbers of group g
//   param_groups.<g>.lr, ...    f64 0-dim per option (betas as f64 [2], flags as 0/1)
//   param_groups.<g>.initial_lr f64 0-dim, once a scheduler has been attached
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::optim {

// A parameter group: its tensors and its own options (PyTorch's param_groups entry).
template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options{};
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Whether step_unless_found_inf is available: an optimizer whose update reads GradScaler's
  // inf flag on the device (Adam/AdamW with capturable = true in every group).
  virtual bool can_skip_on_device() const { return false; }
  // step(), except that nothing changes (parameters, state, step counts) when found_inf, an
  // f32 [1] flag on the parameters' device, is non-zero; decided by the device, so the host
  // never waits for the flag. NotImplementedError unless can_skip_on_device().
  virtual void step_unless_found_inf(const Tensor& found_inf);
  // Drops every gradient (set_to_none, the default as in PyTorch 2) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  size_t num_param_groups() const { return groups_.size(); }
  const std::vector<Tensor>& params(size_t group) const;
  // All parameters, in parameter-number order.
  std::vector<Tensor> parameters() const;
  size_t num_params() const { return state_.size(); }

  double lr(size_t group = 0) const;
  void set_lr(double lr, size_t group);
  void set_lr(double lr);  // every group
  // The lr schedulers start from (PyTorch's group["initial_lr"]): set by the first scheduler
  // attached to this optimizer, so a second one starts from the same base.
  std::optional<double> initial_lr(size_t group) const;
  void set_initial_lr(double lr, size_t group);
  // The momentum a schedule cycles (OneCycleLR): SGD's and RMSprop's momentum, Adam's beta1;
  // nullopt for an optimizer without one (Adagrad). set_momentum throws ValueError there.
  std::optional<double> momentum(size_t group) const;
  void set_momentum(double momentum, size_t group);

  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

  // The state of parameter number `param` (undefined before its first step; "master" for the
  // f32 master copy), its step count.
  Tensor state(size_t param, std::string_view buffer) const;
  int64_t state_step(size_t param) const;
  // "SGD", "Adam", "AdamW": the prefix of this optimizer's error messages.
  const std::string& name() const { return name_; }

 protected:
  struct ParamState {
    int64_t step = 0;
    // A capturable optimizer's count of this parameter on the device (an f64 0-dim view of
    // its group's counts): when defined it is the count, and `step` is not used.
    Tensor device_step;
    std::vector<Tensor> buffers;  // in state_names order; empty before the first step
    Tensor master;                // f32 master copy of a 16-bit parameter, or undefined
  };

  // groups: the parameters of each group (validated here); state_names: the per-parameter
  // buffers; counts_steps: whether "state.<i>.step" is kept.
  Optimizer(std::string name, std::vector<std::vector<Tensor>> groups,
            std::vector<std::string> state_names, bool counts_steps);

  size_t param_number(size_t group, size_t k) const { return group_begin_[group] + k; }
  ParamState& param_state(size_t param) { return state_[param]; }
  const ParamState& param_state(size_t param) const { return state_[param]; }
  void check_group(size_t group, const char* what) const;
  // Note [master weights]: the tensor the update of parameter `param` (= p) runs on: p itself,
  // or, when `enabled` and p is 16-bit, its f32 master (created from p on first use).
  Tensor update_target(size_t param, const Tensor& p, bool enabled);
  // Writes each master back into its 16-bit parameter (rounded), after an update.
  static void write_back_masters(const std::vector<std::pair<Tensor, Tensor>>& param_master);

  // Hyperparameters of one group: lr access, and (de)serialization under `prefix`
  // ("param_groups.<g>."). load_group_options validates and may throw before any change.
  virtual double group_lr(size_t group) const = 0;
  virtual void set_group_lr(size_t group, double lr) = 0;
  virtual void save_group_options(size_t group, StateDict& out, const std::string& prefix) const = 0;
  virtual void load_group_options(size_t group, const StateDict& in, const std::string& prefix) = 0;
  virtual std::optional<double> group_momentum(size_t) const { return std::nullopt; }
  virtual void set_group_momentum(size_t, double) {}
  // Buffers that exist only with some options (RMSprop's momentum_buffer and grad_avg, as in
  // PyTorch): an undefined buffer is left out of state_dict and may be absent when loading.
  void set_optional_state(std::vector<std::string> names) { optional_state_names_ = std::move(names); }

 private:
  std::string name_;
  std::vector<std::vector<Tensor>> groups_;
  std::vector<size_t> group_begin_;
  std::vector<std::optional<double>> initial_lr_;
  std::vector<std::string> state_names_;
  std::vector<std::string> optional_state_names_;
  bool counts_steps_;
  std::vector<ParamState> state_;
};

namespace detail {
// Reads a 0-dim option; throws "[<name>.load_state_dict] missing ..." when absent.
double load_option(const std::string& name, const StateDict& in, const std::string& key);
}  // namespace detail

}  // namespace ember::optim
