// DistributedSampler (ember/data/distributed_sampler.h).
#include "ember/data/distributed_sampler.h"

#include <numeric>

#include "ember/data/dataloader.h"
#include "ember/error.h"

namespace ember::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : size_(dataset_size), options_(options) {
  const int64_t r = options.num_replicas;
  EMBER_CHECK(dataset_size >= 0, ValueError, "[DistributedSampler] dataset size must be >= 0, got ",
              dataset_size);
  EMBER_CHECK(r >= 1, ValueError, "[DistributedSampler] num_replicas must be >= 1, got ", r);
  EMBER_CHECK(options.rank >= 0 && options.rank < r, ValueError, "[DistributedSampler] rank ",
              options.rank, " is not in [0, ", r, ")");
  // PyTorch: drop_last keeps floor(n / r) per rank, otherwise ceil(n / r) with padding.
  num_samples_ = options.drop_last ? size_ / r : (size_ + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = permutation(size_, options_.seed, epoch);
  } else {
    order.resize(size_t(size_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  const int64_t total = total_size();
  if (total > size_ && size_ > 0) {  // pad by repeating the order from its start
    order.reserve(size_t(total));
    for (int64_t i = size_; i < total; ++i) order.push_back(order[size_t(i % size_)]);
  }
  order.resize(size_t(total));
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas) mine.push_back(order[size_t(i)]);
  return mine;
}

}  // namespace ember::data
