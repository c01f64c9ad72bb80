// The pooling, resampling, padding and convolution layers and ops against PyTorch
// (tests/fixtures/pool_reference.txt from make_pool_fixtures.py, torch 1.13, f64): forward
// and the gradients of sum(y * gy) for every case, from non-contiguous inputs; then the
// modules (names, shapes, defaults) and a CUDA body per module.
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/ops/matmul_config.h"
#include "support/test_support.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

const char* kRef = "pool_reference.txt";

Tensor load(const std::string& name) { return test::load_fixture(kRef, name).tensor(DType::f64); }

// The fixture's inputs as non-contiguous leaves (last two dims stored transposed).
Tensor strided_leaf(const Tensor& t) {
  Tensor s = t.dim() >= 2 ? t.transpose(-1, -2).contiguous().transpose(-1, -2) : t.clone();
  return s.requires_grad_();
}

// Runs fn on case `name`'s n inputs and compares y and every input gradient with PyTorch's.
void check_case(const std::string& name, size_t n, const std::function<Tensor(const TensorList&)>& fn,
                double tol = 1e-10) {
  SCOPED_TRACE(name);
  TensorList in;
  for (size_t i = 0; i < n; ++i) {
    in.push_back(strided_leaf(load(str(name, ".in", i))));
    if (n == 1 || i == 0) EXPECT_FALSE(in.back().is_contiguous() && in.back().dim() >= 2 && in.back().size(-1) > 1);
  }
  Tensor y = fn(in);
  EXPECT_TRUE(test::all_close(y, load(name + ".y"), tol, tol));
  (y * load(name + ".gy")).sum().backward();
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(str("grad of input ", i));
    EXPECT_TRUE(test::all_close(in[i].grad(), load(str(name, ".grad", i)), tol, tol));
  }
}

TEST(PoolTorch, AvgPool2d) {
  check_case("avg.k3s2p1", 1, [](const TensorList& t) { return F::avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}); });
  check_case("avg.k3s2p1_ceil_nopad", 1,
             [](const TensorList& t) { return F::avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, true, false); });
  check_case("avg.k3s2p1_ceil", 1, [](const TensorList& t) { return F::avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, true); });
  check_case("avg.k23s21p10_div5", 1,
             [](const TensorList& t) { return F::avg_pool2d(t[0], {2, 3}, {2, 1}, {1, 0}, false, true, 5); });
  check_case("avg.k2_default_stride", 1, [](const TensorList& t) { return nn::AvgPool2d(2)(t[0]); });
}

TEST(PoolTorch, AdaptivePools) {
  check_case("aavg.3x2", 1, [](const TensorList& t) { return nn::AdaptiveAvgPool2d({3, 2})(t[0]); });
  check_case("aavg.1", 1, [](const TensorList& t) { return nn::AdaptiveAvgPool2d(1)(t[0]); });
  check_case("aavg.4x7", 1, [](const TensorList& t) { return F::adaptive_avg_pool2d(t[0], {4, 7}); });
  check_case("amax.3x2", 1, [](const TensorList& t) { return nn::AdaptiveMaxPool2d({3, 2})(t[0]); });
  check_case("amax.4x7", 1, [](const TensorList& t) { return F::adaptive_max_pool2d(t[0], {4, 7}); });
  auto [v, idx] = nn::AdaptiveMaxPool2d({3, 2}).forward_with_indices(load("amax.3x2.in0"));
  EXPECT_TRUE(test::all_close(idx, load("amax.3x2.indices"), 0, 0));
  EXPECT_EQ(idx.dtype(), DType::i64);
}

TEST(PoolTorch, Interpolate) {
  check_case("interp.nearest_size", 1, [](const TensorList& t) { return F::interpolate(t[0], {.size = {7, 9}}); });
  check_case("interp.nearest_x2", 1, [](const TensorList& t) { return nn::Upsample({.scale_factor = 2.0})(t[0]); });
  check_case("interp.nearest_scale", 1,
             [](const TensorList& t) { return F::interpolate(t[0], {.scale_factor = {1.5, 2.3}}); });
  check_case("interp.bilinear_size", 1, [](const TensorList& t) {
    return F::interpolate(t[0], {.size = {7, 9}, .mode = "bilinear", .align_corners = false});
  });
  check_case("interp.bilinear_size_ac", 1, [](const TensorList& t) {
    return nn::Upsample({.size = {7, 9}, .mode = "bilinear", .align_corners = true})(t[0]);
  });
  check_case("interp.bilinear_x2", 1,
             [](const TensorList& t) { return nn::Upsample({.scale_factor = 2.0, .mode = "bilinear"})(t[0]); });
  check_case("interp.bilinear_down", 1, [](const TensorList& t) {
    return F::interpolate(t[0], {.scale_factor = {0.6, 1.7}, .mode = "bilinear"});
  });
  check_case("interp.bilinear_recompute", 1, [](const TensorList& t) {
    return F::interpolate(t[0], {.scale_factor = {1.7, 1.7}, .mode = "bilinear", .recompute_scale_factor = true});
  });
}

TEST(PoolTorch, Pad) {
  check_case("pad.constant", 1, [](const TensorList& t) { return F::pad(t[0], {1, 2, 0, 3}, "constant", 0.5); });
  check_case("pad.constant_neg", 1, [](const TensorList& t) { return F::pad(t[0], {-1, 2, 1, -2}); });
  check_case("pad.reflect", 1, [](const TensorList& t) { return F::pad(t[0], {2, 1, 3, 2}, "reflect"); });
  check_case("pad.replicate", 1, [](const TensorList& t) { return F::pad(t[0], {2, 3, 1, 4}, "replicate"); });
  check_case("pad.reflect1d", 1, [](const TensorList& t) { return F::pad(t[0], {3, 2}, "reflect"); });
  check_case("pad.replicate3d", 1, [](const TensorList& t) { return F::pad(t[0], {1, 2, 2, 1, 1, 0}, "replicate"); });
  check_case("pad.constant3d", 1, [](const TensorList& t) { return F::pad(t[0], {1, 0, 0, 2, 1, 1}, "constant", -1.5); });
}

TEST(PoolTorch, ConvVariants) {
  check_case("convt.s2p1op1g2", 3, [](const TensorList& t) {
    return F::conv_transpose2d(t[0], t[1], t[2], {2, 2}, {1, 1}, {1, 1}, 2);
  });
  check_case("convt.s12d2op10", 3, [](const TensorList& t) {
    return F::conv_transpose2d(t[0], t[1], t[2], {1, 2}, {2, 1}, {1, 0}, 1, {2, 2});
  });
  check_case("conv1d.s2p2d2g2", 3, [](const TensorList& t) { return F::conv1d(t[0], t[1], t[2], 2, 2, 2, 2); });
  check_case("conv2d.depthwise_d2", 3,
             [](const TensorList& t) { return F::conv2d(t[0], t[1], t[2], {1, 1}, {2, 2}, {2, 2}, 4); });
  check_case("conv2d.g2_s2_d23", 2,
             [](const TensorList& t) { return F::conv2d(t[0], t[1], Tensor(), {2, 2}, {1, 3}, {2, 3}, 2); });
}

// conv1d runs through conv2d; its refusals name conv1d and the arguments the user passed.
TEST(PoolTorch, Conv1dArgumentErrorsNameConv1d) {
  const Tensor x = randn({2, 4, 9}), w = randn({6, 2, 3});
  for (auto [stride, padding, dilation, groups] :
       {std::array<int64_t, 4>{0, 0, 1, 2}, {1, -1, 1, 2}, {1, 0, 0, 2}, {1, 0, 1, 0}}) {
    const std::string msg =
        test::message_of<ValueError>([&] { F::conv1d(x, w, Tensor(), stride, padding, dilation, groups); });
    EXPECT_EQ(msg.rfind("[conv1d] stride (" + std::to_string(stride) + ")", 0), 0u) << msg;
  }
  const std::string msg = test::message_of<ShapeError>([&] { F::conv1d(x, w, Tensor(), 1, 0, 1, 1); });
  EXPECT_EQ(msg.rfind("[conv1d] input with 4 channels and weight of shape [6, 2, 3] with groups 1", 0), 0u) << msg;
  EXPECT_EQ(F::conv1d(x, w, Tensor(), 2, 1, 1, 2).sizes(), Shape({2, 6, 5}));
}

TEST(PoolLayers, ModulesMatchPyTorchShapesNamesAndInit) {
  manual_seed(0);
  nn::Conv1d c1(4, 6, 3, {.stride = 2, .padding = 1, .groups = 2});
  EXPECT_EQ(c1.weight.sizes(), (Shape{6, 2, 3}));
  EXPECT_EQ(c1.bias.sizes(), (Shape{6}));
  const auto names1 = c1.named_parameters();
  EXPECT_EQ(names1.size(), 2u);
  // PyTorch's bound: 1 / sqrt(fan_in), fan_in = 2 * 3.
  EXPECT_LE(c1.bias.abs().max().item<double>(), 1 / std::sqrt(6.0) + 1e-12);
  EXPECT_LE(c1.weight.abs().max().item<double>(), 1 / std::sqrt(6.0) + 1e-12);
  EXPECT_EQ(c1(randn({2, 4, 9})).sizes(), (Shape{2, 6, 5}));
  EXPECT_EQ(c1(randn({4, 9})).sizes(), (Shape{6, 5}));

  nn::ConvTranspose2d ct(4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  EXPECT_EQ(ct.weight.sizes(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(ct.bias.sizes(), (Shape{6}));
  // fan_in of a transposed weight [in, out / groups, kh, kw] is out / groups * kh * kw = 27.
  EXPECT_LE(ct.bias.abs().max().item<double>(), 1 / std::sqrt(27.0) + 1e-12);
  EXPECT_GT(ct.bias.abs().max().item<double>(), 1 / std::sqrt(4 * 27.0));  // not the forward fan_in's bound
  EXPECT_EQ(ct(randn({2, 4, 5, 6})).sizes(), (Shape{2, 6, 10, 12}));
  EXPECT_EQ(ct.extra_repr(), "4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), groups=2");

  EXPECT_EQ(nn::AdaptiveAvgPool2d(1)(randn({2, 5, 7, 7})).sizes(), (Shape{2, 5, 1, 1}));
  EXPECT_EQ(nn::AdaptiveAvgPool2d({2, 3})(randn({5, 7, 7})).sizes(), (Shape{5, 2, 3}));
  EXPECT_EQ(nn::AvgPool2d(3, 2, 1)(randn({1, 2, 8, 8})).sizes(), (Shape{1, 2, 4, 4}));
  EXPECT_EQ(nn::AvgPool2d(3, 2, 1).extra_repr(), "kernel_size=(3, 3), stride=(2, 2), padding=(1, 1)");
  EXPECT_EQ(nn::Upsample({.scale_factor = 2.0, .mode = "bilinear"})(randn({1, 2, 3, 4})).sizes(), (Shape{1, 2, 6, 8}));
  EXPECT_EQ(test::message_of<ValueError>([] { nn::Upsample({.mode = "nearest"}); }).rfind("[Upsample]", 0), 0u);
  // A ResNet-style head composes in Sequential.
  nn::Sequential head(nn::AdaptiveAvgPool2d(1), nn::Flatten());
  EXPECT_EQ(head(randn({3, 8, 4, 4})).sizes(), (Shape{3, 8}));
}

// The spellings a porter types from PyTorch: plain brace lists for optional sizes and scales,
// positional brace strides, options structs in PyTorch's order. Each is compared with the
// positional form, which the fixture cases above check against PyTorch.
TEST(PoolLayers, PyTorchSpellingsMatchThePositionalForms) {
  const Tensor x = randn({2, 3, 9, 8});
  auto same = [](const Tensor& a, const Tensor& b) { return a.sizes() == b.sizes() && allclose(a, b, 0, 0); };
  EXPECT_TRUE(same(F::interpolate(x, {.size = {8, 11}}), F::interpolate(x, {.size = {{8, 11}}})));
  EXPECT_EQ(F::interpolate(x, {.size = {8, 11}}).sizes(), (Shape{2, 3, 8, 11}));
  EXPECT_EQ(F::interpolate(x, {.size = 5}).sizes(), (Shape{2, 3, 5, 5}));
  // floor(9 * 1.7) = 15, floor(8 * 2.3) = 18.
  EXPECT_EQ(F::interpolate(x, {.scale_factor = {1.7, 2.3}, .mode = "bilinear"}).sizes(), (Shape{2, 3, 15, 18}));
  EXPECT_TRUE(same(F::interpolate(x, {.scale_factor = 2}), F::interpolate(x, {.scale_factor = {2.0, 2.0}})));
  EXPECT_TRUE(same(nn::Upsample({.size = {8, 11}, .mode = "bilinear"})(x),
                   F::interpolate(x, {.size = {8, 11}, .mode = "bilinear"})));
  EXPECT_EQ(nn::Upsample({.size = {8, 11}}).extra_repr(), "size=(8, 11), mode=nearest");

  // MaxPool2d(3, {2, 1}) is PyTorch's MaxPool2d(3, (2, 1)): the stride, not an options struct.
  nn::MaxPool2d brace(3, {2, 1});
  EXPECT_EQ(brace.stride.h, 2);
  EXPECT_EQ(brace.stride.w, 1);
  EXPECT_TRUE(same(brace(x), F::max_pool2d(x, {3, 3}, {2, 1})));
  EXPECT_TRUE(same(nn::MaxPool2d(3, {.stride = 2, .padding = 1})(x), nn::MaxPool2d(3, 2, 1)(x)));
  EXPECT_EQ(nn::MaxPool2d(3).stride.w, 3);
  EXPECT_EQ(nn::MaxPool2d(3, {.padding = 1}).extra_repr(), nn::MaxPool2d(3, 3, 1).extra_repr());

  nn::AvgPool2d options(3, {.stride = {2, 1}, .padding = 1, .ceil_mode = true, .count_include_pad = false,
                            .divisor_override = 5});
  nn::AvgPool2d positional(3, {2, 1}, 1, true, false, 5);
  EXPECT_EQ(options.extra_repr(), positional.extra_repr());
  EXPECT_TRUE(same(options(x), positional(x)));
  EXPECT_TRUE(same(nn::AvgPool2d(2, {.ceil_mode = true})(x), F::avg_pool2d(x, {2, 2}, {2, 2}, {0, 0}, true)));
  EXPECT_EQ(nn::AvgPool2d(2, {.ceil_mode = true})(x).sizes(), (Shape{2, 3, 5, 4}));
}

class PoolLayersDevice : public ::testing::TestWithParam<Device> {};

TEST_P(PoolLayersDevice, ModulesOnCudaMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = GetParam();
  manual_seed(1);
  nn::ConvTranspose2d ct(4, 6, 3, {.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  nn::Conv1d c1(4, 6, 3, {.padding = 2, .dilation = 2});
  Tensor x = randn({2, 4, 5, 6}), s = randn({2, 4, 9});
  cuda::AllowTF32Guard exact(false);
  Tensor yc = ct(x), sc = c1(s);
  ct.to(dev);
  c1.to(dev);
  EXPECT_TRUE(test::close_to_cpu(ct(x.to(dev)), yc, 1e-5));
  EXPECT_TRUE(test::close_to_cpu(c1(s.to(dev)), sc, 1e-5));
  EXPECT_TRUE(test::close_to_cpu(nn::AdaptiveAvgPool2d(1)(x.to(dev)), nn::AdaptiveAvgPool2d(1)(x), 1e-5));
  EXPECT_TRUE(test::close_to_cpu(nn::AvgPool2d(3, 2, 1)(x.to(dev)), nn::AvgPool2d(3, 2, 1)(x), 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Cuda, PoolLayersDevice, ::testing::ValuesIn(test::cuda_devices()), test::device_label);

}  // namespace
