// The caching allocator's logic (core/src/caching_allocator.cpp) on the CPU, through a mock
// backend that hands out host memory, counts calls, fails on demand and completes events
// only when told to. The same logic serves CUDA (tests/core/test_cuda_memory.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <ember/caching_allocator.h>
#include <ember/error.h>

using namespace ember;

namespace {

using CA = CachingAllocator;
constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Shared with the test after the allocator takes ownership of the backend.
struct MockState {
  std::mutex mutex;
  std::set<void*> live;       // segments handed out and not freed
  size_t live_bytes = 0;
  size_t capacity = SIZE_MAX; // malloc fails beyond this many live bytes
  int fail_next = 0;          // the next N mallocs fail
  bool fail_always = false;
  int mallocs = 0, frees = 0, syncs = 0, event_syncs = 0;
  void* stream = nullptr;  // the "current stream"
  struct Event {
    void* stream = nullptr;
    bool done = true;
  };
  std::map<void*, Event*> events;
  int events_created = 0;
  std::set<void*> dead_streams;  // recording on these throws (a destroyed stream)
  int queries_until_failure = -1;  // >= 0: that many event queries answer, the next throws
  std::map<void*, uint64_t> capture_ids;  // streams taking part in a capture, by its id

  // All events recorded on `stream` so far complete (the stream's queued work finished).
  void finish(void* s) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [h, e] : events)
      if (e->stream == s) e->done = true;
  }
};

class MockBackend final : public CA::Backend {
 public:
  explicit MockBackend(std::shared_ptr<MockState> s) : s_(std::move(s)) {}
  ~MockBackend() override {
    for (auto& [h, e] : s_->events) delete e;
    s_->events.clear();
  }
  std::string device_name() const override { return "mock:0"; }
  void* malloc(size_t n) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    if (s_->fail_always) return nullptr;
    if (s_->fail_next > 0) {
      --s_->fail_next;
      return nullptr;
    }
    if (s_->live_bytes + n > s_->capacity) return nullptr;
    void* p = std::aligned_alloc(512, n);
    s_->live.insert(p);
    s_->live_bytes += n;
    sizes_[p] = n;
    ++s_->mallocs;
    return p;
  }
  void free(void* p) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    EXPECT_TRUE(s_->live.count(p)) << "freeing a pointer that is not a segment";
    s_->live.erase(p);
    s_->live_bytes -= sizes_[p];
    sizes_.erase(p);
    ++s_->frees;
    std::free(p);
  }
  CA::StreamHandle current_stream() override { return s_->stream; }
  CA::EventHandle event_create() override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    auto* e = new MockState::Event;
    s_->events[e] = e;
    ++s_->events_created;
    return e;
  }
  void event_destroy(CA::EventHandle h) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    delete s_->events.at(h);
    s_->events.erase(h);
  }
  void event_record(CA::EventHandle h, CA::StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    if (s_->dead_streams.count(stream)) throw DeviceError("[mock] invalid resource handle");
    auto* e = s_->events.at(h);
    e->stream = stream;
    e->done = false;
  }
  bool event_query(CA::EventHandle h) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    if (s_->queries_until_failure == 0) {
      s_->queries_until_failure = -1;
      throw DeviceError("[mock] event query failed");
    }
    if (s_->queries_until_failure > 0) --s_->queries_until_failure;
    return s_->events.at(h)->done;
  }
  void event_synchronize(CA::EventHandle h) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->events.at(h)->done = true;
    ++s_->event_syncs;
  }
  void synchronize() override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    for (auto& [h, e] : s_->events) e->done = true;
    ++s_->syncs;
  }
  uint64_t capture_id(CA::StreamHandle stream) override {
    std::lock_guard<std::mutex> lock(s_->mutex);
    auto it = s_->capture_ids.find(stream);
    return it == s_->capture_ids.end() ? 0 : it->second;
  }

 private:
  std::shared_ptr<MockState> s_;
  std::map<void*, size_t> sizes_;
};

void* const kStreamA = reinterpret_cast<void*>(0x1000);
void* const kStreamB = reinterpret_cast<void*>(0x2000);

struct Fixture : ::testing::Test {
  std::shared_ptr<MockState> mock = std::make_shared<MockState>();
  std::unique_ptr<CA> alloc = std::make_unique<CA>(std::make_unique<MockBackend>(mock));
  cuda::MemoryStats stats() const { return alloc->stats(); }
};

using CachingAllocatorTest = Fixture;

char* at(void* p, size_t off) { return static_cast<char*>(p) + off; }

}  // namespace

TEST_F(CachingAllocatorTest, ZeroBytesIsNullAndNoAllocation) {
  EXPECT_EQ(alloc->allocate(0), nullptr);
  alloc->free(nullptr);
  EXPECT_EQ(stats().num_allocs, 0);
  EXPECT_EQ(mock->mallocs, 0);
}

TEST_F(CachingAllocatorTest, RoundsTo512Bytes) {
  void* a = alloc->allocate(1);
  EXPECT_EQ(stats().allocated_bytes, 512);
  EXPECT_EQ(stats().requested_bytes, 1);
  void* b = alloc->allocate(513);
  EXPECT_EQ(stats().allocated_bytes, 512 + 1024);
  void* c = alloc->allocate(1024);
  EXPECT_EQ(stats().allocated_bytes, 512 + 1024 + 1024);
  EXPECT_EQ(stats().requested_bytes, 1 + 513 + 1024);
  // Carved from one small segment, one after the other.
  EXPECT_EQ(b, at(a, 512));
  EXPECT_EQ(c, at(b, 1024));
  EXPECT_EQ(mock->mallocs, 1);
  for (void* p : {a, b, c}) alloc->free(p);
  EXPECT_EQ(stats().allocated_bytes, 0);
  EXPECT_EQ(stats().requested_bytes, 0);
}

TEST_F(CachingAllocatorTest, ReusesAFreedBlockWithoutAnotherMalloc) {
  void* a = alloc->allocate(4000);
  alloc->free(a);
  void* b = alloc->allocate(4000);
  EXPECT_EQ(a, b);
  EXPECT_EQ(mock->mallocs, 1);
  EXPECT_EQ(stats().num_allocs, 2);
  EXPECT_EQ(stats().num_frees, 1);
  EXPECT_EQ(stats().num_segment_allocs, 1);
  alloc->free(b);
}

TEST_F(CachingAllocatorTest, SmallAndLargePoolsUseSeparateSegments) {
  void* small = alloc->allocate(1 * MiB);  // the largest small request
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer));
  void* mid = alloc->allocate(1 * MiB + 1);  // large pool, a 20 MiB segment
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer + CA::kLargeBuffer));
  // >= 10 MiB and larger than the cached tail: its own segment, rounded to 2 MiB.
  void* big = alloc->allocate(25 * MiB);
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer + CA::kLargeBuffer + 26 * MiB));
  EXPECT_EQ(stats().segments, 3);
  // A small request never takes the large segment's free tail, even though it fits there.
  void* small2 = alloc->allocate(512 * KiB);
  EXPECT_EQ(small2, at(small, 1 * MiB));
  EXPECT_EQ(stats().segments, 3);
  // A second mid request takes the large segment's tail.
  void* mid2 = alloc->allocate(2 * MiB);
  EXPECT_EQ(mid2, at(mid, 1 * MiB + 512));
  EXPECT_EQ(stats().segments, 3);
  for (void* p : {small, mid, big, small2, mid2}) alloc->free(p);
  EXPECT_EQ(stats().allocated_bytes, 0);
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer + CA::kLargeBuffer + 26 * MiB));
}

TEST_F(CachingAllocatorTest, SplitsAndCoalescesWithinASegment) {
  void* a = alloc->allocate(100 * KiB);
  void* b = alloc->allocate(100 * KiB);
  void* c = alloc->allocate(100 * KiB);
  ASSERT_EQ(b, at(a, 100 * KiB));
  ASSERT_EQ(c, at(b, 100 * KiB));
  // The middle alone: a 100 KiB hole, reused by a request that fits, not by a bigger one.
  alloc->free(b);
  void* d = alloc->allocate(150 * KiB);
  EXPECT_NE(d, b);
  EXPECT_EQ(d, at(c, 100 * KiB));  // from the segment's free tail
  alloc->free(d);
  // Free both ends too: all three and the tail merge back into one free 2 MiB block, so a
  // request of the whole segment is served from it without a new malloc.
  alloc->free(a);
  alloc->free(c);
  void* whole = alloc->allocate(CA::kSmallSize);  // 1 MiB: larger than any single hole was
  EXPECT_EQ(whole, a);
  void* rest = alloc->allocate(CA::kSmallBuffer - CA::kSmallSize);
  EXPECT_EQ(rest, at(a, CA::kSmallSize));
  EXPECT_EQ(mock->mallocs, 1);
  alloc->free(whole);
  alloc->free(rest);
  // Fully coalesced: empty_cache can give the segment back.
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_EQ(mock->frees, 1);
}

TEST_F(CachingAllocatorTest, LargePoolDoesNotSplitOffSlivers) {
  // 19.5 MiB of a 20 MiB segment: the 0.5 MiB rest is a small size, so it is not split off
  // (it would otherwise serve small requests from a large segment).
  void* p = alloc->allocate(19 * MiB + 512 * KiB);
  EXPECT_EQ(stats().allocated_bytes, int64_t(CA::kLargeBuffer));
  alloc->free(p);
}

TEST_F(CachingAllocatorTest, PerStreamPoolsDoNotShareFreedBlocks) {
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  alloc->free(a);
  // On stream B the block freed on A is not reused: work queued on A may still use it.
  mock->stream = kStreamB;
  void* b = alloc->allocate(4096);
  EXPECT_NE(a, b);
  EXPECT_EQ(mock->mallocs, 2);
  // Back on A, A's block is reused.
  mock->stream = kStreamA;
  void* a2 = alloc->allocate(4096);
  EXPECT_EQ(a2, a);
  // The explicit-stream overload agrees.
  alloc->free(b);
  EXPECT_EQ(alloc->allocate(4096, kStreamB), b);
}

TEST_F(CachingAllocatorTest, RecordStreamDefersReuseUntilTheEventCompletes) {
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  alloc->record_stream(a, kStreamB);
  alloc->record_stream(a, kStreamA);  // its own stream: nothing to wait for
  alloc->free(a);
  EXPECT_EQ(mock->events_created, 1);
  EXPECT_EQ(stats().allocated_bytes, 0);  // no longer counted as allocated...
  void* b = alloc->allocate(4096);
  EXPECT_NE(b, a);  // ...but not reusable while stream B may still read it
  EXPECT_NE(alloc->summary().find("awaiting other streams"), std::string::npos);
  mock->finish(kStreamB);
  void* c = alloc->allocate(4096);
  EXPECT_EQ(c, a);  // the event completed: back in stream A's pool
  // The event is reused for the next record.
  alloc->record_stream(c, kStreamB);
  alloc->free(c);
  EXPECT_EQ(mock->events_created, 1);
  alloc->free(b);
  mock->finish(kStreamB);
}

TEST_F(CachingAllocatorTest, RecordStreamOfUnknownPointerIsIgnored) {
  int x = 0;
  alloc->record_stream(&x, kStreamB);
  EXPECT_FALSE(alloc->owns(&x));
}

TEST_F(CachingAllocatorTest, FreeOfUnknownPointerThrowsButDeallocateOnlyReports) {
  int x = 0;
  EXPECT_THROW(alloc->free(&x), ValueError);
  testing::internal::CaptureStderr();
  alloc->deallocate(&x, 4);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not allocated"), std::string::npos);
}

TEST_F(CachingAllocatorTest, StatsTrackAllocatedReservedAndPeaks) {
  void* a = alloc->allocate(3 * MiB);       // large: 20 MiB segment
  void* b = alloc->allocate(1000);          // small: 2 MiB segment
  auto s = stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(3 * MiB + 1024));
  EXPECT_EQ(s.reserved_bytes, int64_t(22 * MiB));
  EXPECT_EQ(s.active_blocks, 2);
  EXPECT_EQ(s.segments, 2);
  alloc->free(a);
  s = stats();
  EXPECT_EQ(s.allocated_bytes, 1024);
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(3 * MiB + 1024));
  EXPECT_EQ(s.reserved_bytes, int64_t(22 * MiB));  // cached, still reserved
  alloc->reset_peak_stats();
  s = stats();
  EXPECT_EQ(s.peak_allocated_bytes, 1024);
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(22 * MiB));
  alloc->empty_cache();
  s = stats();
  EXPECT_EQ(s.reserved_bytes, int64_t(2 * MiB));  // the small segment still has a live block
  EXPECT_EQ(s.peak_reserved_bytes, int64_t(22 * MiB));
  EXPECT_EQ(s.num_segment_frees, 1);
  alloc->free(b);
  EXPECT_EQ(stats().num_allocs, 2);
  EXPECT_EQ(stats().num_frees, 2);
}

TEST_F(CachingAllocatorTest, EmptyCacheReleasesOnlyUnusedSegments) {
  void* keep = alloc->allocate(100);
  void* drop = alloc->allocate(5 * MiB);
  alloc->free(drop);
  alloc->empty_cache();
  EXPECT_EQ(mock->frees, 1);
  EXPECT_EQ(mock->live.size(), 1u);
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer));
  EXPECT_GE(mock->syncs, 1);  // waited for the device before giving memory back
  // Still works afterwards.
  void* again = alloc->allocate(5 * MiB);
  EXPECT_NE(again, nullptr);
  alloc->free(again);
  alloc->free(keep);
}

TEST_F(CachingAllocatorTest, EmptyCacheWaitsForPendingStreamUses) {
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  alloc->record_stream(a, kStreamB);
  alloc->free(a);
  alloc->empty_cache();  // synchronizes the event, then the segment is whole and free
  EXPECT_EQ(mock->event_syncs, 1);
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_TRUE(mock->live.empty());
}

TEST_F(CachingAllocatorTest, OutOfMemoryOnceFreesTheCacheAndRetries) {
  void* a = alloc->allocate(15 * MiB);  // its own 16 MiB segment
  alloc->free(a);                       // cached
  mock->fail_next = 1;
  void* b = alloc->allocate(30 * MiB);
  EXPECT_NE(b, nullptr);
  auto s = stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes, int64_t(30 * MiB));  // the cached 16 MiB went back first
  EXPECT_EQ(mock->frees, 1);
  alloc->free(b);
}

TEST_F(CachingAllocatorTest, OutOfMemoryWhenEvenAnEmptyCacheCannotHelp) {
  mock->capacity = 40 * MiB;
  void* a = alloc->allocate(30 * MiB);
  EXPECT_THROW(alloc->allocate(12 * MiB), OutOfMemoryError);  // 30 + 12 > 40, `a` is live
  EXPECT_EQ(stats().num_alloc_retries, 1);
  EXPECT_EQ(stats().allocated_bytes, int64_t(30 * MiB));
  alloc->free(a);
  // Now the cached 30 MiB segment serves it, split.
  void* b = alloc->allocate(12 * MiB);
  EXPECT_EQ(b, a);
  EXPECT_EQ(mock->mallocs, 1);
  alloc->free(b);
}

TEST_F(CachingAllocatorTest, OutOfMemoryThrowsWithSizeDeviceAndSummaryAndRecovers) {
  void* live = alloc->allocate(3 * MiB);
  mock->fail_always = true;
  std::string msg;
  try {
    alloc->allocate(size_t(5) << 30);  // 5 GiB
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("[allocate]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5.00 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mock:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory summary"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3.00 MiB"), std::string::npos) << msg;  // what is allocated
  auto s = stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  // The allocator is intact: the live block is still accounted, new requests work again.
  mock->fail_always = false;
  void* p = alloc->allocate(4 * MiB);
  EXPECT_NE(p, nullptr);
  EXPECT_EQ(stats().allocated_bytes, int64_t(7 * MiB));
  alloc->free(p);
  alloc->free(live);
  EXPECT_EQ(stats().allocated_bytes, 0);
}

TEST_F(CachingAllocatorTest, SummaryIsReadable) {
  void* a = alloc->allocate(1536);
  std::string s = alloc->summary();
  EXPECT_NE(s.find("mock:0"), std::string::npos) << s;
  EXPECT_NE(s.find("allocated"), std::string::npos) << s;
  EXPECT_NE(s.find("1.50 KiB"), std::string::npos) << s;
  EXPECT_NE(s.find("reserved"), std::string::npos) << s;
  EXPECT_NE(s.find("2.00 MiB"), std::string::npos) << s;
  alloc->free(a);
}

TEST(FormatBytes, HumanUnits) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(uint64_t(1) << 50), "1.00 PiB");
}

// A side stream joined into the capture (it waited on an event of the capture stream, so CUDA
// reports the capture's id for it) allocates for the graph too: from the graph's pool, never
// from the general one, where its block would go to eager work while replays write it (issue
// 40, item 7). A stream outside the capture still gets the general pools.
TEST_F(CachingAllocatorTest, SideStreamJoinedIntoACaptureAllocatesFromTheGraphsPool) {
  mock->stream = kStreamA;
  void* const kCapture = reinterpret_cast<void*>(0x3000);
  void* cached_b = alloc->allocate(4096, kStreamB);
  alloc->free(cached_b);  // a free block of the general pool on stream B
  CA::PoolId pool = alloc->create_pool();
  alloc->begin_allocate_to_pool(pool, kCapture);
  mock->capture_ids[kCapture] = 41;  // cudaStreamBeginCapture
  mock->capture_ids[kStreamB] = 41;  // B joins the capture
  void* side = alloc->allocate(4096, kStreamB);
  EXPECT_NE(side, cached_b) << "the joined side stream took a block of the general pool";
  void* on_capture = alloc->allocate(4096, kCapture);
  EXPECT_NE(on_capture, cached_b);
  void* outside = alloc->allocate(4096, kStreamA);  // A is not capturing: the general pool
  alloc->free(outside);
  alloc->end_allocate_to_pool(pool);
  EXPECT_EQ(alloc->allocate(4096, kStreamA), outside);
  alloc->free(outside);
  mock->capture_ids.clear();  // the capture ended; B is an ordinary stream again
  alloc->free(side);          // the graph's side output dies; its block stays the graph's
  void* eager_b = alloc->allocate(4096, kStreamB);
  EXPECT_NE(eager_b, side) << "eager work on B was handed a block replays still write";
  EXPECT_EQ(eager_b, cached_b);
  alloc->free(eager_b);
  alloc->free(on_capture);
  alloc->release_pool(pool);
}

TEST_F(CachingAllocatorTest, GraphPoolServesCaptureAndKeepsItsSegments) {
  mock->stream = kStreamA;
  void* outside = alloc->allocate(4096);
  alloc->free(outside);  // cached in the default pool on stream A

  void* const kCapture = reinterpret_cast<void*>(0x3000);
  CA::PoolId pool = alloc->create_pool();
  alloc->begin_allocate_to_pool(pool, kCapture);
  void* g1 = alloc->allocate(4096, kCapture);
  EXPECT_NE(g1, outside);  // a private segment, not the default pool's block
  alloc->free(g1);         // freed during capture: reusable by the same capture only
  void* g2 = alloc->allocate(4096, kCapture);
  EXPECT_EQ(g2, g1);
  // Another stream during the capture is served from the default pools.
  EXPECT_EQ(alloc->allocate(4096, kStreamA), outside);
  alloc->free(outside);
  alloc->empty_cache();  // refused during a capture: nothing freed
  EXPECT_EQ(mock->frees, 0);
  alloc->end_allocate_to_pool(pool);

  // After the capture, the graph's block is never handed to anyone else.
  void* later = alloc->allocate(4096, kCapture);
  EXPECT_NE(later, g1);
  alloc->free(later);
  alloc->free(g2);  // the graph's output tensor dies; its segment stays for replays
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kSmallBuffer));  // the graph pool's segment
  EXPECT_NE(alloc->summary().find("graph pools"), std::string::npos);
  // Releasing the pool (graph destroyed) gives the segment back.
  alloc->release_pool(pool);
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_EQ(alloc->summary().find("graph pools"), std::string::npos);
}

TEST_F(CachingAllocatorTest, GraphPoolOutlivedByItsTensorsIsFreedWithTheLastOne) {
  void* const kCapture = reinterpret_cast<void*>(0x3000);
  CA::PoolId pool = alloc->create_pool();
  alloc->begin_allocate_to_pool(pool, kCapture);
  void* out = alloc->allocate(3 * MiB, kCapture);
  alloc->end_allocate_to_pool(pool);
  alloc->release_pool(pool);
  EXPECT_EQ(stats().reserved_bytes, int64_t(CA::kLargeBuffer));  // `out` is still alive
  alloc->free(out);
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_TRUE(mock->live.empty());
}

TEST_F(CachingAllocatorTest, RecordStreamDuringCaptureIsDeferredUntilItEnds) {
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  alloc->record_stream(a, kStreamB);
  void* const kCapture = reinterpret_cast<void*>(0x3000);
  CA::PoolId pool = alloc->create_pool();
  alloc->begin_allocate_to_pool(pool, kCapture);
  alloc->free(a);
  EXPECT_EQ(mock->events_created, 0);  // no event may be recorded during a capture
  alloc->end_allocate_to_pool(pool);
  EXPECT_EQ(mock->events_created, 1);
  EXPECT_NE(alloc->allocate(4096, kStreamA), a);
  mock->finish(kStreamB);
  EXPECT_EQ(alloc->allocate(4096, kStreamA), a);
  alloc->release_pool(pool);
}

TEST_F(CachingAllocatorTest, OutOfMemoryDuringCaptureDoesNotFreeTheCache) {
  void* a = alloc->allocate(15 * MiB);
  alloc->free(a);
  void* const kCapture = reinterpret_cast<void*>(0x3000);
  CA::PoolId pool = alloc->create_pool();
  alloc->begin_allocate_to_pool(pool, kCapture);
  mock->fail_next = 1;
  std::string msg;
  try {
    alloc->allocate(30 * MiB, kCapture);
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("captured"), std::string::npos) << msg;
  EXPECT_EQ(mock->frees, 0);
  alloc->end_allocate_to_pool(pool);
  alloc->release_pool(pool);
}

TEST_F(CachingAllocatorTest, DestructorReturnsEverySegment) {
  alloc->allocate(100);
  alloc->allocate(3 * MiB);
  void* c = alloc->allocate(20 * MiB);
  alloc->free(c);
  alloc.reset();
  EXPECT_TRUE(mock->live.empty());
  EXPECT_EQ(mock->live_bytes, 0u);
}

TEST_F(CachingAllocatorTest, ThreadsAllocateAndFreeConcurrently) {
  constexpr int kThreads = 4, kIters = 2000;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng{static_cast<unsigned>(t)};
      std::vector<std::pair<unsigned char*, size_t>> held;
      for (int i = 0; i < kIters; ++i) {
        if (held.size() > 8 || (!held.empty() && rng() % 2)) {
          auto [p, n] = held.back();
          held.pop_back();
          // Nobody else wrote into this block while we held it.
          for (size_t k = 0; k < n; k += 97)
            if (p[k] != static_cast<unsigned char>(t)) errors.fetch_add(1);
          alloc->free(p);
        } else {
          size_t n = (rng() % 2) ? 1 + rng() % 8192 : 1 + rng() % (3 * MiB);
          auto* p = static_cast<unsigned char*>(alloc->allocate(n, kStreamA));
          for (size_t k = 0; k < n; k += 97) p[k] = static_cast<unsigned char>(t);
          held.emplace_back(p, n);
        }
      }
      for (auto [p, n] : held) alloc->free(p);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  auto s = stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.active_blocks, 0);
  EXPECT_EQ(s.num_allocs, s.num_frees);
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_TRUE(mock->live.empty());
}

// Issue 18, item 5: freeing a block whose use stream cannot take an event (a stream destroyed
// behind the allocator's back) used to leave the block in no pool: its segment was never
// freed. Now the free waits for the device instead, returns the block, and still reports.
TEST_F(CachingAllocatorTest, AFailedEventRecordStillReturnsTheBlockToItsPool) {
  void* const kDead = reinterpret_cast<void*>(0x4000);
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  void* b = alloc->allocate(4096);  // a second stream use that does record fine
  alloc->record_stream(a, kStreamB);
  alloc->record_stream(a, kDead);
  mock->dead_streams.insert(kDead);
  const int syncs_before = mock->syncs;
  EXPECT_THROW(alloc->free(a), DeviceError);
  EXPECT_GT(mock->syncs, syncs_before);  // the device-wide wait replaced the missing event
  EXPECT_EQ(stats().allocated_bytes, 512 * 8);
  // The event recorded on B (if any) completed with that wait: the block is reusable.
  EXPECT_EQ(alloc->allocate(4096), a);
  alloc->free(a);
  alloc->free(b);
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_TRUE(mock->live.empty());
  // The same through deallocate (Storage's destructor): reported on stderr, not thrown.
  void* c = alloc->allocate(4096);
  alloc->record_stream(c, kDead);
  testing::internal::CaptureStderr();
  alloc->deallocate(c, 4096);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("invalid resource handle"), std::string::npos);
  EXPECT_EQ(alloc->allocate(4096), c);
  alloc->free(c);
}

// A query that throws halfway through the pending events leaves the rest pending, and none
// is counted twice: every event is destroyed exactly once and every segment is returned.
TEST_F(CachingAllocatorTest, AFailingEventQueryLeavesThePendingEventsConsistent) {
  mock->stream = kStreamA;
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) {
    blocks.push_back(alloc->allocate(4096));
    alloc->record_stream(blocks.back(), kStreamB);
  }
  for (void* p : blocks) alloc->free(p);
  mock->finish(kStreamB);
  mock->queries_until_failure = 1;  // the first pending event completes, the second query throws
  EXPECT_THROW(alloc->allocate(4096), DeviceError);
  EXPECT_EQ(mock->mallocs, 1);
  // The next allocation processes every event once: three blocks back, merged into one free
  // segment (a second pass over a stale entry would free a block twice or not at all).
  std::set<void*> got;
  for (int i = 0; i < 3; ++i) got.insert(alloc->allocate(4096));
  EXPECT_EQ(got, std::set<void*>(blocks.begin(), blocks.end()));
  EXPECT_EQ(mock->mallocs, 1);
  for (void* p : got) alloc->free(p);
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, 0);
  testing::internal::CaptureStderr();
  alloc.reset();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");  // no event destroyed twice
  EXPECT_TRUE(mock->events.empty());
}

// Issue 18, item 11: on out of memory, waiting for the pending stream uses can return a block
// that fits (its segment still holds a live block, so it stays cached). It is found before
// the second cudaMalloc; it used to end in OutOfMemoryError.
TEST_F(CachingAllocatorTest, OutOfMemoryFindsABlockItsPendingEventsReturned) {
  mock->stream = kStreamA;
  void* a = alloc->allocate(4096);
  void* keep = alloc->allocate(4096);  // keeps the segment from being released
  alloc->record_stream(a, kStreamB);
  alloc->free(a);  // pending on B: not reusable yet
  void* more = alloc->allocate(CA::kSmallSize);
  void* rest = alloc->allocate(CA::kSmallBuffer - CA::kSmallSize - 2 * 4096);  // segment full
  ASSERT_EQ(mock->mallocs, 1);
  mock->fail_always = true;
  void* b = nullptr;
  EXPECT_NO_THROW(b = alloc->allocate(4096));
  EXPECT_EQ(b, a);
  EXPECT_EQ(stats().num_alloc_retries, 1);
  EXPECT_EQ(stats().num_ooms, 0);
  mock->fail_always = false;
  for (void* p : {b, keep, more, rest}) alloc->free(p);
}

// Issue 18, item 12: a request whose rounding to 512 B or to a segment would wrap around is
// refused before anything is rounded (it used to come back as a tiny block).
TEST_F(CachingAllocatorTest, AbsurdSizesAreRefusedInsteadOfWrapping) {
  for (size_t n : {SIZE_MAX, SIZE_MAX - 100, CA::kMaxRequest + 1}) {
    std::string msg;
    try {
      void* p = alloc->allocate(n);
      ADD_FAILURE() << "allocated " << n << " bytes at " << p;
    } catch (const OutOfMemoryError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("[allocate]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mock:0"), std::string::npos) << msg;
  }
  EXPECT_EQ(mock->mallocs, 0);
  EXPECT_EQ(stats().allocated_bytes, 0);
}
