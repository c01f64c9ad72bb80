// detail::small_object_alloc / small_object_free (ember/storage.h): a freed block of a size
// class is the next one handed out for that class on the same thread; sizes above 1 KiB are
// not kept; blocks may be freed on another thread, including one that is exiting after its
// lists are gone; and tensors built on them behave (the lists are bypassed under ASan, where
// only the behaviour is checked).
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
  void* b = detail::small_object_alloc(193);  // same 16-byte class (193..208)
  if (kCached) EXPECT_EQ(b, a);
  void* c = detail::small_object_alloc(200);  // the list is empty again: a fresh block
  EXPECT_NE(c, b);
  detail::small_object_free(b, 193);
  detail::small_object_free(c, 200);
  // Above the largest class nothing is kept (a 4 KiB block is not handed out for 4 KiB later
  // by the lists; whatever operator new returns is fine, it just must work).
  void* big = detail::small_object_alloc(4096);
  std::memset(big, 0, 4096);
  detail::small_object_free(big, 4096);
  detail::small_object_free(nullptr, 64);  // a no-op
}

TEST(SmallObjects, BlocksMayBeFreedOnOtherThreadsAndAfterTheirListsAreGone) {
  std::vector<void*> blocks;
  for (int i = 0; i < 1000; ++i) blocks.push_back(detail::small_object_alloc(size_t(16 + i % 900)));
  // Freed by a worker that then exits (its lists keep at most 256 per class, the rest and
  // then the lists themselves go back to the system).
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
