// The activations (leaky_relu, elu, softplus, mish, hardswish, hardsigmoid: elementwise ops
// with fused backward functors) and their modules against PyTorch
// (tests/fixtures/loss_reference.txt from make_loss_fixtures.py, whose input holds every
// op's branch points), on contiguous and strided inputs; gradcheck in f64; f32 and integer
// inputs; the CUDA kernels against the CPU.
#include <functional>
#include <map>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

const char* kRef = "loss_reference.txt";
Tensor fixture(const std::string& name) { return load_fixture(kRef, name).tensor(); }

// A strided view (stride 2 in the last dim) of t's values; its base collects the gradient.
struct Strided {
  Tensor base, view;
};
Strided strided_leaf(const Tensor& t) {
  Shape s = t.sizes();
  s.push_back(2);
  Tensor base = t.unsqueeze(-1).expand(s).contiguous().detach();
  base.requires_grad_(true);
  return {base, base.select(-1, 0)};
}

using Act = std::function<Tensor(const Tensor&)>;
const std::map<std::string, Act>& activations() {
  static const std::map<std::string, Act> acts = {
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x, 0.2); }},
      {"leaky_relu_default", [](const Tensor& x) { return nn::functional::leaky_relu(x); }},
      {"elu", [](const Tensor& x) { return elu(x, 1.5); }},
      {"elu_default", [](const Tensor& x) { return nn::functional::elu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x, 2.0, 5.0); }},
      {"softplus_default", [](const Tensor& x) { return nn::functional::softplus(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"hardswish", [](const Tensor& x) { return hardswish(x); }},
      {"hardsigmoid", [](const Tensor& x) { return nn::functional::hardsigmoid(x); }},
      {"softmax0", [](const Tensor& x) { return nn::Softmax(0)(x); }},
      {"log_softmax1", [](const Tensor& x) { return nn::LogSoftmax(1)(x); }},
  };
  return acts;
}

TEST(Activations, MatchPyTorchForwardAndBackward) {
  const Tensor x = fixture("act.x"), g = fixture("act.g");
  for (const auto& [name, fn] : activations()) {
    SCOPED_TRACE(name);
    for (bool strided : {false, true}) {
      Tensor base, in;
      if (strided) {
        Strided s = strided_leaf(x);
        base = s.base;
        in = s.view;
        ASSERT_FALSE(in.is_contiguous());
      } else {
        base = in = x.clone().requires_grad_(true);
      }
      Tensor y = fn(in);
      EXPECT_TRUE(all_close(y, fixture("act." + name + ".y"), 1e-12, 1e-14));
      (y * g).sum().backward();
      Tensor dx = strided ? base.grad().select(-1, 0) : base.grad();
      // PyTorch's hardsigmoid gradient is g * float(1/6) even in f64, 3e-8 off g / 6.
      const double rtol = name == "hardsigmoid" ? 1e-7 : 1e-12;
      EXPECT_TRUE(all_close(dx, fixture("act." + name + ".dx"), rtol, 1e-14));
    }
  }
}

TEST(Activations, Float32MatchesFloat64) {
  const Tensor x = fixture("act.x");
  for (const auto& [name, fn] : activations()) {
    SCOPED_TRACE(name);
    Tensor y = fn(x.to(DType::f32));
    EXPECT_EQ(y.dtype(), DType::f32);
    EXPECT_TRUE(all_close(y.to(DType::f64), fixture("act." + name + ".y"), 1e-5, 1e-6));
  }
}

TEST(Activations, IntegerInputsPromoteToFloat) {
  Tensor x = tensor<int64_t>({-2, 0, 3});
  Tensor y = leaky_relu(x, 0.5);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(all_close(y, Shape{3}, {-1.0, 0.0, 3.0}));
  EXPECT_TRUE(all_close(hardsigmoid(x), Shape{3}, {1.0 / 6, 0.5, 1.0}));
}

TEST(Activations, PassGradcheck) {
  manual_seed(5);
  // Away from the kinks (0 for leaky_relu/elu, +-3 for the hard ones): finite differences
  // straddling a kink disagree with any one-sided derivative.
  Tensor x = (randn({3, 5}, DType::f64) * 2.0).detach();
  x = where(lt(abs(x), scalar_tensor(0.05, DType::f64)), x + 0.2, x);
  x = where(lt(abs(abs(x) - 3.0), scalar_tensor(0.05, DType::f64)), x + 0.2, x);
  x.requires_grad_(true);
  for (const auto& [name, fn] : activations()) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(autograd::gradcheck([&](const TensorList& in) { return fn(in[0]); }, {x}));
  }
  // softplus across its threshold, with beta != 1.
  EXPECT_TRUE(autograd::gradcheck([&](const TensorList& in) { return softplus(in[0], 3.0, 2.0); }, {x}));
}

TEST(Activations, Modules) {
  const Tensor x = fixture("act.x");
  EXPECT_TRUE(all_close(nn::LeakyReLU(0.2)(x), fixture("act.leaky_relu.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::LeakyReLU()(x), fixture("act.leaky_relu_default.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::ELU(1.5)(x), fixture("act.elu.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::Softplus(2.0, 5.0)(x), fixture("act.softplus.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::Softplus()(x), fixture("act.softplus_default.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::Mish()(x), fixture("act.mish.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::Hardswish()(x), fixture("act.hardswish.y"), 1e-12, 1e-14));
  EXPECT_TRUE(all_close(nn::Hardsigmoid()(x), fixture("act.hardsigmoid.y"), 1e-12, 1e-14));
  nn::Identity id;
  EXPECT_TRUE(id(x).is_same(x));
  EXPECT_EQ(nn::LeakyReLU(0.2).repr(), "LeakyReLU(negative_slope=0.2)");
  EXPECT_EQ(nn::Softmax(1).repr(), "Softmax(dim=1)");
  EXPECT_EQ(nn::Mish().repr(), "Mish()");
  // In a Sequential, through Module's virtual forward too.
  nn::Sequential seq(nn::LeakyReLU(0.2), nn::Identity(), nn::Hardswish());
  EXPECT_TRUE(all_close(seq(x), hardswish(leaky_relu(x, 0.2)), 1e-15, 0));
  nn::Module& as_module = seq[0];
  EXPECT_TRUE(all_close(as_module(x), fixture("act.leaky_relu.y"), 1e-12, 1e-14));
  EXPECT_NE(message_of<ValueError>([] { nn::Softplus(0.0); }).find("[Softplus]"), std::string::npos);
}

// CUDA against the CPU: every new activation, forward and backward, in each float dtype.
TEST(ActivationsCuda, MatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Tensor x = fixture("act.x"), g = fixture("act.g");
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (const auto& [name, fn] : activations()) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dt)));
      Tensor xc = x.to(dt).detach().requires_grad_(true);
      Tensor xg = x.to(Device::cuda(0), dt).detach().requires_grad_(true);
      Tensor yc = fn(xc), yg = fn(xg);
      EXPECT_TRUE(close_to_cpu(yg, yc, cuda_rtol(dt)));
      (yc * g.to(dt)).sum().backward();
      (yg * g.to(Device::cuda(0), dt)).sum().backward();
      EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), cuda_rtol(dt)));
      // A strided view on the device, too.
      Tensor strided = x.t().contiguous().to(Device::cuda(0), dt).t();
      ASSERT_FALSE(strided.is_contiguous());
      EXPECT_TRUE(close_to_cpu(fn(strided), yc.detach(), cuda_rtol(dt)));
    }
  }
}

}  // namespace
}  // namespace ember::test
