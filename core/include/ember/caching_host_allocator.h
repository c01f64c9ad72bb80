// CachingHostAllocator: page-locked (pinned) host memory for asynchronous copies, cached for
// reuse, in the spirit of PyTorch's CachingHostAllocator. Like CachingAllocator, the device
// is reached only through a small Backend (page-locked malloc/free, events, capture state), so
// this logic is unit-tested on the CPU with a mock backend
// (tests/core/test_caching_host_allocator.cpp); core/cuda/host_allocator.cpp supplies the
// CUDA backend behind Tensor::pin_memory.
//
// Why a cache with events: a non_blocking copy from (or to) a pinned block is still running
// when the copy call returns, and the block's tensor may die at once (a DataLoader batch
// after `x.to(cuda, true)`). Freeing or reusing the block then would let the DMA read
// memory that now holds the next batch. Waiting for the device in free would make every
// batch stall the pipeline (non_blocking would buy nothing), and waiting for every device
// would create a context on each. Instead:
//
// Invariants (Note [caching host allocator]):
// - Blocks are obtained from the backend in power-of-two sizes (at least kMinBlockSize) and
//   never split; a freed block serves any later request of the same size class.
// - Each asynchronous copy that touches a block records its (device, stream) on the block
//   (record_use; cuda::detail::copy_bytes calls it). When the block is freed, an event is
//   recorded on each of those streams, and the block becomes reusable once every event has
//   completed. Completion is only ever queried (on allocate and empty_cache), never waited
//   for: no call of this class blocks on the device.
// - Events are created on the device of the stream they are recorded on, which already has
//   a context (a copy just ran there): no other device is ever touched.
// - A copy recorded into a graph (its stream was capturing when record_use saw it) reads or
//   writes the block at every replay, long after the capture: an event recorded at the end of
//   the capture would complete at once (the capture itself runs nothing). Such a block is
//   held by the graph instead (Backend::hold_for_graph): it is not reused before the graph is
//   reset or destroyed, and then only once events recorded on every stream the graph was
//   replayed on have completed. A use inside an invalidated capture is dropped (no graph will
//   ever run it); one inside a capture ember did not make (whose graph's lifetime nothing
//   tells) keeps the block out of use for good.
// - No event is recorded on a stream that is being captured into a graph (illegal there): a
//   block freed while one of its (eager) use streams is capturing keeps that use until the
//   capture has ended, and is retried on each later call.
// - Memory goes back to the backend only from empty_cache() or when the backend is out of
//   page-locked memory, only for blocks that are free with no pending event, and never
//   while a graph capture is under way anywhere (freeing page-locked memory may synchronize
//   the device, which would invalidate that capture). In the steady state (same batch sizes)
//   there is no backend malloc or free at all.
// - A block whose event cannot be recorded (the stream was destroyed behind ember's back)
//   is never reused nor freed: leaking it is the only choice that is safe.
// - One mutex guards everything; backend calls happen under it. A graph's release callback
//   takes it too, so the backend never runs one from inside a backend call.
// - The allocator outlives every graph holding one of its blocks (the process's allocator is
//   never destroyed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "ember/cuda_memory.h"

namespace ember {

class CachingHostAllocator {
 public:
  using StreamHandle = void*;  // cudaStream_t on CUDA
  using EventHandle = void*;   // cudaEvent_t on CUDA
  // Called when a graph that read or wrote a block is reset or destroyed: its device and the
  // streams it was replayed on (none when it never was).
  using GraphRelease = std::function<void(int device, const std::vector<StreamHandle>& replay_streams)>;
  enum class CaptureHold {
    none,         // the stream is not capturing: an ordinary use
    held,         // release will be called once
    held_before,  // that capture already holds the block
    invalidated,  // the capture can produce no graph: the work will never run
    unknown,      // a capture ember did not make: nothing tells when its graph dies
  };

  struct Backend {
    virtual ~Backend() = default;
    // Page-locked memory, or nullptr when there is none left (other failures throw).
    virtual void* malloc(size_t nbytes) = 0;
    virtual void free(void* ptr) = 0;
    virtual EventHandle event_create(int device) = 0;
    virtual void event_destroy(EventHandle event) = 0;
    virtual void event_record(EventHandle event, int device, StreamHandle stream) = 0;
    // True once the work recorded before the event has completed. Never blocks.
    virtual bool event_query(EventHandle event) = 0;
    // True while `stream` of `device` is being captured into a graph.
    virtual bool stream_capturing(int device, StreamHandle stream) = 0;
    // True while any graph capture is under way in the process.
    virtual bool capture_under_way() = 0;
    // Work just queued on `stream` of `device` uses a block (named by `key`). When that stream
    // is capturing into a graph made by ember, arranges for `release` to be called once, when
    // the graph is reset or destroyed, with the streams it was replayed on, and answers held
    // (held_before when a release under `key` is already registered for that capture).
    virtual CaptureHold hold_for_graph(int device, StreamHandle stream, const void* key,
                                       const GraphRelease& release) = 0;
  };

  static constexpr size_t kMinBlockSize = 512;
  // Larger requests fail at once with OutOfMemoryError (a power of two above it would wrap).
  static constexpr size_t kMaxRequest = size_t(1) << 62;

  explicit CachingHostAllocator(std::unique_ptr<Backend> backend);
  // Returns every block to the backend, live ones included (the owner outlives them).
  ~CachingHostAllocator();
  CachingHostAllocator(const CachingHostAllocator&) = delete;
  CachingHostAllocator& operator=(const CachingHostAllocator&) = delete;

  // A block of at least nbytes (nullptr for 0). Throws OutOfMemoryError naming `op` when the
  // backend has no page-locked memory left even after the idle blocks were released.
  void* allocate(size_t nbytes, const char* op = "pin_memory");
  // `ptr` must be a pointer allocate() returned; throws ValueError otherwise (or when freed
  // twice), and rethrows a failure to record an event (the block is then leaked, safely).
  void free(void* ptr);
  // Work queued on `stream` of `device` reads or writes the live block containing `ptr` (any
  // address inside it), once or, when the stream is capturing, at every replay of the graph.
  // Returns false, recording nothing, when `ptr` is not in such a block.
  bool record_use(const void* ptr, int device, StreamHandle stream);
  // True when `ptr` lies inside a live block of this allocator.
  bool owns(const void* ptr) const;

  // Returns to the backend every block that is free and whose events have completed
  // (nothing while a capture is under way). Blocks still awaiting copies stay.
  void empty_cache();
  cuda::HostMemoryStats stats() const;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    bool allocated = false;
    bool lost = false;        // an event could not be recorded: never reused nor freed
    int event_count = 0;      // events to complete before it may be reused
    int graph_holds = 0;      // graphs that read or write it at each replay
    std::vector<std::pair<int, StreamHandle>> uses;  // (device, stream) of async copies
  };
  struct Pending {
    EventHandle event;
    int device;
    Block* block;
  };

  void record_events(Block* block);  // for every use whose stream is not capturing
  void release_graph_hold(Block* block, int device, const std::vector<StreamHandle>& replay_streams);
  bool reusable(const Block* block) const;  // free, nothing pending, held by no graph
  void process_events();
  void make_idle(Block* block);      // into the free list of its size class
  void release_idle_blocks();
  EventHandle get_event(int device);

  std::unique_ptr<Backend> backend_;
  mutable std::mutex mutex_;
  std::map<uintptr_t, Block*> blocks_;              // every block, by address
  std::map<size_t, std::vector<Block*>> idle_;      // free, event-free blocks by size
  std::vector<Pending> pending_;                    // events of freed blocks
  std::vector<Block*> deferred_;                    // freed while a use stream was capturing
  std::map<int, std::vector<EventHandle>> free_events_;  // by device
  cuda::HostMemoryStats stats_;
};

}  // namespace ember
