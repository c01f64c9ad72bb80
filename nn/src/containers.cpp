#include "ember/nn/containers.h"

namespace ember::nn {

Module& ModuleList::operator[](size_t i) const {
  EMBER_CHECK(i < modules_.size(), IndexError, "[ModuleList] index ", i, " out of range for ",
              modules_.size(), " modules");
  return *modules_[i];
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [k, m] : items_)
    if (k == key) return true;
  return false;
}

Module& ModuleDict::operator[](const std::string& key) const {
  std::string known;
  for (const auto& [k, m] : items_) {
    if (k == key) return *m;
    known += (known.empty() ? "'" : ", '") + k + "'";
  }
  throw IndexError(str("[ModuleDict] no module under the key '", key, "' (keys: ", known, ")"));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, m] : items_) out.push_back(k);
  return out;
}

}  // namespace ember::nn
