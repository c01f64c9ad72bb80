// The CUDA runtime glue of core (issue 18): device indices and tensor sizes that used to wrap
// (on the CPU), and on a GPU: streams that outlive their handles, errors that are reported
// once, and the caller's current device left as it was. GPU cases skip without a device.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>

#include <ember/cuda_memory.h>
#include <ember/cuda_stream.h>
#include <ember/storage.h>

#include "support/test_support.h"

using namespace ember;
using ember::test::all_close;
using ember::test::message_of;

// ---- on the CPU ----

// Device stores its index in an int8_t: cuda(200) used to become cuda:-56, which indexed the
// per-device allocator table out of bounds.
TEST(DeviceIndex, OutOfRangeIndicesAreRefused) {
  for (int bad : {-1, -56, 128, 200, 1 << 20}) {
    const std::string msg = message_of<ValueError>([&] { (void)Device::cuda(bad); });
    EXPECT_NE(msg.find("[Device] index " + std::to_string(bad) + " is out of range"), std::string::npos)
        << msg;
  }
  EXPECT_THROW((void)Device(DeviceType::CPU, -1), ValueError);
  EXPECT_EQ(Device::cuda(127).index, 127);
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  EXPECT_THROW((void)Device::parse("cuda:200"), ValueError);
  // An index written directly (a public field) is still refused where it would be used.
  Device d = Device::cuda(0);
  d.index = -56;
  EXPECT_THROW(zeros({2}, d), DeviceError);
}

// numel * itemsize used to wrap: a tensor of 2^62 f32 elements got a 0-byte allocation.
TEST(TensorSize, ShapesWhoseBytesOverflowAreRefused) {
  const int64_t big = int64_t(1) << 62;
  const std::string msg = message_of<ShapeError>([&] { (void)empty({big}, DType::f32); });
  EXPECT_NE(msg.find("[empty] a tensor of shape [4611686018427387904] and dtype f32 would need more than 2^63 bytes"),
            std::string::npos)
      << msg;
  EXPECT_THROW((void)empty({big, 8}, DType::u8), ShapeError);            // 2^65 elements
  EXPECT_THROW((void)empty({int64_t(1) << 32, int64_t(1) << 32}), ShapeError);  // 2^64 wraps to 0
  EXPECT_THROW((void)Shape({int64_t(1) << 40, int64_t(1) << 40}).numel(), ShapeError);
  // An empty tensor stays empty whatever its other sizes.
  EXPECT_EQ(Shape({int64_t(1) << 40, int64_t(1) << 40, 0}).numel(), 0);
  EXPECT_EQ(empty({big, big, 0}).numel(), 0);
  // Sizes that fit are unaffected (no allocation is made for these).
  EXPECT_EQ(Shape({int64_t(1) << 31, int64_t(1) << 31}).numel(), int64_t(1) << 62);
}

// The CPU allocator rounded large requests up to whole pages, which wrapped to 0 near SIZE_MAX.
TEST(TensorSize, AbsurdHostAllocationsAreRefused) {
  EXPECT_THROW(Storage(SIZE_MAX - 100, Device::cpu()), OutOfMemoryError);
  EXPECT_THROW(Storage(SIZE_MAX, Device::cpu()), OutOfMemoryError);
}

// ---- on a GPU ----

// A side stream's last handle dies while a tensor it used (record_stream) is still alive;
// the tensor is freed afterwards. Before streams were pooled, the stream was destroyed, the
// free recorded an event on the dead handle, failed, and stranded the block.
TEST(CudaRuntime, ADestroyedSideStreamAfterRecordStream) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  {  // warm-up: whatever the ops below create once (kernels, RNG state) is in the baseline
    Tensor w = randn({1 << 20}, dev) * 2;
  }
  cuda::synchronize();
  cuda::empty_cache();
  const int64_t baseline = cuda::memory_reserved(0);
  testing::internal::CaptureStderr();
  Tensor expected;
  {
    Tensor t = randn({1 << 20}, dev);  // 4 MiB, allocated on the default stream
    expected = t.cpu() * 2;
    Tensor on_side;
    {
      cuda::Stream side(cuda::StreamOptions{.device = 0, .non_blocking = true});
      side.wait_stream(cuda::current_stream(0));
      {
        cuda::StreamGuard guard(side);
        on_side = t * 2;  // reads t on the side stream
      }
      cuda::record_stream(t, side.handle());
      cuda::current_stream(0).wait_stream(side);
    }  // the side stream's last handle is gone
    EXPECT_TRUE(all_close(on_side.cpu(), expected));
    t = Tensor();  // freed now: its event goes on the side stream
  }
  cuda::synchronize();
  cuda::empty_cache();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(cuda::memory_reserved(0), baseline);
  EXPECT_EQ(cuda::memory_allocated(0), cuda::memory_stats(0).allocated_bytes);
}

// Streams come from a bounded pool: constructing many gives at most 32 distinct CUDA streams
// of one kind, each still usable.
TEST(CudaRuntime, StreamsComeFromABoundedPool) {
  EMBER_SKIP_WITHOUT_CUDA();
  const auto [least, greatest] = cuda::Stream::priority_range(0);
  std::set<cuda::StreamHandle> handles;
  for (int i = 0; i < 100; ++i) {
    cuda::Stream s(cuda::StreamOptions{.device = 0, .priority = greatest, .non_blocking = true});
    EXPECT_EQ(s.priority(), greatest);
    EXPECT_TRUE(s.non_blocking());
    handles.insert(s.handle());
  }
  EXPECT_LE(handles.size(), 32u);
  (void)least;
  Tensor x = randn({1000});
  cuda::Stream s(cuda::StreamOptions{.device = 0, .priority = greatest, .non_blocking = true});
  s.wait_stream(cuda::current_stream(0));
  Tensor y;
  {
    cuda::StreamGuard guard(s);
    y = x.to(Device::cuda(0)) + 1;
  }
  s.synchronize();
  EXPECT_TRUE(all_close(y.cpu(), x + 1));
}

// Issue 18, item 10: a failing CUDA call that was caught used to stay latched as the thread's
// last error, and the next launch check (of an unrelated kernel that succeeded) threw it.
// The failing call is a device-to-device copy far past both allocations, which
// cudaMemcpyAsync refuses (cudaErrorInvalidValue, not a sticky error). It runs in a child
// process (a threadsafe death test re-runs only this test there), so that a driver that
// faulted instead could not poison the other GPU tests of this binary.
TEST(CudaRuntimeDeathTest, ACaughtCudaFailureIsNotReportedAgainByTheNextLaunch) {
  EMBER_SKIP_WITHOUT_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const Device dev = Device::cuda(0);
        Tensor a = zeros({256}, TensorOptions(DType::u8).device(dev));
        Tensor b = zeros({256}, TensorOptions(DType::u8).device(dev));
        const std::string msg = message_of<DeviceError>([&] {
          cuda::detail::copy_bytes(b.data_ptr(), dev, a.data_ptr(), dev, size_t(1) << 40);
        });
        bool ok = msg.find("[cuda] cudaMemcpyAsync") != std::string::npos;
        if (!ok) std::fprintf(stderr, "the copy did not fail as expected: %s\n", msg.c_str());
        try {  // the next kernels launch and check cleanly
          Tensor x = randn({1000});
          Tensor y = x.to(dev) * 3 + 1;
          ok = ok && all_close(y.cpu(), x * 3 + 1);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "the next launch failed: %s\n", e.what());
          ok = false;
        }
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Issue 18, item 8: every runtime call that switches devices puts the caller's device back.
// Observable only with two devices: the current stream's device is the current device.
TEST(CudaRuntime, EveryCallPutsTheCallersDeviceBack) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  ASSERT_EQ(cuda::current_stream().device(), 0);
  Tensor on_zero = zeros({1}, Device::cuda(0));  // the caller works on cuda:0 (its context exists)
  const Device other = Device::cuda(1);
  Tensor x = randn({4096});
  Tensor y = x.to(other);                        // copy_bytes
  EXPECT_EQ(cuda::current_stream().device(), 0);
  const Tensor m = y.reshape({64, 64});
  Tensor z = m.matmul(m).sum();                 // a cuBLASLt GEMM and a reduction on cuda:1
  EXPECT_EQ(cuda::current_stream().device(), 0);
  cuda::synchronize(1);                          // used to leave cuda:1 current
  EXPECT_EQ(cuda::current_stream().device(), 0);
  (void)cuda::get_device_properties(1);
  EXPECT_EQ(cuda::current_stream().device(), 0);
  cuda::Stream s(cuda::StreamOptions{.device = 1});
  cuda::Event e(cuda::EventOptions{.device = 1});
  e.record(s);
  e.synchronize();
  EXPECT_EQ(cuda::current_stream().device(), 0);
  Tensor pinned = x.pin_memory();
  Tensor w = pinned.to(other, /*non_blocking=*/true);
  pinned = Tensor();
  cuda::host_empty_cache();
  EXPECT_EQ(cuda::current_stream().device(), 0);
  EXPECT_TRUE(all_close(w.cpu(), x));
  EXPECT_TRUE(std::isfinite(z.item<double>()));
}

// A copy between two devices runs on the destination's current stream after the source
// device's current stream (and the source stream waits for the copy), so neither side sees the
// other's memory early. In the CUDA simulation (tests/CMakeLists.txt: two simulated devices,
// work deferred until something waits for it) a missing wait reads the source unwritten.
TEST(CudaRuntime, CopiesBetweenDevicesFollowBothStreams) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  Tensor x = randn({4096});
  Tensor a = x.to(Device::cuda(0)) * 3 + 1;  // produced by kernels on cuda:0
  Tensor b = a.to(Device::cuda(1));          // copied on cuda:1's stream
  Tensor c = (b * 2).to(Device::cuda(0));    // and back, after cuda:1's kernel
  EXPECT_TRUE(all_close(c.cpu(), (x * 3 + 1) * 2));
  EXPECT_TRUE(all_close(b.cpu(), x * 3 + 1));
}

// synchronize() of every device waits only for devices this process has a context on: waiting
// on another would create its context (issue 40, item 6). Each ctest case is its own process,
// so cuda:0 has none yet unless the test's set-up made one.
TEST(CudaRuntime, SynchronizeAllCreatesNoContext) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (cuda::detail::primary_context_active(0)) GTEST_SKIP() << "cuda:0 already has a context in this process";
  cuda::synchronize();
  EXPECT_FALSE(cuda::detail::primary_context_active(0));
  // With work on the device, the same call waits for it.
  Tensor y = randn({1 << 20}).to(Device::cuda(0)) * 3;
  cuda::synchronize();
  EXPECT_TRUE(cuda::detail::primary_context_active(0));
  EXPECT_TRUE(std::isfinite(y.sum().item<double>()));
}

// A thread that never chose a device (cudaGetDevice reads 0) and works only on cuda:1 creates
// no context on cuda:0: the guards do not "restore" a device nothing ran on.
TEST(CudaRuntime, WorkOnOneDeviceCreatesNoContextOnDeviceZero) {
  EMBER_SKIP_WITHOUT_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  if (cuda::detail::primary_context_active(0)) GTEST_SKIP() << "cuda:0 already has a context in this process";
  std::thread([] {
    Tensor y = randn({256}).to(Device::cuda(1));
    Tensor z = (y * 2).sum();
    EXPECT_TRUE(std::isfinite(z.item<double>()));
  }).join();
  EXPECT_FALSE(cuda::detail::primary_context_active(0));
}
