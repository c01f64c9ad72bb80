// RMSprop and Adagrad: validation, lazy state and a per-parameter sequence of in-place
// elementwise ops in the state dtype (f32 for 16-bit parameters), operation for operation
// PyTorch 1.13's single-tensor update. A parameter's step count advances only after its update.
#include "ember/optim/rmsprop.h"

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/ops/optim.h"

namespace ember::optim {

namespace {

void validate(const RMSpropOptions& o, const char* where) {
  EMBER_CHECK(o.lr >= 0, ValueError, "[RMSprop", where, "] invalid learning rate: ", o.lr);
  EMBER_CHECK(o.eps >= 0, ValueError, "[RMSprop", where, "] invalid epsilon value: ", o.eps);
  EMBER_CHECK(o.momentum >= 0, ValueError, "[RMSprop", where, "] invalid momentum value: ", o.momentum);
  EMBER_CHECK(o.weight_decay >= 0, ValueError, "[RMSprop", where, "] invalid weight_decay value: ",
              o.weight_decay);
  EMBER_CHECK(o.alpha >= 0, ValueError, "[RMSprop", where, "] invalid alpha value: ", o.alpha);
}

void validate(const AdagradOptions& o, const char* where) {
  EMBER_CHECK(o.lr >= 0, ValueError, "[Adagrad", where, "] invalid learning rate: ", o.lr);
  EMBER_CHECK(o.lr_decay >= 0, ValueError, "[Adagrad", where, "] invalid lr_decay value: ", o.lr_decay);
  EMBER_CHECK(o.weight_decay >= 0, ValueError, "[Adagrad", where, "] invalid weight_decay value: ",
              o.weight_decay);
  EMBER_CHECK(o.initial_accumulator_value >= 0, ValueError, "[Adagrad", where,
              "] invalid initial_accumulator_value value: ", o.initial_accumulator_value);
  EMBER_CHECK(o.eps >= 0, ValueError, "[Adagrad", where, "] invalid epsilon value: ", o.eps);
}

template <class G>
std::vector<std::vector<Tensor>> group_params(const std::vector<G>& groups) {
  std::vector<std::vector<Tensor>> out;
  for (const auto& g : groups) {
    validate(g.options, "");
    out.push_back(g.params);
  }
  return out;
}

TensorOptions state_options(const Tensor& p) {
  return TensorOptions(ops::optim_state_dtype(p.dtype())).device(p.device());
}

// The gradient the update uses, in the state dtype: maximize and L2 weight decay applied.
Tensor effective_grad(const Tensor& p, DType dt, bool maximize, double weight_decay) {
  Tensor g = p.grad().to(p.device(), dt);
  if (maximize) g = g.neg();
  if (weight_decay != 0) g = g.add(p.to(dt), weight_decay);
  return g;
}

// p += alpha * d, d in the state dtype (f32 for a 16-bit p: computed in f32, rounded once).
void apply_update(const Tensor& p, const Tensor& d, double alpha) {
  Tensor handle = p;
  if (p.dtype() == d.dtype()) handle.add_(d, alpha);
  else handle.copy_(p.to(d.dtype()).add(d, alpha));
}

}  // namespace

// ---- RMSprop ----

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<Group>{Group{std::move(params), options}}) {}

RMSprop::RMSprop(std::vector<Group> groups)
    : Optimizer("RMSprop", group_params(groups), {"square_avg", "momentum_buffer", "grad_avg"}, true) {
  for (const auto& g : groups) options_.push_back(g.options);
  set_optional_state({"momentum_buffer", "grad_avg"});
}

const RMSpropOptions& RMSprop::options(size_t group) const {
  check_group(group, "options");
  return options_[group];
}

void RMSprop::set_options(const RMSpropOptions& options, size_t group) {
  check_group(group, "set_options");
  validate(options, ".set_options");
  options_[group] = options;
}

void RMSprop::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const RMSpropOptions& o = options_[g];
    const auto& group = params(g);
    for (size_t k = 0; k < group.size(); ++k) {
      const Tensor& p = group[k];
      if (!p.grad().defined()) continue;
      ParamState& s = param_state(param_number(g, k));
      const TensorOptions opts = state_options(p);
      if (s.buffers.empty()) {
        s.buffers = {zeros(p.sizes(), opts), Tensor(), Tensor()};
        s.step = 0;
      }
      // Options may gain momentum or centering after the first step (OneCycleLR cycles
      // momentum): the buffer then starts from zeros, as PyTorch's would at creation.
      if (o.momentum > 0 && !s.buffers[1].defined()) s.buffers[1] = zeros(p.sizes(), opts);
      if (o.centered && !s.buffers[2].defined()) s.buffers[2] = zeros(p.sizes(), opts);
      Tensor& square_avg = s.buffers[0];
      const Tensor grad = effective_grad(p, opts.dtype_, o.maximize, o.weight_decay);
      square_avg.mul_(o.alpha).add_(grad.mul(grad), 1 - o.alpha);
      Tensor avg;
      if (o.centered) {
        Tensor& grad_avg = s.buffers[2];
        grad_avg.mul_(o.alpha).add_(grad, 1 - o.alpha);
        avg = square_avg.sub(grad_avg.mul(grad_avg)).sqrt_();
      } else {
        avg = square_avg.sqrt();
      }
      avg.add_(o.eps);
      if (o.momentum > 0) {
        Tensor& buf = s.buffers[1];
        buf.mul_(o.momentum).add_(grad.div(avg));
        apply_update(p, buf, -o.lr);
      } else {
        apply_update(p, grad.div(avg), -o.lr);
      }
      ++s.step;
    }
  }
}

void RMSprop::save_group_options(size_t group, StateDict& out, const std::string& prefix) const {
  const RMSpropOptions& o = options_[group];
  out.set_scalar(prefix + "alpha", o.alpha);
  out.set_scalar(prefix + "eps", o.eps);
  out.set_scalar(prefix + "weight_decay", o.weight_decay);
  out.set_scalar(prefix + "momentum", o.momentum);
  out.set_scalar(prefix + "centered", o.centered ? 1 : 0);
  out.set_scalar(prefix + "maximize", o.maximize ? 1 : 0);
}

void RMSprop::load_group_options(size_t group, const StateDict& in, const std::string& prefix) {
  RMSpropOptions o = options_[group];
  o.alpha = detail::load_option(name(), in, prefix + "alpha");
  o.eps = detail::load_option(name(), in, prefix + "eps");
  o.weight_decay = detail::load_option(name(), in, prefix + "weight_decay");
  o.momentum = detail::load_option(name(), in, prefix + "momentum");
  o.centered = detail::load_option(name(), in, prefix + "centered") != 0;
  o.maximize = detail::load_option(name(), in, prefix + "maximize") != 0;
  validate(o, ".load_state_dict");
  options_[group] = o;
}

// ---- Adagrad ----

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<Group>{Group{std::move(params), options}}) {}

Adagrad::Adagrad(std::vector<Group> groups) : Optimizer("Adagrad", group_params(groups), {"sum"}, true) {
  for (const auto& g : groups) options_.push_back(g.options);
}

const AdagradOptions& Adagrad::options(size_t group) const {
  check_group(group, "options");
  return options_[group];
}

void Adagrad::set_options(const AdagradOptions& options, size_t group) {
  check_group(group, "set_options");
  validate(options, ".set_options");
  options_[group] = options;
}

void Adagrad::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const AdagradOptions& o = options_[g];
    const auto& group = params(g);
    for (size_t k = 0; k < group.size(); ++k) {
      const Tensor& p = group[k];
      if (!p.grad().defined()) continue;
      ParamState& s = param_state(param_number(g, k));
      const TensorOptions opts = state_options(p);
      if (s.buffers.empty()) {
        s.buffers = {full(p.sizes(), o.initial_accumulator_value, opts)};
        s.step = 0;
      }
      const int64_t t = s.step + 1;
      const Tensor grad = effective_grad(p, opts.dtype_, o.maximize, o.weight_decay);
      const double clr = o.lr / (1 + double(t - 1) * o.lr_decay);
      Tensor& sum = s.buffers[0];
      sum.add_(grad.mul(grad));
      Tensor std = sum.sqrt().add_(o.eps);
      apply_update(p, grad.div(std), -clr);
      s.step = t;
    }
  }
}

void Adagrad::save_group_options(size_t group, StateDict& out, const std::string& prefix) const {
  const AdagradOptions& o = options_[group];
  out.set_scalar(prefix + "lr_decay", o.lr_decay);
  out.set_scalar(prefix + "weight_decay", o.weight_decay);
  out.set_scalar(prefix + "initial_accumulator_value", o.initial_accumulator_value);
  out.set_scalar(prefix + "eps", o.eps);
  out.set_scalar(prefix + "maximize", o.maximize ? 1 : 0);
}

void Adagrad::load_group_options(size_t group, const StateDict& in, const std::string& prefix) {
  AdagradOptions o = options_[group];
  o.lr_decay = detail::load_option(name(), in, prefix + "lr_decay");
  o.weight_decay = detail::load_option(name(), in, prefix + "weight_decay");
  o.initial_accumulator_value = detail::load_option(name(), in, prefix + "initial_accumulator_value");
  o.eps = detail::load_option(name(), in, prefix + "eps");
  o.maximize = detail::load_option(name(), in, prefix + "maximize") != 0;
  validate(o, ".load_state_dict");
  options_[group] = o;
}

}  // namespace ember::optim
