// Optimizer base: group bookkeeping, zero_grad, lr access and the flat state dict
// (Note [optimizer state dict] in optimizer.h).
#include "ember/optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/ops/elementwise.h"
#include "ember/ops/optim.h"

namespace ember::optim {

Optimizer::Optimizer(std::string name, std::vector<std::vector<Tensor>> groups,
                     std::vector<std::string> state_names, bool counts_steps)
    : name_(std::move(name)), groups_(std::move(groups)), state_names_(std::move(state_names)),
      counts_steps_(counts_steps) {
  std::unordered_set<const TensorImpl*> seen;
  size_t n = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    group_begin_.push_back(n);
    for (size_t k = 0; k < groups_[g].size(); ++k, ++n) {
      const Tensor& p = groups_[g][k];
      EMBER_CHECK(p.defined(), ValueError, "[", name_, "] parameter ", k, " of group ", g,
                  " is an undefined tensor");
      EMBER_CHECK(p.is_floating_point(), DTypeError, "[", name_,
                  "] can only optimize floating-point tensors, got ", p.dtype(), " (parameter ",
                  k, " of group ", g, ")");
      EMBER_CHECK(p.is_leaf(), ValueError, "[", name_, "] can't optimize a non-leaf tensor (parameter ",
                  k, " of group ", g, "); pass the leaf, e.g. x.detach().requires_grad_()");
      EMBER_CHECK(seen.insert(p.impl()).second, ValueError, "[", name_, "] parameter ", k,
                  " of group ", g, " appears more than once in the parameter list");
    }
  }
  EMBER_CHECK(n > 0, ValueError, "[", name_, "] got an empty parameter list");
  initial_lr_.resize(groups_.size());
  state_.resize(n);
}

void Optimizer::check_group(size_t group, const char* what) const {
  EMBER_CHECK(group < groups_.size(), IndexError, "[", name_, ".", what, "] group ", group,
              " is out of range for ", groups_.size(), " parameter groups");
}

const std::vector<Tensor>& Optimizer::params(size_t group) const {
  check_group(group, "params");
  return groups_[group];
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  out.reserve(state_.size());
  for (const auto& g : groups_) out.insert(out.end(), g.begin(), g.end());
  return out;
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const auto& g : groups_)
    for (const Tensor& p : g) {
      if (!p.grad().defined()) continue;
      Tensor handle = p;  // shares p's impl: setting its grad sets p's
      if (set_to_none) {
        handle.set_grad(Tensor());
      } else {
        // PyTorch detaches a grad that has a grad_fn (create_graph) before zeroing it.
        Tensor& grad = handle.mutable_grad();
        if (grad.grad_fn()) grad = grad.detach();
        ops::fill_(grad, 0);
        grad.bump_version();
      }
    }
}

double Optimizer::lr(size_t group) const {
  check_group(group, "lr");
  return group_lr(group);
}

void Optimizer::set_lr(double lr, size_t group) {
  check_group(group, "set_lr");
  EMBER_CHECK(lr >= 0, ValueError, "[", name_, ".set_lr] invalid learning rate: ", lr);
  set_group_lr(group, lr);
}

void Optimizer::set_lr(double lr) {
  EMBER_CHECK(lr >= 0, ValueError, "[", name_, ".set_lr] invalid learning rate: ", lr);
  for (size_t g = 0; g < groups_.size(); ++g) set_group_lr(g, lr);
}

std::optional<double> Optimizer::initial_lr(size_t group) const {
  check_group(group, "initial_lr");
  return initial_lr_[group];
}

void Optimizer::set_initial_lr(double lr, size_t group) {
  check_group(group, "set_initial_lr");
  initial_lr_[group] = lr;
}

std::optional<double> Optimizer::momentum(size_t group) const {
  check_group(group, "momentum");
  return group_momentum(group);
}

void Optimizer::set_momentum(double momentum, size_t group) {
  check_group(group, "set_momentum");
  EMBER_CHECK(group_momentum(group).has_value(), ValueError, "[", name_,
              ".set_momentum] this optimizer has no momentum");
  set_group_momentum(group, momentum);
}

Tensor Optimizer::update_target(size_t param, const Tensor& p, bool enabled) {
  if (!enabled || (p.dtype() != DType::f16 && p.dtype() != DType::bf16)) return p;
  Tensor& master = state_[param].master;
  if (!master.defined()) {
    master = empty(p.sizes(), TensorOptions(DType::f32).device(p.device()));
    ops::copy_(master, p);  // exact: every 16-bit value is an f32 value
  }
  return master;
}

void Optimizer::write_back_masters(const std::vector<std::pair<Tensor, Tensor>>& param_master) {
  for (const auto& [p, master] : param_master) {
    ops::copy_(p, master);  // rounds to nearest even
    p.bump_version();
  }
}

Tensor Optimizer::state(size_t param, std::string_view buffer) const {
  EMBER_CHECK(param < state_.size(), IndexError, "[", name_, ".state] parameter ", param,
              " is out of range for ", state_.size(), " parameters");
  for (size_t b = 0; b < state_names_.size(); ++b)
    if (state_names_[b] == buffer)
      return state_[param].buffers.empty() ? Tensor() : state_[param].buffers[b];
  if (buffer == "master") return state_[param].master;
  throw ValueError(str("[", name_, ".state] no state named '", buffer, "'"));
}

int64_t Optimizer::state_step(size_t param) const {
  EMBER_CHECK(param < state_.size(), IndexError, "[", name_, ".state_step] parameter ", param,
              " is out of range for ", state_.size(), " parameters");
  const ParamState& s = state_[param];
  return s.device_step.defined() ? int64_t(s.device_step.item<double>()) : s.step;
}

void Optimizer::step_unless_found_inf(const Tensor&) {
  throw NotImplementedError(str("[", name_, ".step_unless_found_inf] this optimizer decides skipped steps on the "
                                "host; use one with can_skip_on_device() (Adam/AdamW with capturable = true)"));
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < state_.size(); ++i) {
    const ParamState& s = state_[i];
    if (s.buffers.empty()) continue;
    const std::string prefix = str("state.", i, ".");
    if (counts_steps_) out.set_int(prefix + "step", state_step(i));
    for (size_t b = 0; b < state_names_.size(); ++b)
      if (s.buffers[b].defined()) out.insert(prefix + state_names_[b], s.buffers[b]);
    if (s.master.defined()) out.insert(prefix + "master", s.master);
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = str("param_groups.", g, ".");
    std::vector<int64_t> ids(groups_[g].size());
    for (size_t k = 0; k < ids.size(); ++k) ids[k] = int64_t(group_begin_[g] + k);
    out.insert(prefix + "params", tensor(ids, Shape{int64_t(ids.size())}));
    out.set_scalar(prefix + "lr", group_lr(g));
    if (initial_lr_[g]) out.set_scalar(prefix + "initial_lr", *initial_lr_[g]);
    save_group_options(g, out, prefix);
  }
  return out;
}

namespace {

// The parameter number in a key "state.<i>.<rest>", or nullopt for another key.
std::optional<size_t> state_key_index(const std::string& key, std::string* rest) {
  static const std::string kPrefix = "state.";
  if (key.compare(0, kPrefix.size(), kPrefix) != 0) return std::nullopt;
  const char* b = key.data() + kPrefix.size();
  const char* e = key.data() + key.size();
  size_t i = 0;
  auto [ptr, ec] = std::from_chars(b, e, i);
  if (ec != std::errc() || ptr == b || ptr == e || *ptr != '.') return std::nullopt;
  *rest = std::string(ptr + 1, e);
  return i;
}

}  // namespace

void Optimizer::load_state_dict(const StateDict& in) {
  const char* op = "[Optimizer.load_state_dict] ";
  // 1. Groups: same number, same sizes.
  size_t saved_groups = 0;
  while (in.contains(str("param_groups.", saved_groups, ".params"))) ++saved_groups;
  EMBER_CHECK(saved_groups == groups_.size(), ValueError, op, "the state dict has ", saved_groups,
              " parameter groups but this ", name_, " optimizer has ", groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Tensor& ids = in.at(str("param_groups.", g, ".params"));
    EMBER_CHECK(ids.numel() == int64_t(groups_[g].size()), ValueError, op, "parameter group ", g,
                " of the state dict has ", ids.numel(), " parameters but this optimizer's has ",
                groups_[g].size());
  }
  // 2. Per-parameter state: validated into a new vector, committed only when all is well.
  const std::vector<Tensor> all = parameters();
  std::vector<ParamState> fresh(state_.size());
  for (const auto& [key, value] : in) {
    std::string rest;
    const std::optional<size_t> i = state_key_index(key, &rest);
    if (!i) {
      EMBER_CHECK(key.compare(0, 13, "param_groups.") == 0, ValueError, op, "unexpected key '",
                  key, "' in the state dict of a ", name_, " optimizer");
      continue;
    }
    EMBER_CHECK(*i < all.size(), ValueError, op, "the state dict has state for parameter ", *i,
                " but this optimizer has ", all.size(), " parameters");
    if (rest == "step" && counts_steps_) continue;
    bool known = rest == "master";
    for (const auto& n : state_names_) known = known || n == rest;
    EMBER_CHECK(known, ValueError, op, "unexpected key '", key, "' in the state dict of a ", name_,
                " optimizer");
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string prefix = str("state.", i, ".");
    bool any = false;
    for (const auto& n : state_names_) any = any || in.contains(prefix + n);
    if (!any) continue;
    const Tensor& p = all[i];
    const DType sdt = ops::optim_state_dtype(p.dtype());
    for (const auto& n : state_names_) {
      const Tensor* t = in.find(prefix + n);
      if (t == nullptr && std::find(optional_state_names_.begin(), optional_state_names_.end(), n) !=
                              optional_state_names_.end()) {
        fresh[i].buffers.emplace_back();
        continue;
      }
      EMBER_CHECK(t != nullptr, ValueError, op, "state of parameter ", i, " lacks '", n, "'");
      EMBER_CHECK(t->sizes() == p.sizes(), ValueError, op, "state '", n, "' of parameter ", i,
                  " has shape ", t->sizes(), " but the parameter has shape ", p.sizes());
      EMBER_CHECK(t->is_floating_point(), ValueError, op, "state '", n, "' of parameter ", i,
                  " has dtype ", t->dtype(), "; expected a floating-point tensor");
      Tensor copy = empty(p.sizes(), TensorOptions(sdt).device(p.device()));
      ops::copy_(copy, *t);
      fresh[i].buffers.push_back(copy);
    }
    if (const Tensor* m = in.find(prefix + "master")) {
      EMBER_CHECK(p.dtype() == DType::f16 || p.dtype() == DType::bf16, ValueError, op,
                  "state of parameter ", i, " has a 'master' copy but the parameter is ",
                  p.dtype(), " (masters belong to f16/bf16 parameters)");
      EMBER_CHECK(m->sizes() == p.sizes() && m->is_floating_point(), ValueError, op,
                  "state 'master' of parameter ", i, " has shape ", m->sizes(), " and dtype ",
                  m->dtype(), "; expected a floating-point tensor of shape ", p.sizes());
      Tensor copy = empty(p.sizes(), TensorOptions(DType::f32).device(p.device()));
      ops::copy_(copy, *m);
      fresh[i].master = copy;
    }
    if (counts_steps_) {
      const Tensor* s = in.find(prefix + "step");
      EMBER_CHECK(s != nullptr && s->numel() == 1, ValueError, op, "state of parameter ", i,
                  " lacks a one-element 'step'");
      const double step = s->item<double>();
      EMBER_CHECK(step >= 0 && step == double(int64_t(step)), ValueError, op, "state of parameter ",
                  i, " has an invalid step count ", step);
      fresh[i].step = int64_t(step);
    }
  }
  // 3. Hyperparameters: each subclass validates its own before anything changes.
  std::vector<std::optional<double>> initial(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = str("param_groups.", g, ".");
    if (const Tensor* t = in.find(prefix + "initial_lr")) initial[g] = t->item<double>();
  }
  // load_group_options validates then assigns; to keep the all-or-nothing promise, run every
  // group's load on a saved copy of the options and roll back on failure.
  std::vector<double> saved_lrs;
  for (size_t g = 0; g < groups_.size(); ++g) saved_lrs.push_back(group_lr(g));
  StateDict backup;
  for (size_t g = 0; g < groups_.size(); ++g)
    save_group_options(g, backup, str("param_groups.", g, "."));
  try {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const std::string prefix = str("param_groups.", g, ".");
      const double lr = detail::load_option(name_, in, prefix + "lr");
      EMBER_CHECK(lr >= 0, ValueError, op, "invalid learning rate ", lr, " in group ", g);
      load_group_options(g, in, prefix);
      set_group_lr(g, lr);
    }
  } catch (...) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      load_group_options(g, backup, str("param_groups.", g, "."));
      set_group_lr(g, saved_lrs[g]);
    }
    throw;
  }
  // Device step counts stay where they are (a captured step reads them there); they take
  // the loaded values.
  for (size_t i = 0; i < state_.size(); ++i) {
    fresh[i].device_step = state_[i].device_step;
    if (fresh[i].device_step.defined()) fresh[i].device_step.fill_(double(fresh[i].step));
  }
  state_ = std::move(fresh);
  initial_lr_ = std::move(initial);
}

namespace detail {
double load_option(const std::string& name, const StateDict& in, const std::string& key) {
  const Tensor* t = in.find(key);
  EMBER_CHECK(t != nullptr && t->numel() == 1, ValueError, "[Optimizer.load_state_dict] the state dict of a ",
              name, " optimizer lacks '", key, "'");
  return t->item<double>();
}
}  // namespace detail

}  // namespace ember::optim
