// RMSprop, Adagrad and the LinearLR / OneCycleLR / SequentialLR / ReduceLROnPlateau schedulers
// against PyTorch 1.13 (tests/fixtures/optim2_reference.txt, written by
// tests/fixtures/make_optim2_fixtures.py): parameter trajectories over 6 steps in f64 (one
// parameter skips a step), and lr / momentum sequences of two parameter groups.
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "ember/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

const char* kFile = "optim2_reference.txt";
constexpr int kParams = 2, kSteps = 6;

test::Fixture fx(const std::string& name) { return test::load_fixture(kFile, name); }

// The hyperparameters of make_optim2_fixtures.py's CASES.
std::unique_ptr<optim::Optimizer> make(const std::string& name, std::vector<Tensor> ps) {
  if (name == "rmsprop_plain") return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = 0.01});
  if (name == "rmsprop_centered_momentum")
    return std::make_unique<optim::RMSprop>(
        ps, optim::RMSpropOptions{.lr = 0.02, .alpha = 0.9, .eps = 1e-6, .weight_decay = 0.1,
                                  .momentum = 0.8, .centered = true});
  if (name == "rmsprop_momentum_maximize")
    return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .maximize = true});
  if (name == "adagrad_plain") return std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = 0.1});
  return std::make_unique<optim::Adagrad>(
      ps, optim::AdagradOptions{.lr = 0.05, .lr_decay = 0.3, .weight_decay = 0.2,
                                .initial_accumulator_value = 0.5, .eps = 1e-8});
}

class Optim2Case : public ::testing::TestWithParam<std::tuple<Device, std::string>> {};

TEST_P(Optim2Case, MatchesTorchTrajectory) {
  const auto& [device, name] = GetParam();
  if (device.is_cuda()) EMBER_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> ps;
  for (int i = 0; i < kParams; ++i)
    ps.push_back(fx(name + ".p" + std::to_string(i)).tensor(DType::f64).to(device).requires_grad_());
  auto opt = make(name, ps);
  const std::vector<double> mask = fx(name + ".mask").values;
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < kParams; ++i) {
      const std::string g = name + ".g" + std::to_string(s) + "." + std::to_string(i);
      ps[size_t(i)].set_grad(mask[size_t(s * kParams + i)] != 0 ? fx(g).tensor(DType::f64).to(device) : Tensor());
    }
    opt->step();
    for (int i = 0; i < kParams; ++i) {
      const test::Fixture want = fx(name + ".s" + std::to_string(s) + ".p" + std::to_string(i));
      EXPECT_TRUE(test::all_close(ps[size_t(i)], want.shape, want.values, 1e-12, 1e-14))
          << name << " step " << s << " param " << i;
    }
  }
  // p1 skipped one step: its count must say so (PyTorch's state["step"]).
  EXPECT_EQ(opt->state_step(0), kSteps);
  EXPECT_EQ(opt->state_step(1), kSteps - 1);
}

INSTANTIATE_TEST_SUITE_P(Torch, Optim2Case,
                         ::testing::Combine(::testing::ValuesIn(test::test_devices()),
                                            ::testing::Values("rmsprop_plain", "rmsprop_centered_momentum",
                                                              "rmsprop_momentum_maximize", "adagrad_plain",
                                                              "adagrad_decay")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param).is_cuda() ? "cuda_" : "cpu_") +
                                  std::get<1>(info.param);
                         });

// Halfway through a run, state_dict -> a fresh optimizer -> load_state_dict continues the
// same trajectory as the original (PyTorch's state names; optional buffers only when used).
TEST(Optim2, StateDictRoundTripContinuesTrajectory) {
  for (const std::string name : {"rmsprop_centered_momentum", "rmsprop_plain", "adagrad_decay"}) {
    SCOPED_TRACE(name);
    std::vector<Tensor> a, b;
    for (int i = 0; i < kParams; ++i) {
      a.push_back(fx(name + ".p" + std::to_string(i)).tensor().requires_grad_());
      b.push_back(zeros(a.back().sizes(), DType::f64).requires_grad_());
    }
    auto opt = make(name, a);
    auto grads = [&](int s) {
      for (int i = 0; i < kParams; ++i) {
        const std::string g = name + ".g" + std::to_string(s) + "." + std::to_string(i);
        const bool has = fx(name + ".mask").values[size_t(s * kParams + i)] != 0;
        a[size_t(i)].set_grad(has ? fx(g).tensor() : Tensor());
        b[size_t(i)].set_grad(has ? fx(g).tensor() : Tensor());
      }
    };
    for (int s = 0; s < 3; ++s) {
      grads(s);
      opt->step();
    }
    const StateDict sd = opt->state_dict();
    if (name == "rmsprop_plain") {
      EXPECT_TRUE(sd.contains("state.0.square_avg"));
      EXPECT_FALSE(sd.contains("state.0.momentum_buffer"));
      EXPECT_FALSE(sd.contains("state.0.grad_avg"));
    } else if (name == "rmsprop_centered_momentum") {
      EXPECT_TRUE(sd.contains("state.0.momentum_buffer") && sd.contains("state.0.grad_avg"));
    } else {
      EXPECT_TRUE(sd.contains("state.1.sum"));
    }
    EXPECT_EQ(sd.at("state.1.step").item<int64_t>(), 2);
    auto opt2 = make(name, b);
    opt2->load_state_dict(sd);
    {
      NoGradGuard ng;
      for (int i = 0; i < kParams; ++i) b[size_t(i)].copy_(a[size_t(i)]);
    }
    for (int s = 3; s < kSteps; ++s) {
      grads(s);
      opt2->step();
      for (int i = 0; i < kParams; ++i) {
        const test::Fixture want = fx(name + ".s" + std::to_string(s) + ".p" + std::to_string(i));
        EXPECT_TRUE(test::all_close(b[size_t(i)], want.shape, want.values, 1e-12, 1e-14)) << s;
      }
    }
  }
}

TEST(Optim2, Validation) {
  Tensor p = zeros({2}).requires_grad_();
  EXPECT_THROW(optim::RMSprop({p}, {.lr = -1}), ValueError);
  EXPECT_THROW(optim::RMSprop({p}, {.momentum = -0.1}), ValueError);
  EXPECT_THROW(optim::Adagrad({p}, {.lr_decay = -1}), ValueError);
  EXPECT_THROW(optim::Adagrad({p}, {.initial_accumulator_value = -1}), ValueError);
}

// Two groups (lrs 0.1 and 0.02) of an SGD optimizer with momentum 0.9, as the script builds.
struct Sched {
  Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD sgd{std::vector<optim::SGD::Group>{{{a}, {.lr = 0.1, .momentum = 0.9}},
                                                {{b}, {.lr = 0.02, .momentum = 0.9}}}};
};

void expect_rows(const std::string& name, const std::vector<std::vector<double>>& lrs,
                 const std::vector<std::vector<double>>& moms) {
  const test::Fixture want = fx("sched." + name + ".lr");
  const test::Fixture want_m = fx("sched." + name + ".momentum");
  ASSERT_EQ(int64_t(lrs.size()), want.shape[0]) << name;
  for (size_t e = 0; e < lrs.size(); ++e)
    for (size_t g = 0; g < 2; ++g) {
      // OneCycleLR's linear extrapolation at step total_steps is negative in torch; ember stops at 0.
      const double lr = std::max(want.values[e * 2 + g], 0.0);
      EXPECT_NEAR(lrs[e][g], lr, 1e-15 + 1e-13 * std::fabs(lr))
          << name << " lr epoch " << e << " group " << g;
      EXPECT_NEAR(moms[e][g], want_m.values[e * 2 + g], 1e-13) << name << " momentum epoch " << e << " group " << g;
    }
}

void run_schedule(const std::string& name, optim::Optimizer& opt, const std::function<void()>& step, int steps) {
  std::vector<std::vector<double>> lrs, moms;
  auto snap = [&] {
    lrs.push_back({opt.lr(0), opt.lr(1)});
    moms.push_back({*opt.momentum(0), *opt.momentum(1)});
  };
  snap();
  for (int e = 0; e < steps; ++e) {
    step();
    snap();
  }
  expect_rows(name, lrs, moms);
}

TEST(Optim2Schedulers, LinearLR) {
  {
    Sched s;
    optim::LinearLR sch(s.sgd, 0.25, 0.9, 4);
    run_schedule("linear", s.sgd, [&] { sch.step(); }, 7);
  }
  Sched s;
  optim::LinearLR sch(s.sgd);
  run_schedule("linear_default", s.sgd, [&] { sch.step(); }, 7);
  EXPECT_THROW(optim::LinearLR(s.sgd, 0.0), ValueError);
  EXPECT_THROW(optim::LinearLR(s.sgd, 0.5, 1.5), ValueError);
}

TEST(Optim2Schedulers, OneCycleLR) {
  {
    Sched s;
    optim::OneCycleLR sch(s.sgd, std::vector<double>{1.0, 0.5}, {.total_steps = 10});
    EXPECT_DOUBLE_EQ(s.sgd.initial_lr(0).value(), 0.04);  // max_lr / div_factor, as PyTorch sets it
    run_schedule("onecycle_cos", s.sgd, [&] { sch.step(); }, 10);
    EXPECT_THROW(sch.step(), ValueError);  // step 11 of 10
  }
  {
    Sched s;
    optim::OneCycleLR sch(s.sgd, 0.3,
                          {.epochs = 3, .steps_per_epoch = 4, .pct_start = 0.25,
                           .anneal_strategy = optim::AnnealStrategy::linear, .base_momentum = 0.8,
                           .max_momentum = 0.9, .div_factor = 10.0, .final_div_factor = 100.0,
                           .three_phase = true});
    EXPECT_EQ(sch.total_steps(), 12);
    run_schedule("onecycle_linear3", s.sgd, [&] { sch.step(); }, 12);
  }
  {
    Tensor a = zeros({1}).requires_grad_(), b = zeros({1}).requires_grad_();
    optim::Adam adam(std::vector<optim::Adam::Group>{{{a}, {.lr = 0.1}}, {{b}, {.lr = 0.02}}});
    optim::OneCycleLR sch(adam, 0.01, {.total_steps = 8});
    run_schedule("onecycle_adam", adam, [&] { sch.step(); }, 8);  // cycles beta1
    EXPECT_EQ(adam.options(0).betas[1], 0.999);
  }
  Tensor p = zeros({1}).requires_grad_();
  optim::Adagrad adagrad({p});
  EXPECT_THROW(optim::OneCycleLR(adagrad, 0.1, {.total_steps = 5}), ValueError);  // no momentum
  optim::OneCycleLR ok(adagrad, 0.1, {.total_steps = 5, .cycle_momentum = false});
  EXPECT_THROW(optim::OneCycleLR(adagrad, 0.1, {}), ValueError);  // no length
}

TEST(Optim2Schedulers, SequentialLR) {
  {
    Sched s;
    optim::LinearLR warm(s.sgd, 0.1, 1.0, 3);
    optim::CosineAnnealingLR cos(s.sgd, 5, 0.001);
    optim::SequentialLR seq(s.sgd, {warm, cos}, {3});
    run_schedule("sequential", s.sgd, [&] { seq.step(); }, 10);
    EXPECT_EQ(seq.get_last_lr()[0], s.sgd.lr(0));
  }
  {
    Sched s;
    optim::LinearLR a(s.sgd, 0.5, 1.0, 2);
    optim::StepLR b(s.sgd, 2, 0.5);
    optim::CosineAnnealingLR c(s.sgd, 4);
    optim::SequentialLR seq(s.sgd, {a, b, c}, {2, 6});
    run_schedule("sequential3", s.sgd, [&] { seq.step(); }, 10);
    EXPECT_THROW(optim::SequentialLR(s.sgd, {a, b}, {1, 2}), ValueError);
  }
}

TEST(Optim2Schedulers, ReduceLROnPlateau) {
  {
    Sched s;
    optim::ReduceLROnPlateau sch(s.sgd, {.factor = 0.5, .patience = 1, .threshold = 1e-3, .cooldown = 1,
                                         .min_lrs = {0.01, 0.004}});
    const std::vector<double> metric = fx("sched.plateau_min_rel.metric").values;
    size_t e = 0;
    run_schedule("plateau_min_rel", s.sgd, [&] { sch.step(metric[e++]); }, int(metric.size()));
  }
  Sched s;
  using O = optim::ReduceLROnPlateauOptions;
  optim::ReduceLROnPlateau sch(s.sgd, {.mode = O::Mode::max, .factor = 0.1, .patience = 2, .threshold = 0.01,
                                       .threshold_mode = O::ThresholdMode::abs, .min_lr = 0.0005, .eps = 1e-4});
  const std::vector<double> metric = fx("sched.plateau_max_abs.metric").values;
  size_t e = 0;
  run_schedule("plateau_max_abs", s.sgd, [&] { sch.step(metric[e++]); }, int(metric.size()));
  EXPECT_THROW(optim::ReduceLROnPlateau(s.sgd, {.factor = 1.0}), ValueError);
  // state_dict round trip keeps the counters.
  optim::ReduceLROnPlateau other(s.sgd, {.mode = O::Mode::max});
  other.load_state_dict(sch.state_dict());
  EXPECT_EQ(other.best(), sch.best());
  EXPECT_EQ(other.num_bad_epochs(), sch.num_bad_epochs());
}

}  // namespace
