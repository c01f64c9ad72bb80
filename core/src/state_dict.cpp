#include "ember/state_dict.h"


namespace ember {

void StateDict::insert(std::string key, Tensor value) {
  EMBER_CHECK(!index_.count(key), ValueError, "[state_dict] duplicate key '", key, "'");
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

void StateDict::set(std::string key, Tensor value) {
  auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  insert(std::move(key), std::move(value));
}

const Tensor* StateDict::find(std::string_view key) const {
  auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Tensor& StateDict::at(std::string_view key) const {
  const Tensor* t = find(key);
  EMBER_CHECK(t != nullptr, ValueError, "[state_dict] missing key '", key, "'");
  return *t;
}

void StateDict::set_scalar(std::string key, double value) {
  Tensor t = detail::make_tensor({}, DType::f64, Device::cpu());
  *t.data_ptr<double>() = value;
  set(std::move(key), std::move(t));
}

void StateDict::set_int(std::string key, int64_t value) {
  Tensor t = detail::make_tensor({}, DType::i64, Device::cpu());
  *t.data_ptr<int64_t>() = value;
  set(std::move(key), std::move(t));
}

std::vector<std::string> StateDict::keys() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& [k, v] : items_) out.push_back(k);
  return out;
}

StateDict StateDict::sub(std::string_view prefix) const {
  StateDict out;
  for (const auto& [k, v] : items_)
    if (k.size() > prefix.size() && k.compare(0, prefix.size(), prefix) == 0)
      out.insert(k.substr(prefix.size()), v);
  return out;
}

}  // namespace ember

namespace ember {

void ShardedStateDict::insert(std::string key, const Tensor& piece, Shape shape, int64_t begin) {
  EMBER_CHECK(piece.defined(), ValueError, "[ShardedStateDict] '", key, "': undefined piece");
  EMBER_CHECK(begin >= 0 && begin + piece.numel() <= shape.numel(), ValueError, "[ShardedStateDict] '", key,
              "': elements [", begin, ", ", begin + piece.numel(), ") do not fit a tensor of shape ", shape);
  pieces.insert(key, piece);  // throws on a duplicate key
  layout[key] = TensorPiece{std::move(shape), begin};
}

}  // namespace ember
