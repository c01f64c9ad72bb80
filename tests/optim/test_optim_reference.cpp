// ember's optimizers, schedulers and clip_grad_norm_ against PyTorch 1.13 reference values
// (tests/fixtures/optim_reference.txt, written by tests/fixtures/make_optim_fixtures.py).
// Each optimizer case runs 6 steps with a fixed gradient sequence (some parameters without a
// gradient on some steps) and compares every parameter after every step: in f64 against
// torch's f64 run (only rounding differences remain) and in f32 against torch's f32 run.
// One body per device: CUDA cases skip without a device.
#include <cmath>
#include <memory>
#include <string>

#include "ember/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

const char* kFile = "optim_reference.txt";
constexpr int kParams = 3, kSteps = 6;

test::Fixture fx(const std::string& name) { return test::load_fixture(kFile, name); }

std::unique_ptr<optim::Optimizer> make_optimizer(const std::string& name,
                                                 const std::vector<Tensor>& params) {
  const std::string kind = name.substr(0, name.find('_'));
  const std::vector<double> group = fx(name + ".group").values;
  int groups = 0;
  for (double g : group) groups = std::max(groups, int(g) + 1);
  std::vector<std::vector<Tensor>> members(static_cast<size_t>(groups));
  for (int i = 0; i < kParams; ++i) members[size_t(group[size_t(i)])].push_back(params[size_t(i)]);
  if (kind == "sgd") {
    std::vector<optim::SGD::Group> gs;
    for (int g = 0; g < groups; ++g) {
      const auto h = fx(name + ".hp" + std::to_string(g)).values;
      gs.push_back({members[size_t(g)],
                    {.lr = h[0], .momentum = h[1], .dampening = h[2], .weight_decay = h[3],
                     .nesterov = h[4] != 0, .maximize = h[5] != 0}});
    }
    return std::make_unique<optim::SGD>(gs);
  }
  if (kind == "adam") {
    std::vector<optim::Adam::Group> gs;
    for (int g = 0; g < groups; ++g) {
      const auto h = fx(name + ".hp" + std::to_string(g)).values;
      gs.push_back({members[size_t(g)], {.lr = h[0], .betas = {h[1], h[2]}, .eps = h[3], .weight_decay = h[4],
                                         .amsgrad = h.size() > 6 && h[6] != 0, .maximize = h[5] != 0}});
    }
    return std::make_unique<optim::Adam>(gs);
  }
  std::vector<optim::AdamW::Group> gs;
  for (int g = 0; g < groups; ++g) {
    const auto h = fx(name + ".hp" + std::to_string(g)).values;
    gs.push_back({members[size_t(g)], {.lr = h[0], .betas = {h[1], h[2]}, .eps = h[3], .weight_decay = h[4],
                                       .amsgrad = h.size() > 6 && h[6] != 0, .maximize = h[5] != 0}});
  }
  return std::make_unique<optim::AdamW>(gs);
}

// Runs case `name` in `dtype` on `dev`, comparing with the reference after every step.
void run_case(const std::string& name, DType dtype, Device dev, double rtol, double atol) {
  SCOPED_TRACE(name + " " + dtype_name(dtype));
  const std::string tag = dtype == DType::f64 ? "f64" : "f32";
  std::vector<Tensor> params;
  for (int i = 0; i < kParams; ++i) {
    Tensor p = fx(name + ".p" + std::to_string(i)).tensor(dtype).to(dev);
    p.requires_grad_(true);
    params.push_back(p);
  }
  const std::vector<const TensorImpl*> ids = {params[0].impl(), params[1].impl(), params[2].impl()};
  auto opt = make_optimizer(name, params);
  const std::vector<double> mask = fx(name + ".mask").values;
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < kParams; ++i) {
      const bool has = mask[size_t(s * kParams + i)] != 0;
      params[size_t(i)].set_grad(
          has ? fx(name + ".g" + std::to_string(s) + "." + std::to_string(i)).tensor(dtype).to(dev)
              : Tensor());
    }
    opt->step();
    for (int i = 0; i < kParams; ++i) {
      const std::string key = name + "." + tag + ".s" + std::to_string(s) + ".p" + std::to_string(i);
      EXPECT_TRUE(test::all_close(params[size_t(i)], fx(key).tensor(), rtol, atol)) << key;
      EXPECT_EQ(params[size_t(i)].impl(), ids[size_t(i)]) << "the parameter's identity changed";
    }
  }
}

class OptimReference : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { EMBER_SKIP_IF_NO_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

const char* kCases[] = {"sgd_plain",     "sgd_momentum",  "sgd_dampening_wd", "sgd_nesterov_maximize",
                        "sgd_skip",      "adam_default",  "adam_l2",          "adam_maximize",
                        "adamw_default", "adamw_wd",      "adamw_skip",       "adamw_groups",
                        "sgd_groups",    "adam_amsgrad",  "adamw_amsgrad_skip"};

}  // namespace

TEST_P(OptimReference, F64MatchesTorch) {
  for (const char* c : kCases) run_case(c, DType::f64, dev(), 1e-11, 1e-13);
}

TEST_P(OptimReference, F32MatchesTorch) {
  for (const char* c : kCases) run_case(c, DType::f32, dev(), 2e-5, 2e-6);
}

TEST_P(OptimReference, SkippedParametersKeepTheirOwnStepCount) {
  std::vector<Tensor> params;
  for (int i = 0; i < kParams; ++i)
    params.push_back(fx("adamw_skip.p" + std::to_string(i)).tensor(DType::f64).to(dev()).requires_grad_());
  auto opt = make_optimizer("adamw_skip", params);
  const std::vector<double> mask = fx("adamw_skip.mask").values;
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < kParams; ++i)
      params[size_t(i)].set_grad(mask[size_t(s * kParams + i)] != 0
                                     ? fx("adamw_skip.g" + std::to_string(s) + "." + std::to_string(i))
                                           .tensor(DType::f64).to(dev())
                                     : Tensor());
    opt->step();
  }
  for (int i = 0; i < kParams; ++i) {
    int64_t expected = 0;
    for (int s = 0; s < kSteps; ++s) expected += mask[size_t(s * kParams + i)] != 0;
    EXPECT_EQ(opt->state_step(size_t(i)), expected) << "parameter " << i;
  }
}

TEST_P(OptimReference, ClipGradNormMatchesTorch) {
  struct Case {
    const char* name;
    double max_norm, norm_type;
  };
  const Case cases[] = {{"l2", 1.0, 2.0}, {"l2_noclip", 100.0, 2.0}, {"inf", 0.5, INFINITY},
                        {"l1", 2.0, 1.0}, {"l3", 0.7, 3.0}};
  for (DType dtype : {DType::f64, DType::f32}) {
    const double rtol = dtype == DType::f64 ? 1e-12 : 2e-6, atol = dtype == DType::f64 ? 1e-14 : 1e-7;
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dtype));
      std::vector<Tensor> params;
      for (int i = 0; i < kParams; ++i) {
        Tensor g = fx("clip.g" + std::to_string(i)).tensor(dtype).to(dev());
        Tensor p = zeros(g.sizes(), TensorOptions(dtype).device(dev())).requires_grad_();
        p.set_grad(g);
        params.push_back(p);
      }
      Tensor total = optim::clip_grad_norm_(params, c.max_norm, c.norm_type);
      EXPECT_EQ(total.dim(), 0);
      EXPECT_EQ(total.device(), dev());
      EXPECT_EQ(total.dtype(), dtype);
      EXPECT_TRUE(test::all_close(total, fx(std::string("clip.") + c.name + ".total").values, rtol, atol));
      for (int i = 0; i < kParams; ++i)
        EXPECT_TRUE(test::all_close(params[size_t(i)].grad(),
                                    fx(std::string("clip.") + c.name + ".g" + std::to_string(i)).tensor(),
                                    rtol, atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OptimReference, ::testing::ValuesIn(test::test_devices()),
                         test::device_label);

// ---------------------------------------------------------------- schedulers (host only)

namespace {

// An SGD optimizer with two groups (lr 0.1 and 0.02), as in the fixture script.
struct TwoGroups {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD opt{std::vector<optim::SGD::Group>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.02}}}};
};

void expect_schedule(optim::LRScheduler& sched, optim::Optimizer& opt, const std::string& name,
                     double rtol) {
  const test::Fixture f = fx("sched." + name + ".lr");
  const int64_t epochs = f.shape[0];
  for (int64_t e = 0; e < epochs; ++e) {
    if (e > 0) sched.step();
    EXPECT_EQ(sched.last_epoch(), e);
    for (size_t g = 0; g < 2; ++g) {
      const double want = f.values[size_t(e * 2) + g];
      EXPECT_NEAR(opt.lr(g), want, rtol * std::abs(want)) << name << " epoch " << e << " group " << g;
      EXPECT_EQ(sched.get_last_lr()[g], opt.lr(g));
    }
  }
}

}  // namespace

TEST(Schedulers, StepLRMatchesTorch) {
  TwoGroups t;
  optim::StepLR sched(t.opt, 3, 0.5);
  expect_schedule(sched, t.opt, "step", 0);
}

TEST(Schedulers, CosineAnnealingLRMatchesTorchPastTMax) {
  TwoGroups t;
  optim::CosineAnnealingLR sched(t.opt, 7, 0.001);
  expect_schedule(sched, t.opt, "cosine", 1e-15);
}

TEST(Schedulers, LambdaLRMatchesTorch) {
  TwoGroups t;
  optim::LambdaLR sched(t.opt, [](int64_t e) { return std::pow(0.9, double(e)); });
  expect_schedule(sched, t.opt, "lambda", 1e-15);
}

TEST(Schedulers, WarmupCosineLRMatchesTorchLambdaLR) {
  TwoGroups t;
  optim::WarmupCosineLR sched(t.opt, 3, 10, 0.001);
  expect_schedule(sched, t.opt, "warmup_cosine", 1e-14);
}
