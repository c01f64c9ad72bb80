// Gradients of the fused classifier linear_cross_entropy: dx and dW against the composite it
// replaces (linear, slice to the V used classes, cross_entropy) in f32 and f64, with padded
// classes, ignored targets, all ignored, sum and mean, an upstream gradient, leading dims and
// non-contiguous inputs; gradcheck in f64; bf16 autocast on the CPU; retain_graph; double
// backward throws; a no-grad forward records nothing.
#include <cmath>
#include <functional>
#include <string>

#include "support/classifier_composite.h"
#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {

struct Grads {
  Tensor loss, dx, dw;
};
// The loss of f(xb, wb) on fresh leaves, and their gradients for an upstream gradient g.
Grads grads_of(const std::function<Tensor(const Tensor&, const Tensor&)>& f, const Tensor& x, const Tensor& w,
               double g) {
  Tensor xb = x.detach().requires_grad_();
  Tensor wb = w.detach().requires_grad_();
  Tensor loss = f(xb, wb);
  loss.mul(g).backward();
  return {loss.detach(), xb.grad(), wb.grad()};
}

Tensor targets(const Shape& shape, int64_t classes, int64_t ignore) {
  Tensor t = randint(0, classes, shape);
  std::vector<int64_t> v = t.to_vector<int64_t>();
  for (size_t i = 0; i < v.size(); i += 3) v[i] = ignore;
  return tensor<int64_t>(v, shape);
}

void expect_same(const Grads& got, const Grads& want, double rtol, double atol) {
  EXPECT_TRUE(test::all_close(got.loss, want.loss, rtol, atol));
  EXPECT_TRUE(test::all_close(got.dx, want.dx, rtol, atol));
  EXPECT_TRUE(test::all_close(got.dw, want.dw, rtol, atol));
}

}  // namespace

TEST(ClassifierGrad, MatchesCompositeF32F64) {
  manual_seed(31);
  const int64_t b = 3, tt = 7, c = 12, vp = 20, v = 17;
  for (DType dt : {DType::f64, DType::f32}) {
    const double rtol = dt == DType::f64 ? 1e-11 : 2e-5, atol = dt == DType::f64 ? 1e-13 : 1e-6;
    Tensor w = randn({vp, c}, dt);
    Tensor t = targets({b, tt}, v, -1);
    // x as [B, T, C] and as a non-contiguous view of a [B, C, T] leaf.
    Tensor x = randn({b, tt, c}, dt);
    Tensor xbase = randn({b, c, tt}, dt);
    for (Reduction r : {Reduction::mean, Reduction::sum}) {
      SCOPED_TRACE(str(dtype_name(dt), " reduction ", int(r)));
      const LinearCrossEntropyOptions o{.ignore_index = -1, .num_classes = v, .reduction = r};
      auto fused = [&](const Tensor& xx, const Tensor& ww) { return linear_cross_entropy(xx, ww, t, o); };
      auto comp = [&](const Tensor& xx, const Tensor& ww) { return classifier_composite(xx, ww, t, v, -1, r); };
      expect_same(grads_of(fused, x, w, 2.5), grads_of(comp, x, w, 2.5), rtol, atol);
      auto fused_nc = [&](const Tensor& xb, const Tensor& ww) { return fused(xb.transpose(1, 2), ww); };
      auto comp_nc = [&](const Tensor& xb, const Tensor& ww) { return comp(xb.transpose(1, 2), ww); };
      const Grads g = grads_of(fused_nc, xbase, w, 1.0);
      expect_same(g, grads_of(comp_nc, xbase, w, 1.0), rtol, atol);
      // The padded classes get exactly no gradient.
      EXPECT_EQ(g.dw.narrow(0, v, vp - v).abs().max().item<double>(), 0.0);
      EXPECT_EQ(g.dx.dtype(), dt);
      EXPECT_EQ(g.dw.dtype(), dt);
    }
  }
}

TEST(ClassifierGrad, AllIgnoredGivesZeroGradients) {
  Tensor x = randn({5, 4}, DType::f64), w = randn({6, 4}, DType::f64);
  Tensor t = full({5}, -100, DType::i64);
  for (Reduction r : {Reduction::mean, Reduction::sum}) {
    Grads got = grads_of([&](const Tensor& a, const Tensor& b) {
      return linear_cross_entropy(a, b, t, {.reduction = r});
    }, x, w, 1.0);
    Grads want = grads_of(
        [&](const Tensor& a, const Tensor& b) { return classifier_composite(a, b, t, 6, -100, r); }, x, w, 1.0);
    EXPECT_EQ(std::isnan(got.loss.item<double>()), r == Reduction::mean);
    EXPECT_EQ(std::isnan(want.loss.item<double>()), r == Reduction::mean);
    EXPECT_TRUE(test::all_close(got.dx, want.dx, 0, 0));
    EXPECT_TRUE(test::all_close(got.dw, want.dw, 0, 0));
    EXPECT_EQ(got.dx.abs().max().item<double>(), 0.0);
  }
}

TEST(ClassifierGrad, Gradcheck) {
  manual_seed(32);
  Tensor x = randn({2, 3, 4}, DType::f64).requires_grad_();
  Tensor w = randn({7, 4}, DType::f64).requires_grad_();
  Tensor t = tensor<int64_t>({1, -100, 4, 0, 2, 3}, {2, 3});
  for (Reduction r : {Reduction::mean, Reduction::sum}) {
    SCOPED_TRACE(int(r));
    EXPECT_TRUE(gradcheck([&t, r](const TensorList& in) {
      return linear_cross_entropy(in[0], in[1], t, {.num_classes = 5, .reduction = r});
    }, {x, w}));
  }
  // Every row a class; non-contiguous x.
  Tensor xt = randn({4, 3}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) {
    return linear_cross_entropy(in[0].t(), in[1], tensor<int64_t>({6, 0, 3}, {3}));
  }, {xt, w}));
}

TEST(ClassifierGrad, Bf16AutocastOnCpu) {
  manual_seed(33);
  const int64_t n = 40, c = 16, vp = 32, v = 29;
  Tensor x = randn({n, c}), w = randn({vp, c}).mul(0.5);
  Tensor t = targets({n}, v, -1);
  const LinearCrossEntropyOptions o{.ignore_index = -1, .num_classes = v};
  Tensor xa = x.detach().requires_grad_(), wa = w.detach().requires_grad_();
  Tensor loss;
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    loss = linear_cross_entropy(xa, wa, t, o);
  }
  EXPECT_EQ(loss.dtype(), DType::f32);
  loss.backward();
  EXPECT_EQ(xa.grad().dtype(), DType::f32);
  EXPECT_EQ(wa.grad().dtype(), DType::f32);
  // The same as the op on explicitly cast inputs (autocast is only the casts) ...
  Tensor x16 = x.to(DType::bf16).detach().requires_grad_(), w16 = w.to(DType::bf16).detach().requires_grad_();
  Tensor l16 = linear_cross_entropy(x16, w16, t, o);
  EXPECT_TRUE(test::all_close(loss, l16, 0, 0));
  l16.backward();
  EXPECT_TRUE(test::all_close(xa.grad(), x16.grad().to(DType::f32), 0, 0));
  // ... and close to the composite under autocast (bf16 logits, cross_entropy in f32).
  Grads want = grads_of([&](const Tensor& a, const Tensor& b) {
    amp::autocast ac(Device::cpu(), DType::bf16);
    return classifier_composite(a, b, t, v, -1, Reduction::mean);
  }, x, w, 1.0);
  EXPECT_TRUE(test::all_close(loss, want.loss, 1e-3, 1e-3));
  EXPECT_TRUE(test::all_close(xa.grad(), want.dx, 2e-2, 2e-4));
  EXPECT_TRUE(test::all_close(wa.grad(), want.dw, 2e-2, 2e-4));
}

TEST(ClassifierGrad, RetainGraphAndOnlyRequestedGradients) {
  Tensor x = randn({6, 5}, DType::f64).requires_grad_();
  Tensor w = randn({8, 5}, DType::f64);  // a frozen weight: only dx
  Tensor t = tensor<int64_t>({0, 1, 2, 3, 4, 5}, {6});
  Tensor loss = linear_cross_entropy(x, w, t);
  loss.backward(Tensor(), true);
  Tensor first = x.grad().clone();
  loss.backward();  // the saved dlogits are read, not consumed
  EXPECT_TRUE(test::all_close(x.grad(), first.mul(2.0), 1e-14, 1e-15));
  EXPECT_FALSE(w.grad().defined());
}

TEST(ClassifierGrad, NoGradRecordsNothing) {
  Tensor x = randn({3, 4}).requires_grad_(), w = randn({5, 4}).requires_grad_();
  Tensor t = tensor<int64_t>({0, 1, 2}, {3});
  {
    NoGradGuard ng;
    Tensor loss = linear_cross_entropy(x, w, t);
    EXPECT_FALSE(loss.requires_grad());
    EXPECT_EQ(loss.grad_fn(), nullptr);
  }
  Tensor loss = linear_cross_entropy(x.detach(), w.detach(), t);
  EXPECT_EQ(loss.grad_fn(), nullptr);
  EXPECT_NE(linear_cross_entropy(x, w, t).grad_fn(), nullptr);
}

TEST(ClassifierGrad, DoubleBackwardThrows) {
  Tensor x = randn({3, 4}, DType::f64).requires_grad_(), w = randn({5, 4}, DType::f64).requires_grad_();
  Tensor t = tensor<int64_t>({0, 1, 2}, {3});
  TensorList g = autograd::grad({linear_cross_entropy(x, w, t)}, {x, w}, {}, true, true);
  ASSERT_TRUE(g[0].requires_grad());
  // The first-order values are still right under create_graph.
  Grads want = grads_of(
      [&](const Tensor& a, const Tensor& b) { return classifier_composite(a, b, t, 5, -100, Reduction::mean); },
      x, w, 1.0);
  EXPECT_TRUE(test::all_close(g[0].detach(), want.dx, 1e-12, 1e-14));
  try {
    g[0].sum().backward();
    FAIL() << "double backward through linear_cross_entropy must throw";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("[linear_cross_entropy_backward] double backward"), std::string::npos)
        << e.what();
  }
}
