#include "ember/storage.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/macros.h"
#include "ember/profiler.h"

namespace ember {

namespace {
// Sanitizer builds skip every host cache below, so use-after-free stays detectable.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kHostCachesEnabled = false;
#else
constexpr bool kHostCachesEnabled = true;
#endif

// Per-thread free lists of small host blocks, 64-byte aligned, in 64-byte size classes up
// to kMaxSmall bytes. One set serves both small tensor data (CpuAllocator) and the objects
// of every op (detail::small_object_alloc: tensor impls, storage headers, autograd nodes):
// without them the dispatch of a small op spends a third of its time in malloc and free.
// A block's size class alone decides where it comes from and goes (aligned_alloc / free),
// so one allocated with the lists may be freed without them: on another thread, under a
// sanitizer, or during a thread's exit after its lists are gone.
constexpr size_t kMaxSmall = 4096, kSmallStep = 64;
// Blocks kept per class: up to 256, and up to 64 KiB of them (4 MiB per thread at most).
constexpr size_t kSmallListBytes = 64 << 10, kSmallListMax = 256;

size_t small_rounded(size_t nbytes) { return (nbytes + kSmallStep - 1) & ~(kSmallStep - 1); }

struct SmallLists;
// The hot path reads only these two (trivially destructible, so readable at any point of a
// thread's exit, and EMBER_HOT_TLS: one load each): the thread's lists once made, and whether
// they are gone. The lists themselves are on the heap, owned by make()'s thread_local: its
// guard is too slow to pass through on every allocation, and 1.5 KiB of lists inside
// libember_core's TLS block would leave too little of glibc's static TLS surplus for a
// program that dlopens ember (a block with initial-exec variables must fit there whole).
EMBER_HOT_TLS thread_local SmallLists* t_small_lists = nullptr;
EMBER_HOT_TLS thread_local bool t_small_lists_gone = false;

struct SmallLists {
  std::vector<void*> lists[kMaxSmall / kSmallStep];
  ~SmallLists() {
    t_small_lists = nullptr;
    t_small_lists_gone = true;  // blocks freed later in this thread's exit bypass the lists
    for (auto& list : lists)
      for (void* p : list) std::free(p);
  }
  static std::vector<void*>* of(size_t rounded) {
    if (!kHostCachesEnabled) return nullptr;
    SmallLists* lists = t_small_lists;
    if (!lists) {
      if (t_small_lists_gone) return nullptr;
      lists = make();
      if (!lists) return nullptr;
    }
    return &lists->lists[rounded / kSmallStep - 1];
  }
  [[gnu::noinline]] static SmallLists* make() {
    // nothrow: small_free is noexcept; without memory for the lists, blocks bypass them.
    thread_local std::unique_ptr<SmallLists> owner{new (std::nothrow) SmallLists};
    t_small_lists = owner.get();
    return owner.get();
  }
  // The most blocks kept for a class (a table: a division per free showed in the dispatch).
  static size_t cap(size_t rounded) {
    static constexpr auto caps = [] {
      std::array<uint16_t, kMaxSmall / kSmallStep> c{};
      for (size_t i = 0; i < c.size(); ++i)
        c[i] = uint16_t(std::min(kSmallListMax, kSmallListBytes / ((i + 1) * kSmallStep)));
      return c;
    }();
    return caps[rounded / kSmallStep - 1];
  }
};

// A block of small_rounded(nbytes) bytes (0 < nbytes <= kMaxSmall), or nullptr when the
// system has none.
void* small_alloc(size_t nbytes) {
  const size_t rounded = small_rounded(nbytes);
  if (std::vector<void*>* list = SmallLists::of(rounded); list && !list->empty()) {
    void* p = list->back();
    list->pop_back();
    return p;
  }
  return std::aligned_alloc(kSmallStep, rounded);
}

void small_free(void* p, size_t nbytes) noexcept {
  const size_t rounded = small_rounded(nbytes);
  if (std::vector<void*>* list = SmallLists::of(rounded);
      list && list->size() < SmallLists::cap(rounded)) {
    try {
      list->push_back(p);
      return;
    } catch (...) {  // no room to remember it: free it instead
    }
  }
  std::free(p);
}

// 64-byte aligned host memory: a cache line, and enough for any SIMD load Eigen issues.
// Freed blocks are kept for reuse: small ones in the per-thread lists above, large ones in
// one shared cache of exact page-rounded sizes, up to kMaxLargeBytes in total: a training
// step allocates the same activation and gradient sizes every step, and without the cache
// each of them is a fresh mmap whose first touch page-faults (10-15% of an MNIST MLP step
// went to the kernel zeroing pages). release_cached_host_memory() frees the large ones.
// cpu_memory_stats(): live bytes and their peak, updated on every CPU allocation (relaxed
// atomics: a counter, not a synchronization; the peak is raised by compare-and-swap).
std::atomic<int64_t> g_cpu_allocated{0}, g_cpu_peak{0};
void count_cpu_bytes(int64_t delta) noexcept {
  const int64_t now = g_cpu_allocated.fetch_add(delta, std::memory_order_relaxed) + delta;
  int64_t peak = g_cpu_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_cpu_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    // Larger requests cannot exist, and rounding them to whole pages would wrap to 0.
    EMBER_CHECK(nbytes <= kMaxRequest, OutOfMemoryError, "[allocate] cannot allocate ",
                uint64_t(nbytes), " bytes of host memory (more than 2^63)");
    profiler::detail::note_host_alloc(int64_t(nbytes));  // profile_memory's CPU counter
    void* p = nbytes <= kMaxSmall ? small_alloc(nbytes) : take_large(large_rounded(nbytes));
    if (p == nullptr && kHostCachesEnabled) {  // the large cache may be what holds the memory
      release_large();
      p = nbytes <= kMaxSmall ? small_alloc(nbytes) : std::aligned_alloc(64, large_rounded(nbytes));
    }
    EMBER_CHECK(p != nullptr, OutOfMemoryError, "[allocate] cannot allocate ", uint64_t(nbytes),
                " bytes of host memory");
    count_cpu_bytes(int64_t(nbytes));
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    profiler::detail::note_host_alloc(-int64_t(nbytes));
    count_cpu_bytes(-int64_t(nbytes));
    if (nbytes <= kMaxSmall) {
      small_free(ptr, nbytes);
      return;
    }
    const size_t rounded = large_rounded(nbytes);
    if (kHostCachesEnabled) {
      std::lock_guard<std::mutex> lock(large_mutex_);
      if (large_bytes_ + rounded <= kMaxLargeBytes) {
        large_[rounded].push_back(ptr);
        large_bytes_ += rounded;
        return;
      }
    }
    std::free(ptr);
  }
  void release_large() {
    std::lock_guard<std::mutex> lock(large_mutex_);
    for (auto& [size, blocks] : large_)
      for (void* p : blocks) std::free(p);
    large_.clear();
    large_bytes_ = 0;
  }

 private:
  // Whole pages, so nearby sizes share a bin.
  static size_t large_rounded(size_t nbytes) { return (nbytes + 4095) & ~size_t(4095); }
  // A cached block of exactly `rounded` bytes, else a new one (nullptr when there is none).
  void* take_large(size_t rounded) {
    if (kHostCachesEnabled) {
      std::lock_guard<std::mutex> lock(large_mutex_);
      auto it = large_.find(rounded);
      if (it != large_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        large_bytes_ -= rounded;
        return p;
      }
    }
    return std::aligned_alloc(64, rounded);
  }
  static constexpr size_t kMaxLargeBytes = size_t(1) << 30;
  static constexpr size_t kMaxRequest = size_t(INT64_MAX);
  std::mutex large_mutex_;
  std::unordered_map<size_t, std::vector<void*>> large_;
  size_t large_bytes_ = 0;
};

CpuAllocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuAllocator* cpu = new CpuAllocator;
  return *cpu;
}
}  // namespace

void release_cached_host_memory() { cpu_allocator().release_large(); }

CpuMemoryStats cpu_memory_stats() {
  return {g_cpu_allocated.load(std::memory_order_relaxed), g_cpu_peak.load(std::memory_order_relaxed)};
}

void reset_peak_cpu_memory_stats() { g_cpu_peak.store(g_cpu_allocated.load(std::memory_order_relaxed), std::memory_order_relaxed); }

namespace detail {

void* small_object_alloc(size_t nbytes) {
  if (nbytes == 0 || nbytes > kMaxSmall) return ::operator new(nbytes);
  void* p = small_alloc(nbytes);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void small_object_free(void* p, size_t nbytes) noexcept {
  if (p == nullptr) return;
  if (nbytes == 0 || nbytes > kMaxSmall) ::operator delete(p);
  else small_free(p, nbytes);
}

}  // namespace detail

Allocator* allocator_for(Device device) {
  if (device.is_cpu()) return &cpu_allocator();
  return cuda::detail::allocator(device.index);
}

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

void Storage::release_memory() {
  EMBER_CHECK(allocator_ != nullptr, ValueError,
              "[Storage::release_memory] only storage ember allocated can be released (this one wraps "
              "memory owned elsewhere)");
  if (released_) return;
  allocator_->deallocate(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate() {
  if (!released_) return;
  data_ = allocator_->allocate(nbytes_);
  released_ = false;
}

Storage::~Storage() {
  if (released_) return;
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace ember
