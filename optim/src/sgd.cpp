// SGD: validation, momentum-buffer bookkeeping and one fused ops::sgd_step_ call per group.
#include "ember/optim/sgd.h"

#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/ops/optim.h"

namespace ember::optim {

namespace {

void validate(const SGDOptions& o, const char* where) {
  EMBER_CHECK(o.lr >= 0, ValueError, "[SGD", where, "] invalid learning rate: ", o.lr);
  EMBER_CHECK(o.momentum >= 0, ValueError, "[SGD", where, "] invalid momentum value: ", o.momentum);
  EMBER_CHECK(o.weight_decay >= 0, ValueError, "[SGD", where, "] invalid weight_decay value: ",
              o.weight_decay);
  EMBER_CHECK(o.dampening == o.dampening, ValueError, "[SGD", where, "] dampening is NaN");
  EMBER_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), ValueError, "[SGD", where,
              "] Nesterov momentum requires a momentum and zero dampening (momentum ", o.momentum,
              ", dampening ", o.dampening, ")");
}

std::vector<std::vector<Tensor>> group_params(const std::vector<SGD::Group>& groups) {
  std::vector<std::vector<Tensor>> out;
  for (const auto& g : groups) {
    validate(g.options, "");
    out.push_back(g.params);
  }
  return out;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<Group>{Group{std::move(params), options}}) {}

SGD::SGD(std::vector<Group> groups)
    : Optimizer("SGD", group_params(groups), {"momentum_buffer"}, false) {
  for (const auto& g : groups) options_.push_back(g.options);
}

const SGDOptions& SGD::options(size_t group) const {
  check_group(group, "options");
  return options_[group];
}

void SGD::set_options(const SGDOptions& options, size_t group) {
  check_group(group, "set_options");
  validate(options, ".set_options");
  options_[group] = options;
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t g = 0; g < num_param_groups(); ++g) {
    const SGDOptions& o = options_[g];
    const bool momentum = o.momentum != 0;
    TensorList ps, gs, bufs;
    std::vector<uint8_t> first;
    std::vector<size_t> ids;
    const auto& group = params(g);
    for (size_t k = 0; k < group.size(); ++k) {
      const Tensor& p = group[k];
      if (!p.grad().defined()) continue;
      ps.push_back(p);
      gs.push_back(p.grad());
      ids.push_back(param_number(g, k));
      if (!momentum) continue;
      ParamState& s = param_state(ids.back());
      // A new buffer is only recorded after the update succeeded (it takes d on that step).
      first.push_back(s.buffers.empty() ? 1 : 0);
      bufs.push_back(s.buffers.empty()
                         ? empty(p.sizes(), TensorOptions(ops::optim_state_dtype(p.dtype())).device(p.device()))
                         : s.buffers[0]);
    }
    if (ps.empty()) continue;
    ops::sgd_step_(ps, gs, bufs, first,
                   {.lr = o.lr, .momentum = o.momentum, .dampening = o.dampening,
                    .weight_decay = o.weight_decay, .nesterov = o.nesterov, .maximize = o.maximize});
    if (momentum)
      for (size_t j = 0; j < ids.size(); ++j)
        if (first[j]) param_state(ids[j]).buffers = {bufs[j]};
  }
}

void SGD::save_group_options(size_t group, StateDict& out, const std::string& prefix) const {
  const SGDOptions& o = options_[group];
  out.set_scalar(prefix + "momentum", o.momentum);
  out.set_scalar(prefix + "dampening", o.dampening);
  out.set_scalar(prefix + "weight_decay", o.weight_decay);
  out.set_scalar(prefix + "nesterov", o.nesterov ? 1 : 0);
  out.set_scalar(prefix + "maximize", o.maximize ? 1 : 0);
}

void SGD::load_group_options(size_t group, const StateDict& in, const std::string& prefix) {
  SGDOptions o = options_[group];
  o.momentum = detail::load_option(name(), in, prefix + "momentum");
  o.dampening = detail::load_option(name(), in, prefix + "dampening");
  o.weight_decay = detail::load_option(name(), in, prefix + "weight_decay");
  o.nesterov = detail::load_option(name(), in, prefix + "nesterov") != 0;
  o.maximize = detail::load_option(name(), in, prefix + "maximize") != 0;
  validate(o, ".load_state_dict");
  options_[group] = o;
}

}  // namespace ember::optim
