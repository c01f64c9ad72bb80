// The pinned-memory cache's logic (Note [caching host allocator] in
// ember/caching_host_allocator.h). Device-agnostic: the CUDA backend is in
// core/cuda/host_allocator.cpp, the tests' mock in tests/core/test_caching_host_allocator.cpp.
#include "ember/caching_host_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <exception>

#include "ember/caching_allocator.h"  // format_bytes
#include "ember/error.h"

namespace ember {

CachingHostAllocator::CachingHostAllocator(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)) {}

CachingHostAllocator::~CachingHostAllocator() {
  try {
    for (const Pending& p : pending_) backend_->event_destroy(p.event);
    for (auto& [device, events] : free_events_)
      for (EventHandle ev : events) backend_->event_destroy(ev);
    for (auto& [addr, block] : blocks_) backend_->free(block->ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[pin_memory] while destroying the pinned-memory cache: %s\n", e.what());
  }
  for (auto& [addr, block] : blocks_) delete block;
}

void* CachingHostAllocator::allocate(size_t nbytes, const char* op) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(nbytes <= kMaxRequest, OutOfMemoryError, "[", op, "] cannot allocate ",
              format_bytes(nbytes), " of page-locked host memory (more than any machine has)");
  const size_t size = std::max(kMinBlockSize, std::bit_ceil(nbytes));
  process_events();

  Block* block = nullptr;
  if (auto it = idle_.find(size); it != idle_.end() && !it->second.empty()) {
    block = it->second.back();
    it->second.pop_back();
  } else {
    auto fresh = std::make_unique<Block>();
    void* p = backend_->malloc(size);
    if (!p && !backend_->capture_under_way()) {
      release_idle_blocks();  // other size classes may hold what this one needs
      p = backend_->malloc(size);
    }
    EMBER_CHECK(p != nullptr, OutOfMemoryError, "[", op, "] cannot allocate ", format_bytes(size),
                " of page-locked host memory (", format_bytes(uint64_t(stats_.allocated_bytes)),
                " in use, ", format_bytes(uint64_t(stats_.reserved_bytes)), " reserved)");
    fresh->ptr = p;
    fresh->size = size;
    try {
      blocks_.emplace(reinterpret_cast<uintptr_t>(p), fresh.get());
    } catch (...) {
      backend_->free(p);
      throw;
    }
    block = fresh.release();
    stats_.reserved_bytes += int64_t(size);
    stats_.num_host_allocs += 1;
  }
  block->allocated = true;
  stats_.allocated_bytes += int64_t(block->size);
  stats_.active_blocks += 1;
  stats_.num_allocs += 1;
  return block->ptr;
}

void CachingHostAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  EMBER_CHECK(it != blocks_.end() && it->second->allocated, ValueError, "[pin_memory] pointer ",
              uint64_t(reinterpret_cast<uintptr_t>(ptr)),
              " was not allocated by the pinned-memory allocator (or was freed twice)");
  Block* block = it->second;
  block->allocated = false;
  stats_.allocated_bytes -= int64_t(block->size);
  stats_.active_blocks -= 1;
  stats_.num_frees += 1;
  if (block->lost) return;
  if (!block->uses.empty()) {
    record_events(block);  // makes it idle once nothing is pending
    return;
  }
  if (reusable(block)) make_idle(block);  // else the graphs holding it release it
}

bool CachingHostAllocator::record_use(const void* ptr, int device, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(addr);
  if (it == blocks_.begin()) return false;
  Block* block = std::prev(it)->second;
  if (!block->allocated || addr >= reinterpret_cast<uintptr_t>(block->ptr) + block->size)
    return false;
  const GraphRelease release = [this, block](int d, const std::vector<StreamHandle>& streams) {
    release_graph_hold(block, d, streams);
  };
  switch (backend_->hold_for_graph(device, stream, block, release)) {
    case CaptureHold::none:
      break;
    case CaptureHold::held:
      block->graph_holds += 1;
      return true;
    case CaptureHold::held_before:
    case CaptureHold::invalidated:
      return true;
    case CaptureHold::unknown:
      block->lost = true;
      return true;
  }
  const std::pair<int, StreamHandle> use{device, stream};
  if (std::find(block->uses.begin(), block->uses.end(), use) == block->uses.end())
    block->uses.push_back(use);
  return true;
}

bool CachingHostAllocator::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(addr);
  if (it == blocks_.begin()) return false;
  const Block* block = std::prev(it)->second;
  return block->allocated && addr < reinterpret_cast<uintptr_t>(block->ptr) + block->size;
}

void CachingHostAllocator::record_events(Block* block) {
  try {
    for (size_t i = 0; i < block->uses.size();) {
      const auto [device, stream] = block->uses[i];
      if (backend_->stream_capturing(device, stream)) {  // retried once the capture ends
        ++i;
        continue;
      }
      detail::reserve_one_more(pending_);  // no throw once recorded
      EventHandle ev = get_event(device);
      try {
        backend_->event_record(ev, device, stream);
      } catch (...) {
        free_events_[device].push_back(ev);
        throw;
      }
      pending_.push_back({ev, device, block});
      block->event_count += 1;
      block->uses[i] = block->uses.back();
      block->uses.pop_back();
    }
  } catch (...) {
    // Nothing can tell when that stream is done with the block: keep it out of use forever.
    block->lost = true;
    block->uses.clear();
    std::erase(deferred_, block);
    throw;
  }
  if (!block->uses.empty()) {
    if (std::find(deferred_.begin(), deferred_.end(), block) == deferred_.end())
      deferred_.push_back(block);
  } else {
    std::erase(deferred_, block);
    if (reusable(block)) make_idle(block);
  }
}

void CachingHostAllocator::release_graph_hold(Block* block, int device,
                                              const std::vector<StreamHandle>& replay_streams) {
  std::lock_guard<std::mutex> lock(mutex_);
  block->graph_holds -= 1;
  if (block->lost) return;
  // The replays become uses like any copy's: reused once events after them have completed.
  for (StreamHandle s : replay_streams) {
    const std::pair<int, StreamHandle> use{device, s};
    if (std::find(block->uses.begin(), block->uses.end(), use) == block->uses.end())
      block->uses.push_back(use);
  }
  if (block->allocated) return;  // its free records the events
  if (!block->uses.empty()) {
    record_events(block);
    return;
  }
  if (reusable(block)) make_idle(block);
}

bool CachingHostAllocator::reusable(const Block* block) const {
  return !block->allocated && !block->lost && block->event_count == 0 && block->graph_holds == 0 &&
         block->uses.empty();
}

void CachingHostAllocator::process_events() {
  // Blocks whose streams were capturing when they were freed: record what can be now. A
  // failure belongs to no caller of this allocation, so it is reported, not thrown.
  if (!deferred_.empty()) {
    const std::vector<Block*> deferred = deferred_;
    for (Block* block : deferred) {
      try {
        record_events(block);
      } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "[pin_memory] a freed pinned block stays out of use: recording its event "
                     "failed: %s\n",
                     e.what());
      }
    }
  }
  // An entry is removed before its block is touched: a query that throws leaves every entry
  // still listed pending and none counted twice.
  for (size_t i = 0; i < pending_.size();) {
    const Pending p = pending_[i];
    if (!backend_->event_query(p.event)) {
      ++i;
      continue;
    }
    pending_[i] = pending_.back();
    pending_.pop_back();
    free_events_[p.device].push_back(p.event);
    Block* block = p.block;
    block->event_count -= 1;
    if (reusable(block)) make_idle(block);
  }
}

void CachingHostAllocator::make_idle(Block* block) { idle_[block->size].push_back(block); }

void CachingHostAllocator::release_idle_blocks() {
  for (auto& [size, list] : idle_) {
    while (!list.empty()) {
      Block* block = list.back();
      backend_->free(block->ptr);  // first: if it throws, the block stays cached and counted
      list.pop_back();
      blocks_.erase(reinterpret_cast<uintptr_t>(block->ptr));
      stats_.reserved_bytes -= int64_t(block->size);
      stats_.num_host_frees += 1;
      delete block;
    }
  }
}

void CachingHostAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  process_events();
  if (backend_->capture_under_way()) return;
  release_idle_blocks();
}

CachingHostAllocator::EventHandle CachingHostAllocator::get_event(int device) {
  auto& events = free_events_[device];
  if (!events.empty()) {
    EventHandle ev = events.back();
    events.pop_back();
    return ev;
  }
  return backend_->event_create(device);
}

cuda::HostMemoryStats CachingHostAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace ember
