#include "ember/storage.h"

#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "ember/cuda.h"
#include "ember/error.h"
#include "ember/profiler.h"

namespace ember {

namespace {
// Sanitizer builds skip every host cache below, so use-after-free stays detectable.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kHostCachesEnabled = false;
#else
constexpr bool kHostCachesEnabled = true;
#endif

// 64-byte aligned host memory: a cache line, and enough for any SIMD load Eigen issues.
// Freed blocks are kept for reuse, in two caches:
// - small blocks (up to kMaxSmall bytes) in per-thread free lists: without them, the
//   dispatch of a small op spends a third of its time in aligned_alloc and free;
// - large blocks in one shared cache of exact page-rounded sizes, up to kMaxLargeBytes in
//   total: a training step allocates the same activation and gradient sizes every step, and
//   without the cache each of them is a fresh mmap whose first touch page-faults (10-15% of
//   an MNIST MLP step went to the kernel zeroing pages). release_cached_host_memory() frees it.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    profiler::detail::note_host_alloc(int64_t(nbytes));  // profile_memory's CPU counter
    const size_t rounded = round(nbytes);
    if (kCacheEnabled && rounded <= kMaxSmall) {
      auto& bin = small_cache().bins[rounded / 64 - 1];
      if (!bin.empty()) {
        void* p = bin.back();
        bin.pop_back();
        return p;
      }
    } else if (kCacheEnabled) {
      std::lock_guard<std::mutex> lock(large_mutex_);
      auto it = large_.find(rounded);
      if (it != large_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        large_bytes_ -= rounded;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr && kCacheEnabled) {  // the cache may be what holds the memory
      release_large();
      p = std::aligned_alloc(64, rounded);
    }
    EMBER_CHECK(p != nullptr, OutOfMemoryError, "[allocate] cannot allocate ", uint64_t(nbytes),
                " bytes of host memory");
    return p;
  }
  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    profiler::detail::note_host_alloc(-int64_t(nbytes));
    const size_t rounded = round(nbytes);
    if (kCacheEnabled && rounded <= kMaxSmall) {
      auto& bin = small_cache().bins[rounded / 64 - 1];
      if (bin.size() < kPerBin) {
        bin.push_back(ptr);
        return;
      }
    } else if (kCacheEnabled) {
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
  // Small sizes to 64 bytes; large ones to whole pages, so nearby sizes share a bin.
  static size_t round(size_t nbytes) {
    return nbytes <= kMaxSmall ? (nbytes + 63) & ~size_t(63) : (nbytes + 4095) & ~size_t(4095);
  }
  static constexpr bool kCacheEnabled = kHostCachesEnabled;
  static constexpr size_t kMaxSmall = 4096, kPerBin = 64;
  static constexpr size_t kMaxLargeBytes = size_t(1) << 30;
  struct SmallCache {
    std::vector<void*> bins[kMaxSmall / 64];
    ~SmallCache() {
      for (auto& bin : bins)
        for (void* p : bin) std::free(p);
    }
  };
  static SmallCache& small_cache() {
    thread_local SmallCache c;
    return c;
  }
  std::mutex large_mutex_;
  std::unordered_map<size_t, std::vector<void*>> large_;
  size_t large_bytes_ = 0;
};

// ---- detail::small_object_alloc ----
constexpr size_t kSmallObjectStep = 16, kSmallObjectMax = 1024, kSmallObjectClasses = kSmallObjectMax / 16;
constexpr size_t kSmallObjectsPerClass = 256;

// Readable at any point of a thread's exit (trivially destructible), unlike the lists.
thread_local bool t_small_lists_gone = false;

struct SmallObjectLists {
  std::vector<void*> lists[kSmallObjectClasses];
  ~SmallObjectLists() {
    t_small_lists_gone = true;  // objects freed later in this thread's exit bypass the lists
    for (auto& list : lists)
      for (void* p : list) ::operator delete(p);
  }
};

SmallObjectLists& small_object_lists() {
  thread_local SmallObjectLists lists;
  return lists;
}

CpuAllocator& cpu_allocator() {
  // Never destroyed: tensors in static storage may be freed after main returns.
  static CpuAllocator* cpu = new CpuAllocator;
  return *cpu;
}
}  // namespace

void release_cached_host_memory() { cpu_allocator().release_large(); }

namespace detail {

void* small_object_alloc(size_t nbytes) {
  if (!kHostCachesEnabled || nbytes == 0 || nbytes > kSmallObjectMax || t_small_lists_gone)
    return ::operator new(nbytes);
  const size_t cls = (nbytes - 1) / kSmallObjectStep;
  std::vector<void*>& list = small_object_lists().lists[cls];
  if (list.empty()) return ::operator new((cls + 1) * kSmallObjectStep);
  void* p = list.back();
  list.pop_back();
  return p;
}

void small_object_free(void* p, size_t nbytes) noexcept {
  if (p == nullptr) return;
  if (kHostCachesEnabled && nbytes != 0 && nbytes <= kSmallObjectMax && !t_small_lists_gone) {
    std::vector<void*>& list = small_object_lists().lists[(nbytes - 1) / kSmallObjectStep];
    if (list.size() < kSmallObjectsPerClass) {
      try {
        list.push_back(p);
        return;
      } catch (...) {  // no room to remember it: free it instead
      }
    }
  }
  ::operator delete(p);
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

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace ember
