// Dataset's default batching and TensorDataset. Batches are built without gradient recording:
// a loader produces data, not graph nodes, and may run on worker threads.
#include "ember/data/dataset.h"

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::data {

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard no_grad;
  EMBER_CHECK(!indices.empty(), ValueError, "[Dataset] get_batch needs at least one index");
  TensorList data, targets;
  data.reserve(indices.size());
  targets.reserve(indices.size());
  for (int64_t i : indices) {
    Example e = get(i);
    data.push_back(std::move(e.data));
    targets.push_back(std::move(e.target));
  }
  return {stack(data), stack(targets)};
}

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  detail::check_defined("TensorDataset", data_, "data");
  detail::check_defined("TensorDataset", targets_, "targets");
  EMBER_CHECK(data_.dim() >= 1 && targets_.dim() >= 1, ShapeError,
              "[TensorDataset] data and targets need a leading example dimension, got shapes ",
              data_.sizes(), " and ", targets_.sizes());
  EMBER_CHECK(data_.size(0) == targets_.size(0), ShapeError, "[TensorDataset] data has ",
              data_.size(0), " examples (shape ", data_.sizes(), ") but targets has ",
              targets_.size(0), " (shape ", targets_.sizes(), ")");
  size_ = data_.size(0);
}

Example TensorDataset::get(int64_t index) const {
  NoGradGuard no_grad;
  EMBER_CHECK(index >= 0 && index < size_, IndexError, "[TensorDataset] index ", index,
              " is out of range for ", size_, " examples");
  return {data_.select(0, index), targets_.select(0, index)};
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  NoGradGuard no_grad;
  for (int64_t i : indices)
    EMBER_CHECK(i >= 0 && i < size_, IndexError, "[TensorDataset] index ", i,
                " is out of range for ", size_, " examples");
  const Tensor index = tensor(indices, Shape{int64_t(indices.size())});
  return {index_select(data_, 0, index.to(data_.device())),
          index_select(targets_, 0, index.to(targets_.device()))};
}

}  // namespace ember::data
