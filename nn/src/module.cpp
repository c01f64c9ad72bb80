#include "ember/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <ostream>
#include <typeinfo>
#include <unordered_set>

#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::nn {

Module::Module(Module&& other) noexcept
    : params_(std::move(other.params_)),
      buffers_(std::move(other.buffers_)),
      children_(std::move(other.children_)),
      forward_pre_hooks_(std::move(other.forward_pre_hooks_)),
      forward_hooks_(std::move(other.forward_hooks_)),
      training_(other.training_) {}

void Module::check_new_name(const char* what, const std::string& name) const {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, ValueError, "[", what,
              "] invalid name '", name, "' in ", type_name(), ": names are non-empty and have no '.'");
  auto taken = [&](const auto& list) {
    for (const auto& item : list)
      if (item.first == name) return true;
    return false;
  };
  bool child_taken = false;
  for (const Child& c : children_) child_taken |= c.name == name;
  EMBER_CHECK(!taken(params_) && !taken(buffers_) && !child_taken, ValueError, "[", what, "] ",
              type_name(), " already has a parameter, buffer or submodule named '", name, "'");
}

Tensor Module::register_parameter(std::string name, Tensor value, bool requires_grad) {
  check_new_name("register_parameter", name);
  EMBER_CHECK(value.defined(), ValueError, "[register_parameter] '", name, "' is undefined");
  EMBER_CHECK(value.is_leaf(), AutogradError, "[register_parameter] '", name,
              "' was produced by an op; register a leaf (e.g. value.detach())");
  if (requires_grad) value.requires_grad_(true);
  params_.emplace_back(std::move(name), value);
  return value;
}

Tensor Module::register_buffer(std::string name, Tensor value) {
  check_new_name("register_buffer", name);
  EMBER_CHECK(value.defined(), ValueError, "[register_buffer] '", name, "' is undefined");
  buffers_.emplace_back(std::move(name), value);
  return value;
}

void Module::add_member_child(std::string name, Module& member) {
  check_new_name("register_module", name);
  EMBER_CHECK(&member != this, ValueError, "[register_module] a module cannot contain itself");
  const auto offset = reinterpret_cast<const char*>(&member) - reinterpret_cast<const char*>(this);
  // A data member lies after the Module base; anything else must be shared (see the header).
  EMBER_CHECK(offset > 0 && offset < (std::ptrdiff_t(1) << 20), ValueError, "[register_module] '",
              name, "' is not a data member of ", type_name(),
              "; register it as a std::shared_ptr instead");
  children_.push_back({std::move(name), offset, nullptr});
}

void Module::add_owned_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name("register_module", name);
  EMBER_CHECK(module != nullptr, ValueError, "[register_module] '", name, "' is null");
  children_.push_back({std::move(name), 0, std::move(module)});
}

Module* Module::child_ptr(const Child& c) const {
  if (c.owned) return c.owned.get();
  return reinterpret_cast<Module*>(const_cast<char*>(reinterpret_cast<const char*>(this)) +
                                   c.member_offset);
}

// Visits (dotted name, tensor) pairs of parameters or buffers, this module's first.
template <class F>
void Module::visit_tensors(const std::string& prefix, bool recurse, bool buffers, F&& fn) const {
  for (const auto& [name, t] : buffers ? buffers_ : params_) fn(prefix + name, t);
  if (!recurse) return;
  for (const Child& c : children_) child_ptr(c)->visit_tensors(prefix + c.name + ".", true, buffers, fn);
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  visit_tensors("", recurse, false, [&](std::string name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(name), t);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(std::move(t));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  visit_tensors("", recurse, true, [&](std::string name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.emplace_back(std::move(name), t);
  });
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(std::move(t));
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const Child& c : children_) out.emplace_back(c.name, child_ptr(c));
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const Child& c : children_) out.push_back(child_ptr(c));
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out{{"", const_cast<Module*>(this)}};
  for (const Child& c : children_)
    for (auto& [name, m] : child_ptr(c)->named_modules())
      out.emplace_back(name.empty() ? c.name : c.name + "." + name, m);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const Child& c : children_) child_ptr(c)->apply(fn);
  fn(*this);
}

// Converts every parameter and buffer once (shared ones too) in place, gradients along.
void Module::convert(const std::function<Tensor(const Tensor&)>& fn) {
  NoGradGuard no_grad;
  std::unordered_set<const TensorImpl*> done;
  auto visit = [&](const std::string&, const Tensor& t) {
    if (!done.insert(t.impl()).second) return;
    Tensor converted = fn(t);
    if (converted.is_same(t)) return;
    Tensor grad = t.grad();
    Tensor handle = t;
    handle.set_data(converted);
    if (grad.defined() && !handle.grad().defined()) handle.set_grad(fn(grad));
  };
  visit_tensors("", true, false, visit);
  visit_tensors("", true, true, visit);
}

Module& Module::to(Device device) {
  convert([&](const Tensor& t) { return t.device() == device ? t : t.to(device); });
  return *this;
}

Module& Module::to(DType dtype) {
  convert([&](const Tensor& t) {
    return !t.is_floating_point() || t.dtype() == dtype ? t : t.to(dtype);
  });
  return *this;
}

Module& Module::to(Device device, DType dtype) {
  to(device);
  return to(dtype);
}

Module& Module::train(bool on) {
  training_ = on;
  for (const Child& c : children_) child_ptr(c)->train(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      p.mutable_grad().zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  auto add = [&](std::string name, const Tensor& t) { out.insert(std::move(name), t.detach()); };
  // PyTorch's order: each module's parameters, then its buffers, then its children.
  std::function<void(const Module&, const std::string&)> walk = [&](const Module& m,
                                                                    const std::string& prefix) {
    for (const auto& [name, t] : m.params_) add(prefix + name, t);
    for (const auto& [name, t] : m.buffers_) add(prefix + name, t);
    for (const Child& c : m.children_) walk(*m.child_ptr(c), prefix + c.name + ".");
  };
  walk(*this, "");
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict mine = state_dict();
  std::string missing, unexpected;
  for (const auto& [name, t] : mine)
    if (!state.contains(name)) missing += (missing.empty() ? "'" : ", '") + name + "'";
  for (const auto& [name, t] : state)
    if (!mine.contains(name)) unexpected += (unexpected.empty() ? "'" : ", '") + name + "'";
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "[load_state_dict] state dict does not match " + type_name() + ":";
    if (!missing.empty()) msg += " missing keys " + missing + ";";
    if (!unexpected.empty()) msg += " unexpected keys " + unexpected + ";";
    throw ValueError(msg);
  }
  // Check every shape before copying anything, so a failed load changes nothing.
  for (const auto& [name, dst] : mine) {
    const Tensor* src = state.find(name);
    if (src == nullptr) continue;
    EMBER_CHECK(src->defined() && src->sizes() == dst.sizes(), ShapeError,
                "[load_state_dict] '", name, "': the module has shape ", dst.sizes(),
                " but the state dict has ", src->defined() ? str(src->sizes()) : "undefined");
  }
  NoGradGuard no_grad;
  for (const auto& [name, dst] : mine) {
    const Tensor* src = state.find(name);
    if (src != nullptr) Tensor(dst).copy_(*src);
  }
}

void Module::register_forward_pre_hook(ForwardPreHook hook) {
  EMBER_CHECK(hook, ValueError, "[register_forward_pre_hook] empty hook on ", type_name());
  forward_pre_hooks_.push_back(std::move(hook));
}

void Module::register_forward_hook(ForwardHook hook) {
  EMBER_CHECK(hook, ValueError, "[register_forward_hook] empty hook on ", type_name());
  forward_hooks_.push_back(std::move(hook));
}

Tensor Module::run_forward_hooks(Tensor out) const {
  for (const ForwardHook& h : forward_hooks_)
    if (Tensor r = h(*this, out); r.defined()) out = std::move(r);
  return out;
}

void Module::throw_replaced_missing_input() const {
  throw ValueError(str("[", type_name(), "] a forward pre-hook returned an input for a call without one input ",
                       "(call(fn)); call it as call(x, fn)"));
}

Tensor Module::forward(const Tensor& x) { return static_cast<const Module&>(*this).forward(x); }

Tensor Module::forward(const Tensor&) const {
  throw NotImplementedError(str("[", type_name(), "] has no forward(const Tensor&): define Tensor forward(const Tensor& x) "
                                "(const or not) in ", type_name(), ", or call its own forward with its arguments"));
}

std::string Module::type_name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // "ember::nn::Linear" -> "Linear"; "(anonymous namespace)::Net" -> "Net".
  const auto colon = name.rfind("::");
  return colon == std::string::npos ? name : name.substr(colon + 2);
}

std::string Module::repr() const {
  std::string out = type_name() + "(";
  const std::string extra = extra_repr();
  if (children_.empty()) return out + extra + ")";
  out += extra.empty() ? "\n" : extra + "\n";
  for (const Child& c : children_) {
    std::string child = child_ptr(c)->repr();
    // Indent the child's continuation lines by two spaces.
    for (size_t pos = child.find('\n'); pos != std::string::npos; pos = child.find('\n', pos + 3))
      child.replace(pos, 1, "\n  ");
    out += "  (" + c.name + "): " + child + "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

}  // namespace ember::nn
