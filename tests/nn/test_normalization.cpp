// The normalization layers against PyTorch (tests/fixtures/norm_reference.txt from
// make_norm_fixtures.py): BatchNorm2d over two training steps on non-contiguous inputs (outputs,
// every gradient, running statistics, num_batches_tracked) and then in eval mode; BatchNorm1d's
// cumulative average; GroupNorm; RMSNorm. Plus the state_dict names and the module API.
#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

const char* kRef = "norm_reference.txt";

Tensor ref(const std::string& name, Device dev) { return load_fixture(kRef, name).tensor().to(dev); }

class NormalizationTest : public ::testing::TestWithParam<Device> {};

TEST_P(NormalizationTest, BatchNorm2dTrainsAndEvaluatesAsPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  nn::BatchNorm2d bn(3, {.momentum = 0.2});
  bn.to(DType::f64);
  bn.to(dev);
  {
    NoGradGuard no_grad;
    bn.weight.copy_(ref("bn2d.weight", dev));
    bn.bias.copy_(ref("bn2d.bias", dev));
  }
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE(str("step ", step));
    const std::string p = str("bn2d.step", step);
    // The stored [C, N, H, W] array permuted to [N, C, H, W]: a non-contiguous input.
    Tensor x = ref(str("bn2d.x", step, "_base"), dev).permute({1, 0, 2, 3}).requires_grad_();
    bn.zero_grad();
    Tensor y = bn(x);
    EXPECT_TRUE(all_close(y, ref(p + ".y", dev), 1e-10, 1e-11));
    mul(y, ref(str("bn2d.gy", step), dev)).sum().backward();
    EXPECT_TRUE(all_close(x.grad(), ref(p + ".dx", dev), 1e-9, 1e-10));
    EXPECT_TRUE(all_close(bn.weight.grad(), ref(p + ".dweight", dev), 1e-9, 1e-10));
    EXPECT_TRUE(all_close(bn.bias.grad(), ref(p + ".dbias", dev), 1e-9, 1e-10));
  }
  // state_dict: PyTorch's keys, in PyTorch's order, with its values after two steps.
  const StateDict sd = bn.state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                                 "num_batches_tracked"}));
  EXPECT_TRUE(all_close(bn.running_mean, ref("bn2d.state.running_mean", dev), 1e-11, 1e-12));
  EXPECT_TRUE(all_close(bn.running_var, ref("bn2d.state.running_var", dev), 1e-11, 1e-12));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::i64);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  bn.eval();
  EXPECT_TRUE(all_close(bn(ref("bn2d.x3", dev)), ref("bn2d.eval_y", dev), 1e-10, 1e-11));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);  // eval does not count
}

TEST_P(NormalizationTest, BatchNorm1dCumulativeAverage) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  nn::BatchNorm1d bn(4, {.momentum = std::nullopt});
  bn.to(DType::f64);
  bn.to(dev);
  EXPECT_TRUE(all_close(bn(ref("bn1d.xa", dev)), ref("bn1d.ya", dev), 1e-10, 1e-11));
  EXPECT_TRUE(all_close(bn(ref("bn1d.xb", dev)), ref("bn1d.yb", dev), 1e-10, 1e-11));
  EXPECT_TRUE(all_close(bn.running_mean, ref("bn1d.state.running_mean", dev), 1e-11, 1e-12));
  EXPECT_TRUE(all_close(bn.running_var, ref("bn1d.state.running_var", dev), 1e-11, 1e-12));
  bn.eval();
  EXPECT_TRUE(all_close(bn(ref("bn1d.xa", dev)), ref("bn1d.eval_y", dev), 1e-10, 1e-11));
}

TEST_P(NormalizationTest, GroupNormMatchesPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  nn::GroupNorm gn(2, 6);
  gn.to(DType::f64);
  gn.to(dev);
  StateDict state;
  state.insert("weight", ref("gn.weight", dev));
  state.insert("bias", ref("gn.bias", dev));
  gn.load_state_dict(state);
  Tensor x = ref("gn.x_base", dev).transpose(0, 2).requires_grad_();  // [3, 6, 5], strided
  Tensor y = gn(x);
  EXPECT_TRUE(all_close(y, ref("gn.y", dev), 1e-10, 1e-11));
  mul(y, ref("gn.gy", dev)).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), ref("gn.dx", dev), 1e-9, 1e-10));
  EXPECT_TRUE(all_close(gn.weight.grad(), ref("gn.dweight", dev), 1e-9, 1e-10));
  EXPECT_TRUE(all_close(gn.bias.grad(), ref("gn.dbias", dev), 1e-9, 1e-10));
}

TEST_P(NormalizationTest, RMSNormMatchesPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  nn::RMSNorm rms({8}, 1e-6);
  rms.to(DType::f64);
  rms.to(dev);
  StateDict state;
  state.insert("weight", ref("rms.weight", dev));
  rms.load_state_dict(state);
  Tensor x = ref("rms.x", dev).requires_grad_();
  Tensor y = rms(x);
  EXPECT_TRUE(all_close(y, ref("rms.y", dev), 1e-10, 1e-11));
  mul(y, ref("rms.gy", dev)).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), ref("rms.dx", dev), 1e-9, 1e-10));
  EXPECT_TRUE(all_close(rms.weight.grad(), ref("rms.dweight", dev), 1e-9, 1e-10));
}

INSTANTIATE_TEST_SUITE_P(Devices, NormalizationTest, ::testing::ValuesIn(test_devices()),
                         device_label);

TEST(Normalization, ModuleApi) {
  nn::BatchNorm2d bn(5);
  EXPECT_TRUE(all_close(bn.weight, ones({5}), 0, 0));
  EXPECT_TRUE(all_close(bn.bias, zeros({5}), 0, 0));
  EXPECT_TRUE(all_close(bn.running_var, ones({5}), 0, 0));
  EXPECT_EQ(bn.parameters().size(), 2u);
  EXPECT_EQ(bn.buffers().size(), 3u);
  EXPECT_EQ(bn.repr(), "BatchNorm2d(5, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  nn::BatchNorm2d plain(4, {.affine = false, .track_running_stats = false});
  EXPECT_EQ(plain.parameters().size(), 0u);
  EXPECT_EQ(plain.buffers().size(), 0u);
  plain.eval();  // no running statistics: batch statistics even in eval mode, as PyTorch
  Tensor y = plain(add(randn({3, 4, 2, 2}), full({}, 5.0)));
  EXPECT_NEAR(y.mean().item<double>(), 0.0, 1e-5);
  EXPECT_NE(message_of<ShapeError>([&] { bn(randn({2, 5, 3})); })
                .find("[BatchNorm2d] expected 4D input (got 3D input"),
            std::string::npos);
  EXPECT_NE(message_of<ShapeError>([&] { nn::BatchNorm1d(5)(randn({2, 5, 3, 3})); })
                .find("[BatchNorm1d] expected 2D or 3D input"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([] { nn::GroupNorm(4, 6); }).find("[GroupNorm] num_channels 6"),
            std::string::npos);
  nn::RMSNorm rms({16});
  EXPECT_FALSE(rms.eps.has_value());
  EXPECT_EQ(rms.state_dict().keys(), std::vector<std::string>{"weight"});
  // functional spellings
  Tensor x = randn({4, 6, 3});
  EXPECT_TRUE(all_close(nn::functional::group_norm(x, 3), group_norm(x, 3), 0, 0));
  EXPECT_TRUE(all_close(nn::functional::rms_norm(x, {3}), rms_norm(x, {3}), 0, 0));
  EXPECT_EQ(nn::functional::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true).sizes(), x.sizes());
}

}  // namespace
}  // namespace ember::test
