// Adam and AdamW: validation, lazy state creation and one fused ops::adam_step_ call per
// group (ops::adam_step_scheduled_ for a capturable group). A parameter's step count advances
// only after its update succeeded.
#include "ember/optim/adam.h"

#include <cmath>

#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/ops/optim.h"

namespace ember::optim::detail {

namespace {

template <class Options>
void validate(const Options& o, const char* name, const char* where) {
  EMBER_CHECK(o.lr >= 0, ValueError, "[", name, where, "] invalid learning rate: ", o.lr);
  EMBER_CHECK(o.eps >= 0, ValueError, "[", name, where, "] invalid epsilon value: ", o.eps);
  EMBER_CHECK(o.betas[0] >= 0 && o.betas[0] < 1, ValueError, "[", name, where,
              "] invalid beta parameter at index 0: ", o.betas[0], " (must be in [0, 1))");
  EMBER_CHECK(o.betas[1] >= 0 && o.betas[1] < 1, ValueError, "[", name, where,
              "] invalid beta parameter at index 1: ", o.betas[1], " (must be in [0, 1))");
  EMBER_CHECK(o.weight_decay >= 0, ValueError, "[", name, where, "] invalid weight_decay value: ",
              o.weight_decay);
}

template <class Options>
std::vector<std::vector<Tensor>> group_params(const std::vector<ParamGroup<Options>>& groups,
                                              const char* name) {
  std::vector<std::vector<Tensor>> out;
  for (const auto& g : groups) {
    validate(g.options, name, "");
    out.push_back(g.params);
  }
  return out;
}

constexpr const char* adam_name(bool decoupled) { return decoupled ? "AdamW" : "Adam"; }

// A parameter's m, v and (amsgrad) vmax, created as zeros at its first step; zeros at step 0
// are exactly a fresh state. vmax also starts at zeros when amsgrad is switched on later or a
// state dict without it was loaded (PyTorch would fail on the missing key).
void ensure_adam_state(std::vector<Tensor>& buffers, const Tensor& p, bool amsgrad) {
  const TensorOptions opts = TensorOptions(ops::optim_state_dtype(p.dtype())).device(p.device());
  if (buffers.empty()) buffers = {zeros(p.sizes(), opts), zeros(p.sizes(), opts), Tensor()};
  if (amsgrad && !buffers[2].defined()) buffers[2] = zeros(p.sizes(), opts);
}

}  // namespace

template <class Options, bool Decoupled>
AdamBase<Options, Decoupled>::AdamBase(std::vector<Group> groups)
    : Optimizer(adam_name(Decoupled), group_params(groups, adam_name(Decoupled)),
                {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}, true) {
  set_optional_state({"max_exp_avg_sq"});  // amsgrad's; a group without it keeps none
  for (const auto& g : groups) options_.push_back(g.options);
  device_lr_.resize(options_.size());
  device_steps_.resize(options_.size());
}

template <class Options, bool Decoupled>
const Options& AdamBase<Options, Decoupled>::options(size_t group) const {
  check_group(group, "options");
  return options_[group];
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::set_options(const Options& options, size_t group) {
  check_group(group, "set_options");
  validate(options, adam_name(Decoupled), ".set_options");
  EMBER_CHECK(options.capturable == options_[group].capturable || !device_steps_[group].defined(), ValueError,
              "[", adam_name(Decoupled), ".set_options] capturable cannot change after the group's first step");
  options_[group] = options;
  if (device_lr_[group].defined()) device_lr_[group].fill_(options.lr);
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::set_group_lr(size_t group, double lr) {
  options_[group].lr = lr;
  if (device_lr_[group].defined()) device_lr_[group].fill_(lr);  // read by the next (replayed) step
}

template <class Options, bool Decoupled>
bool AdamBase<Options, Decoupled>::can_skip_on_device() const {
  for (const Options& o : options_)
    if (!o.capturable) return false;
  return true;
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::step_unless_found_inf(const Tensor& found_inf) {
  EMBER_CHECK(can_skip_on_device(), NotImplementedError, "[", adam_name(Decoupled),
              ".step_unless_found_inf] needs capturable = true in every parameter group");
  ember::detail::check_defined("step_unless_found_inf", found_inf, "found_inf");
  update(found_inf);
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::capturable_update(size_t g, const Tensor& found_inf) {
  const Options& o = options_[g];
  const auto& group = params(g);
  if (group.empty()) return;
  TensorList ps, gs, ms, vs, vmaxs;
  std::vector<std::pair<Tensor, Tensor>> masters;
  for (size_t k = 0; k < group.size(); ++k) {
    const Tensor& p = group[k];
    EMBER_CHECK(p.grad().defined(), ValueError, "[", adam_name(Decoupled), ".step] parameter ", k, " of group ", g,
                " has no gradient: a capturable optimizer updates every parameter of its groups at every "
                "step (leave a frozen parameter out of the optimizer, or use capturable = false)");
    ParamState& s = param_state(param_number(g, k));
    ensure_adam_state(s.buffers, p, o.amsgrad);
    const Tensor target = update_target(param_number(g, k), p, o.master_weights);
    if (!target.is_same(p)) masters.emplace_back(p, target);
    ps.push_back(target);
    gs.push_back(p.grad());
    ms.push_back(s.buffers[0]);
    vs.push_back(s.buffers[1]);
    if (o.amsgrad) vmaxs.push_back(s.buffers[2]);
  }
  if (!device_steps_[g].defined()) {
    // From here on the counts live on the device, starting from the host's (a state dict
    // loaded before the first step included).
    const Device device = group[0].device();
    std::vector<double> counts;
    for (size_t k = 0; k < group.size(); ++k) counts.push_back(double(param_state(param_number(g, k)).step));
    device_steps_[g] = tensor(counts, Shape{int64_t(counts.size())}).to(device);
    device_lr_[g] = full({1}, o.lr, TensorOptions(DType::f64).device(device));
    for (size_t k = 0; k < group.size(); ++k)
      param_state(param_number(g, k)).device_step = device_steps_[g].select(0, int64_t(k));
  }
  ops::adam_step_scheduled_(ps, gs, ms, vs, device_lr_[g], device_steps_[g], found_inf,
                            {.lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps,
                             .weight_decay = o.weight_decay, .decoupled_weight_decay = Decoupled,
                             .maximize = o.maximize, .amsgrad = o.amsgrad},
                            vmaxs);
  write_back_masters(masters);
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::step() {
  update(Tensor());
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::update(const Tensor& found_inf) {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    if (options_[g].capturable) {
      capturable_update(g, found_inf);
      continue;
    }
    const Options& o = options_[g];
    TensorList ps, gs, ms, vs, vmaxs;
    std::vector<int64_t> steps;
    std::vector<size_t> ids;
    std::vector<std::pair<Tensor, Tensor>> masters;  // (16-bit parameter, its f32 master)
    const auto& group = params(g);
    for (size_t k = 0; k < group.size(); ++k) {
      const Tensor& p = group[k];
      if (!p.grad().defined()) continue;
      ParamState& s = param_state(param_number(g, k));
      if (s.buffers.empty()) s.step = 0;
      ensure_adam_state(s.buffers, p, o.amsgrad);
      const Tensor target = update_target(param_number(g, k), p, o.master_weights);
      if (!target.is_same(p)) masters.emplace_back(p, target);
      ps.push_back(target);
      gs.push_back(p.grad());  // cast to the target's dtype (f32 for a master) by the op
      ms.push_back(s.buffers[0]);
      vs.push_back(s.buffers[1]);
      if (o.amsgrad) vmaxs.push_back(s.buffers[2]);
      steps.push_back(s.step + 1);
      ids.push_back(param_number(g, k));
    }
    if (ps.empty()) continue;
    ops::adam_step_(ps, gs, ms, vs, steps,
                    {.lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps,
                     .weight_decay = o.weight_decay, .decoupled_weight_decay = Decoupled,
                     .maximize = o.maximize, .amsgrad = o.amsgrad},
                    vmaxs);
    write_back_masters(masters);
    for (size_t i : ids) ++param_state(i).step;
  }
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::save_group_options(size_t group, StateDict& out,
                                                      const std::string& prefix) const {
  const Options& o = options_[group];
  out.set(prefix + "betas", tensor(std::vector<double>{o.betas[0], o.betas[1]}, Shape{2}));
  out.set_scalar(prefix + "eps", o.eps);
  out.set_scalar(prefix + "weight_decay", o.weight_decay);
  out.set_scalar(prefix + "amsgrad", o.amsgrad ? 1 : 0);
  out.set_scalar(prefix + "maximize", o.maximize ? 1 : 0);
  out.set_scalar(prefix + "master_weights", o.master_weights ? 1 : 0);
}

template <class Options, bool Decoupled>
void AdamBase<Options, Decoupled>::load_group_options(size_t group, const StateDict& in,
                                                      const std::string& prefix) {
  Options o = options_[group];
  const Tensor* betas = in.find(prefix + "betas");
  EMBER_CHECK(betas != nullptr && betas->numel() == 2, ValueError,
              "[Optimizer.load_state_dict] the state dict of a ", name(), " optimizer lacks a 2-element '",
              prefix, "betas'");
  const std::vector<double> b = betas->to_vector<double>();
  o.betas = {b[0], b[1]};
  o.eps = load_option(name(), in, prefix + "eps");
  o.weight_decay = load_option(name(), in, prefix + "weight_decay");
  o.maximize = load_option(name(), in, prefix + "maximize") != 0;
  // Optional: state dicts written before the option existed lack it.
  if (const Tensor* t = in.find(prefix + "master_weights")) o.master_weights = t->item<double>() != 0;
  if (const Tensor* t = in.find(prefix + "amsgrad")) o.amsgrad = t->item<double>() != 0;
  validate(o, adam_name(Decoupled), ".load_state_dict");
  options_[group] = o;
}

template class AdamBase<AdamOptions, false>;
template class AdamBase<AdamWOptions, true>;

}  // namespace ember::optim::detail
