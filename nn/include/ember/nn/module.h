// nn::Module: the base of every layer and model. A module owns named parameters (leaf tensors
// that require grad), named buffers (state that is saved but not trained, e.g. running
// statistics) and named submodules, and gives recursive access to all of them: parameters(),
// state_dict(), to(device), train()/eval(), zero_grad().
//
//   struct Net : nn::Module {
//     nn::Linear fc1{784, 512}, fc2{512, 10};
//     Net() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     Tensor forward(const Tensor& x) { return fc2(nn::functional::relu(fc1(x.flatten(1)))); }
//   };
//
// Invariants:
// - Parameters and buffers are held as Tensor handles; to() changes them in place with
//   Tensor::set_data, so every other handle (the layer's own `weight` member, an optimizer)
//   keeps seeing the same tensor.
// - parameters() lists each tensor once (a weight shared by two modules, e.g. a tied
//   embedding, is trained once); state_dict() lists it under every name, as PyTorch does.
// - Note [Module relocation]: a submodule that is a data member is registered by reference
//   and remembered as its byte offset from this Module, not as a pointer, so a module stays
//   valid when it is moved (nn::Sequential(nn::Linear(2, 3), ...) moves its layers into
//   place). Only members may be registered that way; any other module is registered as a
//   std::shared_ptr and owned.
//
// Note [calling a module]: `net(x)` works for any module whose class defines
// `Tensor forward(const Tensor&)`, const or not, with no operator() of its own. Module declares
// forward(const Tensor&) twice, virtual: a user's non-const forward overrides the non-const
// one, a const forward (every built-in layer's) overrides the const one, and the non-const
// default forwards to the const one, so Module::operator() (and a call through a Module&, as
// in Sequential or ModuleList) reaches whichever the class defined; with neither, the const
// default throws "[Net] has no forward(const Tensor&)". (Without deducing this (C++23) or a
// CRTP base, a virtual is the only way from Module::operator() to Net::forward.) A forward
// with other arguments, forward(x, mask), hides these two and is called as net.forward(x,
// mask) or through an operator() of the class's own; `using nn::Module::forward;` in the
// class silences clang's -Woverloaded-virtual about the hiding. A one-argument forward must
// return Tensor: `std::pair<Tensor, Tensor> forward(const Tensor&)` does not compile ("conflicting
// return type" against the virtual); give such a forward another name or a second parameter.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember/state_dict.h"
#include "ember/tensor.h"

namespace ember::nn {

namespace detail {
// How PyTorch prints a bool in a module's repr ("bias=True").
inline const char* py_bool(bool b) { return b ? "True" : "False"; }
// How PyTorch prints a tuple of sizes: "(768,)", "(2, 3)".
template <class Sizes>
std::string py_tuple(const Sizes& sizes) {
  std::string s = "(";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + (sizes.size() == 1 ? ",)" : ")");
}
}  // namespace detail

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&& other) noexcept;
  Module& operator=(Module&&) = delete;

  // ---- registration (names: non-empty, no '.', unique within this module) ----
  // Returns a handle to the registered tensor (keep it as the layer's member).
  Tensor register_parameter(std::string name, Tensor value, bool requires_grad = true);
  Tensor register_buffer(std::string name, Tensor value);
  // A module that is a data member of this one (see Note [Module relocation]).
  template <class M>
  M& register_module(std::string name, M& member) {
    add_member_child(std::move(name), static_cast<Module&>(member));
    return member;
  }
  // Any other module: shared ownership.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_owned_child(std::move(name), module);
    return module;
  }

  // ---- access (recursive by default; depth-first in registration order) ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Module*> children() const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  // This module (named "") and all below it, pre-order, with dotted names.
  std::vector<std::pair<std::string, Module*>> named_modules() const;
  // The number of distinct parameter elements.
  int64_t num_parameters() const;
  // Calls fn on every module below this one and then on this one.
  void apply(const std::function<void(Module&)>& fn);

  // ---- state ----
  // Moves parameters and buffers (in place; see the invariants above). to(dtype) converts
  // only floating-point tensors, as PyTorch does.
  Module& to(Device device);
  Module& to(DType dtype);
  Module& to(Device device, DType dtype);
  // PyTorch's module.double() / .float() / .half() / .bfloat16() (C++ keywords take a '_').
  Module& double_() { return to(DType::f64); }
  Module& float_() { return to(DType::f32); }
  Module& half() { return to(DType::f16); }
  Module& bfloat16() { return to(DType::bf16); }
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  // Drops (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  // Parameters and buffers under dotted names ("fc1.weight"), detached and sharing storage.
  StateDict state_dict() const;
  // Copies values in (converting dtype and device to the module's). With strict, a missing
  // or unexpected key is an error listing every such key; a shape mismatch always is.
  void load_state_dict(const StateDict& state, bool strict = true);

  // ---- calling (Note [calling a module]) ----
  virtual Tensor forward(const Tensor& x);
  virtual Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) { return call(x, [&](const Tensor& in) { return forward(in); }); }
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }

  // ---- forward hooks (torch.nn.Module.register_forward_pre_hook / register_forward_hook) ----
  // Pre-hooks run before the module's forward and may replace its input (return it; an
  // undefined Tensor keeps it), hooks run after it and may replace its output, in
  // registration order, whenever the module is called through operator() or call(). A
  // forward with other arguments runs them as call(x, [&](const Tensor& in) { return
  // forward(in, mask); }), or call([&] { ... }) when it has no one input (its pre-hooks see
  // an undefined input and may not replace it). A model that fuses work across its layers'
  // boundaries (GPT's trunk) calls its layers one by one, through call(), while any of them
  // has hooks. fully_shard (ember/distributed/fsdp.h) hangs its parameter gathering on them,
  // tensor parallelism (ember/distributed/tensor_parallel.h) its collectives. A hook that
  // throws propagates the exception out of the call.
  using ForwardPreHook = std::function<Tensor(const Module&, const Tensor& input)>;
  using ForwardHook = std::function<Tensor(const Module&, const Tensor& output)>;
  void register_forward_pre_hook(ForwardPreHook hook);
  void register_forward_hook(ForwardHook hook);
  bool has_forward_hooks() const { return !forward_pre_hooks_.empty() || !forward_hooks_.empty(); }
  // Runs fn(input) (this module's forward) between the hooks.
  template <class F>
  Tensor call(const Tensor& input, F&& fn) const {
    if (!has_forward_hooks()) [[likely]]
      return fn(input);
    Tensor x = input;
    for (const ForwardPreHook& h : forward_pre_hooks_)
      if (Tensor r = h(*this, x); r.defined()) x = std::move(r);
    return run_forward_hooks(fn(x));
  }
  template <class F>
  Tensor call(F&& fn) const {
    if (!has_forward_hooks()) [[likely]]
      return fn();
    for (const ForwardPreHook& h : forward_pre_hooks_)
      if (h(*this, Tensor()).defined()) throw_replaced_missing_input();
    return run_forward_hooks(fn());
  }

  // ---- printing ----
  // The layer's name in repr(): the class name by default ("Net"), "Linear" for nn::Linear.
  virtual std::string type_name() const;
  // What goes between the parentheses of a leaf's repr: "in_features=784, out_features=512".
  virtual std::string extra_repr() const { return {}; }
  // PyTorch's module printout: the type, then one indented line per submodule.
  std::string repr() const;

 private:
  struct Child {
    std::string name;
    std::ptrdiff_t member_offset = 0;  // when owned == nullptr: a member at this + offset
    std::shared_ptr<Module> owned;
  };
  void check_new_name(const char* what, const std::string& name) const;
  void add_member_child(std::string name, Module& member);
  void add_owned_child(std::string name, std::shared_ptr<Module> module);
  Module* child_ptr(const Child& c) const;
  Tensor run_forward_hooks(Tensor out) const;
  [[noreturn]] void throw_replaced_missing_input() const;
  template <class F>
  void visit_tensors(const std::string& prefix, bool recurse, bool buffers, F&& fn) const;
  void convert(const std::function<Tensor(const Tensor&)>& fn);

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<Child> children_;
  std::vector<ForwardPreHook> forward_pre_hooks_;
  std::vector<ForwardHook> forward_hooks_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace ember::nn
