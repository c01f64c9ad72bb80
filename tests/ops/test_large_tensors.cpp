// Tensors above 2^31 elements on CUDA: every index, offset and grid computation must be 64-bit.
// Each op's result is compared with a chunked reference: the same op over pieces below 2^31
// elements (paths the other CUDA tests compare with the CPU), combined on the host in f64. They
// need a card with tens of GB free (an H100 has 80); with less they skip and say how much.
#include <cmath>

#include <ember/ops/index.h>

#include "support/test_support.h"

using namespace ember;

namespace {

constexpr int64_t kBig = (int64_t(1) << 31) + 4099;  // past 2^31, not a multiple of anything nice

// Skips unless `bytes` are free on cuda:0 (after the caching allocator's cache is released).
#define EMBER_SKIP_UNLESS_FREE(bytes)                                                              \
  do {                                                                                            \
    EMBER_SKIP_WITHOUT_CUDA();                                                                    \
    cuda::empty_cache();                                                                          \
    const size_t free_bytes = cuda::get_device_properties(0).free_memory;                         \
    if (free_bytes < size_t(bytes))                                                               \
      GTEST_SKIP() << "needs " << (size_t(bytes) >> 30) << " GiB free on cuda:0, the card has "   \
                   << (free_bytes >> 30) << " GiB free";                                          \
  } while (0)

// max |a - b| / max |b|, in `dt` (f32 for the big ones: f64 temporaries of a 3 GiB tensor would
// need more memory than the op under test).
double max_rel(const Tensor& a, const Tensor& b, DType dt = DType::f64) {
  return (a.to(dt) - b.to(dt)).abs().max().item<double>() / std::max(1e-30, b.to(dt).abs().max().item<double>());
}

}  // namespace

// A small view whose offsets pass 2^31 elements: 2 rows of 64 in an f16 storage of 2 x kBig
// (8 GiB, of which the ops touch a few pages). Every kernel below indexes it with a row offset
// of kBig elements, so an offset computed in 32 bits reads or writes the wrong place. It runs in
// the CUDA simulation too (its allocations from 1 GiB up are mapped lazily): the seeded 32-bit
// offset bug of scripts/sim_mutants.py fails it there.
TEST(LargeTensorsCuda, SmallViewWithOffsetsPastTwoToTheThirtyOne) {
  EMBER_SKIP_UNLESS_FREE(int64_t(9) << 30);
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  Tensor big = empty({2 * kBig}, TensorOptions(DType::f16).device(dev));
  Tensor v = big.view({2, kBig}).narrow(1, 0, 64);  // strides {kBig, 1}
  ASSERT_FALSE(v.is_contiguous());
  Tensor src = randn({2, 64}).to(DType::f16);
  v.copy_(src.to(dev));  // elementwise copy into the strided view
  Tensor cpu_view = src.to(DType::f32);
  EXPECT_TRUE(test::all_close(v.to(Device::cpu()).to(DType::f32), cpu_view, 0, 0));
  EXPECT_EQ(big.narrow(0, kBig + 5, 1).to(DType::f32).item<float>(), cpu_view[1][5].item<float>());
  // A scan and a reduction along the rows of the view, against the CPU on the same values.
  EXPECT_TRUE(test::all_close(v.to(DType::f32).cumsum(1).to(Device::cpu()), cpu_view.cumsum(1), 1e-5, 1e-5));
  EXPECT_TRUE(test::all_close(v.cumsum(1).to(Device::cpu()).to(DType::f32), src.cumsum(1).to(DType::f32), 1e-2, 1e-2));
  EXPECT_TRUE(test::all_close(v.to(DType::f32).sum({1}).to(Device::cpu()), cpu_view.sum({1}), 1e-5, 1e-5));
}

// A broadcast add in f16 over kBig elements ([kBig / 4099, 4099] + [4099]), checked piece by
// piece against the same add on row ranges below 2^31 elements.
TEST(LargeTensorsCuda, BroadcastAddInF16PastTwoToTheThirtyOne) {
  EMBER_SKIP_UNLESS_FREE(int64_t(14) << 30);
  const Device dev = Device::cuda(0);
  const int64_t cols = 4099, rows = kBig / cols + 1;
  ASSERT_GT(rows * cols, int64_t(1) << 31);
  NoGradGuard no_grad;
  Tensor x = randn({rows, cols}, TensorOptions(DType::f16).device(dev));
  Tensor b = randn({cols}, TensorOptions(DType::f16).device(dev));
  Tensor y = x + b;
  const int64_t piece = (int64_t(1) << 30) / cols;  // rows per piece: ~2^30 elements
  for (int64_t r0 = 0; r0 < rows; r0 += piece) {
    const int64_t n = std::min(piece, rows - r0);
    Tensor ref = x.narrow(0, r0, n) + b;
    EXPECT_EQ(y.narrow(0, r0, n).ne(ref).sum().item<int64_t>(), 0) << "rows " << r0 << ".." << r0 + n;
  }
  // The last element, whose flat index is past 2^31.
  EXPECT_EQ(y.select(0, rows - 1).select(0, cols - 1).item<double>(),
            (x.select(0, rows - 1).select(0, cols - 1) + b.select(0, cols - 1)).item<double>());
}

// sum over kBig f32 elements, all at once and along each dim of a 2-d view, against f64 sums
// of pieces.
TEST(LargeTensorsCuda, SumPastTwoToTheThirtyOne) {
  EMBER_SKIP_UNLESS_FREE(int64_t(20) << 30);
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  Tensor x = rand({kBig}, dev);  // positive: no cancellation to blur the comparison
  double ref = 0;
  const int64_t piece = int64_t(1) << 30;
  for (int64_t i = 0; i < kBig; i += piece) ref += x.narrow(0, i, std::min(piece, kBig - i)).to(DType::f64).sum().item<double>();
  EXPECT_NEAR(x.sum().item<double>(), ref, 1e-6 * ref);
  const int64_t cols = 4099, rows = kBig / cols;
  Tensor m = x.narrow(0, 0, rows * cols).view({rows, cols});
  Tensor by_col = m.sum({0});
  Tensor ref_col = zeros({cols}, TensorOptions(DType::f64).device(dev));
  for (int64_t r0 = 0; r0 < rows; r0 += piece / cols) ref_col += m.narrow(0, r0, std::min(piece / cols, rows - r0)).to(DType::f64).sum({0});
  EXPECT_LT(max_rel(by_col, ref_col), 1e-5);
  EXPECT_LT(max_rel(m.sum({1}).narrow(0, rows - 5, 5), m.narrow(0, rows - 5, 5).to(DType::f64).sum({1})), 1e-6);
}

// cross-entropy over bf16 logits [131072, 50257] (6.6e9 elements): the loss against the mean of
// per-piece losses, and the logits' gradient on the last rows against the piece's own.
TEST(LargeTensorsCuda, CrossEntropyOnBf16Logits131072x50257) {
  EMBER_SKIP_UNLESS_FREE(int64_t(44) << 30);
  const Device dev = Device::cuda(0);
  const int64_t N = 131072, V = 50257;
  Tensor logits = randn({N, V}, TensorOptions(DType::bf16).device(dev)).requires_grad_();
  Tensor target = randint(0, V, {N}, TensorOptions(DType::i64).device(dev));
  Tensor loss = cross_entropy(logits, target);
  loss.backward();
  const int64_t piece = 16384;  // 16384 * 50257 < 2^31
  double ref = 0;
  {
    NoGradGuard no_grad;
    for (int64_t r0 = 0; r0 < N; r0 += piece)
      ref += cross_entropy(logits.detach().narrow(0, r0, piece), target.narrow(0, r0, piece), {.reduction = Reduction::sum})
                 .to(DType::f64)
                 .item<double>();
  }
  ref /= double(N);
  EXPECT_NEAR(loss.item<double>(), ref, 1e-2 * std::fabs(ref));  // bf16 output: 3 significant digits
  // The gradient of the last piece's rows: the piece's own mean-loss gradient scaled by piece/N.
  Tensor tail = logits.detach().narrow(0, N - piece, piece).clone().requires_grad_();
  cross_entropy(tail, target.narrow(0, N - piece, piece)).backward();
  Tensor expect = tail.grad().to(DType::f32) * (double(piece) / double(N));
  Tensor got = logits.grad().narrow(0, N - piece, piece).to(DType::f32);
  EXPECT_LT(max_rel(got, expect, DType::f32), 2e-2);
}

// embedding backward into a 250000 x 12288 table (3.07e9 elements): each column half against
// the same backward on that half alone (1.5e9 elements).
TEST(LargeTensorsCuda, EmbeddingBackwardIntoA250000x12288Table) {
  EMBER_SKIP_UNLESS_FREE(int64_t(40) << 30);
  const Device dev = Device::cuda(0);
  const int64_t vocab = 250000, D = 12288;
  NoGradGuard no_grad;
  Tensor tok = randint(0, vocab, {4, 512}, TensorOptions(DType::i64).device(dev));
  tok.narrow(1, 0, 64).fill_(vocab - 1);  // the last row, whose offsets are the largest
  Tensor g = randn({4, 512, D}, dev);
  Tensor table = ops::embedding_backward(g, tok, vocab);
  ASSERT_EQ(table.sizes(), (Shape{vocab, D}));
  for (int64_t half = 0; half < 2; ++half) {
    Tensor gh = g.narrow(2, half * D / 2, D / 2).contiguous();
    Tensor ref = ops::embedding_backward(gh, tok, vocab);
    EXPECT_EQ(table.narrow(1, half * D / 2, D / 2).ne(ref).sum().item<int64_t>(), 0) << "half " << half;
  }
}

// Note [ordered index sums] with 64-bit keys: a scatter_add into 2^32 + 8 f16 bins (8 GiB),
// so the sentinel key passes 2^32 and the sort takes 64-bit keys and positions (every other
// index-sum test fits 32 bits). Eight sources into three bins, one past 2^32; the other bins
// keep their values. The input, the out-of-place result and the check's bool mask: about 21 GiB.
TEST(LargeTensorsCuda, ScatterAddPastTwoToTheThirtyTwoBinsTakesSixtyFourBitKeys) {
  EMBER_SKIP_UNLESS_FREE(int64_t(24) << 30);
  const Device dev = Device::cuda(0);
  NoGradGuard no_grad;
  const int64_t bins = (int64_t(1) << 32) + 8, far = (int64_t(1) << 32) + 5;
  Tensor out = zeros({bins}, TensorOptions(DType::f16).device(dev));
  out.narrow(0, 3, 1).fill_(1.5);
  Tensor idx = tensor<int64_t>({3, far, 7, far, 3, 3, 7, far}, {8}).to(dev);
  Tensor src = tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, {8}).to(DType::f16).to(dev);
  Tensor r = out.scatter_add(0, idx, src);
  auto at = [&](int64_t i) { return r.narrow(0, i, 1).to(DType::f32).item<float>(); };
  EXPECT_EQ(at(3), 1.5f + 1 + 5 + 6);
  EXPECT_EQ(at(7), 3.f + 7);
  EXPECT_EQ(at(far), 2.f + 4 + 8);
  EXPECT_EQ(at(4), 0.f);
  EXPECT_EQ(at(bins - 1), 0.f);
  EXPECT_EQ(r.ne(0).sum().item<int64_t>(), 3);  // nothing else written
}
