// CachingAllocator: the device-agnostic logic of ember's CUDA caching allocator, in the
// spirit of PyTorch's CUDACachingAllocator. The device itself is reached only through a
// small Backend (raw malloc/free, events, the current stream, a device-wide wait), so that
// this logic is unit-tested on the CPU with a mock backend handing out host memory
// (tests/core/test_caching_allocator.cpp); core/cuda/caching_allocator.cpp supplies the
// CUDA backend.
//
// Invariants (Note [caching allocator]):
// - Memory is obtained in segments (one backend malloc each) and handed out as blocks, each a
//   contiguous piece of one segment. A segment's blocks form a doubly linked list in address
//   order; free neighbours are merged at once, so two adjacent free blocks never coexist.
// - Requests are rounded up to a multiple of 512 B. Rounded sizes <= 1 MiB come from the
//   small pool (2 MiB segments), larger ones from the large pool (20 MiB segments for
//   requests under 10 MiB, else the request rounded to 2 MiB), so small tensors never
//   fragment big segments.
// - Every block belongs to the stream it was allocated on (the current stream at allocate
//   time). A freed block goes back to its stream's pool and is reused only by allocations on
//   that stream: work queued on one stream runs in order, so reuse needs no synchronization.
// - A block that record_stream says is also used on other streams is not reusable when freed:
//   an event is recorded on each of those streams, and the block returns to its pool once
//   all of them have completed (checked on every allocation, or waited for before freeing
//   the cache). Those events are recorded when the block is freed, maybe long after the
//   stream's last user handle died: ember's streams live as long as the process (Note
//   [stream lifetime] in core/cuda/stream.cpp). Should a record fail anyway, the free waits
//   for the whole device instead and the block still returns to its pool.
// - Graph capture: allocations on a capturing stream are served from a private pool that only
//   that capture uses, and that pool's segments stay reserved while the graph lives, so a
//   replay finds its memory where the capture left it. While any capture is under way no
//   event is queried or recorded (illegal during capture) and no segment is freed.
// - One mutex guards everything; backend calls happen under it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/cuda_memory.h"
#include "ember/storage.h"

namespace ember {

// "1.50 MiB": bytes in binary units, for messages and summaries.
std::string format_bytes(uint64_t nbytes);

namespace detail {
// Room for one more element before something is recorded that must not be lost to a failed
// push_back (both caching allocators' pending-event lists). Geometric: reserving size() + 1
// would reallocate on every call.
template <class T>
void reserve_one_more(std::vector<T>& v) {
  if (v.size() == v.capacity()) v.reserve(std::max<size_t>(16, 2 * v.capacity()));
}
}  // namespace detail

class CachingAllocator final : public Allocator {
 public:
  // Streams and events are opaque handles (cudaStream_t, cudaEvent_t on CUDA).
  using StreamHandle = void*;
  using EventHandle = void*;
  using PoolId = uint64_t;

  struct Backend {
    virtual ~Backend() = default;
    // "cuda:0": names the device in messages.
    virtual std::string device_name() const = 0;
    // Device memory, or nullptr when the device is out of memory (other failures throw).
    virtual void* malloc(size_t nbytes) = 0;
    virtual void free(void* ptr) = 0;
    // The calling thread's current stream on this device.
    virtual StreamHandle current_stream() = 0;
    virtual EventHandle event_create() = 0;
    virtual void event_destroy(EventHandle event) = 0;
    virtual void event_record(EventHandle event, StreamHandle stream) = 0;
    // True once all work recorded before the event has completed.
    virtual bool event_query(EventHandle event) = 0;
    virtual void event_synchronize(EventHandle event) = 0;
    // Waits for all work on the device (before segments go back to the driver).
    virtual void synchronize() = 0;
    // The id of the graph capture `stream` takes part in (its own, or one it was joined into
    // by waiting on an event of a capturing stream), 0 when it is not capturing.
    virtual uint64_t capture_id(StreamHandle stream) = 0;
  };

  static constexpr size_t kMinBlockSize = 512;          // rounding unit
  static constexpr size_t kSmallSize = 1 << 20;         // largest request of the small pool
  static constexpr size_t kSmallBuffer = 2 << 20;       // small pool segment size
  static constexpr size_t kLargeBuffer = 20 << 20;      // large segment for mid-size requests
  static constexpr size_t kMinLargeAlloc = 10 << 20;    // from here a segment fits the request
  static constexpr size_t kRoundLarge = 2 << 20;        // ... rounded to 2 MiB
  // Larger requests fail at once with OutOfMemoryError (rounding them would wrap).
  static constexpr size_t kMaxRequest = size_t(INT64_MAX);

  explicit CachingAllocator(std::unique_ptr<Backend> backend);
  // Returns every segment to the backend (live blocks included: the owner outlives them).
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Allocator interface: allocate on the backend's current stream. Never returns nullptr
  // for nbytes > 0: when the backend is out of memory even after the cache was freed, throws
  // OutOfMemoryError naming the request, the device and the summary.
  void* allocate(size_t nbytes) override;
  // Never throws (it runs from Storage's destructor): a pointer this allocator does not
  // know, or a backend failure, is reported on stderr.
  void deallocate(void* ptr, size_t nbytes) override;

  void* allocate(size_t nbytes, StreamHandle stream);
  void free(void* ptr);
  // `ptr` (as returned by allocate) is also used by work on `stream`. Unknown pointers are
  // ignored (memory not from this allocator).
  void record_stream(void* ptr, StreamHandle stream);
  // True when `ptr` is a live allocation of this allocator.
  bool owns(void* ptr) const;

  cuda::MemoryStats stats() const;
  void reset_peak_stats();
  // Waits for pending stream uses, then frees every segment without live blocks. Does
  // nothing while a capture is under way.
  void empty_cache();
  std::string summary() const;

  // Graph capture (see cuda::Graph). create_pool returns a private pool held once;
  // begin_allocate_to_pool routes allocations on `stream` to it until end_allocate_to_pool,
  // and those on any stream taking part in the same capture (the backend's capture_id: a side
  // stream joined into it), as PyTorch 2.1+ matches on the capture id; release_pool drops the
  // hold, after which its segments are freed as soon as they hold no live block.
  PoolId create_pool();
  void begin_allocate_to_pool(PoolId pool, StreamHandle stream);
  void end_allocate_to_pool(PoolId pool);
  void release_pool(PoolId pool);

 private:
  struct Block;
  struct BlockPool;
  struct PrivatePool;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };

  BlockPool& pool_for(size_t size, StreamHandle stream);
  Block* find_free_block(BlockPool& pool, size_t size, StreamHandle stream);
  // A block spanning a new segment for a `size`-byte block; on out of memory, frees the
  // cache and searches `pool` again before one more try. Throws OutOfMemoryError.
  Block* new_segment(BlockPool& pool, size_t size, StreamHandle stream, size_t requested);
  void free_block(Block* block);  // into its pool, merging neighbours
  bool try_merge(Block* dst, Block* src);
  // Records an event on each stream of the block's use set. Never strands the block: when a
  // record fails it waits for the device, returns the block to its pool, and rethrows.
  void insert_events(Block* block);
  void process_events();
  void synchronize_and_free_events();
  void release_cached_blocks();  // waits, then frees all unused segments (not while capturing)
  void release_free_segments(BlockPool& pool);
  void release_segment(Block* block);
  void maybe_release_private_pool(PoolId id);
  EventHandle get_event();
  std::string summary_locked() const;
  [[noreturn]] void throw_oom(size_t requested, size_t rounded, size_t segment_size,
                              bool freed_cache);

  std::unique_ptr<Backend> backend_;
  mutable std::mutex mutex_;
  std::unique_ptr<BlockPool> small_pool_, large_pool_;
  std::map<PoolId, std::unique_ptr<PrivatePool>> private_pools_;
  PoolId next_pool_id_ = 1;
  // Captures under way: the stream whose allocations go to each private pool.
  std::vector<std::pair<PoolId, StreamHandle>> captures_;
  std::unordered_map<void*, Block*> active_blocks_;
  // Events recorded for blocks freed while still used on other streams.
  std::vector<std::pair<EventHandle, Block*>> pending_events_;
  std::vector<Block*> deferred_event_blocks_;  // freed during a capture
  std::vector<EventHandle> free_events_;
  cuda::MemoryStats stats_;
};

}  // namespace ember
