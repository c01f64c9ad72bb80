// DistributedSampler: this rank's share of an epoch, torch.utils.data.DistributedSampler's
// rules, usable directly as a DataLoader sampler:
//
//   data::DistributedSampler sampler(train.size(), {.num_replicas = distributed::world_size(),
//                                                   .rank = distributed::rank(), .shuffle = true});
//   data::DataLoader loader(train, {.batch_size = 64, .sampler = sampler});
//   loader.set_epoch(epoch);   // the loader passes its epoch to the sampler
//
// Invariants:
// - The epoch's global order is permutation(size, seed, epoch) when shuffling (the very order
//   a single-process shuffling loader with that seed visits), else 0, 1, ..., size - 1.
// - Rank r takes the global positions r, r + R, r + 2R, ... (R = num_replicas). So with a
//   per-rank batch of b, batch k of every rank together is exactly global batch k of size R*b:
//   DDP on R ranks sees the batches a single process sees.
// - Every rank gets the same number of indices: without drop_last the order is padded by
//   repeating its first indices (as PyTorch); with drop_last its tail is dropped instead.
// - It lives in data (not distributed): it needs no communication, only the rank and count.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);

  // This rank's indices for `epoch` (also its call operator, so it converts to data::Sampler).
  std::vector<int64_t> indices(int64_t epoch) const;
  std::vector<int64_t> operator()(int64_t epoch) const { return indices(epoch); }
  // For use without a DataLoader (PyTorch's sampler.set_epoch); a DataLoader passes its own
  // epoch (DataLoader::set_epoch) to the call operator instead.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }

  int64_t num_samples() const { return num_samples_; }  // per rank
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
  int64_t epoch_ = 0;
};

}  // namespace ember::data
