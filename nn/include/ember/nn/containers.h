// Containers of submodules, as torch.nn.ModuleList and torch.nn.ModuleDict. Like Sequential
// (layers.h) they own their modules through std::shared_ptr (a module passed by value is moved
// into one) and register them as submodules, so parameters(), state_dict(), to() and
// train()/eval() reach them under PyTorch's names ("layers.0.weight", "heads.cls.weight").
// Neither has a forward: the owner iterates and calls, `for (auto& m : layers) x = (*m)(x);`
// (any module with a one-argument forward is callable through Module&: Note [calling a module]).
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

namespace detail {
// A module argument as a shared_ptr: a shared_ptr as it is, a module moved into a new one.
template <class M>
auto to_shared(M&& module) {
  if constexpr (requires { typename std::decay_t<M>::element_type; }) {
    return std::shared_ptr<typename std::decay_t<M>::element_type>(std::forward<M>(module));
  } else {
    return std::make_shared<std::decay_t<M>>(std::forward<M>(module));
  }
}
// The module of `m` as an M, or an IndexError naming the container and the real type.
template <class M>
M& checked_cast(const char* container, const std::string& where, Module& m) {
  M* p = dynamic_cast<M*>(&m);
  EMBER_CHECK(p != nullptr, ValueError, "[", container, "] module ", where, " is a ", m.type_name(),
              ", not the requested type");
  return *p;
}
}  // namespace detail

// Modules named "0", "1", ... in insertion order.
//
//   nn::ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks.push_back(nn::Linear(64, 64));
//   for (auto& b : blocks) x = nn::functional::relu((*b)(x));
class ModuleList : public Module {
 public:
  using value_type = std::shared_ptr<Module>;
  using const_iterator = std::vector<std::shared_ptr<Module>>::const_iterator;

  ModuleList() = default;
  template <class... Ms>
    // (A single ModuleList argument is the move constructor's.)
    requires(sizeof...(Ms) > 1 || (sizeof...(Ms) == 1 && (!std::is_same_v<std::decay_t<Ms>, ModuleList> && ...)))
  explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  // Takes a module by value (moved into shared ownership) or as a shared_ptr; returns the
  // shared_ptr, typed.
  template <class M>
  auto push_back(M&& module) {
    auto p = detail::to_shared(std::forward<M>(module));
    register_module(std::to_string(modules_.size()), p);
    modules_.push_back(p);
    return p;
  }
  template <class M>
  auto append(M&& module) { return push_back(std::forward<M>(module)); }

  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // IndexError past the end.
  Module& operator[](size_t i) const;
  // The i-th module as an M (ValueError when it is another type).
  template <class M>
  M& at(size_t i) const {
    return detail::checked_cast<M>("ModuleList", std::to_string(i), (*this)[i]);
  }
  const_iterator begin() const { return modules_.begin(); }
  const_iterator end() const { return modules_.end(); }
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules under string keys, iterated in insertion order. A key is a submodule name:
// non-empty, no '.', and new (inserting an existing key is a ValueError; PyTorch would
// replace the module, which ember's registration does not support).
//
//   nn::ModuleDict heads;
//   heads.insert("cls", nn::Linear(64, 10));
//   Tensor logits = heads["cls"](h);
class ModuleDict : public Module {
 public:
  using value_type = std::pair<std::string, std::shared_ptr<Module>>;
  using const_iterator = std::vector<value_type>::const_iterator;

  ModuleDict() = default;
  template <class M>
  auto insert(std::string key, M&& module) {
    auto p = detail::to_shared(std::forward<M>(module));
    register_module(key, p);  // checks the name and that it is new
    items_.emplace_back(std::move(key), p);
    return p;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(const std::string& key) const;
  // IndexError for a missing key.
  Module& operator[](const std::string& key) const;
  template <class M>
  M& at(const std::string& key) const {
    return detail::checked_cast<M>("ModuleDict", "'" + key + "'", (*this)[key]);
  }
  std::vector<std::string> keys() const;
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }
  std::string type_name() const override { return "ModuleDict"; }

 private:
  std::vector<value_type> items_;
};

}  // namespace ember::nn
