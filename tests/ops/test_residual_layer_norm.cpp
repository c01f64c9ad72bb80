// residual_layer_norm (ember's fused pre-LN residual step) against the composite it replaces:
// sum = add(x, delta), y = layer_norm(sum), and under autocast to(y, autocast dtype). The fused
// op must equal it bit for bit, forward and backward (same rounding of the sum, same
// statistics, dy read in y's dtype), in every dtype pairing the kernels take; plus f64
// gradcheck, CPU autocast bf16, and CUDA bodies comparing the device with itself (bitwise) and
// with the CPU (tolerances). CUDA bodies skip without a device.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <ember/amp/autocast.h>
#include <ember/autograd/engine.h>
#include <ember/ops/nn.h>

#include "support/test_support.h"

using namespace ember;

namespace {

// Bitwise equality of values (f64 holds every f16/bf16/f32 value exactly) plus dtype and shape.
::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined())
    return ::testing::AssertionFailure() << "one of the tensors is undefined";
  if (!a.defined()) return ::testing::AssertionSuccess();
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes())
    return ::testing::AssertionFailure() << dtype_name(a.dtype()) << " " << str(a.sizes()) << " vs "
                                         << dtype_name(b.dtype()) << " " << str(b.sizes());
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << va[i] << " vs " << vb[i]
                                           << " (diff " << va[i] - vb[i] << ")";
  return ::testing::AssertionSuccess();
}

// Inputs whose sum has a large common offset and a small spread: the rounding of the sum to its
// dtype and the variance around the mean both matter, so a kernel that normalizes the unrounded
// sum, or computes the variance carelessly, differs from the composite.
Tensor residual_input(const Shape& shape, Device dev = Device::cpu()) {
  return randn(shape, DType::f64).mul(3.0).add(20.0).to(dev);
}

struct Leaves {
  Tensor x, delta, w, b;
};
Leaves leaves(const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& b) {
  auto leaf = [](const Tensor& t) { return t.defined() ? t.detach().clone().requires_grad_(true) : Tensor(); };
  return {leaf(x), leaf(delta), leaf(w), leaf(b)};
}

// Runs fn on fresh leaves, backpropagates gs into sum and gy into y, and returns
// {sum, y, dx, ddelta, dweight, dbias}.
template <class F>
TensorList run_with_grads(F&& fn, const Tensor& x, const Tensor& delta, const Tensor& w, const Tensor& b,
                          const Tensor& gs, const Tensor& gy) {
  Leaves l = leaves(x, delta, w, b);
  auto [s, y] = fn(l);
  autograd::backward({s, y}, {gs.to(s.dtype()), gy.to(y.dtype())});
  auto g = [](const Tensor& t) { return t.defined() ? t.grad() : Tensor(); };
  return {s.detach(), y.detach(), g(l.x), g(l.delta), g(l.w), g(l.b)};
}

std::pair<Tensor, Tensor> composite(const Leaves& l, const Shape& ns, double eps, DType y_dtype) {
  Tensor s = add(l.x, l.delta);
  Tensor y = layer_norm(s, ns, l.w, l.b, eps);
  if (y.dtype() != y_dtype) y = to(y, y.device(), y_dtype);
  return {s, y};
}

const char* kNames[] = {"sum", "y", "dx", "ddelta", "dweight", "dbias"};

void expect_same(const TensorList& fused, const TensorList& ref) {
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_TRUE(same_bits(fused[i], ref[i])) << kNames[i];
}

struct Pairing {
  DType x, delta;
};

}  // namespace

// Every dtype pairing: the kernels' own (f32/f64/f16/bf16 alone, f32 with a 16-bit delta), the
// swapped one (bf16 x + f32 delta), and those the front casts (f16 + bf16, f64 + f32).
TEST(ResidualLayerNorm, ForwardAndGradientsEqualTheComposite) {
  manual_seed(11);
  const Pairing pairings[] = {{DType::f32, DType::f32},  {DType::f64, DType::f64}, {DType::f32, DType::bf16},
                              {DType::f32, DType::f16},  {DType::bf16, DType::f32}, {DType::bf16, DType::bf16},
                              {DType::f16, DType::f16},  {DType::f16, DType::bf16}, {DType::f64, DType::f32}};
  for (const Shape& ns : {Shape{24}, Shape{5, 24}}) {
    const Shape shape{3, 5, 24};
    Tensor xb = residual_input(shape), db = randn(shape, DType::f64).mul(0.5);
    Tensor gsb = randn(shape, DType::f64), gyb = randn(shape, DType::f64);
    Tensor wb = randn(ns, DType::f64), bb = randn(ns, DType::f64);
    for (Pairing p : pairings) {
      const DType s = promote_types(p.x, p.delta);
      for (int affine = 0; affine < 4; ++affine) {  // none, weight, both, bias only
        SCOPED_TRACE(str(dtype_name(p.x), " + ", dtype_name(p.delta), " over ", ns, " affine ", affine));
        Tensor w = (affine == 1 || affine == 2) ? wb.to(s) : Tensor();
        Tensor b = affine >= 2 ? bb.to(s) : Tensor();
        Tensor x = xb.to(p.x), d = db.to(p.delta);
        TensorList fused = run_with_grads(
            [&](const Leaves& l) { return residual_layer_norm(l.x, l.delta, ns, l.w, l.b, 1e-5); }, x, d, w, b,
            gsb, gyb);
        TensorList ref = run_with_grads([&](const Leaves& l) { return composite(l, ns, 1e-5, s); }, x, d, w, b,
                                        gsb, gyb);
        EXPECT_EQ(fused[0].dtype(), s);
        EXPECT_EQ(fused[1].dtype(), s);
        EXPECT_EQ(fused[2].dtype(), p.x);
        EXPECT_EQ(fused[3].dtype(), p.delta);  // delta's gradient in delta's own dtype
        expect_same(fused, ref);
      }
    }
  }
}

// The ops-level forward: mean and rstd are those of layer_norm on the stored sum, and a 16-bit
// y around an f32 sum is the f32 y rounded once.
TEST(ResidualLayerNorm, OpsForwardStatisticsAndSixteenBitOutput) {
  manual_seed(12);
  Tensor x = residual_input({7, 33}).to(DType::f32), d = randn({7, 33}).to(DType::bf16);
  Tensor w = randn({33}), b = randn({33});
  for (DType yd : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(yd));
    ops::ResidualLayerNormForward f = ops::residual_layer_norm_forward(x, d, {33}, w, b, 1e-5, yd);
    Tensor sum = add(x, d);
    ops::LayerNormForward ln = ops::layer_norm_forward(sum, {33}, w, b, 1e-5);
    EXPECT_TRUE(same_bits(f.sum, sum));
    EXPECT_TRUE(same_bits(f.y, ln.y.to(yd)));
    EXPECT_TRUE(same_bits(f.mean, ln.mean));
    EXPECT_TRUE(same_bits(f.rstd, ln.rstd));
  }
}

// layer_norm_backward reads a 16-bit output gradient of an f32 layer norm as it is: the same
// bits as the gradient widened to f32 first.
TEST(ResidualLayerNorm, BackwardReadsSixteenBitGradients) {
  manual_seed(13);
  Tensor x = residual_input({9, 40}).to(DType::f32), w = randn({40});
  ops::LayerNormForward f = ops::layer_norm_forward(x, {40}, w, Tensor(), 1e-5);
  for (DType gd : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(gd));
    Tensor g = randn({9, 40}).to(gd);
    auto got = ops::layer_norm_backward(g, x, {40}, w, f.mean, f.rstd, {true, true, true});
    auto want = ops::layer_norm_backward(g.to(DType::f32), x, {40}, w, f.mean, f.rstd, {true, true, true});
    EXPECT_EQ(got.dx.dtype(), DType::f32);
    EXPECT_TRUE(same_bits(got.dx, want.dx));
    EXPECT_TRUE(same_bits(got.dweight, want.dweight));
    EXPECT_TRUE(same_bits(got.dbias, want.dbias));
  }
}

// Strided inputs (a transpose, a narrow) and a strided output gradient.
TEST(ResidualLayerNorm, NonContiguousInputs) {
  manual_seed(14);
  Tensor xbase = residual_input({16, 6}).to(DType::f32);        // x = xbase.t(): [6, 16]
  Tensor dbase = randn({6, 20}).to(DType::bf16);                // delta = narrow: [6, 16]
  Tensor x = xbase.t(), d = dbase.narrow(1, 2, 16);
  ASSERT_FALSE(x.is_contiguous());
  ASSERT_FALSE(d.is_contiguous());
  Tensor w = randn({16, 2}).select(1, 0), b = randn({32}).narrow(0, 3, 16);
  Tensor gs = randn({16, 6}).t(), gy = randn({6, 32}).narrow(1, 1, 16);
  TensorList fused = run_with_grads(
      [&](const Leaves& l) { return residual_layer_norm(l.x, l.delta, {16}, l.w, l.b, 1e-5); }, x, d, w, b, gs,
      gy);
  TensorList ref =
      run_with_grads([&](const Leaves& l) { return composite(l, {16}, 1e-5, DType::f32); }, x, d, w, b, gs, gy);
  expect_same(fused, ref);
  // And a non-contiguous leaf itself: gradients of the view's shape.
  Tensor xl = xbase.detach().clone().requires_grad_(true);
  Tensor y = residual_layer_norm(xl.t(), d, {16}).second;
  autograd::backward({y}, {gy});
  Tensor xl2 = xbase.detach().clone().requires_grad_(true);
  Tensor y2 = layer_norm(add(xl2.t(), d), {16});
  autograd::backward({y2}, {gy});
  EXPECT_TRUE(same_bits(xl.grad(), xl2.grad()));
}

TEST(ResidualLayerNorm, GradcheckF64) {
  manual_seed(15);
  Tensor x = randn({3, 7}, DType::f64).requires_grad_(true);
  Tensor d = randn({3, 7}, DType::f64).requires_grad_(true);
  Tensor w = randn({7}, DType::f64).requires_grad_(true);
  Tensor b = randn({7}, DType::f64).requires_grad_(true);
  Tensor k = randn({3, 7}, DType::f64);
  // y plus a multiple of sum: both outputs' gradient paths are checked.
  auto fn = [&](const TensorList& in) {
    auto [s, y] = residual_layer_norm(in[0], in[1], {7}, in[2], in[3], 1e-5);
    return add(y, mul(s, k));
  };
  EXPECT_TRUE(autograd::gradcheck(fn, {x, d, w, b}));
  auto fn_plain = [&](const TensorList& in) {
    auto [s, y] = residual_layer_norm(in[0], in[1], {7});
    return mul(y, k);
  };
  EXPECT_TRUE(autograd::gradcheck(fn_plain, {x, d}));
}

// CPU autocast (bf16, ember's CPU default): y comes out in bf16, equal to the explicit cast of
// the f32 composite, and every gradient equals the composite's (dy read in bf16).
TEST(ResidualLayerNorm, CpuAutocastWritesYInTheAutocastDtype) {
  manual_seed(16);
  const Shape shape{4, 6, 48};
  Tensor gs = randn(shape), gy = randn(shape);
  for (DType dd : {DType::f32, DType::bf16}) {
    for (DType wd : {DType::f32, DType::bf16}) {  // a bf16 weight is cast up, as layer_norm's
      SCOPED_TRACE(str("delta ", dtype_name(dd), " weight ", dtype_name(wd)));
      Tensor x = residual_input(shape).to(DType::f32), d = randn(shape).to(dd);
      Tensor w = randn({48}).to(wd), b = randn({48}).to(wd);
      TensorList fused = run_with_grads(
          [&](const Leaves& l) {
            amp::autocast ac(Device::cpu(), DType::bf16);
            return residual_layer_norm(l.x, l.delta, {48}, l.w, l.b, 1e-5);
          },
          x, d, w, b, gs, gy);
      EXPECT_EQ(fused[0].dtype(), DType::f32);
      EXPECT_EQ(fused[1].dtype(), DType::bf16);
      EXPECT_EQ(fused[3].dtype(), dd);
      EXPECT_EQ(fused[4].dtype(), wd);
      // The composite under the same autocast (layer_norm casts a bf16 weight up), then cast.
      TensorList ref = run_with_grads(
          [&](const Leaves& l) {
            amp::autocast ac(Device::cpu(), DType::bf16);
            return composite(l, {48}, 1e-5, DType::bf16);
          },
          x, d, w, b, gs, gy);
      expect_same(fused, ref);
      if (wd == DType::f32) {  // the explicit cast, no autocast anywhere
        Tensor want = layer_norm(add(x, d), {48}, w, b, 1e-5).to(DType::bf16);
        EXPECT_TRUE(same_bits(fused[1], want));
      }
    }
  }
  // A 16-bit sum under autocast runs as the composite (layer_norm casts it up), y in bf16; an
  // f64 sum is never cast.
  Tensor xh = randn(shape).to(DType::bf16), dh = randn(shape).to(DType::bf16);
  TensorList fused16 = run_with_grads(
      [&](const Leaves& l) {
        amp::autocast ac(Device::cpu(), DType::bf16);
        return residual_layer_norm(l.x, l.delta, {48}, l.w, l.b, 1e-5);
      },
      xh, dh, Tensor(), Tensor(), gs, gy);
  TensorList ref16 = run_with_grads(
      [&](const Leaves& l) {
        amp::autocast ac(Device::cpu(), DType::bf16);
        return composite(l, {48}, 1e-5, DType::bf16);
      },
      xh, dh, Tensor(), Tensor(), gs, gy);
  EXPECT_EQ(fused16[0].dtype(), DType::bf16);
  EXPECT_EQ(fused16[1].dtype(), DType::bf16);
  expect_same(fused16, ref16);
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    EXPECT_EQ(residual_layer_norm(randn(shape, DType::f64), randn(shape, DType::f64), {48}).second.dtype(),
              DType::f64);
  }
  // Plain layer_norm keeps PyTorch's rule: f32 out under autocast.
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    EXPECT_EQ(layer_norm(randn(shape), {48}).dtype(), DType::f32);
  }
}

TEST(ResidualLayerNorm, BadInputs) {
  Tensor x = randn({2, 3, 4});
  auto msg = [](auto&& f) { return test::message_of<Error>(f); };
  EXPECT_THROW(residual_layer_norm(x, randn({3, 4}), {4}), ShapeError);
  EXPECT_NE(msg([&] { residual_layer_norm(x, randn({3, 4}), {4}); }).find("[residual_layer_norm] delta of shape [3, 4]"),
            std::string::npos);
  EXPECT_THROW(residual_layer_norm(x, randn({2, 3, 4}), {3}), ShapeError);
  EXPECT_THROW(residual_layer_norm(x, randn({2, 3, 4}), {4}, randn({4}, DType::f64)), DTypeError);
  EXPECT_THROW(residual_layer_norm(x, ones({2, 3, 4}, DType::i64), {4}), DTypeError);
  EXPECT_THROW(residual_layer_norm(x, Tensor(), {4}), Error);
  // The kernels write a 16-bit y only around an f32 sum.
  const std::string m = msg([&] {
    ops::residual_layer_norm_forward(x.to(DType::f64), x.to(DType::f64), {4}, Tensor(), Tensor(), 1e-5,
                                     DType::bf16);
  });
  EXPECT_NE(m.find("output dtype bf16 must be the sum's dtype f64"), std::string::npos) << m;
}

// ---- CUDA: the device against itself (bitwise, like the CPU tests) and against the CPU ----

namespace {
const Device kGpu = Device::cuda(0);

using test::close_to_cpu;
using test::cuda_rtol;
}  // namespace

// f32, bf16, f32 x + bf16 delta, and f32 + bf16 under CUDA autocast (bf16 y), at GPT's C = 768,
// odd widths, and a row longer than the shared-memory cache (the stored sum is reread).
TEST(ResidualLayerNormCuda, MatchesTheCompositeOnTheDeviceAndTheCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(21);
  struct Case {
    DType x, delta;
    bool autocast;
  };
  const Case cases[] = {{DType::f32, DType::f32, false},  {DType::bf16, DType::bf16, false},
                        {DType::f32, DType::bf16, false}, {DType::f32, DType::bf16, true},
                        {DType::f32, DType::f32, true},   {DType::f64, DType::f64, false}};
  for (int64_t cols : {int64_t(768), int64_t(771), int64_t(31), int64_t(20000)}) {
    const int64_t rows = cols > 1000 ? 5 : 67;
    const Shape shape{rows, cols};
    Tensor xb = residual_input(shape), db = randn(shape, DType::f64).mul(0.5);
    Tensor wb = randn({cols}, DType::f64), bb = randn({cols}, DType::f64);
    Tensor gsb = randn(shape, DType::f64), gyb = randn(shape, DType::f64);
    for (Case c : cases) {
      SCOPED_TRACE(str(dtype_name(c.x), " + ", dtype_name(c.delta), c.autocast ? " autocast" : "", " C ", cols));
      const DType s = promote_types(c.x, c.delta);
      const DType yd = c.autocast ? DType::bf16 : s;
      auto on = [&](Device dev, bool fused) {
        return run_with_grads(
            [&](const Leaves& l) -> std::pair<Tensor, Tensor> {
              amp::autocast ac(dev, DType::bf16, c.autocast);
              if (fused) return residual_layer_norm(l.x, l.delta, {cols}, l.w, l.b, 1e-5);
              return composite(l, {cols}, 1e-5, yd);
            },
            xb.to(dev, c.x), db.to(dev, c.delta), wb.to(dev, s), bb.to(dev, s), gsb.to(dev), gyb.to(dev));
      };
      TensorList gpu = on(kGpu, true), gpu_ref = on(kGpu, false), cpu = on(Device::cpu(), true);
      EXPECT_EQ(gpu[1].dtype(), yd);
      for (size_t i = 0; i < gpu.size(); ++i) {
        EXPECT_TRUE(same_bits(gpu[i], gpu_ref[i])) << kNames[i];  // the device's own composite
        // Against the CPU: the sum bit for bit (one rounding of the same addition), the rest
        // within the dtype's tolerance (the CUDA reduction order differs).
        EXPECT_TRUE(i == 0 ? same_bits(gpu[i].cpu(), cpu[i]) : close_to_cpu(gpu[i], cpu[i], cuda_rtol(gpu[i].dtype())))
            << kNames[i];
      }
    }
  }
}

// The CUDA backward kernels read a bf16 dy around an f32 x: the bits of the widened dy.
TEST(ResidualLayerNormCuda, BackwardReadsSixteenBitGradients) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(22);
  for (int64_t cols : {int64_t(768), int64_t(771), int64_t(20000)}) {
    SCOPED_TRACE(cols);
    Tensor x = residual_input({40, cols}, kGpu).to(DType::f32), w = randn({cols}).to(kGpu);
    ops::LayerNormForward f = ops::layer_norm_forward(x, {cols}, w, Tensor(), 1e-5);
    Tensor g = randn({40, cols}).to(kGpu, DType::bf16);
    auto got = ops::layer_norm_backward(g, x, {cols}, w, f.mean, f.rstd, {true, true, true});
    auto want = ops::layer_norm_backward(g.to(DType::f32), x, {cols}, w, f.mean, f.rstd, {true, true, true});
    EXPECT_TRUE(same_bits(got.dx, want.dx));
    EXPECT_TRUE(same_bits(got.dweight, want.dweight));
    EXPECT_TRUE(same_bits(got.dbias, want.dbias));
  }
}
