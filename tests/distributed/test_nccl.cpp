// The NCCL backend on a real GPU (these skip without one): a polled, unfinished collective
// leaves no error behind for the next launch; creating a communicator whose peer never arrives
// fails after the timeout instead of blocking; DDP's last gradient hook does not make the host
// wait for the GPU; a collective that does not finish within the timeout ends the job (the
// watchdog), and an exit without finalize() does not; threads that wait and launch at once are
// serialized on the communicator; Works and tensors may outlive their group; init() without
// NCCL leaves the current device alone. Each runs on this rank's own GPU, in a world of one or
// one GPU per rank.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "../../distributed/src/backends.h"  // make_nccl_group: a communicator with a missing peer
#include "dist_util.h"

using namespace ember;
using namespace ember::test;
using Clock = std::chrono::steady_clock;

namespace {

// Queues work on the current stream of `dev` that keeps it busy for at least `ms` milliseconds
// on any GPU, far longer than the host work a test does meanwhile: exact-f32 GEMMs (no TF32,
// so no faster path than the one timed), as many as a timed run says fill the time, twice
// over. Returns the last result.
Tensor keep_stream_busy(Device dev, double ms = 1000) {
  cuda::AllowTF32Guard exact(false);
  const Tensor a = randn({4096, 4096}, dev).mul_(1.0 / 64);  // a @ a stays O(1)
  Tensor out = a.matmul(a);  // warm-up: cuBLAS set-up and heuristics, outside the timing
  cuda::synchronize(dev.index);
  cuda::Event start({.device = dev.index, .enable_timing = true}), stop({.device = dev.index, .enable_timing = true});
  start.record();
  for (int i = 0; i < 4; ++i) out = a.matmul(a);
  stop.record();
  const double per_gemm = std::max(double(start.elapsed_time(stop)) / 4, 1e-3);  // waits for both
  const int n = int(std::min(2.0 * ms / per_gemm + 1, 100000.0));
  for (int i = 0; i < n; ++i) out = a.matmul(a);  // one stream: each runs after the previous
  return out;
}

distributed::WorkPtr all_reduce_async(distributed::ProcessGroup& pg, const Tensor& t) {
  return pg.all_reduce(t, distributed::ReduceOp::sum, /*async_op=*/true);
}

}  // namespace

// Issue 18, item 1: cudaEventQuery answering cudaErrorNotReady also latches it as the thread's
// last error; before the fix the next launch check (cudaGetLastError) threw it against a launch
// that had succeeded.
TEST(Nccl, PollingAnUnfinishedCollectiveLeavesNoErrorForTheNextLaunch) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto pg = distributed::default_group(dev);
  Tensor t = ones({1 << 20}, dev);
  pg->all_reduce(t);  // warm up: the first collective connects the ranks
  t.fill_(1.0);
  Tensor busy = keep_stream_busy(dev);
  auto work = pg->all_reduce(t, distributed::ReduceOp::sum, /*async_op=*/true);
  EXPECT_FALSE(work->is_completed()) << "the collective waits for the busy stream";
  Tensor other;
  ASSERT_NO_THROW(other = full({16}, 2.0, dev).mul(3.0)) << "an ordinary launch after the poll";
  work->wait();
  EXPECT_TRUE(all_close(t.cpu(), std::vector<double>(size_t(1) << 20, double(world())), 0, 0));
  EXPECT_TRUE(all_close(other.cpu(), std::vector<double>(16, 6.0), 0, 0));
  EXPECT_TRUE(work->is_completed());
  EXPECT_TRUE(std::isfinite(busy.sum().item<double>()));
}

// Issue 18, item 20: a rank that died before init (here: a peer that never exists). Before the
// fix ncclCommInitRank blocked forever; the non-blocking init fails after the timeout.
TEST(Nccl, InitWithAMissingPeerFailsAfterTheTimeout) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  const auto start = Clock::now();
  const std::string msg = message_of<distributed::DistributedError>([&] {
    distributed::detail::make_nccl_group(/*rank=*/0, /*size=*/2, dev.index, [](void*, size_t) {},
                                         std::chrono::seconds(2));
  });
  const double s = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(msg.find("ncclCommInitRankConfig on rank 0 did not complete within 2 s"), std::string::npos) << msg;
  EXPECT_GE(s, 2.0);
  EXPECT_LT(s, 60.0);
  // The failed attempt left nothing behind: the default group still works.
  Tensor t = ones({4}, dev);
  distributed::default_group(dev)->all_reduce(t);
  EXPECT_TRUE(all_close(t.cpu(), std::vector<double>(4, double(world())), 0, 0));
}

// Issue 18, item 20: the last gradient hook orders the stream after the reductions instead of
// waiting for them on the host, so backward() returns while the GPU still works (before the fix
// it returned only once everything queued before the reductions had finished), and the step
// that follows still sees the averaged gradients (values against a CPU reference).
TEST(Nccl, DdpBackwardReturnsBeforeTheGpuFinishes) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  const int64_t per_rank = 6, rows = per_rank * world();
  manual_seed(7);
  Mlp ref;
  manual_seed(7);
  Mlp net;
  net.to(dev);
  distributed::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.0005});  // several buckets
  optim::SGD ref_opt(ref.parameters(), {.lr = 0.1}), opt(net.parameters(), {.lr = 0.1});
  Generator gen(11);
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({rows, 8}, DType::f32, &gen), y = randint(0, 4, {rows}, DType::i64, &gen);
    ref_opt.zero_grad();
    cross_entropy(ref.forward(x), y).backward();
    ref_opt.step();

    Tensor xl = x.narrow(0, my_rank() * per_rank, per_rank).to(dev), yl = y.narrow(0, my_rank() * per_rank, per_rank).to(dev);
    opt.zero_grad();
    Tensor loss = cross_entropy(ddp.forward([&] { return net.forward(xl); }), yl);
    Tensor busy;
    cuda::Event busy_done;
    if (step == 2) {  // steps 0 and 1 warm up (kernels loaded, NCCL connected)
      busy = keep_stream_busy(dev);
      busy_done.record();
    }
    loss.backward();
    if (step == 2) {
      EXPECT_FALSE(busy_done.query()) << "backward() waited on the host for the GPU";
    }
    opt.step();
  }
  auto pn = net.parameters(), pr = ref.parameters();
  for (size_t i = 0; i < pn.size(); ++i) EXPECT_LT(max_abs_diff(pn[i].cpu(), pr[i]), 1e-4) << i;
}

// Note [NCCL watchdog]: a collective that has not finished within the group's timeout ends the
// job with a message, even while the host is blocked in a synchronization behind it. Here the
// collective waits for a busy stream (a second) against a 50 ms timeout. A death test:
// gtest re-runs this binary for the statement (only in a world of one).
TEST(NcclDeathTest, CollectivePastTheTimeoutEndsTheJob) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  if (world() > 1) GTEST_SKIP() << "a death test re-runs the binary alone: only in the single-process run";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto pg = distributed::default_group(dev);
        Tensor t = ones({16}, dev);
        pg->all_reduce(t);  // connected, on the default timeout
        pg->set_timeout(std::chrono::milliseconds(50));
        Tensor busy = keep_stream_busy(dev);
        pg->all_reduce(t);
        (void)t.sum().item<double>();  // blocks behind the collective
        std::this_thread::sleep_for(std::chrono::seconds(30));
        std::exit(0);  // the watchdog did not fire
      },
      ::testing::ExitedWithCode(1), "all_reduce\\] rank 0: the NCCL collective did not finish within 0.05 s");
}

// Note [NCCL comm lock]: Work::wait() polls the communicator (ncclCommGetAsyncError) on the
// thread that calls it, here a second thread, while the first issues collectives on the same
// communicator (and the watchdog polls it too). Before the fix these NCCL calls ran
// concurrently, which NCCL does not support (a finished call's job could be cleaned up twice).
TEST(Nccl, WaitingOnAnotherThreadWhileLaunchingIsSafe) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  auto pg = distributed::default_group(dev);
  constexpr int kN = 1500;
  std::vector<Tensor> ts(kN);
  std::vector<distributed::WorkPtr> works(kN);
  std::atomic<int> issued{0};
  std::exception_ptr waiter_error;
  std::thread waiter([&] {
    try {
      for (int i = 0; i < kN; ++i) {
        while (issued.load() <= i) std::this_thread::yield();
        works[size_t(i)]->wait();
      }
    } catch (...) {
      waiter_error = std::current_exception();
      issued = kN + 1;  // nothing left to wait for
    }
  });
  for (int i = 0; i < kN && issued.load() <= kN; ++i) {
    ts[size_t(i)] = full({64}, double(i % 97), dev);
    works[size_t(i)] = all_reduce_async(*pg, ts[size_t(i)]);
    issued = i + 1;
  }
  waiter.join();
  if (waiter_error) std::rethrow_exception(waiter_error);
  cuda::synchronize(dev.index);  // every stream of the device, the communication stream included
  for (int i = 0; i < kN; ++i)
    ASSERT_TRUE(all_close(ts[size_t(i)].cpu(), std::vector<double>(64, double(i % 97) * world()), 0, 0)) << i;
}

// A Work and the tensors of its collective may outlive the group (issue 18 review, items 2 and
// 5). Before the fix wait() polled the destroyed communicator (a use after free), and freeing
// the tensor recorded an event on the destroyed communication stream ("[free] ..." on stderr,
// or worse, on an unrelated stream that reused the handle). Here a private group of one.
TEST(Nccl, WorksAndTensorsOutliveTheirGroup) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  Tensor t = full({1 << 16}, 3.0, dev);
  distributed::WorkPtr work;
  {
    auto pg = distributed::detail::make_nccl_group(/*rank=*/0, /*size=*/1, dev.index, [](void*, size_t) {},
                                                   std::chrono::seconds(60));
    Tensor busy = keep_stream_busy(dev, 200);  // the collective is still queued when the group goes
    work = all_reduce_async(*pg, t);
  }  // ~NcclProcessGroup: finalize (flushes the collective), destroy
  ::testing::internal::CaptureStderr();
  ASSERT_NO_THROW(work->wait());
  EXPECT_TRUE(work->is_completed());
  EXPECT_TRUE(all_close(t.cpu(), std::vector<double>(size_t(1) << 16, 3.0), 0, 0));
  const int64_t reserved_before_free = cuda::memory_reserved(dev.index);
  t = Tensor();  // its block was record_stream()ed on the group's stream
  work.reset();
  cuda::synchronize(dev.index);
  Tensor again = zeros({1 << 16}, dev);  // the freed block serves a new tensor
  cuda::synchronize(dev.index);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "");
  EXPECT_LE(cuda::memory_reserved(dev.index), reserved_before_free) << "the freed block was not reused";
}

// Note [NCCL watchdog]: main() ends without finalize() (here exit() from inside the test, with
// collectives still queued behind a busy stream): the atexit hook stops the watchdog before the
// CUDA runtime and NCCL tear down, so a query failing during teardown cannot abort the job. The
// exit status stays 0. A death test (re-runs the binary alone): only in a world of one.
TEST(NcclDeathTest, ExitWithoutFinalizeIsNotAFailure) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  if (world() > 1) GTEST_SKIP() << "a death test re-runs the binary alone: only in the single-process run";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto pg = distributed::default_group(dev);
        Tensor t = ones({1 << 16}, dev);
        pg->all_reduce(t);
        Tensor busy = keep_stream_busy(dev, 300);
        for (int i = 0; i < 20; ++i) all_reduce_async(*pg, t);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [device choice], issue 18 review item 9: init() without NCCL makes no GPU current (a
// CPU job creates no CUDA context, which an exclusive-process GPU would refuse); with NCCL it
// makes the rank's GPU current. Needs two GPUs: a local rank that chooses another GPU than the
// current one. A death test, so that the re-initialized environment dies with it.
TEST(NcclDeathTest, InitWithoutNcclLeavesTheCurrentDeviceAlone) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  if (world() > 1) GTEST_SKIP() << "a death test re-runs the binary alone: only in the single-process run";
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs (a local rank must choose another GPU than the current one)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int other = dev.index == 0 ? 1 : 0;  // main()'s init() made `dev` current
  EXPECT_EXIT(
      {
        distributed::finalize();
        setenv("LOCAL_RANK", std::to_string(other).c_str(), 1);
        distributed::init({.nccl = false});
        const int chosen = distributed::local_device(DeviceType::CUDA).index;
        const int without = cuda::current_stream().device();
        distributed::finalize();
        distributed::init({.nccl = true});
        const int with = cuda::current_stream().device();
        std::fprintf(stderr, "chosen cuda:%d, current without NCCL cuda:%d, with NCCL cuda:%d\n", chosen, without, with);
        std::exit(chosen == other && without == dev.index && with == other ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}
