// The CUDA caching allocator and graphs on a real GPU (each test skips without one), and the
// CPU-only promises of ember/cuda_memory.h (zeros, no throw) that CI checks.
#include "support/test_support.h"

#include <ember/cuda_graph.h>
#include <ember/cuda_memory.h>
#include <ember/cuda_stream.h>

using namespace ember;
using ember::test::all_close;

namespace {
#define SKIP_WITHOUT_CUDA() EMBER_SKIP_WITHOUT_CUDA()

int64_t round512(int64_t n) { return (n + 511) / 512 * 512; }
}  // namespace

TEST(CudaMemory, WithoutADeviceStatsAreZeroAndNothingThrows) {
  if (cuda::is_available()) GTEST_SKIP() << "checks the no-device behaviour";
  EXPECT_EQ(cuda::memory_allocated(), 0);
  EXPECT_EQ(cuda::memory_reserved(), 0);
  EXPECT_EQ(cuda::max_memory_allocated(), 0);
  EXPECT_EQ(cuda::max_memory_reserved(), 0);
  EXPECT_EQ(cuda::memory_stats().num_allocs, 0);
  EXPECT_NO_THROW(cuda::reset_peak_memory_stats());
  EXPECT_NO_THROW(cuda::empty_cache());
  EXPECT_NE(cuda::memory_summary().find("no CUDA"), std::string::npos) << cuda::memory_summary();
  cuda::Graph g;  // constructible; using it says why not
  EXPECT_FALSE(g.is_captured());
  EXPECT_THROW(g.capture_begin(), DeviceError);
  EXPECT_THROW(g.replay(), Error);  // DeviceError (no CUDA) or ValueError (nothing captured)
  EXPECT_THROW(cuda::record_stream(ones({2}), nullptr), DeviceError);
}

TEST(CudaMemory, StatsFollowTensorsAndEmptyCacheReleases) {
  SKIP_WITHOUT_CUDA();
  cuda::synchronize();
  cuda::empty_cache();
  const auto before = cuda::memory_stats(0);
  const int64_t n = 1000 * 1000 + 3;  // f32: 4 MB + 12 B, large pool
  {
    Tensor t = randn({n}, Device::cuda(0));
    const auto during = cuda::memory_stats(0);
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, round512(4 * n));
    EXPECT_EQ(during.requested_bytes - before.requested_bytes, 4 * n);
    EXPECT_GE(during.reserved_bytes - before.reserved_bytes, round512(4 * n));
    EXPECT_GE(during.peak_allocated_bytes, during.allocated_bytes);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
  }
  const auto after = cuda::memory_stats(0);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_GT(after.reserved_bytes, before.reserved_bytes);  // cached, not returned
  EXPECT_GE(after.peak_allocated_bytes, before.allocated_bytes + round512(4 * n));
  // The cached block is reused: no new segment for the same size.
  {
    Tensor t = randn({n}, Device::cuda(0));
    EXPECT_EQ(cuda::memory_stats(0).num_segment_allocs, after.num_segment_allocs);
  }
  cuda::reset_peak_memory_stats(0);
  EXPECT_EQ(cuda::max_memory_allocated(0), cuda::memory_allocated(0));
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(0), before.reserved_bytes);
  const std::string summary = cuda::memory_summary(0);
  EXPECT_NE(summary.find("cuda:0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("reserved"), std::string::npos) << summary;
}

TEST(CudaMemory, ValuesSurviveBlockReuse) {
  SKIP_WITHOUT_CUDA();
  // Free and reallocate many times on the same stream: values computed on the GPU always
  // match the CPU, so a reused block is never clobbered by pending work.
  for (int i = 0; i < 20; ++i) {
    Tensor a = randn({257, 33});
    Tensor b = randn({257, 33});
    Tensor ga = a.to(Device::cuda(0)), gb = b.to(Device::cuda(0));
    Tensor gc = ga * gb + ga;
    ga = Tensor();
    gb = Tensor();
    Tensor junk = randn({257, 33}, Device::cuda(0));  // likely reuses ga's block
    EXPECT_TRUE(all_close(gc.to(Device::cpu()), a * b + a));
  }
}

TEST(CudaMemory, ImpossibleRequestThrowsOutOfMemoryAndTheProcessContinues) {
  SKIP_WITHOUT_CUDA();
  Tensor keep = randn({1024}, Device::cuda(0));
  const auto before = cuda::memory_stats(0);
  std::string msg;
  try {
    // 1 PiB of bytes.
    Tensor huge = empty({int64_t(1) << 50}, TensorOptions(DType::u8).device(Device::cuda(0)));
    ADD_FAILURE() << "a 1 PiB allocation succeeded";
  } catch (const OutOfMemoryError& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("1.00 PiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memory summary"), std::string::npos) << msg;
  const auto after = cuda::memory_stats(0);
  EXPECT_EQ(after.num_ooms, before.num_ooms + 1);
  EXPECT_EQ(after.num_alloc_retries, before.num_alloc_retries + 1);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  // Still usable.
  Tensor x = randn({64, 64});
  EXPECT_TRUE(all_close((keep.to(Device::cpu()) * 2).sum(), (keep * 2).sum().to(Device::cpu()),
                        1e-5, 1e-4));
  EXPECT_TRUE(all_close(x.to(Device::cuda(0)).add(1).to(Device::cpu()), x.add(1)));
}

TEST(CudaMemory, RecordStreamAcceptsACudaTensor) {
  SKIP_WITHOUT_CUDA();
  Tensor t = randn({16}, Device::cuda(0));
  EXPECT_NO_THROW(cuda::record_stream(t, nullptr));  // its own stream: a no-op
  EXPECT_THROW(cuda::record_stream(randn({2}), nullptr), DeviceError);
}

// A block freed while a side stream still reads it (record_stream) is not handed to the next
// allocation of its own stream until the side stream's work is done. In the CUDA simulation
// (deferred streams) the side stream's read runs when the host synchronizes with it, after
// the default stream's next writes: without the record_stream the same-sized tensor below
// takes the block, its fill lands first and the side stream reads 7s.
TEST(CudaMemory, RecordStreamKeepsABlockUntilTheSideStreamIsDone) {
  SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const int64_t n = 1 << 16;
  Tensor t = randn({n}, dev);
  Tensor expected = t.cpu() * 2;
  cuda::Stream side(cuda::StreamOptions{.device = 0, .non_blocking = true});
  side.wait_stream(cuda::current_stream(0));
  Tensor on_side;
  {
    cuda::StreamGuard guard(side);
    on_side = t * 2;  // reads t on the side stream
  }
  cuda::record_stream(t, side.handle());
  t = Tensor();  // freed while the side stream may still read it
  Tensor u = full({n}, 7.0, TensorOptions().device(dev));  // same size, the default stream
  EXPECT_TRUE(all_close(u.cpu(), full({n}, 7.0)));
  Tensor result;
  {
    cuda::StreamGuard guard(side);
    result = on_side.cpu();
  }
  EXPECT_TRUE(all_close(result, expected));
}

namespace {
Tensor graph_body(const Tensor& x, const Tensor& w) { return exp(x * w + 1) * 0.5 + x; }
}  // namespace

TEST(CudaGraph, ReplayMatchesEagerAndSeesInPlaceInputChanges) {
  SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  const Device dev = Device::cuda(0);
  Tensor x = (randn({4096}) * 0.5).to(dev);
  Tensor w = (randn({4096}) * 0.5).to(dev);
  Tensor eager = graph_body(x, w).to(Device::cpu());  // also warms up the kernels

  cuda::Graph g;
  Tensor y;
  const int64_t reserved_before = cuda::memory_reserved(0);
  {
    cuda::GraphCapture capture(g);
    y = graph_body(x, w);
  }
  ASSERT_TRUE(g.is_captured());
  // Capture records, it does not run: replay computes y.
  g.replay();
  EXPECT_TRUE(all_close(y.to(Device::cpu()), eager, 1e-5, 1e-6));
  const void* y_ptr = y.data_ptr();

  // New input written in place: the replay reads it through the captured pointer.
  Tensor x2 = randn({4096}) * 0.5;
  x.copy_(x2.to(dev));
  g.replay();
  Tensor expected = graph_body(x2, w.to(Device::cpu()));
  EXPECT_TRUE(all_close(y.to(Device::cpu()), expected, 1e-5, 1e-6));
  EXPECT_EQ(y.data_ptr(), y_ptr);

  // The graph's pool keeps its memory through empty_cache while the graph lives.
  cuda::empty_cache();
  EXPECT_GT(cuda::memory_reserved(0), 0);
  (void)reserved_before;
  g.reset();
  EXPECT_FALSE(g.is_captured());
  EXPECT_THROW(g.replay(), ValueError);
}

TEST(CudaGraph, ItemInsideACaptureFailsCleanly) {
  SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  Tensor x = randn({16}, Device::cuda(0));
  cuda::Graph g;
  // A device->host read is illegal during capture: the read itself or capture_end throws,
  // and afterwards the thread's stream and the allocator are back to normal.
  EXPECT_THROW(
      {
        cuda::GraphCapture capture(g);
        (void)(x * 2).sum().item<float>();
      },
      Error);
  EXPECT_FALSE(g.is_captured());
  Tensor z = randn({16});
  EXPECT_TRUE(all_close(z.to(Device::cuda(0)).mul(3).to(Device::cpu()), z.mul(3)));
  // The graph can be captured again.
  Tensor y;
  g.capture_begin();
  y = x * 2;
  g.capture_end();
  g.replay();
  EXPECT_TRUE(all_close(y.to(Device::cpu()), x.to(Device::cpu()) * 2));
}

TEST(CudaGraph, MisuseIsAnError) {
  SKIP_WITHOUT_CUDA();
  cuda::Graph g;
  EXPECT_THROW(g.capture_end(), ValueError);
  EXPECT_THROW(g.replay(), ValueError);
  g.capture_begin();
  EXPECT_THROW(g.capture_begin(), ValueError);
  g.capture_end();  // an empty capture is fine
  EXPECT_THROW(g.capture_begin(), ValueError);  // holds a capture: reset() first
  g.reset();
}

// A side stream joined into a capture (it waits on an event the capture stream recorded)
// allocates for the graph: its block comes from the graph's pool and stays the graph's after
// the tensor dies, so eager work on that stream never gets memory replays still write (issue
// 40, item 7: the allocator matches on CUDA's capture id, not on the capture stream).
TEST(CudaGraph, SideStreamJoinedIntoTheCaptureAllocatesFromTheGraphsPool) {
  SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  const Device dev = Device::cuda(0);
  const int64_t n = 1 << 16;
  Tensor x = randn({n}).to(dev);
  cuda::Stream side;
  {  // warm-up: the kernels and the side stream's first use outside the capture
    cuda::StreamGuard on_side(side);
    (void)(x + 1);
  }
  cuda::synchronize();
  cuda::Graph g;
  Tensor y, z;
  {
    cuda::GraphCapture capture(g);
    y = x * 2;
    cuda::Event fork;
    fork.record();
    side.wait(fork);  // the side stream joins the capture
    {
      cuda::StreamGuard on_side(side);
      z = y + 1;  // allocated on the side stream, during the capture
    }
    cuda::Event rejoin;
    rejoin.record(side);
    cuda::current_stream().wait(rejoin);
  }
  g.replay();
  cuda::synchronize();
  EXPECT_TRUE(all_close(z.to(Device::cpu()), x.to(Device::cpu()) * 2 + 1));
  const void* z_ptr = z.data_ptr();
  z = Tensor();  // the graph's side output dies; replays still write its block
  Tensor eager;
  {
    cuda::StreamGuard on_side(side);
    eager = empty({n}, dev);
  }
  EXPECT_NE(eager.data_ptr(), z_ptr) << "eager work on the side stream got the graph's block";
  cuda::synchronize();
}
