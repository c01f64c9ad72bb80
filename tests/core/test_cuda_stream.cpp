// cuda::Stream, cuda::Event, StreamGuard, device properties and versions.
// Without a device (CI: CUDA compiled in, no GPU; or a CPU-only build) the CpuOnly cases check
// that everything fails with a clear DeviceError and nothing crashes; the Gpu cases skip. On
// a GPU the Gpu cases check timing, the current-stream switch, event ordering across streams
// and asynchronous copies from pinned memory, against CPU-computed references.
#include <string>

#include "support/test_support.h"

using namespace ember;
using test::message_of;

namespace {
#define SKIP_WITHOUT_GPU() EMBER_SKIP_WITHOUT_CUDA()

#define SKIP_WITH_GPU() \
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: covered by the Gpu cases"

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Several dependent kernels on the current stream, long enough that a missing wait on
// another stream would let that stream read stale values: y = x * 0.5 + 1, 16 times.
// Elements for the busy chains: enough to keep a GPU busy for a while; in the CUDA simulation
// (work on the CPU, one fiber per thread) a small tensor orders the streams just the same.
int64_t big_enough() { return cuda::is_simulated() ? int64_t(1) << 14 : int64_t(1) << 22; }

Tensor busy_chain(Tensor x) {
  for (int i = 0; i < 16; ++i) x = x.mul(0.5).add(1.0);
  return x;
}
}  // namespace

// ---- without a device ----

TEST(CudaStreamCpuOnly, ConstructorsThrowClearDeviceErrors) {
  SKIP_WITH_GPU();
  EXPECT_FALSE(cuda::is_available());
  EXPECT_EQ(cuda::device_count(), 0);
  for (const std::string& msg :
       {message_of<DeviceError>([] { cuda::Stream s; }),
        message_of<DeviceError>([] { cuda::Stream s(cuda::StreamOptions{.device = 0}); }),
        message_of<DeviceError>([] { cuda::Event e; }),
        message_of<DeviceError>([] { cuda::Event e(cuda::EventOptions{.enable_timing = true}); }),
        message_of<DeviceError>([] { (void)cuda::Stream::default_stream(); }),
        message_of<DeviceError>([] { (void)cuda::Stream::default_stream(0); }),
        message_of<DeviceError>([] { (void)cuda::Stream::priority_range(); }),
        message_of<DeviceError>([] { (void)cuda::current_stream(); }),
        message_of<DeviceError>([] { (void)cuda::current_stream(0); }),
        message_of<DeviceError>([] { (void)cuda::get_device_properties(0); })}) {
    // "[Stream] cuda:0 requested but no CUDA device is visible" or, in a CPU-only build,
    // "[Stream] this build of ember has no CUDA support".
    EXPECT_EQ(msg.rfind("[", 0), 0u) << msg;
    EXPECT_TRUE(contains(msg, "no CUDA device") || contains(msg, "no CUDA support")) << msg;
  }
  EXPECT_TRUE(contains(message_of<DeviceError>([] { cuda::Stream s; }), "[Stream]"));
  EXPECT_TRUE(contains(message_of<DeviceError>([] { cuda::Event e; }), "[Event]"));
}

TEST(CudaStreamCpuOnly, QueriesAnswerWithoutThrowing) {
  SKIP_WITH_GPU();
  cuda::synchronize();  // nothing to wait for
  EXPECT_NO_THROW((void)cuda::driver_version());
  EXPECT_NO_THROW((void)cuda::driver_version_number());
  const std::string runtime = cuda::runtime_version();
  if (runtime == "none") {  // CPU-only build
    EXPECT_EQ(cuda::runtime_version_number(), 0);
    EXPECT_EQ(cuda::driver_version(), "none");
  } else {  // CUDA compiled in: "CUDA 13.0" matches the number
    const int v = cuda::runtime_version_number();
    EXPECT_GE(v, 11000);
    EXPECT_EQ(runtime, "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10));
  }
  // Copies between CPU buffers never need CUDA.
  Tensor a = randn({64});
  Tensor b = a.to(Device::cpu(), true);
  EXPECT_TRUE(test::all_close(b, a, 0, 0));
}

// ---- on a GPU ----

TEST(CudaStreamGpu, DefaultAndCurrentStreams) {
  SKIP_WITHOUT_GPU();
  cuda::Stream def = cuda::Stream::default_stream(0);
  EXPECT_TRUE(def.is_default());
  EXPECT_EQ(def.device(), 0);
  EXPECT_EQ(cuda::current_stream(0), def);  // nothing changed it yet on this thread
  EXPECT_TRUE(cuda::current_stream().is_default());

  const auto [least, greatest] = cuda::Stream::priority_range(0);
  EXPECT_GE(least, greatest);  // lower numbers run first
  cuda::Stream high(cuda::StreamOptions{.device = 0, .priority = greatest, .non_blocking = true});
  EXPECT_FALSE(high.is_default());
  EXPECT_NE(high.handle(), nullptr);
  EXPECT_EQ(high.priority(), greatest);
  EXPECT_TRUE(high.non_blocking());
  cuda::Stream plain(cuda::StreamOptions{.device = 0});
  EXPECT_EQ(plain.priority(), 0);
  EXPECT_FALSE(plain.non_blocking());
  EXPECT_FALSE(high == plain);
  cuda::Stream copy = high;  // copies share the stream
  EXPECT_EQ(copy, high);
  high.synchronize();
  EXPECT_TRUE(high.query());
}

TEST(CudaStreamGpu, StreamGuardSwitchesAndRestores) {
  SKIP_WITHOUT_GPU();
  const cuda::Stream before = cuda::current_stream(0);
  cuda::Stream a(cuda::StreamOptions{.device = 0});
  cuda::Stream b(cuda::StreamOptions{.device = 0, .non_blocking = true});
  {
    cuda::StreamGuard ga(a);
    EXPECT_EQ(cuda::current_stream(0), a);
    EXPECT_EQ(ga.previous(), before);
    {
      cuda::StreamGuard gb(b);
      EXPECT_EQ(cuda::current_stream(0), b);
      EXPECT_EQ(gb.previous(), a);
    }
    EXPECT_EQ(cuda::current_stream(0), a);
  }
  EXPECT_EQ(cuda::current_stream(0), before);
  // A guard over a temporary Stream (pooled streams outlive every handle).
  {
    cuda::StreamGuard g(cuda::Stream(cuda::StreamOptions{.device = 0}));
    Tensor x = randn({1024}, Device::cuda(0));
    EXPECT_FALSE(cuda::current_stream(0).is_default());
    Tensor y = x.mul(2.0);
    EXPECT_TRUE(test::all_close(y.to(Device::cpu()), x.to(Device::cpu()).mul(2.0)));
  }
  EXPECT_EQ(cuda::current_stream(0), before);
}

TEST(CudaStreamGpu, EventsTimeAKernel) {
  SKIP_WITHOUT_GPU();
  Tensor x = randn({big_enough()}, Device::cuda(0));
  cuda::Event start(cuda::EventOptions{.device = 0, .enable_timing = true});
  cuda::Event end(cuda::EventOptions{.device = 0, .enable_timing = true});
  EXPECT_FALSE(start.recorded());
  EXPECT_TRUE(start.query());  // nothing recorded: complete
  start.record();
  Tensor y = busy_chain(x);
  end.record();
  const float ms = start.elapsed_time(end);
  EXPECT_GT(ms, 0.0f);
  EXPECT_LT(ms, 60e3f);
  EXPECT_TRUE(end.query());
  // Timing needs both events made with enable_timing.
  cuda::Event untimed(cuda::EventOptions{.device = 0});
  untimed.record();
  EXPECT_THROW((void)start.elapsed_time(untimed), ValueError);
  cuda::Event never(cuda::EventOptions{.device = 0, .enable_timing = true});
  EXPECT_THROW((void)start.elapsed_time(never), ValueError);
  // Move-only ownership: the moved-to event keeps the recording.
  cuda::Event moved = std::move(end);
  EXPECT_TRUE(moved.recorded());
  EXPECT_GE(start.elapsed_time(moved), 0.0f);
  EXPECT_TRUE(test::all_close(y.to(Device::cpu()), busy_chain(x.to(Device::cpu())), 1e-5, 1e-5));
}

TEST(CudaStreamGpu, SideStreamOrderedWithEvents) {
  SKIP_WITHOUT_GPU();
  Tensor host = randn({big_enough() / 4});
  const cuda::Stream main = cuda::current_stream(0);
  // Produced on the main stream by a chain of kernels...
  Tensor x = busy_chain(host.to(Device::cuda(0)));
  cuda::Event produced(cuda::EventOptions{.device = 0});
  produced.record(main);
  // ...consumed on a non-blocking side stream, which only the event orders after them.
  cuda::Stream side(cuda::StreamOptions{.device = 0, .non_blocking = true});
  side.wait(produced);
  Tensor y;
  {
    cuda::StreamGuard guard(side);
    y = x.mul(3.0).add(-1.0);
  }
  cuda::Event consumed(cuda::EventOptions{.device = 0});
  consumed.record(side);
  main.wait(consumed);
  Tensor expected = busy_chain(host).mul(3.0).add(-1.0);
  EXPECT_TRUE(test::all_close(y.to(Device::cpu()), expected, 1e-5, 1e-5));

  // wait_stream does the same with a hidden event.
  Tensor z;
  side.wait_stream(main);
  {
    cuda::StreamGuard guard(side);
    z = y.mul(2.0);
  }
  main.wait_stream(side);
  EXPECT_TRUE(test::all_close(z.to(Device::cpu()), expected.mul(2.0), 1e-5, 1e-5));
}

TEST(CudaStreamGpu, NonBlockingCopyFromPinnedMemory) {
  SKIP_WITHOUT_GPU();
  Tensor host = randn({big_enough() / 4});
  Tensor pinned = host.pin_memory();
  ASSERT_TRUE(pinned.is_pinned());
  cuda::Stream s(cuda::StreamOptions{.device = 0, .non_blocking = true});
  Tensor d;
  {
    cuda::StreamGuard guard(s);
    d = pinned.to(Device::cuda(0), /*non_blocking=*/true);  // queued on s
    d = d.mul(2.0);                                          // ordered after it on s
    s.synchronize();
  }
  EXPECT_TRUE(test::all_close(d.to(Device::cpu()), host.mul(2.0), 0, 0));
  // A blocking copy to pageable memory on a side stream is complete when it returns.
  Tensor back;
  {
    cuda::StreamGuard guard(s);
    back = d.to(Device::cpu());
  }
  EXPECT_TRUE(test::all_close(back, host.mul(2.0), 0, 0));
  // Pageable host memory with non_blocking is still correct (the copy waits).
  Tensor paged = host.to(Device::cuda(0), /*non_blocking=*/true);
  EXPECT_TRUE(test::all_close(paged.to(Device::cpu()), host, 0, 0));
}

TEST(CudaStreamGpu, DevicePropertiesAreSane) {
  SKIP_WITHOUT_GPU();
  for (int d = 0; d < cuda::device_count(); ++d) {
    const cuda::DeviceProperties p = cuda::get_device_properties(d);
    EXPECT_EQ(p.index, d);
    EXPECT_EQ(p.name, cuda::device_name(d));
    EXPECT_GE(p.major, 3);
    EXPECT_GT(p.multiprocessor_count, 0);
    EXPECT_GT(p.total_memory, size_t(1) << 30);
    EXPECT_GT(p.free_memory, 0u);
    EXPECT_LE(p.free_memory, p.total_memory);
    EXPECT_GT(p.l2_cache_size, 0);
    EXPECT_GT(p.clock_rate_khz, 100000);        // > 100 MHz
    EXPECT_GT(p.memory_clock_rate_khz, 100000);
    EXPECT_GT(p.memory_bus_width, 0);
    EXPECT_GT(p.peak_memory_bandwidth(), 1e10);  // > 10 GB/s
    EXPECT_EQ(p.warp_size, 32);
    EXPECT_GE(p.shared_memory_per_block_optin, p.shared_memory_per_block);
    EXPECT_GE(p.shared_memory_per_multiprocessor, p.shared_memory_per_block);
    EXPECT_EQ(p.pci_bus_id.size(), std::string("0000:00:00.0").size()) << p.pci_bus_id;
  }
  EXPECT_THROW((void)cuda::get_device_properties(cuda::device_count()), DeviceError);
  EXPECT_GE(cuda::driver_version_number(), cuda::runtime_version_number() / 1000 * 1000);
  EXPECT_NE(cuda::driver_version(), "none");
}
