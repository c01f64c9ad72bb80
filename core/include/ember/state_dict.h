// StateDict: an insertion-ordered map from names to tensors, the one currency of saved state.
// Modules ("fc1.weight"), optimizers ("state.0.exp_avg", "param_groups.0.lr") and schedulers
// all flatten their state into it, so io/ writes any of them as one safetensors file and a
// checkpoint is a folder of such files. Scalars are stored as 0-dim tensors (f64 or i64).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember {

class StateDict {
 public:
  using Item = std::pair<std::string, Tensor>;

  // Appends `key`; a key that is already present is an error (two modules with one name).
  void insert(std::string key, Tensor value);
  // Inserts or replaces, keeping the original position of a replaced key.
  void set(std::string key, Tensor value);
  bool contains(std::string_view key) const { return index_.count(std::string(key)) != 0; }
  // Throws ValueError naming the key when it is missing.
  const Tensor& at(std::string_view key) const;
  const Tensor* find(std::string_view key) const;
  // Scalars stored as 0-dim tensors.
  void set_scalar(std::string key, double value);
  void set_int(std::string key, int64_t value);
  double scalar(std::string_view key) const { return at(key).item<double>(); }
  int64_t integer(std::string_view key) const { return at(key).item<int64_t>(); }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const;
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  // The entries whose key starts with `prefix`, with the prefix removed ("fc1." -> "weight").
  StateDict sub(std::string_view prefix) const;

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace ember
