// amp::GradScaler and the amp ops family: step skipping on inf/NaN (parameters and optimizer
// state untouched), backoff and growth, PyTorch 1.13's GradScaler sequences
// (tests/fixtures/amp_grad_scaler_reference.txt from make_amp_fixtures.py), the fused
// unscale + check against its composite, state dicts, clipping between unscale_ and step,
// and the disabled pass-through. CUDA bodies skip without a device.
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "ember/amp/autocast.h"
#include "ember/amp/grad_scaler.h"
#include "ember/ops/amp.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

class GradScalerTest : public ::testing::TestWithParam<Device> {};

// loss = sum(w * x) / 8 for a 3-element w: dloss/dw = x / 8.
Tensor linear_loss(const Tensor& w, std::vector<float> x, Device dev) {
  return (w * tensor(x, Shape{3}).to(dev)).sum() / 8.0;
}

TEST_P(GradScalerTest, InfGradientSkipsStepAndHalvesScale) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor w = tensor(std::vector<float>{0.5f, -1.25f, 2.0f}, Shape{3}).to(dev).requires_grad_(true);
  optim::AdamW opt({w}, {.lr = 0.1});
  amp::GradScaler scaler({.growth_interval = 100});
  // One clean step creates the optimizer state.
  scaler.scale(linear_loss(w, {1, 2, 3}, dev)).backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  const Tensor w_before = w.detach().clone();
  const Tensor m_before = opt.state(0, "exp_avg").clone();
  const Tensor v_before = opt.state(0, "exp_avg_sq").clone();
  for (float bad : {kInf, kNaN, -kInf}) {
    opt.zero_grad();
    scaler.scale(linear_loss(w, {1, bad, 3}, dev)).backward();
    EXPECT_FALSE(scaler.step(opt));
    const double before = scaler.get_scale();
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), before * 0.5);
    EXPECT_EQ(scaler.growth_tracker(), 0);
    EXPECT_TRUE(all_close(w.detach(), w_before, 0, 0));
    EXPECT_TRUE(all_close(opt.state(0, "exp_avg"), m_before, 0, 0));
    EXPECT_TRUE(all_close(opt.state(0, "exp_avg_sq"), v_before, 0, 0));
    EXPECT_EQ(opt.state_step(0), 1);
  }
  EXPECT_EQ(scaler.get_scale(), 65536.0 / 8);
}

TEST_P(GradScalerTest, GrowthIntervalCleanStepsDoubleTheScale) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor w = ones({3}, dev).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.01});
  amp::GradScaler scaler({.init_scale = 1024, .growth_interval = 4});
  std::vector<double> scales;
  for (int t = 0; t < 9; ++t) {
    opt.zero_grad();
    scaler.scale(linear_loss(w, {1, 2, 3}, dev)).backward();
    EXPECT_TRUE(scaler.step(opt));
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 1024, 2048, 2048, 2048, 2048, 4096, 4096}));
  EXPECT_EQ(scaler.growth_tracker(), 1);
  // The gradients the optimizer saw were unscaled exactly (powers of two): x / 8.
  EXPECT_TRUE(all_close(w.grad(), std::vector<double>{0.125, 0.25, 0.375}, 0, 0));
}

// PyTorch 1.13's GradScaler with SGD(momentum 0.9) on the same scripted inf/NaN pattern.
TEST_P(GradScalerTest, MatchesTorchReferenceSequences) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/amp_grad_scaler_reference.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int scenarios = 0;
  std::getline(in, line);
  while (!line.empty()) {
    std::istringstream head(line);
    std::string word, name;
    double init_scale, growth, backoff;
    int64_t interval, steps;
    head >> word >> name >> init_scale >> growth >> backoff >> interval >> steps;
    ASSERT_EQ(word, "scenario");
    SCOPED_TRACE(name);
    ++scenarios;
    Tensor w = tensor(std::vector<float>{0.5f, -1.25f, 2.0f}, Shape{3}).to(dev).requires_grad_(true);
    optim::SGD opt({w}, {.lr = 0.125, .momentum = 0.9});
    amp::GradScaler scaler({.init_scale = init_scale, .growth_factor = growth,
                            .backoff_factor = backoff, .growth_interval = interval});
    for (int64_t t = 0; t < steps; ++t) {
      ASSERT_TRUE(std::getline(in, line));
      std::istringstream row(line);
      int bad, taken;
      double scale, w0, w1, w2;
      int64_t tracker;
      row >> bad >> taken >> scale >> tracker >> w0 >> w1 >> w2;
      std::vector<float> x = {1.0f, -2.0f, 0.25f * float(t + 1)};
      if (bad == 1) x[1] = kInf;
      if (bad == 2) x[2] = kNaN;
      opt.zero_grad();
      scaler.scale(linear_loss(w, x, dev)).backward();
      EXPECT_EQ(scaler.step(opt), taken == 1) << "step " << t;
      scaler.update();
      EXPECT_EQ(scaler.get_scale(), scale) << "step " << t;
      EXPECT_EQ(scaler.growth_tracker(), tracker) << "step " << t;
      EXPECT_TRUE(all_close(w.detach(), std::vector<double>{w0, w1, w2}, 1e-5, 1e-6)) << "step " << t;
    }
    if (!std::getline(in, line)) line.clear();
  }
  EXPECT_EQ(scenarios, 3);
}

// The fused pass against its composite (cast to the compute type, multiply, cast back;
// isfinite reduced on the host), over mixed dtypes, odd sizes and a strided gradient.
TEST_P(GradScalerTest, FusedUnscaleMatchesComposite) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  manual_seed(7);
  for (bool poison : {false, true}) {
    TensorList grads = {randn({1000}, dev) * 300.0, randn({3, 7}, TensorOptions(DType::f16).device(dev)),
                        randn({40000}, TensorOptions(DType::bf16).device(dev)),
                        randn({17}, TensorOptions(DType::f64).device(dev)),
                        randn({6, 5}, dev).transpose(0, 1), zeros({0}, dev)};
    if (poison) grads[2].select(0, 39999).fill_(kInf);
    TensorList expected;
    for (const Tensor& g : grads) {
      const DType c = g.dtype() == DType::f64 ? DType::f64 : DType::f32;
      expected.push_back((g.to(c) * (1.0f / 1024.0f)).to(g.dtype()));
    }
    Tensor found = zeros({1}, dev);
    const Tensor inv = full({1}, 1.0 / 1024.0, dev);
    ops::amp_unscale_and_check_(grads, found, inv);
    EXPECT_EQ(found.item<double>(), poison ? 1.0 : 0.0);
    for (size_t i = 0; i < grads.size(); ++i) {
      if (poison && i == 2) continue;  // inf * s = inf: checked below
      EXPECT_TRUE(all_close(grads[i], expected[i], 0, 0)) << "gradient " << i;
    }
    if (poison) {
      EXPECT_TRUE(std::isinf(grads[2].select(0, 39999).item<double>()));
    }
    // The flag accumulates and is never cleared by a clean pass.
    TensorList clean = {ones({5}, dev)};
    ops::amp_unscale_and_check_(clean, found, inv);
    EXPECT_EQ(found.item<double>(), poison ? 1.0 : 0.0);
  }
}

TEST_P(GradScalerTest, UpdateScaleOpMatchesTorchKernel) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor s = full({1}, 3e38, dev);
  Tensor tracker = zeros({1}, TensorOptions(DType::i32).device(dev));
  Tensor found = zeros({1}, dev);
  ops::amp_update_scale_(s, tracker, found, 2.0, 0.5, 1);  // 6e38 overflows f32: not grown
  EXPECT_EQ(s.item<double>(), double(3e38f));
  EXPECT_EQ(tracker.item<int64_t>(), 0);
  found.fill_(1.0);
  ops::amp_update_scale_(s, tracker, found, 2.0, 0.5, 1);
  EXPECT_EQ(s.item<double>(), double(3e38f * 0.5f));
}

TEST_P(GradScalerTest, StateDictRoundTrip) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor w = ones({3}, dev).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 0.01});
  amp::GradScaler a({.init_scale = 512, .growth_factor = 3, .backoff_factor = 0.25,
                     .growth_interval = 5});
  for (float bad : {0.0f, 0.0f, kInf, 0.0f, 0.0f, 0.0f}) {
    opt.zero_grad();
    a.scale(linear_loss(w, {1, 2 + bad, 3}, dev)).backward();
    a.step(opt);
    a.update();
  }
  const StateDict sd = a.state_dict();
  EXPECT_EQ(sd.scalar("scale"), 128.0);
  EXPECT_EQ(sd.integer("growth_tracker"), 3);
  EXPECT_EQ(sd.scalar("growth_factor"), 3.0);
  EXPECT_EQ(sd.scalar("backoff_factor"), 0.25);
  EXPECT_EQ(sd.integer("growth_interval"), 5);
  amp::GradScaler b;  // defaults; everything comes from the state dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 128.0);
  EXPECT_EQ(b.growth_tracker(), 3);
  // Both continue identically: two more clean steps grow the scale by 3.
  for (amp::GradScaler* s : {&a, &b})
    for (int t = 0; t < 2; ++t) {
      opt.zero_grad();
      s->scale(linear_loss(w, {1, 2, 3}, dev)).backward();
      s->step(opt);
      s->update();
    }
  EXPECT_EQ(a.get_scale(), 384.0);
  EXPECT_EQ(b.get_scale(), 384.0);
  EXPECT_EQ(b.state_dict().integer("growth_tracker"), 0);
  StateDict broken = sd;
  broken.set_int("growth_tracker", 9);
  EXPECT_NE(message_of<ValueError>([&] { b.load_state_dict(broken); }).find("[GradScaler"),
            std::string::npos);
}

TEST_P(GradScalerTest, ClippingBetweenUnscaleAndStep) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor w = zeros({3}, dev).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 1.0});
  amp::GradScaler scaler;
  // dloss/dw = (3, 4, 0) / 8 * 8 = (3, 4, 0): norm 5.
  scaler.scale((w * tensor(std::vector<float>{3, 4, 0}, Shape{3}).to(dev)).sum()).backward();
  EXPECT_TRUE(all_close(w.grad(), std::vector<double>{3 * 65536.0, 4 * 65536.0, 0}, 0, 0));
  scaler.unscale_(opt);
  EXPECT_TRUE(all_close(w.grad(), std::vector<double>{3, 4, 0}, 0, 0));
  const Tensor norm = optim::clip_grad_norm_({w}, 1.0);
  EXPECT_NEAR(norm.item<double>(), 5.0, 1e-6);
  EXPECT_TRUE(scaler.step(opt));  // no second unscale
  scaler.update();
  EXPECT_TRUE(all_close(w.detach(), std::vector<double>{-0.6, -0.8, 0}, 1e-5, 1e-6));
  // Misuse is reported as PyTorch does.
  opt.zero_grad();
  scaler.scale((w * 2.0).sum()).backward();
  scaler.unscale_(opt);
  EXPECT_NE(message_of<ValueError>([&] { scaler.unscale_(opt); }).find("already been called"),
            std::string::npos);
  scaler.step(opt);
  EXPECT_NE(message_of<ValueError>([&] { scaler.step(opt); }).find("already been called"),
            std::string::npos);
  scaler.update();
}

TEST_P(GradScalerTest, DisabledIsAPassThrough) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor w = ones({3}, dev).requires_grad_(true);
  optim::SGD opt({w}, {.lr = 1.0});
  amp::GradScaler scaler({.enabled = false});
  const Tensor loss = linear_loss(w, {1, 2, 3}, dev);
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.data_ptr(), loss.data_ptr());
  scaled.backward();
  scaler.unscale_(opt);
  EXPECT_TRUE(all_close(w.grad(), std::vector<double>{0.125, 0.25, 0.375}, 0, 0));
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_TRUE(all_close(w.detach(), std::vector<double>{0.875, 0.75, 0.625}, 0, 0));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  // Disabled, an inf gradient is not caught: the optimizer steps (as PyTorch).
  opt.zero_grad();
  scaler.scale(linear_loss(w, {1, kInf, 3}, dev)).backward();
  EXPECT_TRUE(scaler.step(opt));
}

INSTANTIATE_TEST_SUITE_P(Devices, GradScalerTest, ::testing::ValuesIn(test_devices()),
                         device_label);

TEST(GradScaler, ValidatesOptions) {
  EXPECT_NE(message_of<ValueError>([] { amp::GradScaler({.growth_factor = 1.0}); })
                .find("[GradScaler] growth_factor"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([] { amp::GradScaler({.backoff_factor = 1.5}); })
                .find("[GradScaler] backoff_factor"),
            std::string::npos);
  amp::GradScaler s;
  Tensor w = ones({3}).requires_grad_(true);
  optim::SGD opt({w});
  EXPECT_NE(message_of<ValueError>([&] { s.update(); }).find("scale(loss) first"), std::string::npos);
}

}  // namespace
}  // namespace ember::test

// End to end on the CPU: an MLP trained with f16 autocast + GradScaler reaches the loss band
// of the same f32 training (same data, same initialization), and a run whose scale starts
// absurdly high backs off (skipped steps) and still trains.

namespace ember::test {
namespace {

struct ScalerMlp {
  nn::Linear fc1{8, 32}, fc2{32, 1};
  Tensor forward(const Tensor& x) const { return fc2(relu(fc1(x))); }
  std::vector<Tensor> parameters() { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias}; }
};

double train_mlp(bool fp16, double init_scale, double* initial, int* skipped) {
  manual_seed(11);
  const Tensor x = randn({256, 8});
  const Tensor y = tanh(x.matmul(randn({8, 4}))).matmul(randn({4, 1}));
  manual_seed(12);
  ScalerMlp net;
  optim::AdamW opt(net.parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  amp::GradScaler scaler({.init_scale = init_scale, .growth_interval = 50, .enabled = fp16});
  auto f32_loss = [&] {
    NoGradGuard no_grad;
    return nn::functional::mse_loss(net.forward(x), y).item<double>();
  };
  *initial = f32_loss();
  *skipped = 0;
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::autocast ac(Device::cpu(), DType::f16, fp16);
      loss = nn::functional::mse_loss(net.forward(x), y);
    }
    scaler.scale(loss).backward();
    if (!scaler.step(opt)) ++*skipped;
    scaler.update();
  }
  return f32_loss();
}

TEST(GradScalerEndToEnd, F16AutocastMlpReachesF32Band) {
  double init32 = 0, init16 = 0, init_hi = 0;
  int skipped = 0;
  const double f32 = train_mlp(false, 1.0, &init32, &skipped);
  EXPECT_EQ(skipped, 0);
  const double f16 = train_mlp(true, 65536.0, &init16, &skipped);
  ASSERT_LT(f32, 0.1 * init32);
  EXPECT_LT(f16, 1.5 * f32 + 2e-3) << "f32 " << f32 << " f16 " << f16;
  // 2^40 overflows f16 gradients at once: the scaler backs off until they fit, then trains.
  const double hi = train_mlp(true, std::ldexp(1.0, 40), &init_hi, &skipped);
  EXPECT_GT(skipped, 10);
  EXPECT_LT(skipped, 40);
  EXPECT_LT(hi, 1.5 * f32 + 2e-3) << "f32 " << f32 << " f16 from 2^40 " << hi;
  std::printf("final loss: f32 %.5f  f16+scaler %.5f  f16 from 2^40 %.5f (%d skipped)\n", f32, f16,
              hi, skipped);
}

}  // namespace
}  // namespace ember::test
