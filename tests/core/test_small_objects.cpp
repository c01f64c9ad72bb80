// detail::small_object_alloc / small_object_free (ember/storage.h): a freed block of a size
// class is the next one handed out for that class on the same thread, by the same lists that
// hold small tensor data; sizes above 4 KiB are not kept; blocks may be freed on another
// thread, including one that is exiting after its lists are gone; and tensors built on them
// behave (the lists are bypassed under ASan, where only the behaviour is checked).
#include <cstring>
#include <thread>
#include <vector>

#include "ember/storage.h"
#include "support/test_support.h"

using namespace ember;

namespace {
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCached = false;
#else
constexpr bool kCached = true;
#endif
}  // namespace

TEST(SmallObjects, FreedBlocksAreReusedPerSizeClass) {
  void* a = detail::small_object_alloc(200);
  ASSERT_NE(a, nullptr);
  std::memset(a, 0xab, 200);  // the whole block is usable
  detail::small_object_free(a, 200);
  void* b = detail::small_object_alloc(193);  // same 64-byte class (193..256)
  if (kCached) {
    EXPECT_EQ(b, a);
  }
  void* c = detail::small_object_alloc(200);  // the list is empty again: a fresh block
  EXPECT_NE(c, b);
  detail::small_object_free(b, 193);
  detail::small_object_free(c, 200);
  // Above the largest class nothing is kept (an 8 KiB block comes from operator new; it just
  // must work).
  void* big = detail::small_object_alloc(8192);
  std::memset(big, 0, 8192);
  detail::small_object_free(big, 8192);
  detail::small_object_free(nullptr, 64);  // a no-op
}

// One set of lists: a block freed as a small object is the next small tensor's data of that
// class (no object an op creates is anywhere near 4000 bytes), and back.
TEST(SmallObjects, SmallTensorDataSharesTheLists) {
  void* a = detail::small_object_alloc(4000);
  detail::small_object_free(a, 4000);
  Tensor t = empty({1000});  // 4000 bytes of f32
  if (kCached) {
    EXPECT_EQ(t.data_ptr(), a);
  }
  void* data = t.data_ptr();
  t = Tensor();
  void* b = detail::small_object_alloc(3990);
  if (kCached) {
    EXPECT_EQ(b, data);
  }
  detail::small_object_free(b, 3990);
}

TEST(SmallObjects, BlocksMayBeFreedOnOtherThreadsAndAfterTheirListsAreGone) {
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) blocks.push_back(detail::small_object_alloc(size_t(16 + i % 900)));
  // Freed by a worker that then exits (its lists keep at most 256 per class and 64 KiB, the
  // rest and then the lists themselves go back to the system).
  std::thread([&] {
    for (size_t i = 0; i < blocks.size(); ++i) detail::small_object_free(blocks[i], size_t(16 + i % 900));
  }).join();
  // A thread_local object destroyed after the lists (it was constructed before them, so it is
  // destroyed after them) frees a block during the thread's exit.
  struct FreeAtExit {
    void* p = nullptr;
    ~FreeAtExit() { detail::small_object_free(p, 48); }
  };
  std::thread([] {
    thread_local FreeAtExit late;
    late.p = detail::small_object_alloc(48);
    detail::small_object_free(detail::small_object_alloc(48), 48);  // creates the lists
  }).join();
  SUCCEED();
}

TEST(SmallObjects, TensorsBuiltOnThemWorkAcrossThreads) {
  std::vector<Tensor> made;
  std::thread([&] {
    for (int i = 0; i < 500; ++i) made.push_back(full({3}, double(i)).reshape({3, 1}));
  }).join();
  for (int i = 0; i < 500; ++i) EXPECT_EQ(made[size_t(i)].sum().item<double>(), 3.0 * i);
  made.clear();  // freed on this thread
  Tensor x = ones({4}).requires_grad_(true);
  for (int i = 0; i < 100; ++i) (x * 2.0).sum().backward();
  EXPECT_EQ(x.grad().to_vector<double>(), std::vector<double>(4, 200.0));
}

// cpu_memory_stats counts the bytes tensors asked for while they live (small blocks from the
// lists and large cached ones alike), and the peak since the last reset.
TEST(CpuMemoryStats, LiveBytesAndPeakFollowTensors) {
  release_cached_host_memory();
  reset_peak_cpu_memory_stats();
  const CpuMemoryStats before = cpu_memory_stats();
  EXPECT_EQ(before.peak_allocated_bytes, before.allocated_bytes);
  {
    Tensor big = empty({1 << 18}, DType::f32);  // 1 MiB: a large block
    Tensor small = empty({10}, DType::f64);     // 80 B: a small one
    const CpuMemoryStats during = cpu_memory_stats();
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, (1 << 20) + 80);
    EXPECT_EQ(during.peak_allocated_bytes, during.allocated_bytes);
  }
  const CpuMemoryStats after = cpu_memory_stats();
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);  // the block cache does not count
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + (1 << 20) + 80);
  {
    Tensor again = empty({1 << 18}, DType::f32);  // from the cache this time: counted the same
    EXPECT_EQ(cpu_memory_stats().allocated_bytes, before.allocated_bytes + (1 << 20));
  }
  reset_peak_cpu_memory_stats();
  EXPECT_EQ(cpu_memory_stats().peak_allocated_bytes, before.allocated_bytes);
}
