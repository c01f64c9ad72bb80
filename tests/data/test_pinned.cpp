// Tensor::pin_memory / is_pinned, which loaders use for asynchronous host-to-device copies.
// Without a CUDA device pin_memory is the identity; with one it makes a page-locked copy from
// the pinned-memory cache (Note [caching host allocator]), which reuses a block only once the
// copies that used it have completed and never waits for the device to free one.
#include <atomic>
#include <thread>
#include <vector>

#include <ember/cuda_graph.h>
#include <ember/cuda_memory.h>
#include <ember/data.h>

#include "support/test_support.h"

using namespace ember;
using ember::test::message_of;

namespace {

TEST(PinMemory, WithoutCudaItIsTheIdentity) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  Tensor x = arange(6, DType::f32);
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_same(x));
  EXPECT_FALSE(p.is_pinned());
  EXPECT_FALSE(x.is_pinned());
}

TEST(PinMemory, ACudaTensorCannotBePinned) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor g = arange(4, DType::f32).to(Device::cuda());
  EXPECT_NE(message_of<DeviceError>([&] { g.pin_memory(); }).find("[pin_memory] only CPU tensors"),
            std::string::npos);
  EXPECT_FALSE(g.is_pinned());
}

TEST(PinMemory, MakesAPageLockedContiguousCopy) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor x = arange(12, DType::f32).reshape({3, 4});
  EXPECT_FALSE(x.is_pinned());
  Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_NE(p.storage(), x.storage());
  EXPECT_EQ(p.sizes(), x.sizes());
  EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
  EXPECT_TRUE(p.pin_memory().is_same(p)) << "pinning pinned memory is a no-op";

  // A strided source comes out contiguous with the same values.
  Tensor t = x.t();
  Tensor pt = t.pin_memory();
  EXPECT_TRUE(pt.is_pinned());
  EXPECT_TRUE(pt.is_contiguous());
  EXPECT_EQ(pt.to_vector<float>(), t.to_vector<float>());

  // The asynchronous copy to the device and back.
  Tensor d = p.to(Device::cuda(), /*non_blocking=*/true);
  cuda::synchronize();
  EXPECT_EQ(d.cpu().to_vector<float>(), x.to_vector<float>());
  Tensor labels = arange(5, DType::i64).pin_memory();
  EXPECT_EQ(labels.to(Device::cuda(), true).cpu().to_vector<int64_t>(),
            (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

// Issue 18, item 7: freeing a pinned tensor used to wait for every device. Now a freed
// block comes back only after the copy that read it has completed (here the copy queues
// behind long kernels, and the block's next owner overwrites it at once: a block reused
// too early would hand the copy the new values), freeing it does not wait (the stream is
// still busy right after), and in the steady state pinning makes no new page-locked
// allocation and frees none.
TEST(PinMemory, BlocksAreReusedOnlyAfterTheirCopiesComplete) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  // Each round of 8 GEMMs of 4096^3 is milliseconds of work, far longer than the host needs
  // to pin the next batch, so the copies stay queued behind them.
  Tensor busy = randn({4096, 4096}, dev);
  for (int round = 0; round < 3; ++round) {
    std::vector<Tensor> sources, copies;
    for (int i = 0; i < 8; ++i) {
      for (int k = 0; k < 8; ++k) busy = busy.matmul(busy).mul(1e-3);  // keep the stream busy
      Tensor x = full({1 << 18}, double(round * 100 + i));
      Tensor pinned = x.pin_memory();
      copies.push_back(pinned.to(dev, /*non_blocking=*/true));
      sources.push_back(x);
      pinned = Tensor();  // freed with its copy still queued
      EXPECT_FALSE(cuda::current_stream(0).query())
          << "freeing the pinned tensor waited for the device (round " << round << ", copy " << i << ")";
    }
    for (size_t i = 0; i < copies.size(); ++i)
      EXPECT_TRUE(test::all_close(copies[i].cpu(), sources[i], 0, 0)) << "round " << round << " copy " << i;
  }
  cuda::synchronize();
  // Steady state: the same sizes again only reuse cached blocks.
  const cuda::HostMemoryStats before = cuda::host_memory_stats();
  for (int i = 0; i < 20; ++i) {
    Tensor x = full({1 << 18}, double(i));
    Tensor d = x.pin_memory().to(dev, true);
    EXPECT_EQ(d.sum().item<double>(), double(i) * double(1 << 18));  // waits: its block is free again
  }
  const cuda::HostMemoryStats after = cuda::host_memory_stats();
  EXPECT_EQ(after.num_host_allocs, before.num_host_allocs);
  EXPECT_EQ(after.num_host_frees, before.num_host_frees);
  EXPECT_EQ(after.num_allocs - before.num_allocs, 20);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  cuda::host_empty_cache();
  EXPECT_LT(cuda::host_memory_stats().reserved_bytes, after.reserved_bytes);
}

// Issue 18 review, finding 4: a copy captured into a graph reads its pinned block at every
// replay. When the pinned tensor dies after the capture, the block must not go to the next
// pin_memory (whose values the replays would then copy) until the graph is reset and its
// replays have completed.
TEST(PinMemory, ABlockACapturedCopyReadsStaysOutOfUseUntilTheGraphIsReset) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  constexpr int64_t n = 1 << 16;
  const Tensor expected = full({n}, 7.0);
  cuda::Graph g;
  Tensor d;
  const void* captured_block = nullptr;
  {
    Tensor pinned = expected.pin_memory();
    captured_block = pinned.data_ptr();
    cuda::GraphCapture capture(g);
    d = pinned.to(dev, /*non_blocking=*/true);
  }  // `pinned` dies: only the graph still reads its block
  std::vector<Tensor> later;  // the next owners of blocks of that size write other values
  for (int i = 0; i < 4; ++i) {
    later.push_back(full({n}, double(100 + i)).pin_memory());
    EXPECT_NE(later.back().data_ptr(), captured_block) << "pinned tensor " << i;
  }
  for (int rep = 0; rep < 3; ++rep) {
    d.fill_(0.0);
    g.replay();
    EXPECT_TRUE(test::all_close(d.cpu(), expected, 0, 0)) << "replay " << rep;
  }
  // Once the graph is reset and its replays are done, the block is cached again: pinning
  // the same size class again allocates no new page-locked memory.
  later.clear();
  g.reset();
  cuda::synchronize();
  const cuda::HostMemoryStats before = cuda::host_memory_stats();
  std::vector<Tensor> again;
  for (int i = 0; i < 5; ++i) again.push_back(full({n}, 1.0).pin_memory());
  EXPECT_EQ(cuda::host_memory_stats().num_host_allocs, before.num_host_allocs);
}

// Issue 18's GPU test: one thread captures graphs while another pins tensors, copies them to
// the same device asynchronously and frees them. Freeing pinned memory used to synchronize
// every device, which invalidated the capture under way on the other thread.
TEST(PinMemory, CaptureWhileAnotherThreadFreesPinnedTensorsAndCopies) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  Tensor x = randn({1 << 16}, dev);
  const Tensor x_cpu = x.cpu();
  auto body = [](const Tensor& t) { return (t * 0.5 + 1).exp() - t; };
  const Tensor expected = body(x_cpu);
  (void)body(x);  // warm-up outside the captures

  constexpr int kMaxIterations = 100000;
  std::atomic<bool> stop{false};
  std::atomic<int> iterations{0};
  std::string worker_error;
  Tensor worker_sum;
  double worker_expected = 0;
  std::thread worker([&] {
    try {
      NoGradGuard worker_no_grad;
      Tensor acc = zeros({4096}, dev);
      int i = 0;
      for (; i < kMaxIterations && (!stop.load() || i < 50); ++i) {
        const double v = double(i % 7);  // sums stay exact in f32
        Tensor pinned = full({4096}, v).pin_memory();
        Tensor d = pinned.to(dev, /*non_blocking=*/true);
        pinned = Tensor();  // freed with its copy in flight
        acc.add_(d);
        worker_expected += v;
        iterations.store(i + 1);
      }
      worker_sum = acc.cpu();
    } catch (const std::exception& e) {
      worker_error = e.what();
    }
  });
  while (iterations.load() < 20 && worker_error.empty()) std::this_thread::yield();

  std::string capture_error;
  int captured = 0;
  try {
    for (int rep = 0; rep < 30; ++rep) {
      cuda::Graph g;
      Tensor y;
      {
        cuda::GraphCapture capture(g);
        y = body(x);
      }
      g.replay();
      EXPECT_TRUE(test::all_close(y.cpu(), expected, 1e-5, 1e-5)) << "capture " << rep;
      ++captured;
    }
  } catch (const std::exception& e) {
    capture_error = e.what();
  }
  stop.store(true);
  worker.join();
  EXPECT_EQ(capture_error, "");
  EXPECT_EQ(captured, 30);
  ASSERT_EQ(worker_error, "");
  ASSERT_TRUE(worker_sum.defined());
  EXPECT_TRUE(test::all_close(worker_sum, full({4096}, worker_expected), 0, 0));
}

}  // namespace
