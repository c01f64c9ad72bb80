// The fused unscale-and-check kernel (ops/cuda/amp.cu) at its edges, on a GPU (skipped
// without one): a gradient list longer than one launch's table (512 tensors), mixed dtypes,
// tensors of several chunks (16384 elements each), and a single non-finite value at the very
// last element of a middle tensor's last chunk, the element a chunk or table boundary error
// would miss. Reference: the composite (cast to the compute type, multiply, cast back)
// computed on the CPU, and the non-finite flag known by construction.
#include <cmath>
#include <limits>
#include <vector>

#include "ember/ops/amp.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

constexpr int64_t kChunk = 16384;  // ops/cuda/amp.cu's elements per block
constexpr int kTensors = 600;      // more than one table of 512

DType dtype_of(int i) {
  static const DType kinds[] = {DType::f32, DType::f16, DType::bf16, DType::f64};
  return kinds[i % 4];
}

// Tensor i: a few elements, or several chunks ending in a partial one.
int64_t numel_of(int i) {
  if (i % 97 == 0) return 3 * kChunk + 1 + i;
  if (i % 50 == 0) return kChunk;  // exactly one full chunk
  return 1 + (i * 37) % 700;
}

std::vector<Tensor> make_grads() {
  manual_seed(2024);
  std::vector<Tensor> grads;
  for (int i = 0; i < kTensors; ++i)
    grads.push_back((randn({numel_of(i)}) * 100.0).to(dtype_of(i)));
  return grads;
}

struct Case {
  int tensor;     // -1: no non-finite value
  double value;   // inf or NaN
};

TEST(FusedUnscaleCuda, ManyMixedGradientsWithOneNonFiniteAtAMiddleTensorsLastElement) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // 291 = 3 * 97: a middle tensor of the first table with 4 chunks; 485 = 5 * 97 too; 582
  // (= 6 * 97) lies in the second launch's table.
  for (const Case c : {Case{-1, 0.0}, Case{291, inf}, Case{291, nan}, Case{485, -inf}, Case{582, nan}}) {
    std::vector<Tensor> host = make_grads();
    if (c.tensor >= 0) {
      ASSERT_GT(numel_of(c.tensor), 3 * kChunk);
      host[size_t(c.tensor)].select(0, numel_of(c.tensor) - 1).fill_(c.value);
    }
    TensorList grads;
    for (const Tensor& h : host) grads.push_back(h.to(dev));
    Tensor found = zeros({1}, dev);
    const Tensor inv = full({1}, 1.0 / 1024.0, dev);
    ops::amp_unscale_and_check_(grads, found, inv);
    EXPECT_EQ(found.item<double>(), c.tensor >= 0 ? 1.0 : 0.0) << "non-finite at tensor " << c.tensor;
    for (int i = 0; i < kTensors; ++i) {
      const Tensor& h = host[size_t(i)];
      const DType compute = h.dtype() == DType::f64 ? DType::f64 : DType::f32;
      const Tensor expected = (h.to(compute) * (1.0 / 1024.0)).to(h.dtype());
      const Tensor got = grads[size_t(i)].cpu();
      if (i == c.tensor) {  // its other elements are unscaled too; the poisoned one stays so
        const int64_t n = numel_of(i);
        EXPECT_TRUE(all_close(got.narrow(0, 0, n - 1), expected.narrow(0, 0, n - 1), 0, 0)) << i;
        const double last = got.select(0, n - 1).item<double>();
        if (std::isnan(c.value)) {
          EXPECT_TRUE(std::isnan(last));
        } else {
          EXPECT_EQ(last, c.value);
        }
      } else {
        ASSERT_TRUE(all_close(got, expected, 0, 0)) << "gradient " << i << " (" << dtype_name(h.dtype()) << ", "
                                                    << numel_of(i) << " elements), case " << c.tensor;
      }
    }
  }
}

// Only empty (and undefined) gradients: nothing to launch, and a launch of zero blocks would
// be an invalid configuration on the device (issue 40, item 8): the unscale is a no-op.
TEST(FusedUnscaleCuda, OnlyEmptyGradientsLaunchNothing) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  const TensorList grads = {zeros({0}, dev), zeros({3, 0}, TensorOptions(DType::bf16).device(dev)), Tensor()};
  Tensor found = zeros({1}, dev);
  const Tensor inv = full({1}, 0.5, dev);
  ASSERT_NO_THROW(ops::amp_unscale_and_check_(grads, found, inv));
  EXPECT_EQ(found.item<double>(), 0.0);
}

}  // namespace
}  // namespace ember::test
