// Capturable Adam/AdamW (Note [capturable optimizer step], ops/src/optim.cpp): a training step
// whose optimizer reads lr and step counts from device tensors and whose GradScaler skip is
// decided on the device gives the eager step's results (bit for bit on the CPU); lr changes
// between steps take effect; state dicts carry the device counts; and on a GPU the whole step
// (forward, backward, GradScaler, AdamW) captured in a cuda::Graph and replayed reproduces the
// eager losses (skipped without a device).
#include <cmath>
#include <limits>

#include "ember/amp/grad_scaler.h"
#include "ember/cuda.h"
#include "ember/cuda_graph.h"
#include "ember/optim/adam.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

// A 4 -> 8 -> 2 MLP as raw tensors, so two runs can start from identical weights.
struct Mlp {
  Tensor w1, b1, w2;
  Mlp(Device dev, uint64_t seed) {
    manual_seed(seed);
    const TensorOptions o = TensorOptions(DType::f32).device(dev);
    w1 = randn({8, 4}, o).mul(0.5).requires_grad_(true);
    b1 = randn({8}, o).mul(0.1).requires_grad_(true);
    w2 = randn({2, 8}, o).mul(0.5).requires_grad_(true);
  }
  std::vector<Tensor> params() const { return {w1, b1, w2}; }
  Tensor loss(const Tensor& x, const Tensor& y) const {
    return ((x.matmul(w1.t()) + b1).relu().matmul(w2.t()) - y).pow(2).mean();
  }
};

// Deterministic batches: batch k is a fixed function of k (inf in batch 3, which the scaler
// must skip).
std::pair<Tensor, Tensor> batch(int k, Device dev) {
  manual_seed(1000 + uint64_t(k));
  Tensor x = randn({16, 4}), y = randn({16, 2});
  if (k == 3) x = x.mul(std::numeric_limits<float>::infinity());
  return {x.to(dev), y.to(dev)};
}

struct RunResult {
  std::vector<double> losses;
  std::vector<Tensor> params;
  double scale;
  std::vector<int64_t> steps;
};

// Six scaled AdamW steps (two param groups, lr changed before step 4, step 3 skipped).
RunResult train(Device dev, bool capturable) {
  Mlp m(dev, 7);
  optim::AdamW opt(std::vector<optim::AdamW::Group>{
      {{m.w1, m.w2}, {.lr = 1e-2, .weight_decay = 0.1, .capturable = capturable}},
      {{m.b1}, {.lr = 3e-2, .weight_decay = 0.0, .capturable = capturable}}});
  amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
  RunResult r;
  for (int k = 0; k < 6; ++k) {
    if (k == 4) opt.set_lr(5e-3);
    auto [x, y] = batch(k, dev);
    opt.zero_grad();
    Tensor loss = m.loss(x, y);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    r.losses.push_back(loss.item<double>());
  }
  for (const Tensor& p : m.params()) r.params.push_back(p.detach().cpu());
  r.scale = scaler.get_scale();
  for (size_t i = 0; i < opt.num_params(); ++i) r.steps.push_back(opt.state_step(i));
  return r;
}

class CapturableStep : public ::testing::TestWithParam<Device> {};

TEST_P(CapturableStep, MatchesTheHostScheduledStep) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  const RunResult eager = train(dev, false), capt = train(dev, true);
  const double tol = dev.is_cpu() ? 0.0 : 1e-6;
  for (size_t k = 0; k < eager.losses.size(); ++k) {
    if (k == 3) continue;  // the inf batch
    EXPECT_NEAR(capt.losses[k], eager.losses[k], tol * std::abs(eager.losses[k])) << "step " << k;
  }
  for (size_t i = 0; i < eager.params.size(); ++i)
    EXPECT_TRUE(all_close(capt.params[i], eager.params[i], tol, tol)) << "parameter " << i;
  EXPECT_EQ(capt.scale, eager.scale);
  // 1024 grows to 2048 after steps 0-1, halves at the inf step 3, grows again after 4-5.
  EXPECT_EQ(eager.scale, 2048.0);
  EXPECT_EQ(capt.steps, eager.steps);
  EXPECT_EQ(eager.steps, std::vector<int64_t>({5, 5, 5}));  // six steps, one skipped
}

TEST_P(CapturableStep, StateDictCarriesTheDeviceCounts) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Mlp a(dev, 3), b(dev, 3);
  optim::AdamW oa(a.params(), {.lr = 1e-2, .capturable = true});
  optim::AdamW ob(b.params(), {.lr = 1e-2});
  auto step = [&](const Mlp& m, optim::Optimizer& o, int k) {
    auto [x, y] = batch(k, dev);
    o.zero_grad();
    m.loss(x, y).backward();
    o.step();
  };
  for (int k = 0; k < 3; ++k) step(a, oa, k);
  const StateDict sd = oa.state_dict();
  EXPECT_EQ(sd.integer("state.0.step"), 3);
  // Capturable -> host-scheduled: the next steps agree.
  ob.load_state_dict(sd);
  for (size_t i = 0; i < 3; ++i) b.params()[i].detach().copy_(a.params()[i].detach());
  EXPECT_EQ(ob.state_step(2), 3);
  // Host-scheduled -> a capturable optimizer that has already stepped: its device counts
  // take the loaded values.
  Mlp c(dev, 3);
  optim::AdamW oc(c.params(), {.lr = 1e-2, .capturable = true});
  step(c, oc, 9);
  EXPECT_EQ(oc.state_step(0), 1);
  oc.load_state_dict(ob.state_dict());
  EXPECT_EQ(oc.state_step(0), 3);
  for (size_t i = 0; i < 3; ++i) c.params()[i].detach().copy_(a.params()[i].detach());
  for (int k = 4; k < 6; ++k) {
    step(a, oa, k);
    step(b, ob, k);
    step(c, oc, k);
  }
  const double tol = dev.is_cpu() ? 0.0 : 1e-6;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(all_close(a.params()[i].detach(), b.params()[i].detach(), tol, tol)) << i;
    EXPECT_TRUE(all_close(c.params()[i].detach(), b.params()[i].detach(), tol, tol)) << i;
  }
  EXPECT_EQ(oa.state_step(1), 5);
  EXPECT_EQ(oc.state_step(1), 5);
}

TEST_P(CapturableStep, EveryParameterNeedsAGradient) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Mlp m(dev, 1);
  optim::Adam opt(m.params(), {.capturable = true});
  m.w1.sum().backward();  // b1 and w2 get no gradient
  const std::string msg = message_of<ValueError>([&] { opt.step(); });
  EXPECT_NE(msg.find("[Adam.step] parameter 1 of group 0 has no gradient: a capturable optimizer"),
            std::string::npos)
      << msg;
  EXPECT_TRUE(opt.can_skip_on_device());
  optim::Adam host(m.params());
  EXPECT_FALSE(host.can_skip_on_device());
  EXPECT_THROW(host.step_unless_found_inf(zeros({1})), NotImplementedError);
}

INSTANTIATE_TEST_SUITE_P(Devices, CapturableStep, ::testing::ValuesIn(test_devices()), device_label);

// The warm-up calls are plain calls of the step (so they run anywhere); a zero warm-up is
// refused; and without a GPU the capturing call fails with an ember error, not a crash.
TEST(GraphedStep, WarmUpCallsRunTheStepEagerly) {
  EXPECT_THROW(cuda::GraphedStep([] {}, 0), ValueError);
  int runs = 0;
  cuda::GraphedStep step([&] { ++runs; }, 2);
  step();
  step();
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(step.is_captured());
  step.step();  // the eager form, any time
  EXPECT_EQ(runs, 3);
  if (!cuda::is_available()) {
    EXPECT_THROW(step(), Error);
    EXPECT_FALSE(step.is_captured());
  }
  EXPECT_THROW(cuda::GraphedStep([] {}, cuda::GraphedStepOptions{.warmup_steps = -1}), ValueError);
}

// Each call returns the step's results (a Tensor or a TensorList): that is where the caller
// reads them, before and after the capture.
TEST(GraphedStep, CallsReturnTheStepsResults) {
  int runs = 0;
  cuda::GraphedStep single([&] { return full({1}, double(++runs)); }, 2);
  EXPECT_EQ(single()[0].item<double>(), 1.0);
  EXPECT_EQ(single()[0].item<double>(), 2.0);
  const TensorList eager = single.step();
  ASSERT_EQ(eager.size(), 1u);
  EXPECT_EQ(eager[0].item<double>(), 3.0);
  cuda::GraphedStep multi([] { return TensorList{ones({2}), zeros({3})}; },
                          cuda::GraphedStepOptions{.warmup_steps = 1});
  const TensorList out = multi();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].sizes(), Shape({2}));
  EXPECT_EQ(out[1].sizes(), Shape({3}));
  if (!cuda::is_available()) {
    EXPECT_THROW(multi(), Error);  // the capturing call
  }
}

// The acceptance test for whole-step CUDA graphs: cuda::GraphedStep captures one full
// step (forward, scaled backward, unscale + inf check, AdamW, scale update) after three eager
// warm-up steps and replays it on new batches copied into the static inputs, with an lr change
// between replays; every loss must equal the same model's trained eagerly (same kernels, so
// equal up to cuBLAS algorithm choice).
TEST(CapturableStepCuda, WholeStepGraphReplaysTheEagerLosses) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda();
  auto run = [&](bool graphed) {
    Mlp m(dev, 11);
    optim::AdamW opt(m.params(), {.lr = 1e-2, .capturable = true});
    amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 3});
    Tensor x_static = zeros({16, 4}, TensorOptions(DType::f32).device(dev));
    Tensor y_static = zeros({16, 2}, TensorOptions(DType::f32).device(dev));
    Tensor loss_static;
    auto step = [&] {
      opt.zero_grad();
      loss_static = m.loss(x_static, y_static);
      scaler.scale(loss_static).backward();
      scaler.step(opt);
      scaler.update();
    };
    cuda::GraphedStep graphed_step(step, /*warmup_steps=*/3);
    std::vector<double> losses;
    for (int k = 0; k < 10; ++k) {
      if (k == 6) opt.set_lr(2e-3);
      auto [x, y] = batch(k, dev);
      x_static.copy_(x);
      y_static.copy_(y);
      if (graphed) graphed_step();
      else step();
      EXPECT_EQ(graphed_step.is_captured(), graphed && k >= 3) << "step " << k;
      losses.push_back(loss_static.item<double>());
    }
    return losses;
  };
  const std::vector<double> eager = run(false), graphed = run(true);
  for (size_t k = 0; k < eager.size(); ++k) {
    if (k == 3) continue;  // the inf batch: both non-finite
    EXPECT_NEAR(graphed[k], eager[k], 1e-5 * std::abs(eager[k])) << "step " << k;
  }
}

// Issue 18, items 6 and 9. A step graphed over a model with matmuls, with an eager step()
// between replays: the losses the calls return (and the loss tensor the caller keeps, and
// the parameters' gradients) keep following the replays after it, equal to the same model
// trained eagerly; they used to freeze at the eager step's values. And once the graph, the
// model and the optimizer are gone, reserved memory is back to what it was before the
// capture: the capture's cuBLASLt workspace used to be kept by a process-wide map, which
// held the graph's private pool forever.
TEST(GraphedStepCuda, EagerStepBetweenReplaysAndTheGraphsMemoryIsReturned) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda();
  const TensorOptions f32 = TensorOptions(DType::f32).device(dev);
  constexpr int kSteps = 9, kEagerStep = 5;  // warm-up 0-1, capture 2, replays, eager at 5
  struct Trace {
    std::vector<double> losses;
    std::vector<Tensor> w1_grads;
  };
  auto run = [&](bool graphed) {
    Mlp m(dev, 11);
    optim::AdamW opt(m.params(), {.lr = 1e-2, .capturable = true});
    Tensor x_static = zeros({16, 4}, f32), y_static = zeros({16, 2}, f32);
    auto step = [&] {
      opt.zero_grad();
      Tensor loss = m.loss(x_static, y_static);
      loss.backward();
      opt.step();
      return loss;
    };
    cuda::GraphedStep graphed_step(step, {.warmup_steps = 2, .parameters = m.params()});
    Trace t;
    Tensor held;  // the graph's loss output, kept across calls as a caller might
    for (int k = 0; k < kSteps; ++k) {
      auto [x, y] = batch(10 + k, dev);
      x_static.copy_(x);
      y_static.copy_(y);
      Tensor loss = !graphed ? step() : k == kEagerStep ? graphed_step.step()[0] : graphed_step()[0];
      if (graphed && k == 2) held = loss;
      if (graphed && k >= 2) {
        EXPECT_TRUE(loss.is_same(held) || loss.data_ptr() == held.data_ptr()) << "step " << k;
        EXPECT_EQ(held.item<double>(), loss.item<double>()) << "step " << k;
      }
      t.losses.push_back(loss.item<double>());
      t.w1_grads.push_back(m.w1.grad().cpu());
    }
    return t;
  };
  {  // warm-up outside the measurement: kernels, the default stream's cuBLASLt workspace
    (void)run(false);
  }
  cuda::synchronize();
  cuda::empty_cache();
  const int64_t reserved_before = cuda::memory_reserved(0);
  const Trace eager = run(false), graphed = run(true);
  cuda::synchronize();
  cuda::empty_cache();
  EXPECT_EQ(cuda::memory_reserved(0), reserved_before)
      << "the graph's pool was not released:\n" << cuda::memory_summary(0);
  for (int k = 0; k < kSteps; ++k) {
    EXPECT_NEAR(graphed.losses[size_t(k)], eager.losses[size_t(k)], 1e-5 * std::abs(eager.losses[size_t(k)]))
        << "step " << k;
    EXPECT_TRUE(all_close(graphed.w1_grads[size_t(k)], eager.w1_grads[size_t(k)], 1e-5, 1e-6)) << "step " << k;
  }
  // The replays after the eager step did move on.
  EXPECT_NE(graphed.losses[kEagerStep + 1], graphed.losses[kEagerStep + 2]);
  EXPECT_NE(graphed.losses[kEagerStep], graphed.losses[kEagerStep + 1]);
}

}  // namespace
}  // namespace ember::test
