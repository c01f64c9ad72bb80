// DataLoader: coverage and order of every epoch, independence from num_workers, drop_last,
// samplers, bounded prefetch, errors from workers, and clean shutdown on early exit.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include <ember/data.h>

#include "support/test_support.h"

using namespace ember;
using ember::test::message_of;

namespace {

// Example i is data [i, 10 i] (f32) and target i (i64). Counts loads, can fail at one index,
// and can be slow, to observe the workers from outside.
class Probe : public data::Dataset {
 public:
  explicit Probe(int64_t n, int64_t fail_at = -1, int sleep_us = 0)
      : n_(n), fail_at_(fail_at), sleep_us_(sleep_us) {}
  int64_t size() const override { return n_; }
  data::Example get(int64_t i) const override {
    ++loads;
    if (sleep_us_) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    EMBER_CHECK(i != fail_at_, ValueError, "[Probe] boom at ", i);
    return {tensor(std::vector<float>{float(i), float(10 * i)}), scalar_tensor(i, DType::i64)};
  }
  mutable std::atomic<int64_t> loads{0};

 private:
  int64_t n_, fail_at_;
  int sleep_us_;
};

// The targets of every batch of one pass, in order.
std::vector<std::vector<int64_t>> epoch_batches(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& [x, y] : loader) out.push_back(y.to_vector<int64_t>());
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> v;
  for (const auto& b : batches) v.insert(v.end(), b.begin(), b.end());
  return v;
}

TEST(Permutation, IsAPureFunctionOfSeedAndEpoch) {
  for (int64_t n : {0, 1, 2, 7, 1000}) {
    std::vector<int64_t> p = data::permutation(n, 42, 3);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> iota(static_cast<size_t>(n));
    std::iota(iota.begin(), iota.end(), int64_t(0));
    EXPECT_EQ(sorted, iota) << n;
    EXPECT_EQ(p, data::permutation(n, 42, 3));
  }
  EXPECT_NE(data::permutation(1000, 42, 3), data::permutation(1000, 42, 4));
  EXPECT_NE(data::permutation(1000, 42, 3), data::permutation(1000, 43, 3));
  // Roughly uniform: over many draws every position of a 4-permutation sees each value.
  std::vector<std::vector<int>> seen(4, std::vector<int>(4, 0));
  for (int e = 0; e < 4000; ++e) {
    auto p = data::permutation(4, 7, e);
    for (int i = 0; i < 4; ++i) ++seen[size_t(i)][size_t(p[size_t(i)])];
  }
  for (auto& row : seen)
    for (int c : row) EXPECT_NEAR(c, 1000, 150);
}

TEST(DataLoader, EveryIndexExactlyOnceAndBatchesEqualRows) {
  const int64_t n = 103;
  Tensor x = arange(n * 3, DType::f32).reshape({n, 3});
  Tensor y = arange(n, DType::i64).mul(Scalar(int64_t(2)));
  data::TensorDataset ds(x, y);
  for (int workers : {0, 1, 3}) {
    data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .num_workers = workers, .seed = 5});
    EXPECT_EQ(loader.size(), 11);
    std::vector<int64_t> seen;
    int64_t batches = 0;
    for (auto& [bx, by] : loader) {
      ASSERT_EQ(bx.dim(), 2);
      const int64_t b = bx.size(0);
      EXPECT_EQ(b, batches < 10 ? 10 : 3);
      ASSERT_EQ(by.sizes(), (Shape{b}));
      std::vector<float> xv = bx.to_vector<float>();
      std::vector<int64_t> yv = by.to_vector<int64_t>();
      for (int64_t r = 0; r < b; ++r) {
        const int64_t i = yv[size_t(r)] / 2;  // the example index, recovered from its target
        seen.push_back(i);
        for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(xv[size_t(r * 3 + c)], float(i * 3 + c));
      }
      ++batches;
    }
    EXPECT_EQ(batches, 11);
    std::sort(seen.begin(), seen.end());
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t(0));
    EXPECT_EQ(seen, all) << "num_workers " << workers;
  }
}

TEST(DataLoader, OrderIsReproducibleIndependentOfWorkersAndNewEachEpoch) {
  Probe ds(257);
  auto run = [&](int workers, uint64_t seed, int epochs) {
    data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .num_workers = workers,
                                 .seed = seed, .prefetch = 1 + workers});
    std::vector<std::vector<int64_t>> orders;
    for (int e = 0; e < epochs; ++e) {
      EXPECT_EQ(loader.epoch(), e);
      orders.push_back(flat(epoch_batches(loader)));
    }
    return orders;
  };
  auto w0 = run(0, 11, 3);
  EXPECT_EQ(w0, run(1, 11, 3));
  EXPECT_EQ(w0, run(3, 11, 3));
  EXPECT_NE(w0[0], w0[1]);
  EXPECT_NE(w0[1], w0[2]);
  EXPECT_NE(w0[0], run(0, 12, 1)[0]);
  // The order is permutation(size, seed, epoch); set_epoch replays an epoch.
  EXPECT_EQ(w0[1], data::permutation(257, 11, 1));
  data::DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 11});
  loader.set_epoch(2);
  EXPECT_EQ(flat(epoch_batches(loader)), w0[2]);
  EXPECT_EQ(loader.epoch(), 3);
}

TEST(DataLoader, WithoutShuffleTheOrderIsSequential) {
  Probe ds(25);
  data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 2});
  auto batches = epoch_batches(loader);
  ASSERT_EQ(batches.size(), 7u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[6], (std::vector<int64_t>{24}));
  std::vector<int64_t> all(25);
  std::iota(all.begin(), all.end(), int64_t(0));
  EXPECT_EQ(flat(batches), all);
}

TEST(DataLoader, DropLast) {
  Probe ds(103);
  for (int workers : {0, 2}) {
    data::DataLoader loader(ds, {.batch_size = 10, .shuffle = true, .num_workers = workers,
                                 .drop_last = true});
    EXPECT_EQ(loader.size(), 10);
    auto batches = epoch_batches(loader);
    ASSERT_EQ(batches.size(), 10u);
    for (auto& b : batches) EXPECT_EQ(b.size(), 10u);
    auto v = flat(batches);
    EXPECT_EQ(std::set<int64_t>(v.begin(), v.end()).size(), 100u);
    // The dropped three are the tail of the epoch's permutation.
    auto p = data::permutation(103, 0, loader.epoch() - 1);
    EXPECT_EQ(v, std::vector<int64_t>(p.begin(), p.begin() + 100));
  }
  Probe small(5);
  data::DataLoader none(small, {.batch_size = 10, .num_workers = 2, .drop_last = true});
  EXPECT_EQ(none.size(), 0);
  EXPECT_TRUE(epoch_batches(none).empty());
}

TEST(DataLoader, EmptyDatasetAndBadOptions) {
  Probe empty(0);
  data::DataLoader loader(empty, {.batch_size = 3, .shuffle = true, .num_workers = 2});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(epoch_batches(loader).empty());
  EXPECT_NE(message_of<ValueError>([&] { data::DataLoader l(empty, {.batch_size = 0}); })
                .find("batch_size must be >= 1"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { data::DataLoader l(empty, {.num_workers = -1}); })
                .find("num_workers"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { data::DataLoader l(empty, {.prefetch = 0}); })
                .find("prefetch"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] {
              data::DataLoader l(empty, {.shuffle = true,
                                         .sampler = [](int64_t) { return std::vector<int64_t>{}; }});
            }).find("mutually exclusive"),
            std::string::npos);
}

TEST(DataLoader, SamplerChoosesTheIndicesOfEachEpoch) {
  Probe ds(20);
  std::vector<int64_t> epochs_seen;
  // A shard in the style of a distributed sampler: every other index of the epoch's
  // permutation, starting at this "rank" (1).
  auto sampler = [&](int64_t epoch) {
    epochs_seen.push_back(epoch);
    auto p = data::permutation(20, 9, epoch);
    std::vector<int64_t> shard;
    for (size_t i = 1; i < p.size(); i += 2) shard.push_back(p[i]);
    return shard;
  };
  data::DataLoader loader(ds, {.batch_size = 4, .sampler = sampler, .num_workers = 2});
  EXPECT_EQ(loader.size(), 3);  // 10 indices
  loader.set_epoch(7);
  auto v = flat(epoch_batches(loader));
  auto p = data::permutation(20, 9, 7);
  std::vector<int64_t> expected;
  for (size_t i = 1; i < p.size(); i += 2) expected.push_back(p[i]);
  EXPECT_EQ(v, expected);
  EXPECT_EQ(epochs_seen.back(), 7);

  data::DataLoader bad(ds, {.sampler = [](int64_t) { return std::vector<int64_t>{3, 20}; }});
  EXPECT_NE(message_of<IndexError>([&] { bad.begin(); }).find("sampler returned index 20"),
            std::string::npos);
}

TEST(DataLoader, WorkerExceptionReachesTheConsumerWithItsMessage) {
  for (int workers : {0, 1, 3}) {
    Probe ds(100, /*fail_at=*/37);
    data::DataLoader loader(ds, {.batch_size = 5, .num_workers = workers});
    int64_t delivered = 0;
    const std::string msg = message_of<ValueError>([&] {
      for (auto& [x, y] : loader) {
        EXPECT_EQ(y.to_vector<int64_t>()[0], delivered * 5);
        ++delivered;
      }
    });
    EXPECT_NE(msg.find("[Probe] boom at 37"), std::string::npos) << msg;
    EXPECT_EQ(delivered, 7) << "every batch before the failing one arrives, in order";
    // The loader is reusable: a later epoch fails again at the same place, not before.
    EXPECT_NE(message_of<ValueError>([&] { for (auto& b : loader) (void)b; }).find("boom"),
              std::string::npos);
  }
}

TEST(DataLoader, PrefetchIsBoundedPerWorker) {
  Probe ds(1000);
  data::DataLoader loader(ds, {.batch_size = 1, .num_workers = 2, .prefetch = 3});
  // Waits (up to 10 s) until `loads` reaches n, then a little longer to see it stay there.
  auto settle = [&](int64_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (ds.loads < n && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return int64_t(ds.loads);
  };
  auto it = loader.begin();  // batch 0 is taken; each worker may run 3 batches ahead
  EXPECT_EQ(settle(7), 7) << "1 consumed + 2 workers x prefetch 3";
  ++it;  // frees a slot of worker 1, which loads one more
  EXPECT_EQ(settle(8), 8);
  EXPECT_EQ((*it).target.item<int64_t>(), 1);
}

TEST(DataLoader, EarlyBreakAndDestructionStopTheWorkers) {
  auto ds = std::make_shared<Probe>(100000, -1, /*sleep_us=*/200);
  {
    data::DataLoader loader(ds, {.batch_size = 2, .shuffle = true, .num_workers = 3, .prefetch = 2});
    int64_t k = 0;
    for (auto& [x, y] : loader) {
      EXPECT_EQ(x.size(0), 2);
      if (++k == 5) break;  // the iterator dies here: workers stop and join
    }
    const int64_t after_break = ds->loads;
    // At most: 5 batches consumed + (prefetch + the one loading) per worker, 2 examples each.
    EXPECT_LE(after_break, 2 * (5 + 3 * 2));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(ds->loads, after_break) << "no worker still runs after the break";

    // An iterator that outlives its loader keeps working, and stops its threads when it dies.
    auto owner = std::make_unique<data::DataLoader>(
        std::static_pointer_cast<const data::Dataset>(ds), data::DataLoaderOptions{.batch_size = 3, .num_workers = 2});
    auto it = owner->begin();
    owner.reset();
    ++it;
    EXPECT_EQ((*it).target.to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5}));
  }
  const int64_t at_exit = ds->loads;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(ds->loads, at_exit);
  // Many short-lived iterations in a row neither hang nor leak threads.
  data::DataLoader loader(ds, {.batch_size = 1, .num_workers = 4, .prefetch = 4});
  for (int r = 0; r < 50; ++r) {
    auto it = loader.begin();
    if (r % 2) ++it;
  }
}

TEST(DataLoader, OwnsATemporaryDataset) {
  Tensor x = arange(12, DType::f32).reshape({6, 2});
  Tensor y = arange(6, DType::i64);
  data::DataLoader loader(data::TensorDataset(x, y), {.batch_size = 4, .num_workers = 1});
  auto batches = epoch_batches(loader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(loader.dataset().size(), 6);
}

TEST(DataLoader, PinMemoryBatchesHoldTheSameValues) {
  Probe ds(10);
  data::DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .pin_memory = true});
  int64_t first = 0;
  for (auto& [x, y] : loader) {
    EXPECT_EQ(x.is_pinned(), cuda::is_available());
    EXPECT_EQ(y.is_pinned(), cuda::is_available());
    std::vector<int64_t> yv = y.to_vector<int64_t>();
    std::vector<float> xv = x.to_vector<float>();
    for (size_t r = 0; r < yv.size(); ++r) {
      EXPECT_EQ(yv[r], first + int64_t(r));
      EXPECT_EQ(xv[2 * r + 1], float(10 * yv[r]));
    }
    first += int64_t(yv.size());
  }
  EXPECT_EQ(first, 10);
}

TEST(Dataset, DefaultGetBatchStacksAndTensorDatasetChecksShapes) {
  Probe ds(6);
  data::Example b = ds.get_batch({5, 1});
  EXPECT_EQ(b.data.sizes(), (Shape{2, 2}));
  EXPECT_EQ(b.data.to_vector<float>(), (std::vector<float>{5, 50, 1, 10}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{5, 1}));

  Tensor x = arange(12, DType::f32).reshape({4, 3});
  data::TensorDataset td(x, arange(4, DType::i64));
  data::Example e = td.get(2);
  EXPECT_EQ(e.data.to_vector<float>(), (std::vector<float>{6, 7, 8}));
  EXPECT_EQ(e.target.item<int64_t>(), 2);
  data::Example tb = td.get_batch({3, 0});
  EXPECT_EQ(tb.data.to_vector<float>(), (std::vector<float>{9, 10, 11, 0, 1, 2}));
  EXPECT_EQ(message_of<IndexError>([&] { td.get_batch({4}); }).find("[TensorDataset] index 4"), 0u);
  EXPECT_NE(message_of<ShapeError>([&] { data::TensorDataset(x, arange(3, DType::i64)); })
                .find("data has 4 examples"),
            std::string::npos);
}

}  // namespace

static_assert(std::input_iterator<ember::data::DataLoader::Iterator>);
static_assert(std::sentinel_for<ember::data::DataLoader::Sentinel, ember::data::DataLoader::Iterator>);
