// The fused multi-tensor kernels (ops::adam_step_, ops::sgd_step_) against the composite of
// unfused ember ops they replace, over lists that mix dtypes (f32, f64, bf16, f16), sizes
// (one element to several parallel chunks) and a non-contiguous parameter; results that do
// not depend on the OpenMP thread count; and CUDA against CPU (skipped without a device).
#include <omp.h>

#include <cmath>

#include "ember/ops/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-13, 1e-15};
    case DType::f32: return {2e-6, 1e-7};
    default: return {1e-2, 1e-3};  // one 16-bit rounding of the result may differ
  }
}

struct Lists {
  TensorList p, g, m, v;
};

// Parameters of many sizes and dtypes, with gradients and (non-trivial) state.
Lists make_lists(Device dev, uint64_t seed) {
  manual_seed(seed);
  const std::vector<std::pair<Shape, DType>> spec = {
      {{1}, DType::f32},        {{7, 5}, DType::f32}, {{300, 257}, DType::f32},  // > 1 chunk
      {{33}, DType::f64},       {{64, 3}, DType::bf16}, {{129}, DType::f16},     {{0, 3}, DType::f32}};
  Lists l;
  for (const auto& [shape, dt] : spec) {
    const DType sdt = ops::optim_state_dtype(dt);
    l.p.push_back(randn(shape, TensorOptions(dt).device(dev)));
    l.g.push_back(randn(shape, TensorOptions(dt).device(dev)).mul(0.5));
    l.m.push_back(randn(shape, TensorOptions(sdt).device(dev)).mul(0.1));
    l.v.push_back(rand(shape, TensorOptions(sdt).device(dev)).mul(0.01));
  }
  return l;
}

Lists clone_lists(const Lists& l) {
  Lists c;
  for (size_t i = 0; i < l.p.size(); ++i) {
    c.p.push_back(l.p[i].clone());
    c.g.push_back(l.g[i].clone());
    c.m.push_back(l.m[i].clone());
    c.v.push_back(l.v[i].clone());
  }
  return c;
}

// The unfused Adam/AdamW update of one tensor, in the compute type (f32 for 16-bit
// parameters, rounded back to the parameter dtype once at the end, as the kernel does).
void composite_adam(Tensor& p, const Tensor& grad, Tensor& m, Tensor& v, int64_t step,
                    const ops::AdamStepParams& hp) {
  const DType c = ops::optim_state_dtype(p.dtype());
  Tensor param = p.to(c), g = grad.to(c);
  if (hp.maximize) g = g.neg();
  if (hp.decoupled_weight_decay) param = param.mul(1 - hp.lr * hp.weight_decay);
  else if (hp.weight_decay != 0) g = g.add(param.mul(hp.weight_decay));
  m.copy_(m.mul(hp.beta1).add(g.mul(1 - hp.beta1)));
  v.copy_(v.mul(hp.beta2).add(g.mul(g).mul(1 - hp.beta2)));
  const double bc1 = 1 - std::pow(hp.beta1, double(step)), bc2 = 1 - std::pow(hp.beta2, double(step));
  Tensor denom = v.sqrt().div(std::sqrt(bc2)).add(hp.eps);
  p.copy_(param.add(m.div(denom).mul(-hp.lr / bc1)));
}

void composite_sgd(Tensor& p, const Tensor& grad, Tensor& buf, bool first,
                   const ops::SgdStepParams& hp) {
  const DType c = ops::optim_state_dtype(p.dtype());
  Tensor param = p.to(c), d = grad.to(c);
  if (hp.maximize) d = d.neg();
  if (hp.weight_decay != 0) d = d.add(param.mul(hp.weight_decay));
  if (hp.momentum != 0) {
    buf.copy_(first ? d : buf.mul(hp.momentum).add(d.mul(1 - hp.dampening)));
    d = hp.nesterov ? d.add(buf.mul(hp.momentum)) : buf;
  }
  p.copy_(param.add(d.mul(-hp.lr)));
}

class Fused : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { EMBER_SKIP_IF_NO_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
};

const ops::AdamStepParams kAdamVariants[] = {
    {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1,
     .decoupled_weight_decay = true},
    {.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05},
    {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0, .maximize = true},
};

}  // namespace

TEST_P(Fused, AdamMatchesCompositeOverMixedLists) {
  NoGradGuard no_grad;
  for (const auto& hp : kAdamVariants) {
    Lists fused = make_lists(dev(), 11);
    Lists ref = clone_lists(fused);
    // Per-tensor step counts differ (parameters skipped on earlier steps).
    std::vector<int64_t> steps = {1, 3, 2, 5, 1, 4, 1};
    for (int round = 0; round < 3; ++round) {
      const Tensor before = fused.p[2].clone();
      const void* ptr = fused.p[2].data_ptr();
      ops::adam_step_(fused.p, fused.g, fused.m, fused.v, steps, hp);
      EXPECT_EQ(fused.p[2].data_ptr(), ptr) << "updated in place";
      EXPECT_FALSE(test::all_close(fused.p[2], before, 0, 0)) << "the update did something";
      for (size_t i = 0; i < ref.p.size(); ++i) composite_adam(ref.p[i], ref.g[i], ref.m[i], ref.v[i], steps[i], hp);
      for (size_t i = 0; i < ref.p.size(); ++i) {
        SCOPED_TRACE("round " + std::to_string(round) + " tensor " + std::to_string(i) + " " +
                     dtype_name(ref.p[i].dtype()));
        const Tol t = tol_for(ref.p[i].dtype());
        EXPECT_TRUE(test::all_close(fused.p[i], ref.p[i], t.rtol, t.atol));
        const Tol ts = tol_for(ops::optim_state_dtype(ref.p[i].dtype()));
        EXPECT_TRUE(test::all_close(fused.m[i], ref.m[i], ts.rtol, ts.atol));
        EXPECT_TRUE(test::all_close(fused.v[i], ref.v[i], ts.rtol, ts.atol));
      }
      for (auto& s : steps) ++s;
    }
  }
}

TEST_P(Fused, SgdMatchesCompositeOverMixedLists) {
  NoGradGuard no_grad;
  const ops::SgdStepParams variants[] = {
      {.lr = 0.1},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.2, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.02, .nesterov = true, .maximize = true},
  };
  for (const auto& hp : variants) {
    Lists fused = make_lists(dev(), 12);
    Lists ref = clone_lists(fused);
    const bool momentum = hp.momentum != 0;
    std::vector<uint8_t> first = {1, 0, 1, 0, 1, 0, 1};
    for (int round = 0; round < 3; ++round) {
      ops::sgd_step_(fused.p, fused.g, momentum ? fused.m : TensorList{}, first, hp);
      for (size_t i = 0; i < ref.p.size(); ++i) composite_sgd(ref.p[i], ref.g[i], ref.m[i], first[i] != 0, hp);
      for (size_t i = 0; i < ref.p.size(); ++i) {
        SCOPED_TRACE("round " + std::to_string(round) + " tensor " + std::to_string(i));
        const Tol t = tol_for(ref.p[i].dtype());
        EXPECT_TRUE(test::all_close(fused.p[i], ref.p[i], t.rtol, t.atol));
        if (momentum) {
          EXPECT_TRUE(test::all_close(fused.m[i], ref.m[i], t.rtol, t.atol));
        }
      }
      std::fill(first.begin(), first.end(), 0);
    }
  }
}

TEST_P(Fused, NonContiguousParameterIsUpdatedThroughItsView) {
  NoGradGuard no_grad;
  manual_seed(3);
  Tensor base = randn({6, 4}, dev());
  Tensor p = base.t();  // [4, 6], non-contiguous view of base
  ASSERT_FALSE(p.is_contiguous());
  Tensor g = randn({4, 6}, dev()), m = zeros({4, 6}, dev()), v = zeros({4, 6}, dev());
  Tensor ref = p.contiguous().clone(), rm = m.clone(), rv = v.clone();
  const ops::AdamStepParams hp{.lr = 0.01, .weight_decay = 0.01, .decoupled_weight_decay = true};
  ops::adam_step_({p}, {g}, {m}, {v}, {1}, hp);
  composite_adam(ref, g, rm, rv, 1, hp);
  EXPECT_TRUE(test::all_close(base.t(), ref, 2e-6, 1e-7));
  EXPECT_TRUE(test::all_close(m, rm, 2e-6, 1e-7));
}

TEST_P(Fused, GradientOfAnotherDtypeIsCast) {
  NoGradGuard no_grad;
  manual_seed(4);
  Tensor p = randn({10}, dev()), g = randn({10}, TensorOptions(DType::f64).device(dev()));
  Tensor p2 = p.clone();
  ops::sgd_step_({p}, {g}, {}, {}, {.lr = 0.5});
  ops::sgd_step_({p2}, {g.to(DType::f32)}, {}, {}, {.lr = 0.5});
  EXPECT_TRUE(test::all_close(p, p2, 0, 0));
}

TEST_P(Fused, BadListsAreRejected) {
  NoGradGuard no_grad;
  Tensor p = zeros({3}, dev()), g = zeros({3}, dev()), m = zeros({3}, dev()), v = zeros({3}, dev());
  EXPECT_NE(test::message_of<ValueError>([&] { ops::adam_step_({p}, {}, {m}, {v}, {1}, {}); })
                .find("[adam_step] got 1 parameters but 0 gradients"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] { ops::adam_step_({p}, {zeros({4}, dev())}, {m}, {v}, {1}, {}); })
                .find("does not match parameter 0"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] {
              ops::adam_step_({p}, {g}, {zeros({3}, TensorOptions(DType::f64).device(dev()))}, {v}, {1}, {});
            }).find("state tensor of parameter 0 must be contiguous f32"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { ops::adam_step_({p}, {g}, {m}, {v}, {0}, {}); })
                .find("step counts start at 1"),
            std::string::npos);
  EXPECT_NE(test::message_of<DTypeError>([&] {
              Tensor i = zeros({3}, TensorOptions(DType::i64).device(dev()));
              ops::sgd_step_({i}, {i}, {}, {}, {});
            }).find("must be floating-point"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { ops::sgd_step_({p}, {g}, {m}, {1}, {.lr = 0.1}); })
                .find("momentum buffers given but momentum is 0"),
            std::string::npos);
}

// The capturable form reads lr and the step counts from tensors: the same update as the host
// form with those values (bit for bit on the CPU, whose scalars come from the same double
// arithmetic; on CUDA the device's pow may differ in the last bit), every count advances, and
// a non-zero found_inf leaves everything as it was.
TEST_P(Fused, ScheduledAdamEqualsHostScalarsAndSkipsOnInf) {
  NoGradGuard no_grad;
  const bool exact = dev().is_cpu();
  const TensorOptions f64 = TensorOptions(DType::f64).device(dev());
  for (const auto& hp : kAdamVariants) {
    Lists host = make_lists(dev(), 41);
    Lists sched = clone_lists(host);
    std::vector<int64_t> steps = {1, 3, 2, 5, 1, 4, 1};
    Tensor counts = tensor(std::vector<double>{0, 2, 1, 4, 0, 3, 0}, Shape{7}).to(dev());
    Tensor lr = full({1}, hp.lr, f64);
    const Tensor clear = zeros({1}, TensorOptions(DType::f32).device(dev()));
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      ops::adam_step_(host.p, host.g, host.m, host.v, steps, hp);
      // Round 0 passes no flag, the others a clear (zero) one: both update.
      ops::adam_step_scheduled_(sched.p, sched.g, sched.m, sched.v, lr, counts, round == 0 ? Tensor() : clear, hp);
      for (size_t i = 0; i < host.p.size(); ++i) {
        SCOPED_TRACE("tensor " + std::to_string(i));
        const Tol t = exact ? Tol{0, 0} : tol_for(host.p[i].dtype());
        EXPECT_TRUE(test::all_close(sched.p[i], host.p[i], t.rtol, t.atol));
        EXPECT_TRUE(test::all_close(sched.m[i], host.m[i], exact ? 0 : 1e-6, 0));
        EXPECT_TRUE(test::all_close(sched.v[i], host.v[i], exact ? 0 : 1e-6, 0));
      }
      for (auto& s : steps) ++s;
      EXPECT_EQ(counts.to_vector<int64_t>(), std::vector<int64_t>({1 + round, 3 + round, 2 + round, 5 + round,
                                                                   1 + round, 4 + round, 1 + round}));
    }
    // A new lr written into the tensor is the one the next update uses.
    ops::AdamStepParams hp2 = hp;
    hp2.lr = hp.lr * 0.25;
    lr.fill_(hp2.lr);
    ops::adam_step_(host.p, host.g, host.m, host.v, steps, hp2);
    ops::adam_step_scheduled_(sched.p, sched.g, sched.m, sched.v, lr, counts, Tensor(), hp);
    for (size_t i = 0; i < host.p.size(); ++i) {
      const Tol t = exact ? Tol{0, 0} : tol_for(host.p[i].dtype());
      EXPECT_TRUE(test::all_close(sched.p[i], host.p[i], t.rtol, t.atol)) << "new lr, tensor " << i;
    }
    // found_inf set: nothing moves, not even the counts.
    Lists before = clone_lists(sched);
    const Tensor counts_before = counts.clone();
    ops::adam_step_scheduled_(sched.p, sched.g, sched.m, sched.v, lr, counts, full({1}, 1.0, TensorOptions(DType::f32).device(dev())), hp);
    for (size_t i = 0; i < host.p.size(); ++i) {
      EXPECT_TRUE(test::all_close(sched.p[i], before.p[i], 0, 0)) << "skipped, tensor " << i;
      EXPECT_TRUE(test::all_close(sched.m[i], before.m[i], 0, 0));
      EXPECT_TRUE(test::all_close(sched.v[i], before.v[i], 0, 0));
    }
    EXPECT_TRUE(test::all_close(counts, counts_before, 0, 0));
  }
}

TEST_P(Fused, ScheduledAdamRejectsBadScheduleTensors) {
  NoGradGuard no_grad;
  Lists l = make_lists(dev(), 5);
  const TensorOptions f64 = TensorOptions(DType::f64).device(dev());
  const Tensor lr = full({1}, 1e-3, f64), counts = zeros({7}, f64);
  auto run = [&](const Tensor& lr_t, const Tensor& steps_t, const Tensor& inf_t) {
    return test::message_of<ValueError>(
        [&] { ops::adam_step_scheduled_(l.p, l.g, l.m, l.v, lr_t, steps_t, inf_t, kAdamVariants[0]); });
  };
  EXPECT_NE(run(full({1}, 1e-3, TensorOptions(DType::f32).device(dev())), counts, Tensor())
                .find("lr must be a contiguous f64 [1] tensor"),
            std::string::npos);
  EXPECT_NE(run(lr, zeros({6}, f64), Tensor()).find("steps must be a contiguous f64 [7] tensor"), std::string::npos);
  EXPECT_NE(run(lr, counts, zeros({1}, f64)).find("found_inf must be a contiguous f32 [1] tensor"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Devices, Fused, ::testing::ValuesIn(test::test_devices()), test::device_label);

TEST(FusedCpu, ResultsDoNotDependOnTheThreadCount) {
  NoGradGuard no_grad;
  const int saved = omp_get_max_threads();
  Lists a = make_lists(Device::cpu(), 21), b = clone_lists(a);
  const std::vector<int64_t> steps(a.p.size(), 2);
  omp_set_num_threads(1);
  ops::adam_step_(a.p, a.g, a.m, a.v, steps, kAdamVariants[0]);
  omp_set_num_threads(4);
  ops::adam_step_(b.p, b.g, b.m, b.v, steps, kAdamVariants[0]);
  omp_set_num_threads(saved);
  for (size_t i = 0; i < a.p.size(); ++i) EXPECT_TRUE(test::all_close(a.p[i], b.p[i], 0, 0));
}

TEST(FusedCuda, MatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  NoGradGuard no_grad;
  Lists cpu = make_lists(Device::cpu(), 31);
  Lists gpu;
  for (size_t i = 0; i < cpu.p.size(); ++i) {
    gpu.p.push_back(cpu.p[i].to(Device::cuda()));
    gpu.g.push_back(cpu.g[i].to(Device::cuda()));
    gpu.m.push_back(cpu.m[i].to(Device::cuda()));
    gpu.v.push_back(cpu.v[i].to(Device::cuda()));
  }
  const std::vector<int64_t> steps = {1, 2, 3, 4, 5, 6, 7};
  for (const auto& hp : kAdamVariants) {
    ops::adam_step_(cpu.p, cpu.g, cpu.m, cpu.v, steps, hp);
    ops::adam_step_(gpu.p, gpu.g, gpu.m, gpu.v, steps, hp);
  }
  ops::sgd_step_(cpu.p, cpu.g, cpu.m, std::vector<uint8_t>(7, 0), {.lr = 0.1, .momentum = 0.9});
  ops::sgd_step_(gpu.p, gpu.g, gpu.m, std::vector<uint8_t>(7, 0), {.lr = 0.1, .momentum = 0.9});
  for (size_t i = 0; i < cpu.p.size(); ++i) {
    const Tol t = tol_for(cpu.p[i].dtype());
    EXPECT_TRUE(test::all_close(gpu.p[i], cpu.p[i], t.rtol * 4, t.atol * 4)) << "tensor " << i;
  }
}
