// cuBLASLt specifics of the CUDA GEMM (ops/cuda/linalg.cu, ops/cuda/cublaslt.cu) on a GPU
// (skipped without one), against the CPU's linear as the reference.
#include "ember/ops/linalg.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

// Issue 18, item 18: the bias epilogue reads the bias with vector loads, and the heuristic
// cannot be told the bias pointer's alignment. A bias view that starts 1..7 elements into its
// storage (2..28 bytes: never 16-byte aligned for most offsets) must give the right result
// (it is copied to an aligned vector first), for every GEMM dtype.
TEST(CublasLt, LinearWithABiasViewOffTheSixteenByteGrid) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(5);
  const Tensor x = randn({37, 64}), w = randn({48, 64}), b_all = randn({56});
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const double tol = t == DType::f32 ? 2e-2 : 1e-1;  // TF32 / half-precision inputs
    const Tensor xd = x.to(t).to(dev), wd = w.to(t).to(dev), bd = b_all.to(t).to(dev);
    for (int64_t offset : {1, 2, 3, 5, 7}) {
      const Tensor bias = bd.narrow(0, offset, 48);
      const Tensor expected = ops::linear(x.to(t).to(DType::f32), w.to(t).to(DType::f32),
                                          b_all.to(t).to(DType::f32).narrow(0, offset, 48));
      const Tensor got = ops::linear(xd, wd, bias).cpu().to(DType::f32);
      EXPECT_TRUE(all_close(got, expected, tol, tol)) << dtype_name(t) << " bias offset " << offset;
    }
  }
}

// Issue 18 review, finding 3: inside a capture that an illegal call has invalidated, every
// cuBLASLt launch fails, whatever the algorithm. The fallback over algorithms used to count
// each as a failed algorithm and remember that for the process, so that every later eager
// GEMM of that shape threw "no algorithm". Now the GEMM in the broken capture throws, and
// nothing is remembered.
TEST(CublasLt, AGemmInABrokenCaptureCostsLaterEagerGemmsNothing) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  manual_seed(11);
  // A shape no other test multiplies, so that its cache entry is made here.
  const Tensor a = randn({40, 72}), b = randn({72, 56});
  const Tensor ad = a.to(dev), bd = b.to(dev);
  const Tensor expected = a.matmul(b);
  cuda::Graph g;
  g.capture_begin();
  // Querying a capturing stream is illegal: it invalidates the capture.
  EXPECT_THROW((void)cuda::current_stream().query(), Error);
  const std::string in_capture = message_of<Error>([&] { (void)ad.matmul(bd); });
  EXPECT_NE(in_capture.find("invalidated"), std::string::npos) << in_capture;
  EXPECT_THROW(g.capture_end(), Error);
  for (int i = 0; i < 2; ++i)
    EXPECT_TRUE(all_close(ad.matmul(bd).cpu(), expected, 2e-2, 2e-2)) << "eager GEMM " << i;
}

// Issue 18 review, finding 6d: a GEMM on a side stream joined into a capture is part of the
// graph, so it must use the capture's workspace (from the graph's pool), not the one the
// side stream uses eagerly: eager GEMMs on that stream would scribble on it while the graph
// replays. Seen from outside: the capture allocates the same memory as when the GEMM runs on
// the capture stream itself (the side stream's eager workspace exists beforehand, so using it
// would allocate less).
TEST(CublasLt, AGemmOnASideStreamJoinedIntoACaptureUsesTheCapturesWorkspace) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  manual_seed(12);
  const Tensor a = randn({128, 1024}), b = randn({1024, 96});
  const Tensor ad = a.to(dev), bd = b.to(dev);
  const Tensor expected = a.matmul(b);
  const cuda::Stream side(cuda::StreamOptions{.non_blocking = true});
  {
    const cuda::StreamGuard on_side(side);
    (void)ad.matmul(bd);  // the side stream's eager workspace
  }
  cuda::synchronize();

  // Bytes a capture of the GEMM allocates, and its result tensor.
  auto capture = [&](cuda::Graph& g, bool on_side_stream) {
    const int64_t before = cuda::memory_allocated(0);
    Tensor c;
    {
      cuda::GraphCapture capturing(g);
      if (on_side_stream) {
        side.wait_stream(cuda::current_stream());  // joins the capture
        {
          const cuda::StreamGuard on_side(side);
          c = ad.matmul(bd);
        }
        cuda::current_stream().wait_stream(side);  // and rejoins it
      } else {
        c = ad.matmul(bd);
      }
    }
    return std::make_pair(cuda::memory_allocated(0) - before, c);
  };
  cuda::Graph on_capture_stream, on_side_stream;
  auto [capture_stream_bytes, c_main] = capture(on_capture_stream, false);
  auto [side_stream_bytes, c_side] = capture(on_side_stream, true);
  EXPECT_EQ(side_stream_bytes, capture_stream_bytes);
  for (int rep = 0; rep < 2; ++rep) {
    c_main.fill_(0.0);
    c_side.fill_(0.0);
    on_side_stream.replay();
    on_capture_stream.replay();
    EXPECT_TRUE(all_close(c_main.cpu(), expected, 2e-2, 5e-2)) << "replay " << rep;
    EXPECT_TRUE(all_close(c_side.cpu(), expected, 2e-2, 5e-2)) << "replay " << rep;
  }
}

}  // namespace
}  // namespace ember::test
