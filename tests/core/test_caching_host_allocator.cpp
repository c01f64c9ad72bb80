// The pinned-memory cache's logic (core/src/caching_host_allocator.cpp, issue 18 item 7) on
// the CPU, through a mock backend: host memory for "page-locked" blocks, events that
// complete only when the test says their stream finished (or at once on an idle stream),
// streams that can be marked as capturing, and graph captures whose release the test
// triggers. The mock has no way to wait for a device at all: the cache never needs one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include <ember/caching_host_allocator.h>
#include <ember/error.h>

using namespace ember;

namespace {

using HA = CachingHostAllocator;

struct HostMock {
  std::set<void*> live;
  size_t live_bytes = 0, capacity = SIZE_MAX;
  int mallocs = 0, frees = 0;
  struct Event {
    int device = -1;
    void* stream = nullptr;
    bool done = true;
  };
  std::map<void*, Event*> events;
  std::vector<int> event_devices;  // the device of every event_create
  std::set<void*> capturing;       // streams being captured (by nothing hold_for_graph knows)
  std::set<void*> dead;            // recording on these throws
  std::set<void*> idle;            // nothing is queued on these: an event completes at once
  bool capture_under_way = false;

  // Graph captures as hold_for_graph sees them: the streams taking part in each (the capture
  // stream and joined side streams), and the releases their graphs will call.
  struct Capture {
    bool invalidated = false;
    bool ember = true;  // made by cuda::Graph (else nothing tells when its graph dies)
    std::map<const void*, HA::GraphRelease> releases;
  };
  std::map<int, Capture> captures;
  std::map<void*, int> capture_of;  // stream -> capture

  void finish(void* stream) {
    for (auto& [h, e] : events)
      if (e->stream == stream) e->done = true;
  }
  void begin_capture(int id, std::vector<void*> streams, bool ember = true) {
    captures[id].ember = ember;
    for (void* s : streams) capture_of[s] = id;
  }
  void end_capture(int id) {
    std::erase_if(capture_of, [&](const auto& entry) { return entry.second == id; });
  }
  // What cuda::Graph::reset does: every release, with the streams the graph was replayed on.
  void release_graph(int id, int device, const std::vector<void*>& replay_streams) {
    auto releases = std::move(captures[id].releases);
    captures[id].releases.clear();
    for (auto& [key, release] : releases) release(device, replay_streams);
  }
};

class HostMockBackend final : public HA::Backend {
 public:
  explicit HostMockBackend(std::shared_ptr<HostMock> m) : m_(std::move(m)) {}
  ~HostMockBackend() override {
    for (auto& [h, e] : m_->events) delete e;
    m_->events.clear();
  }
  void* malloc(size_t n) override {
    if (m_->live_bytes + n > m_->capacity) return nullptr;
    void* p = std::aligned_alloc(64, n);
    m_->live.insert(p);
    m_->live_bytes += n;
    sizes_[p] = n;
    ++m_->mallocs;
    return p;
  }
  void free(void* p) override {
    EXPECT_TRUE(m_->live.count(p)) << "freeing a pointer that is not a block";
    m_->live.erase(p);
    m_->live_bytes -= sizes_[p];
    ++m_->frees;
    std::free(p);
  }
  HA::EventHandle event_create(int device) override {
    auto* e = new HostMock::Event;
    e->device = device;
    m_->events[e] = e;
    m_->event_devices.push_back(device);
    return e;
  }
  void event_destroy(HA::EventHandle h) override {
    delete m_->events.at(h);
    m_->events.erase(h);
  }
  void event_record(HA::EventHandle h, int device, HA::StreamHandle stream) override {
    if (m_->dead.count(stream)) throw DeviceError("[mock] invalid resource handle");
    auto* e = m_->events.at(h);
    EXPECT_EQ(e->device, device) << "an event recorded on another device's stream";
    EXPECT_FALSE(m_->capturing.count(stream) || m_->capture_of.count(stream))
        << "an event recorded on a capturing stream";
    e->stream = stream;
    e->done = m_->idle.count(stream) != 0;
  }
  bool event_query(HA::EventHandle h) override { return m_->events.at(h)->done; }
  bool stream_capturing(int, HA::StreamHandle stream) override {
    return m_->capturing.count(stream) != 0 || m_->capture_of.count(stream) != 0;
  }
  bool capture_under_way() override { return m_->capture_under_way; }
  HA::CaptureHold hold_for_graph(int, HA::StreamHandle stream, const void* key,
                                 const HA::GraphRelease& release) override {
    auto it = m_->capture_of.find(stream);
    if (it == m_->capture_of.end()) return HA::CaptureHold::none;
    HostMock::Capture& c = m_->captures[it->second];
    if (c.invalidated) return HA::CaptureHold::invalidated;
    if (!c.ember) return HA::CaptureHold::unknown;
    return c.releases.try_emplace(key, release).second ? HA::CaptureHold::held
                                                       : HA::CaptureHold::held_before;
  }

 private:
  std::shared_ptr<HostMock> m_;
  std::map<void*, size_t> sizes_;
};

void* const kCopyStream = reinterpret_cast<void*>(0x100);
void* const kOtherStream = reinterpret_cast<void*>(0x200);
void* const kCaptureStream = reinterpret_cast<void*>(0x400);
void* const kSideStream = reinterpret_cast<void*>(0x500);  // joined into a capture

struct CachingHostAllocatorTest : ::testing::Test {
  std::shared_ptr<HostMock> mock = std::make_shared<HostMock>();
  std::unique_ptr<HA> alloc = std::make_unique<HA>(std::make_unique<HostMockBackend>(mock));
  cuda::HostMemoryStats stats() const { return alloc->stats(); }
};

}  // namespace

TEST_F(CachingHostAllocatorTest, SizesArePowersOfTwoAndFreedBlocksAreReused) {
  EXPECT_EQ(alloc->allocate(0), nullptr);
  void* a = alloc->allocate(3000);
  EXPECT_EQ(stats().allocated_bytes, 4096);
  EXPECT_EQ(stats().reserved_bytes, 4096);
  alloc->free(a);
  EXPECT_EQ(stats().allocated_bytes, 0);
  // Any request of the same class takes it back, with no new page-locked allocation.
  void* b = alloc->allocate(4096);
  EXPECT_EQ(b, a);
  void* c = alloc->allocate(100);  // the 512 B class: a block of its own
  EXPECT_NE(c, a);
  EXPECT_EQ(mock->mallocs, 2);
  EXPECT_EQ(stats().num_allocs, 3);
  EXPECT_EQ(stats().num_host_allocs, 2);
  EXPECT_EQ(stats().reserved_bytes, 4096 + 512);
  alloc->free(b);
  alloc->free(c);
  EXPECT_EQ(mock->frees, 0);  // nothing goes back in the steady state
}

TEST_F(CachingHostAllocatorTest, ABlockAnAsyncCopyUsedWaitsForItsEvent) {
  void* a = alloc->allocate(1 << 20);
  // A copy read a view in the middle of the block (any address inside counts).
  EXPECT_TRUE(alloc->record_use(static_cast<char*>(a) + 1000, 1, kCopyStream));
  EXPECT_TRUE(alloc->record_use(a, 1, kCopyStream));  // the same stream again: one event
  alloc->free(a);
  EXPECT_EQ(mock->event_devices, std::vector<int>{1});  // created on the copy's device only
  // The copy may still be reading: the next request of that size gets another block.
  void* b = alloc->allocate(1 << 20);
  EXPECT_NE(b, a);
  mock->finish(kCopyStream);
  void* c = alloc->allocate(1 << 20);
  EXPECT_EQ(c, a);  // its event completed: reused
  // The event is reused by the next free, on the same device.
  alloc->record_use(c, 1, kOtherStream);
  alloc->free(c);
  EXPECT_EQ(mock->event_devices.size(), 1u);
  alloc->free(b);
  EXPECT_EQ(stats().active_blocks, 0);
}

TEST_F(CachingHostAllocatorTest, EveryStreamOfEveryDeviceMustFinish) {
  void* a = alloc->allocate(4096);
  alloc->record_use(a, 0, kCopyStream);
  alloc->record_use(a, 2, kOtherStream);
  alloc->free(a);
  EXPECT_EQ(std::multiset<int>(mock->event_devices.begin(), mock->event_devices.end()),
            (std::multiset<int>{0, 2}));
  mock->finish(kCopyStream);
  void* b = alloc->allocate(4096);
  EXPECT_NE(b, a);  // the device-2 copy may still run
  mock->finish(kOtherStream);
  EXPECT_EQ(alloc->allocate(4096), a);
}

TEST_F(CachingHostAllocatorTest, RecordUseOutsideLiveBlocksIsIgnored) {
  int x = 0;
  EXPECT_FALSE(alloc->record_use(&x, 0, kCopyStream));
  EXPECT_FALSE(alloc->owns(&x));
  void* a = alloc->allocate(512);
  EXPECT_TRUE(alloc->owns(static_cast<char*>(a) + 511));
  EXPECT_FALSE(alloc->owns(static_cast<char*>(a) + 512));
  EXPECT_FALSE(alloc->record_use(static_cast<char*>(a) + 512, 0, kCopyStream));
  alloc->free(a);
  EXPECT_FALSE(alloc->owns(a));  // cached, not live
  EXPECT_FALSE(alloc->record_use(a, 0, kCopyStream));
  EXPECT_THROW(alloc->free(a), ValueError);  // freed twice
  EXPECT_THROW(alloc->free(&x), ValueError);
}

// No event may be recorded on a stream under capture: the block keeps that use until the
// capture has ended, then gets its event like any other.
TEST_F(CachingHostAllocatorTest, AUseOnACapturingStreamWaitsForTheCaptureToEnd) {
  void* a = alloc->allocate(4096);
  alloc->record_use(a, 0, kCopyStream);
  mock->capturing.insert(kCopyStream);
  alloc->free(a);
  EXPECT_TRUE(mock->events.empty());
  EXPECT_NE(alloc->allocate(4096), a);
  EXPECT_TRUE(mock->events.empty());
  mock->capturing.clear();
  void* b = alloc->allocate(4096);  // the deferred event is recorded now
  EXPECT_NE(b, a);
  EXPECT_EQ(mock->events.size(), 1u);
  mock->finish(kCopyStream);
  EXPECT_EQ(alloc->allocate(4096), a);
}

TEST_F(CachingHostAllocatorTest, EmptyCacheReleasesOnlyIdleBlocksAndNothingDuringACapture) {
  void* idle = alloc->allocate(4096);
  void* busy = alloc->allocate(8192);
  void* live = alloc->allocate(512);
  alloc->record_use(busy, 0, kCopyStream);
  alloc->free(idle);
  alloc->free(busy);
  mock->capture_under_way = true;  // freeing page-locked memory could break it
  alloc->empty_cache();
  EXPECT_EQ(mock->frees, 0);
  mock->capture_under_way = false;
  alloc->empty_cache();
  EXPECT_EQ(mock->frees, 1);  // `idle` only: `busy` awaits its copy, `live` is in use
  EXPECT_EQ(stats().reserved_bytes, 8192 + 512);
  EXPECT_EQ(stats().num_host_frees, 1);
  mock->finish(kCopyStream);
  alloc->empty_cache();
  EXPECT_EQ(mock->frees, 2);
  alloc->free(live);
  alloc->empty_cache();
  EXPECT_EQ(stats().reserved_bytes, 0);
  EXPECT_TRUE(mock->live.empty());
}

TEST_F(CachingHostAllocatorTest, OutOfPinnedMemoryReleasesIdleBlocksThenThrows) {
  mock->capacity = 64 * 1024;
  void* a = alloc->allocate(32 * 1024);
  alloc->free(a);  // idle, in the 32 KiB class
  void* b = alloc->allocate(64 * 1024);  // only fits once the idle block is released
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(mock->frees, 1);
  std::string msg;
  try {
    alloc->allocate(1024);
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("[pin_memory] cannot allocate 1.00 KiB of page-locked host memory"),
            std::string::npos)
      << msg;
  EXPECT_THROW(alloc->allocate(SIZE_MAX), OutOfMemoryError);  // no wrap to a tiny block
  alloc->free(b);
}

// A block whose event cannot be recorded is never handed out again: nothing could tell when
// the copy that used it is done.
TEST_F(CachingHostAllocatorTest, ABlockWhoseEventCannotBeRecordedIsNeverReused) {
  void* const kDead = reinterpret_cast<void*>(0x300);
  void* a = alloc->allocate(4096);
  alloc->record_use(a, 0, kDead);
  mock->dead.insert(kDead);
  EXPECT_THROW(alloc->free(a), DeviceError);
  for (int i = 0; i < 3; ++i) EXPECT_NE(alloc->allocate(4096), a);
  alloc->empty_cache();
  EXPECT_TRUE(mock->live.count(a));  // not freed either
}

// Issue 18 review, finding 4: a copy recorded into a graph reads the block at every replay.
// The event recorded when the capture ends completes at once (nothing runs on the capture
// stream: replays run on the streams replay() is called on), so the block must stay out of
// use until the graph is reset, and then until its replays on every stream have completed.
TEST_F(CachingHostAllocatorTest, ABlockACapturedCopyUsesWaitsForTheGraphsReplays) {
  void* a = alloc->allocate(4096);
  mock->begin_capture(1, {kCaptureStream, kSideStream});
  EXPECT_TRUE(alloc->record_use(a, 0, kCaptureStream));
  EXPECT_TRUE(alloc->record_use(a, 0, kSideStream));  // the same capture: held once
  EXPECT_EQ(mock->captures[1].releases.size(), 1u);
  alloc->free(a);
  mock->end_capture(1);
  mock->idle.insert(kCaptureStream);
  std::vector<void*> others;
  for (int i = 0; i < 3; ++i) {  // the graph replays meanwhile: the block is not handed out
    others.push_back(alloc->allocate(4096));
    EXPECT_NE(others.back(), a);
  }
  EXPECT_TRUE(mock->events.empty()) << "nothing to wait for before the graph is released";
  mock->release_graph(1, /*device=*/0, {kCopyStream, kOtherStream});  // replayed on both
  EXPECT_NE(alloc->allocate(4096), a);  // the last replays may still run
  mock->finish(kCopyStream);
  EXPECT_NE(alloc->allocate(4096), a);
  mock->finish(kOtherStream);
  EXPECT_EQ(alloc->allocate(4096), a);
}

TEST_F(CachingHostAllocatorTest, AGraphReleasedBeforeItsBlockIsFreedLeavesItsReplaysAsUses) {
  void* a = alloc->allocate(4096);
  mock->begin_capture(1, {kCaptureStream});
  alloc->record_use(a, 0, kCaptureStream);
  mock->end_capture(1);
  mock->release_graph(1, 2, {kCopyStream});  // the tensor outlives the graph
  alloc->free(a);
  EXPECT_EQ(mock->event_devices, std::vector<int>{2});  // on the graph's device
  EXPECT_NE(alloc->allocate(4096), a);
  mock->finish(kCopyStream);
  EXPECT_EQ(alloc->allocate(4096), a);
}

TEST_F(CachingHostAllocatorTest, EveryGraphHoldingABlockMustBeReleased) {
  void* a = alloc->allocate(4096);
  mock->begin_capture(1, {kCaptureStream});
  alloc->record_use(a, 0, kCaptureStream);
  mock->end_capture(1);
  mock->begin_capture(2, {kCaptureStream});
  alloc->record_use(a, 0, kCaptureStream);
  mock->end_capture(2);
  alloc->free(a);
  mock->release_graph(1, 0, {});  // never replayed: nothing to wait for, but graph 2 remains
  void* b = alloc->allocate(4096);
  EXPECT_NE(b, a);
  mock->release_graph(2, 0, {});
  EXPECT_EQ(alloc->allocate(4096), a);
  EXPECT_TRUE(mock->events.empty());
  alloc->free(b);
}

// An invalidated capture produces no graph: its copies never run. A capture ember did not
// make says nothing about when its graph dies: its block is never handed out again.
TEST_F(CachingHostAllocatorTest, UsesInInvalidatedOrForeignCaptures) {
  void* a = alloc->allocate(4096);
  mock->begin_capture(1, {kCaptureStream});
  mock->captures[1].invalidated = true;
  EXPECT_TRUE(alloc->record_use(a, 0, kCaptureStream));
  alloc->free(a);
  mock->end_capture(1);
  EXPECT_EQ(alloc->allocate(4096), a);

  void* b = alloc->allocate(8192);
  mock->begin_capture(2, {kSideStream}, /*ember=*/false);
  EXPECT_TRUE(alloc->record_use(b, 0, kSideStream));
  alloc->free(b);
  mock->end_capture(2);
  mock->idle.insert(kSideStream);
  for (int i = 0; i < 3; ++i) EXPECT_NE(alloc->allocate(8192), b);
  alloc->empty_cache();
  EXPECT_TRUE(mock->live.count(b));  // not freed either
  alloc->free(a);
}
