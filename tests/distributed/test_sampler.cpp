// data::DistributedSampler: PyTorch's sharding rules, and global-batch equivalence with a
// single-process shuffling DataLoader (no communication: every rank's view is computed here).
#include <algorithm>
#include <set>

#include "dist_util.h"

using namespace ember;
using namespace ember::test;
using data::DistributedSampler;

TEST(DistributedSampler, PadsByRepeatingTheStartLikePyTorch) {
  // 10 indices on 3 replicas without shuffling: torch gives [0,3,6,9] [1,4,7,0] [2,5,8,1].
  const std::vector<std::vector<int64_t>> expected = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (int64_t r = 0; r < 3; ++r) {
    DistributedSampler s(10, {.num_replicas = 3, .rank = r, .shuffle = false});
    EXPECT_EQ(s.num_samples(), 4);
    EXPECT_EQ(s.total_size(), 12);
    EXPECT_EQ(s.indices(0), expected[size_t(r)]);
  }
  // drop_last: 3 each, the tail (9) dropped.
  DistributedSampler d(10, {.num_replicas = 3, .rank = 2, .shuffle = false, .drop_last = true});
  EXPECT_EQ(d.indices(0), (std::vector<int64_t>{2, 5, 8}));
  // More replicas than samples: padding wraps around.
  DistributedSampler w(2, {.num_replicas = 5, .rank = 4, .shuffle = false});
  EXPECT_EQ(w.indices(0), std::vector<int64_t>{0});
  EXPECT_THROW(DistributedSampler(10, {.num_replicas = 2, .rank = 2}), ValueError);
}

TEST(DistributedSampler, ShuffledShardsPartitionTheEpochAndChangeWithIt) {
  const int64_t n = 1000, R = 4;
  std::vector<int64_t> all;
  for (int64_t r = 0; r < R; ++r) {
    DistributedSampler s(n, {.num_replicas = R, .rank = r, .seed = 3});
    s.set_epoch(2);
    EXPECT_EQ(s.indices(), s.indices(2));
    EXPECT_NE(s.indices(2), s.indices(3));
    auto mine = s(2);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<int64_t> iota(n);
  for (int64_t i = 0; i < n; ++i) iota[size_t(i)] = i;
  EXPECT_EQ(all, iota);
}

TEST(DistributedSampler, RankBatchesTogetherAreTheSingleProcessBatches) {
  const int64_t n = 48, per_rank = 4, R = 3;
  Tensor xs = arange(n, DType::f32).reshape({n, 1});
  Tensor ys = arange(n, DType::i64);
  data::TensorDataset ds(xs, ys);
  data::DataLoader single(ds, {.batch_size = per_rank * R, .shuffle = true, .seed = 11});
  single.set_epoch(1);
  std::vector<std::set<int64_t>> global;
  for (auto& [x, y] : single) {
    auto v = y.to_vector<int64_t>();
    global.emplace_back(v.begin(), v.end());
  }
  std::vector<std::set<int64_t>> joined(global.size());
  for (int64_t r = 0; r < R; ++r) {
    data::DataLoader loader(ds, {.batch_size = per_rank,
                                 .sampler = DistributedSampler(n, {.num_replicas = R, .rank = r, .seed = 11})});
    loader.set_epoch(1);
    EXPECT_EQ(loader.size(), int64_t(global.size()));
    size_t k = 0;
    for (auto& [x, y] : loader) {
      for (int64_t v : y.to_vector<int64_t>()) joined[k].insert(v);
      ++k;
    }
  }
  EXPECT_EQ(joined, global);
}
