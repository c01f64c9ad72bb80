// clip_grad_norm_'s foreach path (ops::foreach_norm + ops::foreach_mul_, taken when every
// gradient is on one device): the same total and scaled gradients as PyTorch 1.13's per-tensor
// composite (written out here) on many gradients of mixed sizes and dtypes, a handful of
// kernels for GPT-2 124M's 148 parameters instead of hundreds, and CUDA against the CPU.
// (tests/optim/test_optim_reference.cpp compares it with PyTorch's own numbers.)
#include <cmath>
#include <limits>
#include <vector>

#include "ember/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// GPT-2's 148 parameter shapes (wte, wpe, 12 blocks of 12, ln_f) at width c, vocabulary v,
// context t.
std::vector<Shape> gpt2_shapes(int64_t c, int64_t v, int64_t t) {
  std::vector<Shape> s = {{v, c}, {t, c}};
  for (int l = 0; l < 12; ++l) {
    for (Shape x : std::vector<Shape>{{c}, {c}, {3 * c, c}, {3 * c}, {c, c}, {c}, {c}, {c},
                                      {4 * c, c}, {4 * c}, {c, 4 * c}, {c}})
      s.push_back(x);
  }
  s.push_back({c});
  s.push_back({c});
  return s;
}

// Parameters with random gradients: dtypes cycle through `dtypes`; a few have no gradient.
std::vector<Tensor> make_params(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes,
                                Device dev, double scale = 1.0) {
  std::vector<Tensor> ps;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const DType dt = dtypes[i % dtypes.size()];
    Tensor p = zeros(shapes[i], TensorOptions(dt).device(dev)).requires_grad_();
    if (i % 17 != 5) p.set_grad((randn(shapes[i]) * scale).to(dt).to(dev));
    ps.push_back(p);
  }
  return ps;
}

// PyTorch 1.13's clip_grad_norm_: per-tensor norms (in each gradient's dtype), their norm, the
// clamped coefficient, one mul_ per gradient.
Tensor composite_clip(const std::vector<Tensor>& params, double max_norm, double ord) {
  NoGradGuard no_grad;
  std::vector<Tensor> norms;
  DType dt = DType::f32;
  for (const Tensor& p : params)
    if (p.grad().defined() && p.grad().dtype() == DType::f64) dt = DType::f64;
  for (const Tensor& p : params)
    if (p.grad().defined())
      norms.push_back((std::isinf(ord) ? amax(abs(p.grad())) : norm(p.grad(), ord)).to(dt));
  Tensor all = stack(norms);
  Tensor total = std::isinf(ord) ? amax(all) : norm(all, ord);
  Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.mul_(coef);
  }
  return total;
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& ps) {
  std::vector<Tensor> g;
  for (const Tensor& p : ps) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return g;
}

std::vector<Tensor> copy_params(const std::vector<Tensor>& ps, Device dev) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps) {
    Tensor q = zeros(p.sizes(), TensorOptions(p.dtype()).device(dev)).requires_grad_();
    if (p.grad().defined()) q.set_grad(p.grad().to(dev).clone());
    out.push_back(q);
  }
  return out;
}

}  // namespace

TEST(ClipGradNormForeach, MatchesPerTensorCompositeOnManyF32Gradients) {
  manual_seed(11);
  const std::vector<Shape> shapes = gpt2_shapes(48, 500, 64);
  for (double ord : {2.0, 1.0, kInf, 3.0}) {
    for (double max_norm : {1.0, 1e6}) {  // clipping, and not (coefficient 1)
      SCOPED_TRACE(std::to_string(ord) + " max_norm " + std::to_string(max_norm));
      std::vector<Tensor> a = make_params(shapes, {DType::f32}, Device::cpu(), 0.01);
      std::vector<Tensor> b = copy_params(a, Device::cpu());
      const Tensor ta = optim::clip_grad_norm_(a, max_norm, ord);
      const Tensor tb = composite_clip(b, max_norm, ord);
      EXPECT_EQ(ta.dtype(), DType::f32);
      EXPECT_TRUE(test::all_close(ta, tb, 2e-6, 0));
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].grad().defined(), b[i].grad().defined());
        if (a[i].grad().defined()) {
          EXPECT_TRUE(test::all_close(a[i].grad(), b[i].grad(), 2e-6, 1e-12)) << i;
        }
      }
    }
  }
}

TEST(ClipGradNormForeach, MixedDtypesMatchTheExactNorm) {
  // With 16-bit gradients the composite rounds each gradient's own norm to 16 bits; the foreach
  // norm does not, so it is compared with the exact norm of the stored values, and the scaled
  // gradients with mul_ by the coefficient that norm gives.
  manual_seed(12);
  const std::vector<Shape> shapes = gpt2_shapes(32, 300, 32);
  for (const std::vector<DType>& dtypes :
       {std::vector<DType>{DType::f32, DType::bf16, DType::f16}, std::vector<DType>{DType::bf16, DType::f64}}) {
    const bool f64 = dtypes.back() == DType::f64;
    std::vector<Tensor> ps = make_params(shapes, dtypes, Device::cpu(), 0.05);
    const std::vector<Tensor> before = grads_of(ps);
    double sq = 0;
    for (const Tensor& g : before)
      if (g.defined())
        for (double v : g.to_vector<double>()) sq += v * v;
    const double exact = std::sqrt(sq);
    const Tensor total = optim::clip_grad_norm_(ps, 0.5);
    EXPECT_EQ(total.dtype(), f64 ? DType::f64 : DType::f32);
    EXPECT_TRUE(test::all_close(total, std::vector<double>{exact}, f64 ? 1e-13 : 1e-6, 0));
    // The composite's total differs by the 16-bit rounding of the per-tensor norms only.
    std::vector<Tensor> b = copy_params(ps, Device::cpu());
    for (size_t i = 0; i < b.size(); ++i)
      if (before[i].defined()) b[i].set_grad(before[i].clone());
    EXPECT_TRUE(test::all_close(composite_clip(b, 0.5, 2.0), std::vector<double>{exact}, 1e-2, 0));
    const Tensor coef = clamp(0.5 / (total + 1e-6), std::nullopt, 1.0);
    for (size_t i = 0; i < ps.size(); ++i) {
      if (before[i].defined()) {
        EXPECT_TRUE(test::all_close(ps[i].grad(), before[i].clone().mul_(coef), 0, 0)) << i;
      }
    }
  }
}

TEST(ClipGradNormForeach, AFewKernelsForGpt2Parameters) {
  // GPT-2 124M has 148 parameters; the per-tensor composite dispatches two or three kernels per
  // gradient (its norm, its share of the stack, its mul_). Every kernel dispatch is a profiler
  // op event, on the CPU as on CUDA.
  manual_seed(13);
  std::vector<Tensor> ps = make_params(gpt2_shapes(16, 64, 16), {DType::f32}, Device::cpu());
  for (Tensor& p : ps)
    if (!p.grad().defined()) p.set_grad(randn(p.sizes()));
  ASSERT_EQ(ps.size(), 148u);
  profiler::Profiler prof;
  prof.start();
  (void)optim::clip_grad_norm_(ps, 1.0);
  prof.stop();
  int64_t ops = 0;
  for (const profiler::Event& e : prof.events()) ops += e.kind == profiler::EventKind::op;
  RecordProperty("kernel_dispatches", int(ops));
  EXPECT_LE(ops, 12) << "kernel dispatches for 148 gradients";
  EXPECT_GE(ops, 2);
}

TEST(ClipGradNormForeach, CudaMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(14);
  // GPT-2-like widths on a card; narrower in the CUDA simulation (the same tensor count and
  // chunking across tensors, a fraction of the elements).
  const std::vector<Shape> shapes = cuda::is_simulated() ? gpt2_shapes(32, 512, 64) : gpt2_shapes(256, 4096, 256);
  for (double ord : {2.0, kInf, 1.0}) {
    SCOPED_TRACE(ord);
    std::vector<Tensor> cpu = make_params(shapes, {DType::f32, DType::f32, DType::bf16}, Device::cpu(), 0.01);
    std::vector<Tensor> dev = copy_params(cpu, Device::cuda(0));
    const Tensor tc = optim::clip_grad_norm_(cpu, 1.0, ord);
    const Tensor td = optim::clip_grad_norm_(dev, 1.0, ord);
    EXPECT_EQ(td.device(), Device::cuda(0));
    EXPECT_TRUE(test::all_close(td.cpu(), tc, 1e-5, 0));
    for (size_t i = 0; i < cpu.size(); ++i) {
      if (cpu[i].grad().defined()) {
        EXPECT_TRUE(test::all_close(dev[i].grad().cpu().to(DType::f32), cpu[i].grad().to(DType::f32),
                                    cpu[i].grad().dtype() == DType::bf16 ? 8e-3 : 2e-5, 1e-9))
            << i;
      }
    }
  }
}
