// Tensor::pin_memory / is_pinned, which loaders use for asynchronous host-to-device copies.
// Without a CUDA device pin_memory is the identity; with one it makes a page-locked copy.
#include <vector>

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
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor g = arange(4, DType::f32).to(Device::cuda());
  EXPECT_NE(message_of<DeviceError>([&] { g.pin_memory(); }).find("[pin_memory] only CPU tensors"),
            std::string::npos);
  EXPECT_FALSE(g.is_pinned());
}

TEST(PinMemory, MakesAPageLockedContiguousCopy) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
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

}  // namespace
