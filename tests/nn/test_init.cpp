// nn::init against the distributions PyTorch's torch.nn.init defines: sample statistics of
// large tensors within a few standard errors (derived from the sample size), bounds,
// orthogonality, fans of conv weights and the gains of calculate_gain.
#include <cmath>
#include <numbers>

#include "support/test_support.h"

using namespace ember;
namespace init = ember::nn::init;

namespace {

struct Moments {
  double mean = 0, mean_sq = 0, min = 0, max = 0;
  int64_t n = 0;
};

Moments moments(const Tensor& t) {
  const std::vector<double> v = t.to(DType::f64).to_vector<double>();
  Moments m;
  m.n = int64_t(v.size());
  m.min = m.max = v[0];
  for (double x : v) {
    m.mean += x;
    m.mean_sq += x * x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean /= double(m.n);
  m.mean_sq /= double(m.n);
  return m;
}

// U(-b, b): E x = 0, E x^2 = b^2/3, Var x^2 = 4 b^4 / 45. 6 standard errors.
void expect_uniform(const Tensor& t, double b) {
  const Moments m = moments(t);
  const double n = double(m.n);
  EXPECT_GE(m.min, -b);
  EXPECT_LE(m.max, b);
  EXPECT_GT(m.max, b * (1 - 20 / n));  // the range is used up to its ends
  EXPECT_NEAR(m.mean, 0.0, 6 * b / std::sqrt(3 * n));
  EXPECT_NEAR(m.mean_sq, b * b / 3, 6 * std::sqrt(4.0 / 45) * b * b / std::sqrt(n));
}

// N(0, s^2): E x^2 = s^2, Var x^2 = 2 s^4.
void expect_normal(const Tensor& t, double s) {
  const Moments m = moments(t);
  const double n = double(m.n);
  EXPECT_NEAR(m.mean, 0.0, 6 * s / std::sqrt(n));
  EXPECT_NEAR(m.mean_sq, s * s, 6 * std::sqrt(2.0) * s * s / std::sqrt(n));
}

}  // namespace

TEST(Init, FansOfConvWeights) {
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(zeros({8, 4, 3, 5})), std::make_pair(int64_t(60), int64_t(120)));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(zeros({7, 3})), std::make_pair(int64_t(3), int64_t(7)));
  EXPECT_EQ(init::calculate_fan_in_and_fan_out(zeros({2, 6, 4})), std::make_pair(int64_t(24), int64_t(8)));
}

TEST(Init, CalculateGainMatchesTorch) {
  using N = init::Nonlinearity;
  EXPECT_DOUBLE_EQ(init::calculate_gain(N::relu), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(N::leaky_relu), std::sqrt(2.0 / (1 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(init::calculate_gain(N::leaky_relu, 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_DOUBLE_EQ(init::calculate_gain(N::tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(N::selu), 0.75);
  for (N n : {N::linear, N::sigmoid, N::conv1d, N::conv2d, N::conv3d, N::conv_transpose2d})
    EXPECT_DOUBLE_EQ(init::calculate_gain(n), 1.0);
}

TEST(Init, KaimingUniformAndNormal) {
  Generator gen(11);
  Tensor w = empty({128, 32, 3, 3});  // fan_in 288, fan_out 1152; 36864 samples
  init::kaiming_uniform_(w, 0.0, init::FanMode::fan_in, init::Nonlinearity::relu, &gen);
  expect_uniform(w, std::sqrt(2.0) * std::sqrt(3.0 / 288));
  init::kaiming_uniform_(w, std::sqrt(5.0), init::FanMode::fan_in, init::Nonlinearity::leaky_relu, &gen);
  expect_uniform(w, std::sqrt(2.0 / 6.0) * std::sqrt(3.0 / 288));  // nn.Linear/Conv2d's default
  init::kaiming_normal_(w, 0.0, init::FanMode::fan_out, init::Nonlinearity::relu, &gen);
  expect_normal(w, std::sqrt(2.0) / std::sqrt(1152.0));
}

TEST(Init, XavierUniformAndNormal) {
  Generator gen(12);
  Tensor w = empty({200, 150}, DType::f64);
  init::xavier_uniform_(w, 2.0, &gen);
  expect_uniform(w, 2.0 * std::sqrt(6.0 / 350));
  init::xavier_normal_(w, 0.5, &gen);
  expect_normal(w, 0.5 * std::sqrt(2.0 / 350));
}

TEST(Init, TruncNormalMatchesTheTruncatedDistribution) {
  auto pdf = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi); };
  auto cdf = [](double x) { return (1 + std::erf(x / std::sqrt(2.0))) / 2; };
  struct Case { double mean, std, a, b; };
  // The last window lies 5 std out: ~3e-7 of the mass (a rejection sampler would stall).
  for (const Case c : {Case{1.0, 2.0, -1.0, 2.0}, Case{0.0, 1.0, -2.0, 2.0}, Case{0.0, 1.0, 5.0, 6.0}}) {
    SCOPED_TRACE(testing::Message() << "mean " << c.mean << " std " << c.std << " [" << c.a << ", " << c.b << "]");
    Generator gen(13);
    Tensor t = empty({40000}, DType::f64);
    init::trunc_normal_(t, c.mean, c.std, c.a, c.b, &gen);
    const double al = (c.a - c.mean) / c.std, be = (c.b - c.mean) / c.std, z = cdf(be) - cdf(al);
    const double mu = c.mean + c.std * (pdf(al) - pdf(be)) / z;
    const double var = c.std * c.std *
                       (1 + (al * pdf(al) - be * pdf(be)) / z - std::pow((pdf(al) - pdf(be)) / z, 2));
    const Moments m = moments(t);
    EXPECT_GE(m.min, c.a);
    EXPECT_LE(m.max, c.b);
    EXPECT_NEAR(m.mean, mu, 6 * std::sqrt(var / 40000));
    EXPECT_NEAR(m.mean_sq - m.mean * m.mean, var, 0.05 * var);
  }
  Tensor t = empty({4});
  EXPECT_THROW(init::trunc_normal_(t, 0, 1, 1, 1), ValueError);
}

TEST(Init, OrthogonalRowsOrColumns) {
  Generator gen(14);
  for (const Shape& shape : {Shape{6, 10}, Shape{10, 6}, Shape{4, 2, 3, 3}, Shape{5, 5}}) {
    SCOPED_TRACE(testing::Message() << "rows " << shape[0] << ", dims " << shape.size());
    Tensor w = empty(shape, DType::f64);
    init::orthogonal_(w, 1.5, &gen);
    const Tensor m = w.reshape({shape[0], -1});
    const bool wide = m.size(0) <= m.size(1);
    const Tensor gram = wide ? m.matmul(m.t()) : m.t().matmul(m);
    const int64_t k = gram.size(0);
    std::vector<double> identity(size_t(k * k), 0.0);
    for (int64_t i = 0; i < k; ++i) identity[size_t(i * k + i)] = 2.25;  // gain^2 I
    EXPECT_TRUE(test::all_close(gram, Shape{k, k}, identity, 0, 1e-12));
  }
  // f32 weights on the same generator state give the same values, rounded.
  Generator g1(15), g2(15);
  Tensor a = empty({3, 7}, DType::f64), b = empty({3, 7});
  init::orthogonal_(a, 1.0, &g1);
  init::orthogonal_(b, 1.0, &g2);
  EXPECT_TRUE(test::all_close(b, a.to(DType::f32), 0, 1e-7));
  Tensor v = empty({4});
  EXPECT_THROW(init::orthogonal_(v), ShapeError);
}

// Under SkipInitGuard the init functions (and the layers calling them) still validate their
// arguments but draw nothing and write nothing; the guard nests and restores on exit.
TEST(Init, SkipInitGuardDrawsNothingAndRestores) {
  Generator& rng = default_generator(Device::cpu());
  manual_seed(5);
  const Generator::State before = rng.get_state();
  Tensor t = full({3, 4}, 7.0);
  {
    nn::init::SkipInitGuard skip;
    {
      nn::init::SkipInitGuard nested;
    }
    EXPECT_TRUE(nn::init::init_skipped());
    nn::init::normal_(t);
    nn::init::kaiming_uniform_(t);
    nn::init::orthogonal_(t);
    nn::init::zeros_(t);
    nn::Linear layer(64, 32);
    nn::Embedding emb(100, 8);
    EXPECT_EQ(rng.get_state().offset, before.offset);
    EXPECT_EQ(t.to_vector<float>(), std::vector<float>(12, 7.0f));
    EXPECT_THROW(nn::init::normal_(t, 0.0, -1.0), ValueError);  // still validated
  }
  EXPECT_FALSE(nn::init::init_skipped());
  nn::init::normal_(t);
  EXPECT_NE(rng.get_state().offset, before.offset);
  EXPECT_NE(t.to_vector<float>(), std::vector<float>(12, 7.0f));
}
