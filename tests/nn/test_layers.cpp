// The layers against PyTorch (tests/fixtures/nn_reference.txt from make_nn_fixtures.py): a
// small CNN whose PyTorch state dict is loaded by name, compared forward and backward; plus
// initialization statistics, dropout modes, and the composite losses.
#include <cmath>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

const char* kRef = "nn_reference.txt";

// The same layers as make_nn_fixtures.py's Net.
struct SmallCnn : nn::Module {
  nn::Conv2d conv1{1, 4, 3};
  nn::Conv2d conv2{4, 6, 3, {.padding = 1}};
  nn::MaxPool2d pool{2};
  nn::Linear fc1{54, 8};
  nn::LayerNorm norm{{8}};
  nn::Linear fc2{8, 3};
  SmallCnn() {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("pool", pool);
    register_module("fc1", fc1);
    register_module("norm", norm);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu(conv2(relu(conv1(x))));
    h = pool(h).flatten(1);
    h = norm(nn::functional::gelu(fc1(h), "tanh"));
    return fc2(h);
  }
};

class LayersTest : public ::testing::TestWithParam<Device> {};

TEST_P(LayersTest, SmallCnnMatchesPyTorchForwardAndBackward) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  SmallCnn net;
  StateDict state;
  for (const auto& [name, t] : net.state_dict())
    state.insert(name, load_fixture(kRef, "cnn.state." + name).tensor(DType::f64));
  net.to(DType::f64);
  net.to(dev);
  net.load_state_dict(state);

  Tensor x = load_fixture(kRef, "cnn.x").tensor().to(dev);
  Tensor target = load_fixture(kRef, "cnn.target").tensor(DType::i64).to(dev);
  Tensor logits = net.forward(x);
  EXPECT_TRUE(all_close(logits, load_fixture(kRef, "cnn.logits").tensor(), 1e-9, 1e-10));
  Tensor loss = cross_entropy(logits, target);
  EXPECT_NEAR(loss.item<double>(), load_fixture(kRef, "cnn.loss").values[0], 1e-10);
  loss.backward();
  for (const auto& [name, p] : net.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(all_close(p.grad(), load_fixture(kRef, "cnn.grad." + name).tensor(), 1e-8, 1e-10))
        << name;
  }
}

TEST_P(LayersTest, EmbeddingLooksUpRows) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  nn::Embedding emb(6, 4);
  StateDict state;
  state.insert("weight", load_fixture(kRef, "emb.weight").tensor(DType::f32));
  emb.to(dev);
  emb.load_state_dict(state);
  Tensor y = emb(load_fixture(kRef, "emb.idx").tensor(DType::i64).to(dev));
  EXPECT_TRUE(all_close(y, load_fixture(kRef, "emb.y").tensor(), 1e-6, 1e-7));
}

INSTANTIATE_TEST_SUITE_P(Devices, LayersTest, ::testing::ValuesIn(test_devices()), device_label);

TEST(Functional, NllLossMatchesPyTorchWithIgnoredTargets) {
  Tensor logp = load_fixture(kRef, "nll.logp").tensor();
  Tensor target = load_fixture(kRef, "nll.target").tensor(DType::i64);
  using nn::functional::nll_loss;
  EXPECT_NEAR(nll_loss(logp, target).item<double>(), load_fixture(kRef, "nll.mean").values[0], 1e-12);
  EXPECT_NEAR(nll_loss(logp, target, -100, Reduction::sum).item<double>(),
              load_fixture(kRef, "nll.sum").values[0], 1e-12);
  // The same as the fused cross_entropy of the logits that produced these log-probabilities.
  EXPECT_NEAR(nll_loss(logp, target).item<double>(), cross_entropy(logp, target).item<double>(), 1e-12);
}

TEST(Functional, CompositeLossesPassGradcheck) {
  manual_seed(3);
  Tensor a = randn({4, 3}, DType::f64).requires_grad_();
  Tensor b = randn({4, 3}, DType::f64);
  EXPECT_TRUE(autograd::gradcheck([&](const TensorList& in) { return nn::functional::mse_loss(in[0], b); }, {a}));
  Tensor target = tensor<int64_t>({2, -100, 0, 1});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const TensorList& in) { return nn::functional::nll_loss(log_softmax(in[0], 1), target); }, {a}));
  EXPECT_NEAR(nn::functional::mse_loss(a, b).item<double>(), ((a - b) * (a - b)).mean().item<double>(), 1e-12);
}

TEST(Functional, BadInputsNameTheOp) {
  Tensor x = zeros({2, 3});
  EXPECT_NE(message_of<ShapeError>([&] { nn::functional::mse_loss(x, zeros({3, 2})); }).find("[mse_loss]"),
            std::string::npos);
  EXPECT_NE(message_of<DTypeError>([&] { nn::functional::nll_loss(x, zeros({2})); }).find("[nll_loss]"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { nn::functional::gelu(x, "fast"); }).find("[gelu]"), std::string::npos);
  // The literal "none" must not decay to ember::gelu's bool (which would select tanh).
  Tensor v = tensor<float>({1.5f});
  EXPECT_NEAR(nn::functional::gelu(v, "none").item<double>(), gelu(v, false).item<double>(), 0.0);
}

// ---- initialization ----

// Linear's default init is U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
TEST(Init, LinearAndConvDefaultsAreKaimingUniformBounds) {
  manual_seed(11);
  nn::Linear fc(400, 300);
  const double bound = 1.0 / std::sqrt(400.0);
  auto w = fc.weight.to_vector<float>();
  double sum = 0, sq = 0, maxabs = 0;
  for (float v : w) sum += v, sq += double(v) * v, maxabs = std::max(maxabs, std::abs(double(v)));
  const double n = double(w.size());
  EXPECT_LE(maxabs, bound);
  EXPECT_GT(maxabs, 0.99 * bound);
  EXPECT_NEAR(sum / n, 0.0, 4 * bound / std::sqrt(3 * n));
  EXPECT_NEAR(sq / n, bound * bound / 3, 0.02 * bound * bound);  // variance of U(-b, b)
  for (float v : fc.bias.to_vector<float>()) EXPECT_LE(std::abs(v), bound);

  nn::Conv2d conv(8, 16, 3, {.groups = 2});
  const double conv_bound = 1.0 / std::sqrt(4.0 * 9.0);  // fan_in = in/groups * kh * kw
  EXPECT_EQ(conv.weight.sizes(), (Shape{16, 4, 3, 3}));
  double conv_max = 0;
  for (float v : conv.weight.to_vector<float>()) conv_max = std::max(conv_max, std::abs(double(v)));
  EXPECT_LE(conv_max, conv_bound);
  EXPECT_GT(conv_max, 0.9 * conv_bound);
}

TEST(Init, SeedMakesWeightsReproducible) {
  manual_seed(5);
  nn::Linear a(20, 10);
  manual_seed(5);
  nn::Linear b(20, 10);
  nn::Linear c(20, 10);
  EXPECT_TRUE(all_close(a.weight, b.weight, 0, 0));
  EXPECT_FALSE(all_close(b.weight, c.weight, 0, 0));
}

TEST(Init, NormalXavierTruncNormalStatistics) {
  manual_seed(9);
  Tensor t = empty({200, 300});
  nn::init::normal_(t, 1.0, 2.0);
  EXPECT_NEAR(t.mean().item<double>(), 1.0, 0.03);
  EXPECT_NEAR(t.std().item<double>(), 2.0, 0.03);
  nn::init::xavier_normal_(t);
  EXPECT_NEAR(t.std().item<double>(), std::sqrt(2.0 / 500.0), 0.002);
  nn::init::trunc_normal_(t, 0.0, 1.0, -0.5, 1.0);
  EXPECT_GE(t.min().item<double>(), -0.5);
  EXPECT_LE(t.max().item<double>(), 1.0);
  nn::init::kaiming_normal_(t, 0.0, nn::init::FanMode::fan_in, nn::init::Nonlinearity::relu);
  EXPECT_NEAR(t.std().item<double>(), std::sqrt(2.0 / 300.0), 0.002);
  EXPECT_NEAR(nn::init::calculate_gain(nn::init::Nonlinearity::tanh), 5.0 / 3.0, 1e-15);
  Tensor one_dim = empty({4});
  EXPECT_NE(message_of<ShapeError>([&] { nn::init::xavier_uniform_(one_dim); }).find("at least 2 dims"),
            std::string::npos);
}

// ---- modes and shapes ----

TEST(Layers, DropoutFollowsTrainAndEval) {
  manual_seed(1);
  nn::Dropout drop(0.25);
  Tensor x = ones({1000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int64_t zeros_seen = 0;
  for (float e : v) {
    if (e == 0.0f) ++zeros_seen;
    else EXPECT_FLOAT_EQ(e, 1.0f / 0.75f);
  }
  EXPECT_GT(zeros_seen, 180);
  EXPECT_LT(zeros_seen, 320);
  drop.eval();
  EXPECT_TRUE(all_close(drop(x), x, 0, 0));
  EXPECT_THROW(nn::Dropout(1.5), ValueError);
}

TEST(Layers, ShapesFlattenPoolAndErrors) {
  nn::MaxPool2d pool(2);
  EXPECT_EQ(pool(zeros({2, 3, 8, 6})).sizes(), (Shape{2, 3, 4, 3}));
  nn::MaxPool2d pool_s(3, nn::Size2(2), 1);
  EXPECT_EQ(pool_s(zeros({1, 1, 7, 7})).sizes(), (Shape{1, 1, 4, 4}));
  nn::Flatten flat;
  EXPECT_EQ(flat(zeros({2, 3, 4, 5})).sizes(), (Shape{2, 60}));
  nn::Linear fc(3, 2, /*bias=*/false);
  EXPECT_FALSE(fc.bias.defined());
  EXPECT_EQ(fc.parameters().size(), 1u);
  EXPECT_NE(message_of<ValueError>([] { nn::Linear(0, 3); }).find("[Linear] in_features"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([] { nn::Conv2d(3, 4, 3, {.groups = 2}); }).find("divisible by groups"),
            std::string::npos);
  EXPECT_THROW(nn::GELU("fast"), ValueError);
}

// Spellings a porter types from PyTorch: LayerNorm(6), RMSNorm(6), module.double()/.half()/
// .bfloat16()/.float(), x.unflatten and nn.Unflatten.
TEST(Layers, PyTorchSpellingsOfNormsDtypesAndUnflatten) {
  nn::LayerNorm ln(6);
  EXPECT_EQ(ln.normalized_shape, Shape({6}));
  EXPECT_EQ(ln.weight.sizes(), Shape({6}));
  nn::RMSNorm rms(6, 1e-6);
  EXPECT_EQ(rms.normalized_shape, Shape({6}));
  EXPECT_EQ(rms.eps, 1e-6);
  const Tensor x = randn({3, 6});
  EXPECT_TRUE(test::all_close(ln(x), nn::LayerNorm(Shape{6})(x), 0, 0));

  nn::Linear lin(4, 2);
  EXPECT_EQ(&lin.double_(), &lin);
  EXPECT_EQ(lin.weight.dtype(), DType::f64);
  lin.half();
  EXPECT_EQ(lin.bias.dtype(), DType::f16);
  lin.bfloat16();
  EXPECT_EQ(lin.weight.dtype(), DType::bf16);
  lin.float_();
  EXPECT_EQ(lin.weight.dtype(), DType::f32);

  const Tensor a = arange(24.0).reshape({2, 12}).requires_grad_(true);
  const Tensor u = a.unflatten(1, {3, -1});
  EXPECT_EQ(u.sizes(), Shape({2, 3, 4}));
  EXPECT_EQ(u.storage(), a.storage()) << "a view";
  EXPECT_EQ(u.select(1, 2).select(1, 1).to_vector<double>(), (std::vector<double>{9, 21}));
  (u * u).sum().backward();
  EXPECT_TRUE(test::all_close(a.grad(), 2 * a.detach(), 0, 0));
  // A non-contiguous dim splits as a view too.
  const Tensor t = arange(24.0).reshape({4, 6}).t();  // [6, 4], strides [1, 6]
  EXPECT_EQ(t.unflatten(0, {2, 3}).strides(), Shape({3, 1, 6}));
  EXPECT_EQ(t.unflatten(-2, {2, 3}).contiguous().flatten(0, 1).to_vector<double>(), t.contiguous().to_vector<double>());
  EXPECT_NE(test::message_of<ShapeError>([&] { a.unflatten(1, {5, -1}); }).find("[unflatten] sizes [5, -1]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] { a.unflatten(1, {3, 3}); }).find("multiply to 9"), std::string::npos);
  EXPECT_THROW(a.unflatten(1, {-1, -1}), ShapeError);
  EXPECT_THROW(a.unflatten(2, {3, 4}), IndexError);

  nn::Unflatten unf(1, {3, 4});
  EXPECT_EQ(unf(a.detach()).sizes(), Shape({2, 3, 4}));
  EXPECT_EQ(unf.repr(), "Unflatten(dim=1, unflattened_size=(3, 4))");
  EXPECT_EQ(nn::Unflatten(1, {12}).repr(), "Unflatten(dim=1, unflattened_size=(12,))");
  // Python's spellings of bools in reprs.
  EXPECT_NE(ln.repr().find("elementwise_affine=True"), std::string::npos) << ln.repr();
  // PyTorch's tuple spelling of a normalized shape.
  EXPECT_EQ(nn::LayerNorm(768).repr(), "LayerNorm((768,), eps=1e-05, elementwise_affine=True)");
  EXPECT_EQ(nn::RMSNorm(Shape{2, 3}).repr(), "RMSNorm((2, 3), eps=None, elementwise_affine=True)");
  EXPECT_NE(nn::Conv2d(3, 4, 3, {.bias = false}).repr().find(", bias=False)"), std::string::npos);
}

}  // namespace
}  // namespace ember::test
