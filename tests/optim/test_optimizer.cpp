// Optimizer and scheduler behaviour beyond the update math: resume through state dicts
// (bit-exact on the CPU), parameter groups with their own lrs, zero_grad, in-place updates,
// state placement and dtype, the state dict layout, and clear errors for bad inputs.
#include <cmath>
#include <limits>

#include "ember/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Three leaf parameters on `dev` (deterministic values).
std::vector<Tensor> make_params(Device dev, uint64_t seed = 1) {
  manual_seed(seed);
  return {randn({4, 3}, dev).requires_grad_(), randn({3}, dev).requires_grad_(),
          randn({2, 2}, dev).requires_grad_()};
}

// Deterministic gradients for step s (a pure function of s, so two runs see the same).
void set_grads(const std::vector<Tensor>& params, int s) {
  for (size_t i = 0; i < params.size(); ++i) {
    Generator gen(uint64_t(1000 + 17 * s + int(i)));
    Tensor g = randn(params[i].sizes(), TensorOptions(params[i].dtype()), &gen).to(params[i].device());
    Tensor handle = params[i];
    handle.set_grad(g);
  }
}

std::vector<Tensor> clone_params(const std::vector<Tensor>& params) {
  std::vector<Tensor> out;
  for (const Tensor& p : params) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

void expect_bit_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].to_vector<double>(), b[i].to_vector<double>()) << "parameter " << i;
}

}  // namespace

// ---------------------------------------------------------------- resume

TEST(OptimizerResume, AdamWWithGroupsAndSchedulerResumesBitExact) {
  std::vector<Tensor> a = make_params(Device::cpu());
  auto make = [](const std::vector<Tensor>& p) {
    return std::make_unique<optim::AdamW>(std::vector<optim::AdamW::Group>{
        {{p[0], p[1]}, {.lr = 1e-2, .weight_decay = 0.05}}, {{p[2]}, {.lr = 3e-2, .betas = {0.8, 0.9}}}});
  };
  auto opt_a = make(a);
  optim::CosineAnnealingLR sched_a(*opt_a, 5, 1e-4);
  const int k = 3, more = 4;
  for (int s = 0; s < k; ++s) {
    set_grads(a, s);
    if (s == 1) a[1].set_grad(Tensor());  // a skipped parameter: its step count lags
    opt_a->step();
    sched_a.step();
  }
  // Resume: fresh parameters with the same values, a fresh optimizer with other options.
  std::vector<Tensor> b = clone_params(a);
  auto opt_b = std::make_unique<optim::AdamW>(std::vector<optim::AdamW::Group>{
      {{b[0], b[1]}, {.lr = 0.5}}, {{b[2]}, {.lr = 0.5}}});
  optim::CosineAnnealingLR sched_b(*opt_b, 5, 1e-4);
  opt_b->load_state_dict(opt_a->state_dict());
  sched_b.load_state_dict(sched_a.state_dict());
  EXPECT_EQ(opt_b->options(1).betas[0], 0.8);
  EXPECT_EQ(opt_b->options(0).weight_decay, 0.05);
  EXPECT_EQ(opt_b->lr(0), opt_a->lr(0));
  EXPECT_EQ(opt_b->state_step(1), 2);
  EXPECT_EQ(sched_b.last_epoch(), k);
  for (int s = k; s < k + more; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    opt_a->step();
    opt_b->step();
    sched_a.step();
    sched_b.step();
    EXPECT_EQ(sched_a.get_last_lr(), sched_b.get_last_lr());
  }
  expect_bit_equal(a, b);
  // The loaded state was copied: the two optimizers never shared buffers.
  EXPECT_NE(opt_a->state(0, "exp_avg").data_ptr(), opt_b->state(0, "exp_avg").data_ptr());
}

// amsgrad's running maximum is state ("max_exp_avg_sq", as PyTorch names it): a resumed run
// continues bit-exact, a group without amsgrad keeps none, and the capturable step (the
// device-scheduled kernel path) gives the same numbers.
TEST(OptimizerResume, AdamAmsgradResumesBitExact) {
  std::vector<Tensor> a = make_params(Device::cpu());
  auto make = [](const std::vector<Tensor>& p, bool capturable) {
    return std::make_unique<optim::Adam>(std::vector<optim::Adam::Group>{
        {{p[0], p[1]}, {.lr = 1e-2, .betas = {0.9, 0.8}, .amsgrad = true, .capturable = capturable}},
        {{p[2]}, {.lr = 3e-2, .capturable = capturable}}});
  };
  auto opt_a = make(a, false);
  std::vector<Tensor> c = clone_params(a);
  auto opt_c = make(c, true);
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    set_grads(c, s);
    opt_a->step();
    opt_c->step();
  }
  const StateDict sd = opt_a->state_dict();
  EXPECT_TRUE(sd.at("state.0.max_exp_avg_sq").is_same(opt_a->state(0, "max_exp_avg_sq")));
  EXPECT_FALSE(sd.contains("state.2.max_exp_avg_sq")) << "a group without amsgrad keeps no maximum";
  EXPECT_EQ(sd.scalar("param_groups.0.amsgrad"), 1);
  // The maximum is at least the current v, and above it somewhere (v fell between steps).
  const Tensor v = opt_a->state(0, "exp_avg_sq"), vmax = opt_a->state(0, "max_exp_avg_sq");
  EXPECT_TRUE((vmax >= v).all().item<bool>());
  EXPECT_TRUE((vmax > v).any().item<bool>());

  std::vector<Tensor> b = clone_params(a);
  auto opt_b = std::make_unique<optim::Adam>(std::vector<optim::Adam::Group>{{{b[0], b[1]}, {}}, {{b[2]}, {}}});
  opt_b->load_state_dict(sd);
  EXPECT_TRUE(opt_b->options(0).amsgrad);
  EXPECT_FALSE(opt_b->options(1).amsgrad);
  for (int s = 3; s < 6; ++s) {
    for (auto* params : {&a, &b, &c}) set_grads(*params, s);
    opt_a->step();
    opt_b->step();
    opt_c->step();
  }
  expect_bit_equal(a, b);
  expect_bit_equal(a, c);
}

TEST(OptimizerResume, SgdMomentumResumesBitExact) {
  std::vector<Tensor> a = make_params(Device::cpu(), 2);
  optim::SGD opt_a(a, {.lr = 0.05, .momentum = 0.9, .nesterov = true});
  for (int s = 0; s < 3; ++s) {
    set_grads(a, s);
    opt_a.step();
  }
  std::vector<Tensor> b = clone_params(a);
  optim::SGD opt_b(b, {.lr = 0.05});
  opt_b.load_state_dict(opt_a.state_dict());
  EXPECT_TRUE(opt_b.options().nesterov);
  EXPECT_EQ(opt_b.options().momentum, 0.9);
  for (int s = 3; s < 6; ++s) {
    set_grads(a, s);
    set_grads(b, s);
    opt_a.step();
    opt_b.step();
  }
  expect_bit_equal(a, b);
}

// ---------------------------------------------------------------- groups and lr

TEST(Optimizer, ParamGroupsUseTheirOwnLr) {
  std::vector<Tensor> p = make_params(Device::cpu());
  const std::vector<Tensor> before = clone_params(p);
  optim::SGD opt(std::vector<optim::SGD::Group>{{{p[0], p[2]}, {.lr = 0.1}}, {{p[1]}, {.lr = 0.01}}});
  ASSERT_EQ(opt.num_param_groups(), 2u);
  EXPECT_EQ(opt.params(0).size(), 2u);
  EXPECT_TRUE(opt.params(1)[0].is_same(p[1]));
  EXPECT_EQ(opt.num_params(), 3u);
  EXPECT_TRUE(opt.parameters()[1].is_same(p[2]));  // numbered across groups in order
  set_grads(p, 0);
  opt.step();
  const double lrs[] = {0.1, 0.01, 0.1};
  for (size_t i = 0; i < 3; ++i) {
    NoGradGuard ng;
    EXPECT_TRUE(test::all_close(p[i], before[i].sub(p[i].grad().mul(lrs[i])), 1e-6, 1e-7)) << i;
  }
  opt.set_lr(0.5, 1);
  EXPECT_EQ(opt.lr(0), 0.1);
  EXPECT_EQ(opt.lr(1), 0.5);
  opt.set_lr(0.2);
  EXPECT_EQ(opt.lr(0), 0.2);
  EXPECT_EQ(opt.lr(1), 0.2);
  EXPECT_TRUE(contains(test::message_of<IndexError>([&] { opt.lr(2); }), "[SGD.lr] group 2 is out of range"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { opt.set_lr(-1.0); }), "invalid learning rate"));
}

TEST(Optimizer, UserFacingShapeAndDefaults) {
  std::vector<Tensor> p = make_params(Device::cpu());
  optim::AdamW opt(p, {.lr = 1e-3, .weight_decay = 0.01});
  EXPECT_EQ(opt.options().weight_decay, 0.01);
  optim::AdamW defaults(make_params(Device::cpu()));
  EXPECT_EQ(defaults.options().weight_decay, 1e-2);  // torch.optim.AdamW's default
  optim::Adam adam(make_params(Device::cpu()));
  EXPECT_EQ(adam.options().weight_decay, 0.0);
  EXPECT_EQ(adam.options().betas[1], 0.999);
  EXPECT_EQ(opt.name(), "AdamW");
}

TEST(Optimizer, StepUpdatesInPlaceAndSkipsParamsWithoutGrad) {
  std::vector<Tensor> p = make_params(Device::cpu());
  optim::Adam opt(p, {.lr = 0.1});
  const Tensor untouched = p[1].detach().clone();
  set_grads(p, 0);
  p[1].set_grad(Tensor());
  const void* ptr = p[0].data_ptr();
  const uint32_t version = p[0].version();
  opt.step();
  EXPECT_EQ(p[0].data_ptr(), ptr);
  EXPECT_GT(p[0].version(), version);
  EXPECT_TRUE(p[0].is_leaf());
  EXPECT_TRUE(p[0].requires_grad());
  EXPECT_TRUE(test::all_close(p[1], untouched, 0, 0));
  EXPECT_FALSE(opt.state(1, "exp_avg").defined());
  EXPECT_EQ(opt.state_step(1), 0);
  EXPECT_EQ(opt.state_step(0), 1);
  // With every grad missing, step() is a no-op.
  opt.zero_grad();
  const Tensor after = p[0].detach().clone();
  opt.step();
  EXPECT_TRUE(test::all_close(p[0], after, 0, 0));
}

TEST(Optimizer, ZeroGradSetToNoneOrZeroesInPlace) {
  std::vector<Tensor> p = make_params(Device::cpu());
  optim::SGD opt(p, {.lr = 0.1});
  set_grads(p, 0);
  const TensorImpl* grad_impl = p[0].grad().impl();
  opt.zero_grad(false);
  ASSERT_TRUE(p[0].grad().defined());
  EXPECT_EQ(p[0].grad().impl(), grad_impl) << "zero_grad(false) keeps the gradient tensor";
  EXPECT_TRUE(test::all_close(p[0].grad(), zeros({4, 3}), 0, 0));
  opt.zero_grad();
  for (const Tensor& t : p) EXPECT_FALSE(t.grad().defined());
  // Gradients accumulated by backward after zero_grad() start from nothing.
  (p[1] * 2.0).sum().backward();
  EXPECT_TRUE(test::all_close(p[1].grad(), std::vector<double>{2, 2, 2}));
}

TEST(Optimizer, StateDictLayout) {
  std::vector<Tensor> p = make_params(Device::cpu());
  optim::Adam opt(std::vector<optim::Adam::Group>{{{p[0]}, {.lr = 0.1}}, {{p[1], p[2]}, {.eps = 1e-6}}});
  set_grads(p, 0);
  p[2].set_grad(Tensor());
  opt.step();
  opt.step();
  const StateDict sd = opt.state_dict();
  EXPECT_EQ(sd.integer("state.0.step"), 2);
  EXPECT_EQ(sd.at("state.1.exp_avg").sizes(), Shape({3}));
  EXPECT_TRUE(sd.at("state.1.exp_avg_sq").is_same(opt.state(1, "exp_avg_sq")));
  EXPECT_FALSE(sd.contains("state.2.exp_avg")) << "no state before a parameter's first step";
  EXPECT_EQ(sd.scalar("param_groups.0.lr"), 0.1);
  EXPECT_EQ(sd.scalar("param_groups.1.eps"), 1e-6);
  EXPECT_EQ(sd.at("param_groups.1.params").to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(sd.at("param_groups.0.betas").to_vector<double>(), (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(opt.state(0, "exp_avg").dtype(), DType::f32);
}

TEST(Optimizer, SixteenBitParamsKeepF32State) {
  Tensor p = randn({8}, DType::bf16).requires_grad_();
  optim::AdamW opt({p}, {.lr = 0.1});
  p.set_grad(ones({8}, DType::bf16));
  opt.step();
  EXPECT_EQ(opt.state(0, "exp_avg").dtype(), DType::f32);
  EXPECT_EQ(p.dtype(), DType::bf16);
}

TEST(OptimizerCuda, StateLivesOnTheParameterDevice) {
  EMBER_SKIP_WITHOUT_CUDA();
  std::vector<Tensor> p = make_params(Device::cuda());
  optim::AdamW opt(p);
  set_grads(p, 0);
  opt.step();
  EXPECT_TRUE(opt.state(0, "exp_avg").is_cuda());
  // A CPU state dict loads onto the CUDA parameters' device.
  StateDict sd;
  for (const auto& [k, v] : opt.state_dict()) sd.insert(k, v.cpu());
  optim::AdamW other(clone_params(p));
  other.load_state_dict(sd);
  EXPECT_TRUE(other.state(2, "exp_avg_sq").is_cuda());
}

// ---------------------------------------------------------------- errors

TEST(OptimizerErrors, BadConstructorArguments) {
  std::vector<Tensor> p = make_params(Device::cpu());
  EXPECT_TRUE(contains(test::message_of<ValueError>([] { optim::SGD opt(std::vector<Tensor>{}); }),
                       "[SGD] got an empty parameter list"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::SGD opt({p[0], p[0]}); }),
                       "appears more than once"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] {
                         optim::SGD opt(std::vector<optim::SGD::Group>{{{p[0]}, {}}, {{p[0]}, {}}});
                       }),
                       "appears more than once"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::Adam opt({p[0] * 2.0}); }),
                       "[Adam] can't optimize a non-leaf tensor"));
  EXPECT_TRUE(contains(test::message_of<DTypeError>([] { optim::Adam opt({zeros({2}, DType::i64)}); }),
                       "floating-point"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::SGD opt(p, {.lr = -0.1}); }),
                       "[SGD] invalid learning rate: -0.1"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::SGD opt(p, {.lr = 0.1, .nesterov = true}); }),
                       "Nesterov momentum requires a momentum and zero dampening"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] {
                         optim::SGD opt(p, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true});
                       }),
                       "Nesterov momentum requires"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::SGD opt(p, {.momentum = -1}); }),
                       "invalid momentum"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::AdamW opt(p, {.betas = {1.0, 0.999}}); }),
                       "[AdamW] invalid beta parameter at index 0"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::Adam opt(p, {.eps = -1e-8}); }),
                       "[Adam] invalid epsilon value"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::AdamW opt(p, {.weight_decay = -0.1}); }),
                       "invalid weight_decay"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] {
                         optim::AdamW opt(p, {.lr = std::numeric_limits<double>::quiet_NaN()});
                       }),
                       "invalid learning rate"));
}

TEST(Optimizer, StepCastsAGradientOfAnotherDtype) {
  // An f32 parameter with an f64 gradient (set_grad refuses a wrong shape itself; a wrong device
  // or dtype is the kernel front's job): the step casts the gradient and applies it.
  const std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25};
  // Gradients near eps, where Adam's first step lr * g / (|g| + eps) depends on g's magnitude
  // (far from eps it is lr * sign(g), which would hide a mangled cast); one of another dtype.
  const std::vector<double> g = {3e-9, -2e-8, 5e-8, -1e-9};
  for (DType gdt : {DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtype_name(gdt));
    Tensor p = tensor<double>(p0, {4}).to(DType::f32).requires_grad_();
    optim::Adam opt({p}, {.lr = 0.1, .eps = 1e-8});
    Tensor grad = tensor<double>(g, {4}).to(gdt);
    p.set_grad(grad);
    opt.step();
    EXPECT_EQ(opt.state_step(0), 1);
    EXPECT_EQ(p.dtype(), DType::f32);
    // Step 1, bias-corrected: m_hat = g, sqrt(v_hat) = |g|; from the gradient as cast to f32.
    const std::vector<double> gc = grad.to(DType::f32).to_vector<double>();
    std::vector<double> expect(4);
    for (size_t i = 0; i < 4; ++i) expect[i] = p0[i] - 0.1 * gc[i] / (std::fabs(gc[i]) + 1e-8);
    EXPECT_TRUE(test::all_close(p.detach(), expect, 1e-6, 1e-7));
  }
}

TEST(OptimizerErrors, LoadStateDictRejectsMismatchesAndChangesNothing) {
  std::vector<Tensor> p = make_params(Device::cpu());
  optim::AdamW src(p, {.lr = 0.3});
  set_grads(p, 0);
  src.step();
  const StateDict good = src.state_dict();

  std::vector<Tensor> q = make_params(Device::cpu(), 5);
  optim::AdamW dst(q, {.lr = 0.7});
  auto load_msg = [&](const StateDict& sd) {
    return test::message_of<ValueError>([&] { dst.load_state_dict(sd); });
  };
  // Another group layout.
  optim::AdamW two(std::vector<optim::AdamW::Group>{{{q[0]}, {}}, {{q[1], q[2]}, {}}});
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { two.load_state_dict(good); }),
                       "[Optimizer.load_state_dict] the state dict has 1 parameter groups but this AdamW "
                       "optimizer has 2"));
  // Another parameter count.
  optim::AdamW fewer({q[0], q[1]});
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { fewer.load_state_dict(good); }),
                       "parameter group 0 of the state dict has 3 parameters but this optimizer's has 2"));
  // A state tensor of the wrong shape.
  StateDict bad_shape = good;
  bad_shape.set("state.1.exp_avg", zeros({4}));
  EXPECT_TRUE(contains(load_msg(bad_shape), "state 'exp_avg' of parameter 1 has shape [4] but the "
                                            "parameter has shape [3]"));
  // Missing pieces and unknown keys.
  StateDict no_sq;
  for (const auto& [k, v] : good)
    if (k != "state.0.exp_avg_sq") no_sq.insert(k, v);
  EXPECT_TRUE(contains(load_msg(no_sq), "state of parameter 0 lacks 'exp_avg_sq'"));
  StateDict extra = good;
  extra.insert("state.7.exp_avg", zeros({1}));
  EXPECT_TRUE(contains(load_msg(extra), "state for parameter 7 but this optimizer has 3 parameters"));
  StateDict unknown = good;
  unknown.insert("state.0.momentum_buffer", zeros({4, 3}));
  EXPECT_TRUE(contains(load_msg(unknown), "unexpected key 'state.0.momentum_buffer'"));
  StateDict bad_lr = good;
  bad_lr.set_scalar("param_groups.0.lr", -1);
  EXPECT_TRUE(contains(load_msg(bad_lr), "invalid learning rate"));
  StateDict bad_beta = good;
  bad_beta.set("param_groups.0.betas", tensor(std::vector<double>{0.9, 1.5}, Shape{2}));
  EXPECT_TRUE(contains(load_msg(bad_beta), "invalid beta parameter at index 1"));
  // An SGD state dict is not an AdamW one.
  optim::SGD sgd(make_params(Device::cpu(), 6), {.lr = 0.1});
  EXPECT_TRUE(contains(load_msg(sgd.state_dict()), "lacks a 2-element 'param_groups.0.betas'"));
  // Nothing changed on failure.
  EXPECT_EQ(dst.lr(), 0.7);
  EXPECT_EQ(dst.options().betas[1], 0.999);
  EXPECT_FALSE(dst.state(0, "exp_avg").defined());
  // And the good one loads.
  dst.load_state_dict(good);
  EXPECT_EQ(dst.lr(), 0.3);
  EXPECT_EQ(dst.state_step(0), 1);
}

// ---------------------------------------------------------------- schedulers

TEST(Schedulers, ConstructionSetsEpochZeroAndSecondSchedulerSharesBase) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::WarmupCosineLR warm(opt, 4, 20, 0.0);
  EXPECT_EQ(warm.last_epoch(), 0);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.025);  // (0 + 1) / 4 of the base
  EXPECT_EQ(opt.initial_lr(0), 0.1);
  optim::StepLR step(opt, 2);  // starts from initial_lr, not the warmed-up lr
  EXPECT_EQ(step.base_lrs()[0], 0.1);
  for (int e = 1; e < 4; ++e) warm.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);
  warm.step();
  EXPECT_DOUBLE_EQ(opt.lr(), 0.1);  // q = 0: the cosine starts at the base
  for (int e = 5; e < 25; ++e) warm.step();
  EXPECT_EQ(opt.lr(), 0.0);
}

TEST(Schedulers, StateDictResume) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  optim::CosineAnnealingLR a(opt, 10, 0.01);
  for (int e = 0; e < 4; ++e) a.step();
  const StateDict sd = a.state_dict();
  EXPECT_EQ(sd.integer("last_epoch"), 4);
  Tensor q = zeros({1}).requires_grad_();
  optim::SGD opt2({q}, {.lr = 0.1});
  optim::CosineAnnealingLR b(opt2, 10, 0.01);
  b.load_state_dict(sd);
  opt2.set_lr(opt.lr());  // the optimizer's own state dict carries the lr
  for (int e = 0; e < 8; ++e) {
    a.step();
    b.step();
    EXPECT_EQ(a.get_last_lr(), b.get_last_lr());
  }
  StateDict bad = sd;
  bad.set("base_lrs", tensor(std::vector<double>{0.1, 0.2}, Shape{2}));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { b.load_state_dict(bad); }),
                       "[LRScheduler.load_state_dict]"));
}

TEST(Schedulers, BadArguments) {
  Tensor p = zeros({1}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::StepLR s(opt, 0); }),
                       "[StepLR] step_size must be >= 1"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::CosineAnnealingLR s(opt, 0); }),
                       "[CosineAnnealingLR] T_max must be >= 1"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::WarmupCosineLR s(opt, 10, 10); }),
                       "[WarmupCosineLR] needs 0 <= warmup_steps < total_steps"));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] {
                         optim::LambdaLR s(opt, std::vector<optim::LambdaLR::Lambda>{});
                       }),
                       "[LambdaLR] expected 1 lr_lambdas"));
}

// ---------------------------------------------------------------- clip_grad_norm_

TEST(ClipGradNorm, ScalesToMaxNormAndHandlesEdgeCases) {
  std::vector<Tensor> p = make_params(Device::cpu());
  set_grads(p, 0);
  Tensor total = optim::clip_grad_norm_(p, 0.5);
  ASSERT_GT(total.item<double>(), 0.5);
  double sq = 0;
  for (const Tensor& t : p)
    for (double v : t.grad().to_vector<double>()) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq), 0.5 * total.item<double>() / (total.item<double>() + 1e-6), 1e-6);
  // No gradients at all: a CPU zero, nothing else happens.
  std::vector<Tensor> none = make_params(Device::cpu());
  Tensor z = optim::clip_grad_norm_(none, 1.0);
  EXPECT_EQ(z.dim(), 0);
  EXPECT_EQ(z.item<double>(), 0.0);
  // Non-finite totals throw only when asked to.
  Tensor q = zeros({2}).requires_grad_();
  q.set_grad(tensor(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()}));
  EXPECT_TRUE(contains(test::message_of<ValueError>([&] { optim::clip_grad_norm_({q}, 1.0, 2.0, true); }),
                       "[clip_grad_norm_] the total norm of order 2 of the gradients is non-finite"));
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm_({q}, 1.0).item<double>()));
}
