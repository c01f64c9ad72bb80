// Dataset: random access to examples (data, target), the source a DataLoader draws batches
// from; TensorDataset wraps two tensors whose first dimension indexes the examples.
//
// Invariants:
// - get() and get_batch() are const and may be called from several loader worker threads at
//   once: an implementation must be thread-safe for concurrent reads (no hidden caches
//   without a lock).
// - get_batch(indices) equals stacking get(i) for i in indices along a new leading dim; the
//   default does exactly that, and subclasses override it only to do it faster.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/tensor.h"

namespace ember::data {

// One example, or a batch of them (leading batch dim). Binds as `auto& [x, y] = batch`.
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // Stacks get(i) for each index: data [B, ...] and target [B, ...].
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Examples are data[i] and targets[i] (views; get_batch gathers rows with one copy each).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_, targets_;
  int64_t size_ = 0;
};

}  // namespace ember::data
