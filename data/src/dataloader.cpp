// DataLoader: the epoch plan (order, batches), the worker threads and their bounded queues.
//
// Note [Loader worker protocol]: with W workers, worker w loads batches w, w + W, w + 2W, ...
// in that order and appends each result (a batch or the exception it threw) to its own queue,
// never holding more than `prefetch` results queued or loading. The consumer wants batch k
// from queue k % W, whose front is exactly batch k because every worker delivers its batches
// in order and the consumer takes them in order. So the order never depends on timing, and a
// worker that failed on batch k has delivered every batch before it. Stopping sets `stop`
// under the lock and wakes everyone: a worker blocked on a full queue returns at once, one in
// the middle of get_batch returns after it. The consumer never waits on a worker that has
// stopped, because it only waits for a batch its worker has not yet delivered, and a worker
// stops delivering only after an error (the consumer then rethrows and waits no more) or
// after `stop` (set by the consumer itself, which then no longer fetches).
#include "ember/data/dataloader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "ember/grad_mode.h"
#include "ember/random.h"

namespace ember::data {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  EMBER_CHECK(n >= 0, ValueError, "[permutation] n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  // One Philox key per (seed, epoch); counter c yields 128 bits = two 64-bit draws. A draw r
  // maps to [0, i] as (r * (i + 1)) >> 64 (Lemire), whose bias (< n / 2^64) is negligible.
  const uint64_t key = splitmix64(seed ^ splitmix64(uint64_t(epoch)));
  uint32_t w[4];
  uint64_t draws[2];
  for (int64_t i = n - 1, step = 0; i > 0; --i, ++step) {
    if (step % 2 == 0) {
      Philox::draw(key, uint64_t(step / 2), w);
      draws[0] = (uint64_t(w[0]) << 32) | w[1];
      draws[1] = (uint64_t(w[2]) << 32) | w[3];
    }
    const uint64_t r = draws[step % 2];
    const auto j = int64_t((unsigned __int128)r * uint64_t(i + 1) >> 64);
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

// ---- one epoch ----

struct DataLoader::Iterator::Run {
  struct Result {
    Example batch;
    std::exception_ptr error;
  };

  std::shared_ptr<const Dataset> dataset;
  std::vector<int64_t> order;
  int64_t batch_size = 1;
  int64_t num_batches = 0;
  bool pin = false;
  int64_t prefetch = 1;

  int64_t current_index = 0;  // the batch `current` holds; == num_batches when done
  Example current;

  std::mutex mutex;
  std::condition_variable space;  // a worker's queue has room, or stop
  std::condition_variable ready;  // a worker delivered a result
  std::vector<std::deque<Result>> queues;
  bool stop = false;
  std::vector<std::thread> workers;

  ~Run() { shut_down(); }

  Example load(int64_t k) const {
    NoGradGuard no_grad;
    const int64_t begin = k * batch_size;
    const int64_t end = std::min<int64_t>(begin + batch_size, int64_t(order.size()));
    std::vector<int64_t> indices(order.begin() + begin, order.begin() + end);
    Example batch = dataset->get_batch(indices);
    if (pin) {
      if (batch.data.defined()) batch.data = batch.data.pin_memory();
      if (batch.target.defined()) batch.target = batch.target.pin_memory();
    }
    return batch;
  }

  void start(int num_workers) {
    queues.resize(size_t(num_workers));
    workers.reserve(size_t(num_workers));
    try {
      for (int w = 0; w < num_workers; ++w) workers.emplace_back([this, w] { work(w); });
    } catch (...) {  // e.g. the system refused a thread: stop those already running
      shut_down();
      throw;
    }
  }

  void work(int w) {
    const auto W = int64_t(queues.size());
    auto& queue = queues[size_t(w)];
    for (int64_t k = w; k < num_batches; k += W) {
      {
        std::unique_lock lock(mutex);
        space.wait(lock, [&] { return stop || int64_t(queue.size()) < prefetch; });
        if (stop) return;
      }
      Result r;
      try {
        r.batch = load(k);
      } catch (...) {
        r.error = std::current_exception();
      }
      const bool failed = bool(r.error);
      {
        std::lock_guard lock(mutex);
        if (stop) return;
        queue.push_back(std::move(r));
      }
      ready.notify_one();
      if (failed) return;  // the consumer rethrows at batch k and goes no further
    }
  }

  // Batch k, loaded here or taken from its worker; rethrows what loading it threw.
  Example fetch(int64_t k) {
    if (workers.empty()) return load(k);
    auto& queue = queues[size_t(k % int64_t(queues.size()))];
    Result r;
    {
      std::unique_lock lock(mutex);
      ready.wait(lock, [&] { return !queue.empty(); });
      r = std::move(queue.front());
      queue.pop_front();
    }
    space.notify_all();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.batch);
  }

  // Moves to batch k (or to the end); on failure the epoch ends before the error propagates.
  void advance(int64_t k) {
    current = Example{};  // release the previous batch before loading the next
    if (k >= num_batches) {
      current_index = num_batches;
      shut_down();
      return;
    }
    try {
      current = fetch(k);
      current_index = k;
    } catch (...) {
      current_index = num_batches;
      shut_down();
      throw;
    }
  }

  void shut_down() noexcept {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    space.notify_all();
    for (auto& t : workers)
      if (t.joinable()) t.join();
    workers.clear();
    queues.clear();  // drop prefetched batches now, not when the iterator dies
  }
};

DataLoader::Iterator::Iterator() = default;
DataLoader::Iterator::Iterator(std::unique_ptr<Run> run) : run_(std::move(run)) {}
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

bool DataLoader::Iterator::done() const { return !run_ || run_->current_index >= run_->num_batches; }

int64_t DataLoader::Iterator::batch_index() const { return run_ ? run_->current_index : 0; }

Example& DataLoader::Iterator::operator*() const {
  EMBER_CHECK(!done(), IndexError, "[DataLoader] dereferencing an iterator past the last batch");
  return run_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  EMBER_CHECK(!done(), IndexError, "[DataLoader] advancing an iterator past the last batch");
  run_->advance(run_->current_index + 1);
  return *this;
}

// ---- the loader ----

DataLoader::DataLoader(const Dataset& dataset, DataLoaderOptions options)
    // Not owned: the caller keeps the dataset alive (an empty deleter).
    : DataLoader(std::shared_ptr<const Dataset>(&dataset, [](const Dataset*) {}),
                 std::move(options)) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  EMBER_CHECK(dataset_ != nullptr, ValueError, "[DataLoader] the dataset is null");
  EMBER_CHECK(options_.batch_size >= 1, ValueError, "[DataLoader] batch_size must be >= 1, got ",
              options_.batch_size);
  EMBER_CHECK(options_.num_workers >= 0, ValueError,
              "[DataLoader] num_workers must be >= 0, got ", options_.num_workers);
  EMBER_CHECK(options_.prefetch >= 1, ValueError, "[DataLoader] prefetch must be >= 1, got ",
              options_.prefetch);
  EMBER_CHECK(!(options_.sampler && options_.shuffle), ValueError,
              "[DataLoader] shuffle and sampler are mutually exclusive (the sampler decides the "
              "order)");
}

std::vector<int64_t> DataLoader::indices(int64_t epoch) const {
  const int64_t n = dataset_->size();
  if (options_.sampler) {
    std::vector<int64_t> idx = options_.sampler(epoch);
    for (int64_t i : idx)
      EMBER_CHECK(i >= 0 && i < n, IndexError, "[DataLoader] the sampler returned index ", i,
                  " for a dataset of ", n, " examples");
    return idx;
  }
  if (options_.shuffle) return permutation(n, options_.seed, epoch);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), int64_t(0));
  return idx;
}

int64_t DataLoader::size() const {
  const int64_t n =
      options_.sampler ? int64_t(options_.sampler(epoch_).size()) : dataset_->size();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  auto run = std::make_unique<Iterator::Run>();
  run->dataset = dataset_;
  run->order = indices(epoch_);
  run->batch_size = options_.batch_size;
  const auto n = int64_t(run->order.size());
  run->num_batches = options_.drop_last ? n / options_.batch_size
                                        : (n + options_.batch_size - 1) / options_.batch_size;
  run->pin = options_.pin_memory;
  run->prefetch = options_.prefetch;
  ++epoch_;
  // More workers than batches would only idle.
  const auto workers = int(std::min<int64_t>(options_.num_workers, run->num_batches));
  if (workers > 0) run->start(workers);
  run->advance(0);
  return Iterator(std::move(run));
}

}  // namespace ember::data
