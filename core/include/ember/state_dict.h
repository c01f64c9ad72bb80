// StateDict: an insertion-ordered map from names to tensors, the one currency of saved state.
// Modules ("fc1.weight"), optimizers ("state.0.exp_avg", "param_groups.0.lr") and schedulers
// all flatten their state into it, so io/ writes any of them as one safetensors file and a
// checkpoint is a folder of such files. Scalars are stored as 0-dim tensors (f64 or i64).
#pragma once

#include <map>
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

// Note [sharded state]: a tensor divided over ranks is saved as pieces, each the elements
// [begin, begin + numel) of the tensor flattened row-major. A state saved by W ranks loads on
// any number: each rank reads, for every piece it holds now, the saved pieces that overlap it.
// fully_shard writes its shards and their optimizer state this way
// (FSDPModule::sharded_state_dict), io stores them (io::save_sharded_checkpoint) and reads them
// back as a ShardedSource.
struct TensorPiece {
  Shape shape;         // the whole tensor's
  int64_t begin = 0;   // the piece's first element in it
};

// This rank's pieces: 1-D tensors, each with its place in the whole tensor.
struct ShardedStateDict {
  StateDict pieces;
  std::map<std::string, TensorPiece> layout;  // one entry per piece
  // Adds `piece` (any shape: its elements in row-major order) as elements [begin, ...) of a
  // tensor of `shape`.
  void insert(std::string key, const Tensor& piece, Shape shape, int64_t begin);
  // A whole tensor is the piece that starts at 0.
  void insert_whole(std::string key, const Tensor& t) { insert(std::move(key), t, t.sizes(), 0); }
};

// Where a sharded state is read from (a sharded checkpoint folder, several ShardedStateDicts).
class ShardedSource {
 public:
  virtual ~ShardedSource() = default;
  virtual bool contains(const std::string& key) const = 0;
  virtual std::vector<std::string> keys() const = 0;  // sorted
  // The whole tensor's shape (ValueError for an unknown key).
  virtual Shape shape(const std::string& key) const = 0;
  // Elements [begin, begin + numel) of `key` flattened, a 1-D tensor on the CPU; throws when the
  // saved pieces do not cover them.
  virtual Tensor read(const std::string& key, int64_t begin, int64_t numel) const = 0;
};

}  // namespace ember
