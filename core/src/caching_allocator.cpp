// The caching allocator's logic (Note [caching allocator] in ember/caching_allocator.h).
// Device-agnostic: everything the device does goes through Backend, so the same code runs
// under the CUDA backend and under the tests' mock.
#include "ember/caching_allocator.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <exception>

#include "ember/error.h"

namespace ember {

std::string format_bytes(uint64_t nbytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (nbytes < 1024) return std::to_string(nbytes) + " B";
  double v = double(nbytes);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

struct CachingAllocator::Block {
  void* ptr = nullptr;
  size_t size = 0;       // rounded size of this piece of its segment
  size_t requested = 0;  // what the caller asked for (while allocated)
  StreamHandle stream = nullptr;
  BlockPool* pool = nullptr;
  Block* prev = nullptr;  // address-order neighbours within the segment
  Block* next = nullptr;
  bool allocated = false;
  int event_count = 0;                    // pending events before it may return to its pool
  std::vector<StreamHandle> stream_uses;  // other streams recorded by record_stream

  // A search key: the first free block of `stream` of at least `size` bytes.
  Block(StreamHandle s, size_t sz, BlockPool* p) : size(sz), stream(s), pool(p) {}
  Block(void* p, size_t sz, StreamHandle s, BlockPool* bp) : ptr(p), size(sz), stream(s), pool(bp) {}
  bool is_whole_segment() const { return prev == nullptr && next == nullptr; }
};

// Free blocks ordered by (stream, size, address): lower_bound finds the best fit on a stream.
bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<StreamHandle>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<void*>()(a->ptr, b->ptr);
}

struct CachingAllocator::BlockPool {
  BlockPool(bool small, PoolId owner) : is_small(small), owner(owner) {}
  std::set<Block*, BlockLess> blocks;
  const bool is_small;
  const PoolId owner;  // 0: the allocator's default pools, else a private (graph) pool
};

struct CachingAllocator::PrivatePool {
  explicit PrivatePool(PoolId id) : small(true, id), large(false, id) {}
  BlockPool small, large;
  int holds = 1;      // graphs holding it (create_pool counts as one)
  int segments = 0;   // segments it owns, free or not
};

namespace {

size_t round_size(size_t size) {
  const size_t m = CachingAllocator::kMinBlockSize;
  return size < m ? m : (size + m - 1) / m * m;
}

size_t segment_size_for(size_t size) {
  using CA = CachingAllocator;
  if (size <= CA::kSmallSize) return CA::kSmallBuffer;
  if (size < CA::kMinLargeAlloc) return CA::kLargeBuffer;
  return (size + CA::kRoundLarge - 1) / CA::kRoundLarge * CA::kRoundLarge;
}
}  // namespace

CachingAllocator::CachingAllocator(std::unique_ptr<Backend> backend)
    : backend_(std::move(backend)),
      small_pool_(std::make_unique<BlockPool>(true, 0)),
      large_pool_(std::make_unique<BlockPool>(false, 0)) {}

CachingAllocator::~CachingAllocator() {
  // Every block is in exactly one of: a pool, active_blocks_, pending_events_,
  // deferred_event_blocks_. Collect them all, free each segment once (through its head).
  std::set<Block*> all;
  auto add_pool = [&](BlockPool& p) { all.insert(p.blocks.begin(), p.blocks.end()); };
  add_pool(*small_pool_);
  add_pool(*large_pool_);
  for (auto& [id, pp] : private_pools_) {
    add_pool(pp->small);
    add_pool(pp->large);
  }
  for (auto& [ptr, b] : active_blocks_) all.insert(b);
  for (auto& [ev, b] : pending_events_) all.insert(b);
  all.insert(deferred_event_blocks_.begin(), deferred_event_blocks_.end());
  try {
    for (auto& [ev, b] : pending_events_) backend_->event_destroy(ev);
    for (EventHandle ev : free_events_) backend_->event_destroy(ev);
    for (Block* b : all)
      if (b->prev == nullptr) backend_->free(b->ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[caching allocator] while destroying: %s\n", e.what());
  }
  for (Block* b : all) delete b;
}

void* CachingAllocator::allocate(size_t nbytes) {
  return allocate(nbytes, backend_->current_stream());
}

void CachingAllocator::deallocate(void* ptr, size_t) {
  try {
    free(ptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[free] %s\n", e.what());
  }
}

CachingAllocator::BlockPool& CachingAllocator::pool_for(size_t size, StreamHandle stream) {
  auto private_pool = [&](PoolId id) -> BlockPool& {
    PrivatePool& pp = *private_pools_.at(id);
    return size <= kSmallSize ? pp.small : pp.large;
  };
  for (auto& [id, capture_stream] : captures_)
    if (capture_stream == stream) return private_pool(id);
  // A side stream joined into a capture allocates for that graph too: served from the
  // general pool, its block could be handed to eager work while replays still write it.
  // Matched by CUDA's capture id (the capture stream's own is known once capture began).
  if (!captures_.empty()) {
    if (const uint64_t joined = backend_->capture_id(stream); joined != 0)
      for (auto& [id, capture_stream] : captures_)
        if (backend_->capture_id(capture_stream) == joined) return private_pool(id);
  }
  return size <= kSmallSize ? *small_pool_ : *large_pool_;
}

CachingAllocator::Block* CachingAllocator::find_free_block(BlockPool& pool, size_t size,
                                                           StreamHandle stream) {
  Block key(stream, size, &pool);
  auto it = pool.blocks.lower_bound(&key);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.blocks.erase(it);
  return b;
}

void* CachingAllocator::allocate(size_t nbytes, StreamHandle stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (nbytes > kMaxRequest) [[unlikely]] {
    // No device has this much, and rounding it up to a block or a segment would wrap to a
    // small size: two live tensors would share memory.
    stats_.num_ooms += 1;
    throw OutOfMemoryError(str("[allocate] out of memory on ", backend_->device_name(),
                               ": tried to allocate ", format_bytes(nbytes),
                               ", more than any device has"));
  }
  if (captures_.empty()) process_events();

  const size_t size = round_size(nbytes);
  BlockPool& pool = pool_for(size, stream);
  Block* block = find_free_block(pool, size, stream);
  if (!block) block = new_segment(pool, size, stream, nbytes);

  // Split off the tail when what remains is worth keeping: any 512 B in the small pool, but
  // only more than a small request in the large pool (a sliver of a large segment would
  // otherwise serve small tensors that belong in the small pool).
  const size_t remaining = block->size - size;
  if (pool.is_small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
    Block* rest = new Block(static_cast<char*>(block->ptr) + size, remaining, stream, &pool);
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = size;
    pool.blocks.insert(rest);
  }

  block->allocated = true;
  block->requested = nbytes;
  active_blocks_.emplace(block->ptr, block);
  stats_.allocated_bytes += int64_t(block->size);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  stats_.requested_bytes += int64_t(nbytes);
  stats_.active_blocks += 1;
  stats_.num_allocs += 1;
  return block->ptr;
}

CachingAllocator::Block* CachingAllocator::new_segment(BlockPool& pool, size_t size,
                                                       StreamHandle stream, size_t requested) {
  const size_t seg = segment_size_for(size);
  auto block = std::make_unique<Block>(nullptr, seg, stream, &pool);
  void* ptr = backend_->malloc(seg);
  bool freed_cache = false;
  if (!ptr && captures_.empty()) {  // nothing may be freed during a capture
    // Out of memory: give the cache back and retry once. Waiting for the pending stream
    // uses may have returned a block that fits to its pool (a block whose segment still
    // holds live blocks, so it stays cached): look there before asking the device again.
    release_cached_blocks();
    freed_cache = true;
    stats_.num_alloc_retries += 1;
    if (Block* cached = find_free_block(pool, size, stream)) return cached;
    ptr = backend_->malloc(seg);
  }
  if (!ptr) throw_oom(requested, size, seg, freed_cache);
  block->ptr = ptr;
  stats_.reserved_bytes += int64_t(seg);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.segments += 1;
  stats_.num_segment_allocs += 1;
  if (pool.owner) private_pools_.at(pool.owner)->segments += 1;
  return block.release();
}

void CachingAllocator::throw_oom(size_t requested, size_t rounded, size_t segment_size,
                                 bool freed_cache) {
  stats_.num_ooms += 1;
  std::string why = freed_cache ? "even after freeing the allocator's cache"
                    : captures_.empty()
                        ? "and the cache could not help"
                        : "(the cache cannot be freed while a CUDA graph is being captured)";
  throw OutOfMemoryError(str("[allocate] out of memory on ", backend_->device_name(),
                             ": tried to allocate ", format_bytes(requested), " (a new ",
                             format_bytes(segment_size), " segment for a ", format_bytes(rounded),
                             " block) ", why, "; ", format_bytes(uint64_t(stats_.allocated_bytes)),
                             " allocated by ember, ",
                             format_bytes(uint64_t(stats_.reserved_bytes)), " reserved.\n",
                             summary_locked()));
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_blocks_.find(ptr);
  EMBER_CHECK(it != active_blocks_.end(), ValueError, "[free] pointer ", uint64_t(uintptr_t(ptr)),
              " was not allocated by the caching allocator of ", backend_->device_name(),
              " (or was freed twice)");
  Block* block = it->second;
  active_blocks_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= int64_t(block->size);
  stats_.requested_bytes -= int64_t(block->requested);
  stats_.active_blocks -= 1;
  stats_.num_frees += 1;
  block->requested = 0;

  if (!block->stream_uses.empty()) {
    if (!captures_.empty()) {
      deferred_event_blocks_.push_back(block);  // events may not be recorded during capture
    } else {
      insert_events(block);
    }
    return;
  }
  free_block(block);
}

void CachingAllocator::record_stream(void* ptr, StreamHandle stream) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = active_blocks_.find(ptr);
  if (it == active_blocks_.end()) return;
  Block* block = it->second;
  if (stream == block->stream) return;  // its own stream orders every use already
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

bool CachingAllocator::owns(void* ptr) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return active_blocks_.count(ptr) != 0;
}

void CachingAllocator::insert_events(Block* block) {
  try {
    while (!block->stream_uses.empty()) {
      detail::reserve_one_more(pending_events_);  // no throw once recorded
      EventHandle ev = get_event();
      try {
        backend_->event_record(ev, block->stream_uses.back());
      } catch (...) {
        free_events_.push_back(ev);
        throw;
      }
      pending_events_.emplace_back(ev, block);
      block->event_count += 1;
      block->stream_uses.pop_back();
    }
  } catch (...) {
    // No event marks when that stream is done with the block (a stream destroyed behind
    // ember's back, a failing context): a device-wide wait is the only other proof. Without
    // it the block would be in no pool, and its segment would never be freed.
    const std::exception_ptr failure = std::current_exception();
    block->stream_uses.clear();
    try {
      backend_->synchronize();
    } catch (...) {  // a context that cannot synchronize has nothing left to run either
    }
    if (block->event_count == 0) {  // else the events already recorded return it
      try {
        free_block(block);
      } catch (...) {  // it is in its pool by then; only a dead pool's release failed
      }
    }
    std::rethrow_exception(failure);
  }
}

CachingAllocator::EventHandle CachingAllocator::get_event() {
  if (!free_events_.empty()) {
    EventHandle ev = free_events_.back();
    free_events_.pop_back();
    return ev;
  }
  return backend_->event_create();
}

// Both walk pending_events_ in place and remove an entry before touching its block, so a
// query or wait that throws leaves every entry still listed pending and none counted twice.
void CachingAllocator::process_events() {
  for (size_t i = 0; i < pending_events_.size();) {
    const auto [ev, block] = pending_events_[i];
    if (!backend_->event_query(ev)) {
      ++i;
      continue;
    }
    pending_events_[i] = pending_events_.back();
    pending_events_.pop_back();
    free_events_.push_back(ev);
    if (--block->event_count == 0) free_block(block);
  }
}

void CachingAllocator::synchronize_and_free_events() {
  while (!pending_events_.empty()) {
    const auto [ev, block] = pending_events_.back();
    backend_->event_synchronize(ev);
    pending_events_.pop_back();
    free_events_.push_back(ev);
    if (--block->event_count == 0) free_block(block);
  }
}

bool CachingAllocator::try_merge(Block* dst, Block* src) {
  if (!src || src->allocated || src->event_count > 0 || !src->stream_uses.empty()) return false;
  // A free, event-free neighbour is in its pool (the invariant of free_block).
  dst->pool->blocks.erase(src);
  if (dst->prev == src) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
  return true;
}

void CachingAllocator::free_block(Block* block) {
  try_merge(block, block->prev);
  try_merge(block, block->next);
  BlockPool& pool = *block->pool;
  pool.blocks.insert(block);
  // A graph pool nobody holds any more gives a segment back as soon as it is whole, unless
  // a capture is under way (no frees then); empty_cache or the next OOM catches it later.
  if (pool.owner && block->is_whole_segment() && captures_.empty()) {
    auto it = private_pools_.find(pool.owner);
    if (it != private_pools_.end() && it->second->holds == 0) {
      backend_->synchronize();  // a replay of the dead graph may still be running
      release_segment(block);
      maybe_release_private_pool(pool.owner);
    }
  }
}

void CachingAllocator::release_segment(Block* block) {
  BlockPool& pool = *block->pool;
  backend_->free(block->ptr);  // first: if it throws, the segment stays cached and counted
  pool.blocks.erase(block);
  stats_.reserved_bytes -= int64_t(block->size);
  stats_.segments -= 1;
  stats_.num_segment_frees += 1;
  if (pool.owner) private_pools_.at(pool.owner)->segments -= 1;
  delete block;
}

void CachingAllocator::release_free_segments(BlockPool& pool) {
  std::vector<Block*> whole;
  for (Block* b : pool.blocks)
    if (b->is_whole_segment()) whole.push_back(b);
  for (Block* b : whole) release_segment(b);
}

void CachingAllocator::maybe_release_private_pool(PoolId id) {
  auto it = private_pools_.find(id);
  if (it != private_pools_.end() && it->second->holds == 0 && it->second->segments == 0)
    private_pools_.erase(it);
}

void CachingAllocator::release_cached_blocks() {
  if (!captures_.empty()) return;
  synchronize_and_free_events();
  // Work queued on a block's stream before it was freed may still be running: wait for the
  // device before any segment goes back (cudaFree would wait too, but only implicitly).
  backend_->synchronize();
  release_free_segments(*small_pool_);
  release_free_segments(*large_pool_);
  std::vector<PoolId> dead;
  for (auto& [id, pp] : private_pools_) {
    if (pp->holds > 0) continue;  // a live graph replays into these segments
    release_free_segments(pp->small);
    release_free_segments(pp->large);
    dead.push_back(id);
  }
  for (PoolId id : dead) maybe_release_private_pool(id);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_blocks();
}

cuda::MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

std::string CachingAllocator::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return summary_locked();
}

std::string CachingAllocator::summary_locked() const {
  const cuda::MemoryStats& s = stats_;
  // Cached (free) memory, split by pool; the largest free block says how large a request
  // can be served without a new segment.
  struct PoolInfo {
    int64_t free_bytes = 0, free_blocks = 0, largest = 0;
  };
  auto info = [](const BlockPool& p, PoolInfo& out) {
    for (const Block* b : p.blocks) {
      out.free_bytes += int64_t(b->size);
      out.free_blocks += 1;
      out.largest = std::max(out.largest, int64_t(b->size));
    }
  };
  PoolInfo small, large, graph;
  info(*small_pool_, small);
  info(*large_pool_, large);
  int64_t graph_segments = 0;
  for (auto& [id, pp] : private_pools_) {
    info(pp->small, graph);
    info(pp->large, graph);
    graph_segments += pp->segments;
  }
  int64_t waiting = 0;
  for (auto& [ev, b] : pending_events_) waiting += int64_t(b->size);
  for (const Block* b : deferred_event_blocks_) waiting += int64_t(b->size);

  auto B = [](int64_t n) { return format_bytes(uint64_t(std::max<int64_t>(n, 0))); };
  std::string out;
  char line[256];
  auto add = [&](const std::string& label, const std::string& value) {
    std::snprintf(line, sizeof line, "  %-22s %s\n", label.c_str(), value.c_str());
    out += line;
  };
  out += "ember memory summary for " + backend_->device_name() + "\n";
  add("allocated", B(s.allocated_bytes) + " in " + std::to_string(s.active_blocks) +
                       " blocks (peak " + B(s.peak_allocated_bytes) + ", requested " +
                       B(s.requested_bytes) + ")");
  add("reserved", B(s.reserved_bytes) + " in " + std::to_string(s.segments) + " segments (peak " +
                      B(s.peak_reserved_bytes) + ")");
  add("cached, small pool", B(small.free_bytes) + " in " + std::to_string(small.free_blocks) +
                                " free blocks (largest " + B(small.largest) + ")");
  add("cached, large pool", B(large.free_bytes) + " in " + std::to_string(large.free_blocks) +
                                " free blocks (largest " + B(large.largest) + ")");
  if (!private_pools_.empty())
    add("graph pools", std::to_string(private_pools_.size()) + " holding " +
                           std::to_string(graph_segments) + " segments, " + B(graph.free_bytes) +
                           " free");
  if (waiting) add("awaiting other streams", B(waiting));
  add("calls", "allocs " + std::to_string(s.num_allocs) + ", frees " +
                   std::to_string(s.num_frees) + ", segment allocs " +
                   std::to_string(s.num_segment_allocs) + ", segment frees " +
                   std::to_string(s.num_segment_frees) + ", retries after freeing the cache " +
                   std::to_string(s.num_alloc_retries) + ", OOMs " + std::to_string(s.num_ooms));
  return out;
}

CachingAllocator::PoolId CachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  PoolId id = next_pool_id_++;
  private_pools_.emplace(id, std::make_unique<PrivatePool>(id));
  return id;
}

void CachingAllocator::begin_allocate_to_pool(PoolId pool, StreamHandle stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  EMBER_CHECK(private_pools_.count(pool), ValueError, "[graph] unknown memory pool ", pool);
  for (auto& [id, s] : captures_)
    EMBER_CHECK(s != stream, ValueError, "[graph] a capture on this stream is already under way");
  captures_.emplace_back(pool, stream);
}

void CachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(captures_, [&](const auto& c) { return c.first == pool; });
  if (!captures_.empty()) return;
  // Blocks freed during the capture while used on other streams: now events may be recorded.
  // Each block is handled even when another's events fail (insert_events returns it to its
  // pool then); the first failure is reported after all.
  auto deferred = std::move(deferred_event_blocks_);
  deferred_event_blocks_.clear();
  std::exception_ptr failure;
  for (Block* b : deferred) {
    try {
      insert_events(b);
    } catch (...) {
      if (!failure) failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

void CachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = private_pools_.find(pool);
  if (it == private_pools_.end()) return;
  PrivatePool& pp = *it->second;
  if (pp.holds > 0) pp.holds -= 1;
  if (pp.holds > 0 || !captures_.empty()) return;
  bool any_free = false;
  for (BlockPool* p : {&pp.small, &pp.large})
    for (Block* b : p->blocks) any_free |= b->is_whole_segment();
  if (any_free) {
    backend_->synchronize();  // a replay may still be using them
    release_free_segments(pp.small);
    release_free_segments(pp.large);
  }
  maybe_release_private_pool(pool);
}

}  // namespace ember
