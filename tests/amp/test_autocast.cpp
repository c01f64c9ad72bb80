// amp::autocast: the policy table (each op's output dtype under bf16 and f16 autocast), the
// gradients (f32 parameters get f32 gradients equal to the hand-written cast composite),
// nesting, device-type isolation, the weight-cast cache, and an MLP trained under bf16
// autocast against the same MLP in f32. Each body runs on CPU and on CUDA (skipped without a
// device) with both low-precision dtypes.
#include <cmath>
#include <cstdio>
#include <thread>
#include <tuple>

#include "ember/amp.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

using Param = std::tuple<Device, DType>;

class Autocast : public ::testing::TestWithParam<Param> {
 protected:
  Device dev() const { return std::get<0>(GetParam()); }
  DType low() const { return std::get<1>(GetParam()); }
  Tensor randn_(const Shape& s, DType dt = DType::f32) { return randn(s, TensorOptions(dt).device(dev())); }
};

std::string param_label(const ::testing::TestParamInfo<Param>& info) {
  return std::string(std::get<0>(info.param).is_cuda() ? "cuda" : "cpu") + "_" +
         (std::get<1>(info.param) == DType::bf16 ? "bf16" : "f16");
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (Device d : {Device::cpu(), Device::cuda()})
    for (DType t : {DType::bf16, DType::f16}) out.emplace_back(d, t);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Devices, Autocast, ::testing::ValuesIn(params()), param_label);

// Every row of the policy table (docs/amp.md), checked by the output dtype.
TEST_P(Autocast, PolicyTable) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  manual_seed(1);
  const DType lo = low();
  Tensor a = randn_({4, 3}), b = randn_({3, 5}), w = randn_({5, 3}), bias = randn_({5});
  Tensor img = randn_({2, 3, 6, 6}), kernel = randn_({4, 3, 3, 3}), kbias = randn_({4});
  Tensor h = randn_({4, 5}).to(dev(), lo);  // a 16-bit activation
  Tensor pos = add(abs(h), ones({}, TensorOptions(lo).device(dev())));  // > 0, for log
  Tensor target = randint(0, 5, {4}, TensorOptions(DType::i64).device(dev()));
  Tensor gamma = randn_({5}), beta = randn_({5});
  amp::autocast ac(dev(), lo);
  // Low precision: f32 inputs cast down.
  EXPECT_EQ(matmul(a, b).dtype(), lo);
  EXPECT_EQ(linear(a, w, bias).dtype(), lo);
  EXPECT_EQ(linear(a, w).dtype(), lo);
  EXPECT_EQ(conv2d(img, kernel, kbias, {1, 1}, {1, 1}).dtype(), lo);
  EXPECT_EQ(a.matmul(b).dtype(), lo);  // the Tensor method goes through the same op
  // f32: 16-bit inputs cast up.
  EXPECT_EQ(softmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(log_softmax(h, 1).dtype(), DType::f32);
  EXPECT_EQ(cross_entropy(h, target).dtype(), DType::f32);
  EXPECT_EQ(layer_norm(h, {5}, gamma, beta).dtype(), DType::f32);
  EXPECT_EQ(layer_norm(h, {5}).dtype(), DType::f32);
  EXPECT_EQ(sum(h).dtype(), DType::f32);
  EXPECT_EQ(mean(h, {1}).dtype(), DType::f32);
  EXPECT_EQ(exp(h).dtype(), DType::f32);
  EXPECT_EQ(log(pos).dtype(), DType::f32);
  EXPECT_EQ(norm(h).dtype(), DType::f32);
  // Promote: the widest input.
  Tensor h32 = randn_({4, 5});
  EXPECT_EQ(add(h, h32).dtype(), DType::f32);
  EXPECT_EQ(mul(h32, h).dtype(), DType::f32);
  EXPECT_EQ(sub(h, h32).dtype(), DType::f32);
  EXPECT_EQ(div(h, h32).dtype(), DType::f32);
  EXPECT_EQ(add(h, h).dtype(), lo);
  EXPECT_EQ(relu(h).dtype(), lo);  // not in the table: runs in its input dtype
  // Not cast: f64 stays f64 (an explicit choice), integers stay integers.
  Tensor a64 = randn_({4, 3}, DType::f64), b64 = randn_({3, 5}, DType::f64);
  EXPECT_EQ(matmul(a64, b64).dtype(), DType::f64);
  EXPECT_EQ(softmax(a64, 1).dtype(), DType::f64);
  EXPECT_EQ(sum(target).dtype(), sum(target.detach()).dtype());
  EXPECT_FALSE(is_floating(sum(target).dtype()));
}

// Values: the op under autocast equals the op on explicitly cast inputs.
TEST_P(Autocast, ValuesMatchExplicitCasts) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  manual_seed(2);
  Tensor a = randn_({6, 7}), w = randn_({3, 7}), bias = randn_({3});
  Tensor expected_lin = linear(a.to(dev(), low()), w.to(dev(), low()), bias.to(dev(), low()));
  Tensor h = randn_({6, 7}).to(dev(), low());
  Tensor expected_sm = softmax(h.to(dev(), DType::f32), 1);
  amp::autocast ac(dev(), low());
  EXPECT_TRUE(all_close(linear(a, w, bias), expected_lin, 0, 0));
  EXPECT_TRUE(all_close(softmax(h, 1), expected_sm, 0, 0));
}

// f32 parameters receive f32 gradients, equal to those of the hand-written cast composite.
TEST_P(Autocast, GradientsReachF32ParametersThroughCasts) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  manual_seed(3);
  const DType lo = low();
  Tensor x = randn_({8, 6});
  Tensor target = randint(0, 4, {8}, TensorOptions(DType::i64).device(dev()));
  Tensor w1 = mul(randn_({16, 6}), full({}, 0.4, dev())).detach().requires_grad_(true);
  Tensor b1 = randn_({16}).requires_grad_(true);
  Tensor w2 = mul(randn_({4, 16}), full({}, 0.25, dev())).detach().requires_grad_(true);
  Tensor gamma = ones({16}, dev()).requires_grad_(true);
  Tensor loss;
  {
    amp::autocast ac(dev(), lo);
    Tensor h = relu(linear(x, w1, b1));                // low
    h = layer_norm(h, {16}, gamma);                     // f32
    loss = cross_entropy(matmul(h, transpose(w2, 0, 1)), target);  // matmul low, loss f32
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  for (const Tensor* p : {&w1, &b1, &w2, &gamma}) {
    ASSERT_TRUE(p->grad().defined());
    EXPECT_EQ(p->grad().dtype(), DType::f32);
  }
  // The composite, without autocast: the same casts written by hand.
  Tensor w1c = w1.detach().requires_grad_(true), b1c = b1.detach().requires_grad_(true);
  Tensor w2c = w2.detach().requires_grad_(true), gc = gamma.detach().requires_grad_(true);
  auto lowc = [&](const Tensor& t) { return to(t, dev(), lo); };
  auto f32c = [&](const Tensor& t) { return to(t, dev(), DType::f32); };
  Tensor hc = relu(linear(lowc(x), lowc(w1c), lowc(b1c)));
  hc = layer_norm(f32c(hc), {16}, gc);
  // Autocast casts the argument it is given, the transposed view, into a contiguous tensor:
  // casting before transposing hands the GEMM another layout, which on CUDA takes another
  // cuBLASLt kernel and rounds differently (cuda_bf16 differed in the loss's 4th digit on the
  // first GPU run).
  Tensor lossc = cross_entropy(f32c(matmul(lowc(hc), lowc(transpose(w2c, 0, 1)))), target);
  lossc.backward();
  EXPECT_TRUE(all_close(loss, lossc, 0, 0));
  EXPECT_TRUE(all_close(w1.grad(), w1c.grad(), 0, 0));
  EXPECT_TRUE(all_close(b1.grad(), b1c.grad(), 0, 0));
  EXPECT_TRUE(all_close(w2.grad(), w2c.grad(), 0, 0));
  EXPECT_TRUE(all_close(gamma.grad(), gc.grad(), 0, 0));
}

// Activation checkpointing recomputes under the autocast state of the forward, as
// torch.utils.checkpoint does, though the backward runs outside the autocast scope: the
// recomputed linear is low precision again, and every gradient equals the plain graph's bit for
// bit. (It used to recompute in f32: gradients of another function, and on CUDA attention off
// the tensor-core path, gpt --recompute 5x slower on the first GPU run.) The cast cache is left
// empty afterwards, as the guard leaves it.
TEST_P(Autocast, CheckpointRecomputesUnderTheForwardsAutocast) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  manual_seed(4);
  const DType lo = low();
  Tensor x = randn_({8, 6}).requires_grad_(true);
  Tensor w1 = mul(randn_({16, 6}), full({}, 0.4, dev())).detach().requires_grad_(true);
  Tensor b1 = randn_({16}).requires_grad_(true);
  Tensor w2 = mul(randn_({4, 16}), full({}, 0.25, dev())).detach().requires_grad_(true);
  std::vector<DType> seen;  // the hidden activation's dtype at every call of the block
  auto block = [&](const TensorList& in) {
    Tensor h = linear(in[0], w1, b1);
    seen.push_back(h.dtype());
    return linear(gelu(h), w2);
  };
  auto loss_of = [&](bool recompute) {
    amp::autocast ac(dev(), lo);
    Tensor y = recompute ? autograd::checkpoint(block, {x}) : block({x});
    return sum(mul(to(y, dev(), DType::f32), to(y, dev(), DType::f32)));
  };
  // backward() and .grad: checkpoint hands the parameters used inside the block their
  // gradients through its own inner backward, not as captured inputs of autograd::grad.
  const TensorList leaves{x, w1, b1, w2};
  Tensor plain = loss_of(false);
  plain.backward();
  TensorList want;
  for (const Tensor& t : leaves) want.push_back(t.grad().clone());
  for (const Tensor& t : leaves) {
    Tensor g = t.grad();
    g.zero_();
  }
  seen.clear();
  Tensor ckpt = loss_of(true);
  ckpt.backward();  // outside the autocast scope
  TensorList got;
  for (const Tensor& t : leaves) got.push_back(t.grad());
  ASSERT_EQ(seen.size(), 2u) << "the forward and its recomputation";
  EXPECT_EQ(seen[0], lo);
  EXPECT_EQ(seen[1], lo) << "recomputed under the forward's autocast";
  EXPECT_TRUE(all_close(ckpt, plain, 0, 0));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i], 0, 0)) << i;
  EXPECT_FALSE(amp::autocast_enabled());
  EXPECT_EQ(autocast::nesting(), 0);
  EXPECT_EQ(autocast::cache_stats().size, 0);
}

TEST_P(Autocast, NestedGuardsRestoreState) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  const DType lo = low(), other = lo == DType::bf16 ? DType::f16 : DType::bf16;
  const DeviceType dt = dev().type;
  const DType default_dtype = amp::autocast_dtype(dt);
  Tensor a = randn_({2, 3}), b = randn_({3, 2});
  EXPECT_FALSE(amp::autocast_enabled(dt));
  EXPECT_FALSE(amp::autocast_enabled());
  {
    amp::autocast outer(dev(), lo);
    EXPECT_TRUE(amp::autocast_enabled(dt));
    EXPECT_EQ(amp::autocast_dtype(dt), lo);
    {
      amp::autocast off(dev(), lo, /*enabled=*/false);
      EXPECT_FALSE(amp::autocast_enabled(dt));
      EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
      {
        amp::autocast inner(dev(), other);
        EXPECT_EQ(matmul(a, b).dtype(), other);
      }
      EXPECT_FALSE(amp::autocast_enabled(dt));
      EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
    }
    EXPECT_EQ(matmul(a, b).dtype(), lo);
    {
      amp::autocast inner(dev(), other);
      EXPECT_EQ(amp::autocast_dtype(dt), other);
      EXPECT_EQ(matmul(a, b).dtype(), other);
    }
    EXPECT_EQ(amp::autocast_dtype(dt), lo);
    EXPECT_EQ(matmul(a, b).dtype(), lo);
    {
      amp::autocast same_dtype(dev());  // no dtype: keeps the current one
      EXPECT_EQ(matmul(a, b).dtype(), lo);
    }
  }
  EXPECT_FALSE(amp::autocast_enabled(dt));
  EXPECT_FALSE(amp::autocast_enabled());
  EXPECT_EQ(amp::autocast_dtype(dt), default_dtype);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  EXPECT_EQ(autocast::nesting(), 0);
}

// The state is per thread: a guard in one thread does not change another's ops.
TEST_P(Autocast, ThreadLocal) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  Tensor a = randn_({2, 3}), b = randn_({3, 2});
  amp::autocast ac(dev(), low());
  DType in_other_thread = DType::i64;
  std::thread t([&] { in_other_thread = matmul(a, b).dtype(); });
  t.join();
  EXPECT_EQ(in_other_thread, DType::f32);
  EXPECT_EQ(matmul(a, b).dtype(), low());
}

// A parameter used twice in one forward is cast once; an in-place update recasts it; the
// outermost guard's exit clears the cache; activations are never cached.
TEST_P(Autocast, WeightCastCache) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  manual_seed(4);
  Tensor w = randn_({5, 3}).requires_grad_(true);
  Tensor x1 = randn_({4, 3}), x2 = randn_({2, 3});
  autocast::reset_cache_stats();
  Tensor y1, y2;
  {
    amp::autocast ac(dev(), low());
    y1 = linear(x1, w);
    y2 = linear(x2, w);
    autocast::CacheStats s = autocast::cache_stats();
    EXPECT_EQ(s.misses, 1);  // one cast made
    EXPECT_EQ(s.hits, 1);    // the second use reused it
    EXPECT_EQ(s.size, 1);    // x1, x2 (no grad) and the outputs are not cached
    {
      amp::autocast inner(dev(), low());  // a nested guard keeps the cache...
      linear(x1, w);
    }
    EXPECT_EQ(autocast::cache_stats().hits, 2);
    EXPECT_EQ(autocast::cache_stats().size, 1);  // ...and its exit does not clear it

    // Activations that require grad are not cached either.
    Tensor act = mul(x1, full({}, 2.0, dev())).detach().requires_grad_(true);
    Tensor act2 = add(act, act);  // non-leaf
    linear(act2, w);
    linear(act2, w);
    EXPECT_EQ(autocast::cache_stats().size, 1);
    EXPECT_EQ(autocast::cache_stats().hits, 4);

    // An in-place update (an optimizer step) invalidates the entry.
    {
      NoGradGuard ng;
      w.mul_(0.5);
    }
    Tensor y3 = linear(x1, w);
    s = autocast::cache_stats();
    EXPECT_EQ(s.misses, 2);
    EXPECT_EQ(s.size, 1);
    Tensor expected = linear(x1.to(dev(), low()), w.detach().to(dev(), low()));
    EXPECT_TRUE(all_close(y3, expected, 0, 0));  // the new values, not the stale cast
  }
  EXPECT_EQ(autocast::cache_stats().size, 0);  // cleared by the outermost exit
  // Both uses of the one cast send their gradients to w: d/dw sum(y1) + sum(y2) in f32.
  add(sum(to(y1, dev(), DType::f32)), sum(to(y2, dev(), DType::f32))).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  Tensor colsum = add(sum(to(x1.to(dev(), low()), dev(), DType::f32), {0}),
                      sum(to(x2.to(dev(), low()), dev(), DType::f32), {0}));
  Tensor expected_grad = expand(unsqueeze(colsum, 0), {5, 3});
  EXPECT_TRUE(all_close(w.grad(), expected_grad, 1e-2, 1e-2));
}

// Under NoGradGuard a cast records no graph; it must not be cached and handed to a later
// recording forward in the same guard (the parameter would silently get no gradient).
TEST_P(Autocast, NoGradCastsAreNotCached) {
  EMBER_SKIP_IF_NO_DEVICE(dev());
  Tensor w = randn_({5, 3}).requires_grad_(true);
  Tensor x = randn_({4, 3});
  amp::autocast ac(dev(), low());
  {
    NoGradGuard ng;
    linear(x, w);
  }
  Tensor y = linear(x, w);
  EXPECT_TRUE(y.requires_grad());
}

// A guard on one device type leaves the other's ops alone.
TEST(AutocastDevices, CudaGuardDoesNotAffectCpu) {
  Tensor a = randn({2, 3}), b = randn({3, 2});
  Tensor h = randn({2, 3}).to(Device::cpu(), DType::bf16);
  amp::autocast ac(Device::cuda(), DType::bf16);  // touches no CUDA runtime: works anywhere
  EXPECT_TRUE(amp::autocast_enabled(DeviceType::CUDA));
  EXPECT_FALSE(amp::autocast_enabled(DeviceType::CPU));
  EXPECT_TRUE(amp::autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
  EXPECT_EQ(softmax(h, 1).dtype(), DType::bf16);
}

// The engine switches autocast off while it runs: a backward() called inside a guard computes
// what one called outside computes. (Here the forward ran in f32 outside any guard, so a
// re-autocast backward would run the matmul VJPs in bf16 and round the gradients.)
TEST(AutocastDevices, BackwardInsideAGuardEqualsBackwardOutside) {
  manual_seed(21);
  Tensor w = randn({16, 16}).requires_grad_();
  Tensor x = randn({8, 16});
  auto forward = [&] {
    Tensor h = softmax(x.matmul(w), 1).matmul(w);
    return (h * h).sum();
  };
  forward().backward();
  Tensor g_outside = w.grad().clone();
  w.set_grad(Tensor());
  Tensor loss = forward();
  {
    amp::autocast guard(Device::cpu(), DType::bf16);
    loss.backward();
    EXPECT_TRUE(amp::autocast_enabled(DeviceType::CPU));  // restored after backward
  }
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_TRUE(all_close(w.grad(), g_outside, 0, 0));
}

TEST(AutocastDevices, CpuGuardDoesNotAffectCuda) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor a = randn({2, 3}, Device::cuda()), b = randn({3, 2}, Device::cuda());
  amp::autocast ac(Device::cpu(), DType::bf16);
  EXPECT_EQ(matmul(a, b).dtype(), DType::f32);
}

TEST(AutocastDevices, RejectsNon16BitDtypes) {
  EXPECT_NE(message_of<DTypeError>([] { amp::autocast ac(Device::cpu(), DType::f32); })
                .find("[autocast] dtype must be bf16 or f16"),
            std::string::npos);
  EXPECT_FALSE(amp::autocast_enabled());
  EXPECT_EQ(autocast::nesting(), 0);
}

// An MLP trained on a fixed synthetic task, once in f32 and once under bf16 autocast from the
// same initialization, with the same data and plain SGD.
//
// The band: the f32 run drives the loss from ln 4 = 1.39 to ~0.012 (it fits the teacher's
// labels); both runs must end below 0.05, and within 10% (relative, plus 0.002
// absolute) of the f32 run's final loss. Why that width: autocast rounds GEMM inputs to bf16
// (8 significant bits: ~0.4% relative error per rounding) but accumulates in f32 and keeps f32
// parameters, so each step's update differs from the f32 one by well under 1% and the two
// trajectories stay close (measured: 0.012031 f32, 0.012021 bf16); 10% absorbs that drift
// with margin, while a broken autocast (gradients cut at a cast, stale cached weights, a loss
// computed in bf16) leaves the loss near its start or visibly off the f32 run.
double train_mlp(bool use_autocast) {
  manual_seed(7);
  const int64_t n = 256, in = 16, hidden = 64, classes = 4;
  Tensor x = randn({n, in});
  Tensor teacher = randn({in, classes});
  Tensor y = argmax(matmul(x, teacher), 1);
  nn::Linear fc1(in, hidden), fc2(hidden, classes);
  optim::SGD opt({fc1.weight, fc1.bias, fc2.weight, fc2.bias}, {.lr = 0.5});
  double last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss;
    {
      amp::autocast ac(Device::cpu(), DType::bf16, use_autocast);
      Tensor logits = fc2(relu(fc1(x)));
      if (step == 0) {
        EXPECT_EQ(logits.dtype(), use_autocast ? DType::bf16 : DType::f32);
      }
      loss = cross_entropy(logits, y);
    }
    EXPECT_EQ(loss.dtype(), DType::f32);
    opt.zero_grad();
    loss.backward();
    opt.step();
    last = loss.item<double>();
    if (step == 0) {
      EXPECT_GT(last, 1.0);  // ~ln 4 at the start
    }
  }
  EXPECT_EQ(fc1.weight.dtype(), DType::f32);  // master weights stay f32
  EXPECT_EQ(fc1.weight.grad().dtype(), DType::f32);
  return last;
}

TEST(AutocastTraining, MlpBf16ReachesF32LossBand) {
  const double f32 = train_mlp(false);
  const double bf16 = train_mlp(true);
  std::printf("final loss: f32 %.6f  bf16 autocast %.6f\n", f32, bf16);
  EXPECT_LT(f32, 0.05);
  EXPECT_LT(bf16, 0.05);
  EXPECT_NEAR(bf16, f32, 0.002 + 0.1 * f32);
  EXPECT_NE(bf16, f32);  // the bf16 run did compute in bf16
}

}  // namespace
}  // namespace ember::test
