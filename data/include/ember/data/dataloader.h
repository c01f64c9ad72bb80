// DataLoader: batches of a Dataset in a seeded order, loaded by background worker threads
// with bounded prefetch, optionally into pinned host memory.
//
//   data::DataLoader loader(train, {.batch_size = 128, .shuffle = true, .num_workers = 2,
//                                   .pin_memory = true});
//   for (auto& [x, y] : loader) { ... }
//
// Invariants:
// - The order of an epoch is a pure function of (dataset size, seed, epoch) (or whatever the
//   sampler returns for the epoch), never of num_workers or timing: workers take batches
//   round-robin and the consumer receives them strictly in order.
// - Each begin() starts one epoch: it uses epoch() and then advances it by one; set_epoch(e)
//   chooses the epoch the next begin() uses (as with PyTorch's DistributedSampler).
// - The worker threads belong to the iteration (the iterator), not to the loader: when the
//   iterator dies (loop finished, `break`, exception) the threads are stopped and joined.
//   Each worker holds at most `prefetch` batches loaded or loading ahead of the consumer.
// - An exception thrown while loading a batch (in a worker or in the calling thread) reaches
//   the consumer when it advances to that batch, as the same exception object; the iteration
//   then ends.
// - A loader built from an lvalue dataset refers to it (it must outlive the loader and its
//   iterations); one built from an rvalue or a shared_ptr shares ownership of it.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <type_traits>
#include <vector>

#include "ember/data/dataset.h"

namespace ember::data {

// The dataset indices one epoch visits, in order: a distributed sampler returns this rank's
// shard. Called on the consuming thread from begin() and size().
using Sampler = std::function<std::vector<int64_t>(int64_t epoch)>;

// A uniformly random permutation of [0, n), a pure function of (n, seed, epoch) (Philox
// driven Fisher-Yates): what a shuffling loader visits, and what a distributed sampler
// should shard so that every rank agrees on it.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

// Fields in torch.utils.data.DataLoader's argument order (tests/fixtures/make_options_order.py),
// so designated initializers written in PyTorch's order compile:
// {.batch_size = 64, .shuffle = true, .num_workers = 2, .pin_memory = true, .drop_last = true}.
struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;        // a new permutation(size, seed, epoch) each epoch
  Sampler sampler = nullptr;   // overrides the order; incompatible with shuffle
  int num_workers = 0;         // 0: load in the calling thread
  bool pin_memory = false;     // page-locked batches (a no-op without a CUDA device)
  bool drop_last = false;      // drop a final batch smaller than batch_size
  uint64_t seed = 0;           // the shuffle's seed (PyTorch: generator=torch.Generator().manual_seed(seed))
  int prefetch = 2;            // PyTorch's prefetch_factor: batches loaded or loading ahead, per worker (>= 1)
};

class DataLoader {
 public:
  class Iterator;
  struct Sentinel {};

  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // A temporary dataset is moved into shared ownership instead of dangling.
  template <class D>
    requires(std::derived_from<D, Dataset> && !std::is_reference_v<D>)
  DataLoader(D&& dataset, DataLoaderOptions options = {})
      : DataLoader(std::shared_ptr<const Dataset>(
                       std::make_shared<const std::remove_cv_t<D>>(std::move(dataset))),
                   std::move(options)) {}

  // Starts an epoch (threads and all) and loads its first batch.
  Iterator begin();
  Sentinel end() const { return {}; }
  // Batches per epoch (for the epoch the next begin() uses).
  int64_t size() const;
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

 private:
  std::vector<int64_t> indices(int64_t epoch) const;

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
};

// A move-only input iterator that owns one epoch: its order, its worker threads and the
// current batch.
class DataLoader::Iterator {
 public:
  using value_type = Example;
  using reference = Example&;
  using difference_type = std::ptrdiff_t;
  using iterator_category = std::input_iterator_tag;

  Iterator();
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();  // stops and joins the workers

  Example& operator*() const;
  Example* operator->() const { return &**this; }
  Iterator& operator++();
  void operator++(int) { ++*this; }
  // Index of the current batch in this epoch.
  int64_t batch_index() const;
  friend bool operator==(const Iterator& it, Sentinel) { return it.done(); }

 private:
  friend class DataLoader;
  struct Run;
  explicit Iterator(std::unique_ptr<Run> run);
  bool done() const;

  std::unique_ptr<Run> run_;
};

}  // namespace ember::data
