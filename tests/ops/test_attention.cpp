// The fused attention op (ops::scaled_dot_product_attention_forward / _backward) against the
// composite it replaces, matmul + mask + softmax + matmul, built from ember ops in f64 (its
// gradients from autograd through the composite). Causal and not, odd T (not a multiple of
// the block sizes), D = 16 and 64, Tq < Tk (KV-cache steps), non-contiguous inputs, the
// 16-bit dtypes against f32, bad inputs, and CUDA against the CPU (skips without a device).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <ember/ops/attention.h>

#include "support/attention_check.h"
#include "support/test_support.h"

using namespace ember;

namespace {

// -inf above the causal diagonal (key j hidden from query i when j > i + Tk - Tq), else 0.
Tensor causal_bias(int64_t Tq, int64_t Tk, DType dt, Device dev) {
  std::vector<double> m(size_t(Tq * Tk), 0.0);
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j)
      if (j > i + Tk - Tq) m[size_t(i * Tk + j)] = -std::numeric_limits<double>::infinity();
  return tensor<double>(m, {Tq, Tk}).to(dev, dt);
}

Tensor composite_scores(const Tensor& q, const Tensor& k, bool causal, double scale) {
  Tensor s = q.matmul(k.transpose(2, 3)).mul(scale);
  if (causal) s = s + causal_bias(q.sizes()[2], k.sizes()[2], s.dtype(), s.device());
  return s;
}

Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale) {
  return composite_scores(q, k, causal, scale).softmax(3).matmul(v);
}

// log sum exp over the last dim, max-subtracted, in the composite.
Tensor composite_lse(const Tensor& q, const Tensor& k, bool causal, double scale) {
  Tensor s = composite_scores(q, k, causal, scale);
  Tensor m = amax(s, {3}, true);
  return (s - m).exp().sum({3}, true).log().add(m).squeeze(3);
}

struct Case {
  int64_t B, H, Tq, Tk, D;
  bool causal;
};
const Case kCases[] = {
    {1, 1, 1, 1, 16, false}, {1, 1, 1, 1, 16, true},    {2, 3, 7, 7, 16, true},
    {2, 2, 65, 65, 64, true}, {2, 2, 65, 65, 64, false}, {1, 2, 130, 130, 16, true},
    {1, 1, 3, 70, 16, true},  {1, 2, 5, 131, 64, false}, {1, 1, 1, 67, 64, true},
    {1, 1, 129, 129, 24, true}};

std::string label(const Case& c) {
  return str("B", c.B, " H", c.H, " Tq", c.Tq, " Tk", c.Tk, " D", c.D, c.causal ? " causal" : "");
}

struct Inputs {
  Tensor q, k, v, g;
};
Inputs make_inputs(const Case& c, uint64_t seed) {
  Generator gen(seed);
  return {randn({c.B, c.H, c.Tq, c.D}, DType::f64, &gen), randn({c.B, c.H, c.Tk, c.D}, DType::f64, &gen),
          randn({c.B, c.H, c.Tk, c.D}, DType::f64, &gen), randn({c.B, c.H, c.Tq, c.D}, DType::f64, &gen)};
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (double x : t.to_vector<double>()) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST(Attention, ForwardAndLseMatchCompositeInF64) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    Inputs in = make_inputs(c, 1);
    // Scaled-up scores exercise the online max; a custom scale is honoured.
    for (double scale : {1.0 / std::sqrt(double(c.D)), 0.9}) {
      ops::AttentionForward f = ops::scaled_dot_product_attention_forward(
          in.q, in.k, in.v, c.causal, scale == 0.9 ? std::optional<double>(0.9) : std::nullopt);
      EXPECT_EQ(f.out.sizes(), in.q.sizes());
      EXPECT_EQ(f.lse.dtype(), DType::f64);
      EXPECT_TRUE(test::all_close(f.out, composite(in.q, in.k, in.v, c.causal, scale), 1e-11, 1e-12));
      EXPECT_TRUE(test::all_close(f.lse, composite_lse(in.q, in.k, c.causal, scale), 1e-11, 1e-12));
    }
  }
}

TEST(Attention, BackwardMatchesCompositeGradientsInF64) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    Inputs in = make_inputs(c, 2);
    const double scale = 1.0 / std::sqrt(double(c.D));
    ops::AttentionForward f = ops::scaled_dot_product_attention_forward(in.q, in.k, in.v, c.causal);
    ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(
        in.g, in.q, in.k, in.v, f.out, f.lse, c.causal);
    Tensor q = in.q.clone().requires_grad_(true), k = in.k.clone().requires_grad_(true),
           v = in.v.clone().requires_grad_(true);
    composite(q, k, v, c.causal, scale).backward(in.g);
    EXPECT_TRUE(test::all_close(b.dq, q.grad(), 1e-10, 1e-11));
    EXPECT_TRUE(test::all_close(b.dk, k.grad(), 1e-10, 1e-11));
    EXPECT_TRUE(test::all_close(b.dv, v.grad(), 1e-10, 1e-11));
  }
}

// Causal rows see only earlier keys: changing a later key or value leaves earlier outputs
// bit-identical (an independent check of the mask, not through the composite).
TEST(Attention, CausalOutputsIgnoreLaterKeys) {
  Inputs in = make_inputs({1, 2, 70, 70, 16, true}, 3);
  Tensor out1 = ops::scaled_dot_product_attention_forward(in.q, in.k, in.v, true).out;
  Tensor k2 = in.k.clone(), v2 = in.v.clone();
  k2.narrow(2, 40, 30).mul_(5.0);
  v2.narrow(2, 40, 30).add_(1.0);
  Tensor out2 = ops::scaled_dot_product_attention_forward(in.q, k2, v2, true).out;
  EXPECT_TRUE(test::all_close(out2.narrow(2, 0, 40), out1.narrow(2, 0, 40), 0, 0));
  EXPECT_GT(max_abs(out2.narrow(2, 40, 30) - out1.narrow(2, 40, 30)), 1e-3);
}

// The GPT layout: q, k, v as transposed views of [B, T, H, D] (non-contiguous).
TEST(Attention, NonContiguousInputs) {
  Generator gen(4);
  Tensor qkv = randn({2, 33, 3, 4, 16}, DType::f64, &gen);  // [B, T, 3, H, D]
  Tensor q = qkv.select(2, 0).transpose(1, 2), k = qkv.select(2, 1).transpose(1, 2),
         v = qkv.select(2, 2).transpose(1, 2);
  ASSERT_FALSE(q.is_contiguous());
  Tensor g = randn({2, 4, 33, 16}, DType::f64, &gen).transpose(2, 3).contiguous().transpose(2, 3);
  ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, true);
  EXPECT_TRUE(test::all_close(f.out, composite(q.contiguous(), k.contiguous(), v.contiguous(), true, 0.25), 1e-11, 1e-12));
  ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(g, q, k, v, f.out, f.lse, true);
  ops::AttentionBackward bc = ops::scaled_dot_product_attention_backward(
      g.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), f.out, f.lse, true);
  EXPECT_TRUE(test::all_close(b.dq, bc.dq, 0, 0));
  EXPECT_TRUE(test::all_close(b.dk, bc.dk, 0, 0));
  EXPECT_TRUE(test::all_close(b.dv, bc.dv, 0, 0));
}

// f32 against f64; f16/bf16 (computed in f32, rounded once on store) against f32 from the same
// rounded inputs. Tolerances relative to the largest |value|: f32 1e-5, f16 2e-3, bf16 1.6e-2
// (a few units in the last place of the output; gradients get twice that).
TEST(Attention, LowPrecisionDtypesAgainstF32) {
  struct Tol {
    DType dt;
    DType ref;
    double tol;
  };
  for (const Tol& t : {Tol{DType::f32, DType::f64, 1e-5}, Tol{DType::f16, DType::f32, 2e-3},
                       Tol{DType::bf16, DType::f32, 1.6e-2}}) {
    for (const Case& c : {Case{2, 2, 65, 65, 64, true}, Case{1, 3, 37, 37, 16, false}, Case{1, 1, 4, 70, 16, true}}) {
      SCOPED_TRACE(str(dtype_name(t.dt), " ", label(c)));
      Inputs in = make_inputs(c, 5);
      Tensor q = in.q.to(t.dt), k = in.k.to(t.dt), v = in.v.to(t.dt), g = in.g.to(t.dt);
      ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, c.causal);
      EXPECT_EQ(f.out.dtype(), t.dt);
      EXPECT_EQ(f.lse.dtype(), DType::f32);
      ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(g, q, k, v, f.out, f.lse, c.causal);
      auto up = [&](const Tensor& x) { return x.to(t.ref); };
      ops::AttentionForward fr = ops::scaled_dot_product_attention_forward(up(q), up(k), up(v), c.causal);
      ops::AttentionBackward br = ops::scaled_dot_product_attention_backward(
          up(g), up(q), up(k), up(v), fr.out, fr.lse, c.causal);
      auto near = [&](const Tensor& a, const Tensor& r, double tol) {
        return test::all_close(a.to(t.ref), r, tol, tol * max_abs(r));
      };
      EXPECT_TRUE(near(f.out, fr.out, t.tol));
      EXPECT_TRUE(near(f.lse, fr.lse.to(DType::f32), t.tol));
      EXPECT_TRUE(near(b.dq, br.dq, 2 * t.tol));
      EXPECT_TRUE(near(b.dk, br.dk, 2 * t.tol));
      EXPECT_TRUE(near(b.dv, br.dv, 2 * t.tol));
    }
  }
}

TEST(Attention, DegenerateAndBadInputs) {
  Tensor q = randn({2, 0, 5, 8}, DType::f32);
  EXPECT_EQ(ops::scaled_dot_product_attention_forward(q, q, q, true).out.sizes(), q.sizes());
  Tensor q0 = randn({1, 1, 0, 8}, DType::f32), k = randn({1, 1, 4, 8}, DType::f32);
  ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q0, k, k, false);
  ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(q0, q0, k, k, f.out, f.lse, false);
  EXPECT_TRUE(test::all_close(b.dk, zeros({1, 1, 4, 8}), 0, 0));

  auto msg = [](auto f) { return test::message_of<Error>(f); };
  Tensor a = randn({1, 2, 4, 8}, DType::f32);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_forward(a.flatten(0, 1), a, a, false); })
                .find("[scaled_dot_product_attention] expects [B, H, T, D]"), std::string::npos);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_forward(a, randn({1, 2, 4, 4}), a, false); })
                .find("must agree"), std::string::npos);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_forward(a, a, a.to(DType::f64), false); })
                .find("share a dtype"), std::string::npos);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_forward(randn({1, 2, 5, 8}), a, a, true); })
                .find("Tq <= Tk"), std::string::npos);
  EXPECT_THROW(ops::scaled_dot_product_attention_forward(a.to(DType::i64), a.to(DType::i64), a.to(DType::i64), false),
               DTypeError);
}

// ---- CUDA against an f64 reference, with tolerances derived from the rounding ----

// The check itself must be able to fail: a result 5% off is refused in every 16-bit case the
// CUDA test uses, as is one element off by 50%. (Runs on every machine.)
TEST(AttentionBudget, RefusesAFivePercentErrorInSixteenBitDtypes) {
  Inputs in = make_inputs({1, 2, 257, 257, 128, false}, 8);
  ops::AttentionForward f = ops::scaled_dot_product_attention_forward(in.q, in.k, in.v, false);
  ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(in.g, in.q, in.k, in.v, f.out, f.lse, false);
  for (DType dt : {DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    for (const Tensor& r : {f.out, b.dq, b.dk, b.dv}) {
      const double budget = attention_budget(dt, 257);
      EXPECT_LT(budget, 0.0125);
      EXPECT_TRUE(within_budget(r.to(dt), r, budget)) << "the rounding alone is inside the budget";
      EXPECT_FALSE(within_budget(r * 1.05, r, budget));
      EXPECT_FALSE(within_budget(r * 0.95, r, budget));
      Tensor one_off = r.clone();
      one_off.view({-1}).narrow(0, 1000, 1).mul_(1.5);
      EXPECT_FALSE(within_budget(one_off, r, budget));
    }
  }
  EXPECT_FALSE(within_budget(f.out * (1 + 1e-4), f.out, attention_budget(DType::f32, 257)));
}

// CUDA from inputs rounded to each dtype against the f64 composite of the same rounded inputs:
// forward, lse and backward, causal and not, odd T, D = 16, 64, 128 and 40 (the generic
// kernel). The budget's n is the longest reduction of the pass: Tk keys for out and dq, Tq
// queries for dk and dv, D for the scores.
TEST(AttentionCuda, ForwardAndBackwardMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const Case cases[] = {{2, 3, 65, 65, 64, true},   {2, 3, 65, 65, 64, false}, {1, 2, 130, 130, 16, true},
                        {1, 2, 200, 200, 128, true}, {1, 1, 3, 70, 64, true},  {2, 2, 77, 77, 40, false},
                        {1, 1, 1, 1, 64, true},      {1, 2, 257, 257, 128, false}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(str(dtype_name(dt), " ", label(c)));
      Inputs in = make_inputs(c, 6);
      // The rounded inputs, and the same values in f64 for the reference.
      Tensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt), g = in.g.to(dt);
      Tensor q64 = q.to(DType::f64), k64 = k.to(DType::f64), v64 = v.to(DType::f64), g64 = g.to(DType::f64);
      ops::AttentionForward rf = ops::scaled_dot_product_attention_forward(q64, k64, v64, c.causal);
      ops::AttentionBackward rb = ops::scaled_dot_product_attention_backward(g64, q64, k64, v64, rf.out, rf.lse, c.causal);
      ops::AttentionForward gf = ops::scaled_dot_product_attention_forward(q.to(gpu), k.to(gpu), v.to(gpu), c.causal);
      EXPECT_EQ(gf.out.dtype(), dt);
      const int64_t n = std::max({c.Tq, c.Tk, c.D});
      const double budget = attention_budget(dt, n);
      EXPECT_TRUE(within_budget(gf.out, rf.out, budget)) << "out";
      EXPECT_TRUE(within_budget(gf.lse, rf.lse, budget)) << "lse";
      ops::AttentionBackward gb = ops::scaled_dot_product_attention_backward(
          g.to(gpu), q.to(gpu), k.to(gpu), v.to(gpu), gf.out, gf.lse, c.causal);
      // The backward reads the rounded forward output (D = rowsum(dO * O)): one more rounding.
      const double bwd = budget + (dt == DType::f32 ? 0.0 : unit_roundoff(dt));
      // With one key dq = dk = 0: dP - D cancels terms of about sqrt(D) (unit-normal inputs).
      const double zero_scale = std::sqrt(double(c.D));
      const AttentionTermScales terms = attention_term_scales(q64, k64, v64, g64, c.causal);
      EXPECT_TRUE(within_budget(gb.dq, rb.dq, bwd, zero_scale, terms.dq)) << "dq";
      EXPECT_TRUE(within_budget(gb.dk, rb.dk, bwd, zero_scale, terms.dk)) << "dk";
      EXPECT_TRUE(within_budget(gb.dv, rb.dv, bwd)) << "dv";
    }
    // A contiguous view at an odd storage offset (no 16-byte alignment): the generic path.
    Inputs in = make_inputs({1, 2, 70, 70, 64, true}, 7);
    Tensor flat = zeros({1 + 2 * 70 * 64}, DType::f64);
    flat.narrow(0, 1, 2 * 70 * 64).copy_(in.q.flatten());
    Tensor qo = flat.to(gpu, dt).narrow(0, 1, 2 * 70 * 64).view({1, 2, 70, 64});
    Tensor q64 = in.q.to(dt).to(DType::f64), k64 = in.k.to(dt).to(DType::f64), v64 = in.v.to(dt).to(DType::f64);
    Tensor ref = ops::scaled_dot_product_attention_forward(q64, k64, v64, true).out;
    Tensor got = ops::scaled_dot_product_attention_forward(qo, in.k.to(gpu, dt), in.v.to(gpu, dt), true).out;
    EXPECT_TRUE(within_budget(got, ref, attention_budget(dt, 70))) << "odd offset";
  }
}

// Not a correctness test: the fused CPU op against the composite, forward + backward
// (run with --gtest_also_run_disabled_tests --gtest_filter=*AttentionSpeed*).
TEST(Attention, DISABLED_AttentionSpeedVsComposite) {
  const int64_t B = 4, H = 12, T = 256, D = 64;
  Tensor q = randn({B, H, T, D}).requires_grad_(true), k = randn({B, H, T, D}).requires_grad_(true),
         v = randn({B, H, T, D}).requires_grad_(true), g = randn({B, H, T, D});
  auto time = [&](auto&& fn) {
    fn();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;
  };
  const double fused_f = time([&] { NoGradGuard ng; scaled_dot_product_attention(q, k, v, true); });
  const double comp_f = time([&] { NoGradGuard ng; composite(q, k, v, true, 0.125); });
  const double fused_fb = time([&] { scaled_dot_product_attention(q, k, v, true).backward(g); });
  const double comp_fb = time([&] { composite(q, k, v, true, 0.125).backward(g); });
  std::printf("B4 H12 T256 D64 causal f32: forward fused %.2f ms composite %.2f ms (x%.2f); "
              "fwd+bwd fused %.2f ms composite %.2f ms (x%.2f)\n",
              fused_f * 1e3, comp_f * 1e3, comp_f / fused_f, fused_fb * 1e3, comp_fb * 1e3, comp_fb / fused_fb);
}

// ---- strided operands (Note [attention strided operands]) and the packed [B, T, 3C] op ----

namespace {

// Forward and backward of the same op on strided views and on contiguous copies of them.
struct FwdBwd {
  ops::AttentionForward f;
  ops::AttentionBackward b;
};
FwdBwd run_both(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, bool causal) {
  FwdBwd r;
  r.f = ops::scaled_dot_product_attention_forward(q, k, v, causal);
  r.b = ops::scaled_dot_product_attention_backward(g, q, k, v, r.f.out, r.f.lse, causal);
  return r;
}

// Splits qkv [B, T, 3C] into heads as GPT's composite does: [B, H, T, D] each, contiguous.
TensorList split_heads(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.sizes()[0], T = qkv.sizes()[1], C = qkv.sizes()[2] / 3;
  Tensor x = qkv.contiguous().view({B, T, 3, H, C / H});
  return {x.select(2, 0).transpose(1, 2).contiguous(), x.select(2, 1).transpose(1, 2).contiguous(),
          x.select(2, 2).transpose(1, 2).contiguous()};
}
// [B, H, T, D] -> [B, T, H * D].
Tensor merge_heads(const Tensor& y) {
  return y.transpose(1, 2).contiguous().view({y.sizes()[0], y.sizes()[2], y.sizes()[1] * y.sizes()[3]});
}
// The layouts a packed qkv [B, T, W] may come in: contiguous; a slice of a wider row (row
// stride W + 5, storage offset 2: nothing aligned); a transposed buffer whose last dim is not
// unit-stride (the front copies it).
Tensor packed_layout(const Tensor& x, int layout) {
  const int64_t B = x.sizes()[0], T = x.sizes()[1], W = x.sizes()[2];
  if (layout == 0) return x.contiguous();
  if (layout == 1) {
    Tensor wide = zeros({B, T, W + 5}, TensorOptions(x.dtype()).device(x.device()));
    wide.narrow(2, 2, W).copy_(x);
    return wide.narrow(2, 2, W);
  }
  return x.transpose(1, 2).contiguous().transpose(1, 2);
}

}  // namespace

// q, k, v and the output gradient as views a model produces (transposed out of [B, T, H, D],
// sliced in T and in a padded D, broadcast over heads by expand, permuted from [T, B, H, D],
// and a gradient whose last dim is not unit-stride): the forward and the gradients equal those
// of contiguous copies. The kernels read the views in place, so this fails if a driver
// ignores any stride. f64 and f32 (read in place) and bf16 (gathered to f32 through strides).
TEST(Attention, StridedOperandsMatchContiguousCopies) {
  const int64_t B = 2, H = 3, T = 37, D = 16;
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (bool causal : {true, false}) {
      SCOPED_TRACE(str(dtype_name(dt), causal ? " causal" : ""));
      Generator gen(21);
      Tensor q = randn({B, T + 3, H, D + 5}, DType::f64, &gen).to(dt).narrow(1, 1, T).narrow(3, 2, D).transpose(1, 2);
      Tensor k = randn({B, 1, T, D}, DType::f64, &gen).to(dt).expand({B, H, T, D});
      Tensor v = randn({T, B, H, D}, DType::f64, &gen).to(dt).permute({1, 2, 0, 3});
      Tensor g = randn({B, T, H, D + 2}, DType::f64, &gen).to(dt).narrow(3, 0, D).transpose(1, 2);
      Tensor gt = randn({B, H, D, T}, DType::f64, &gen).to(dt).transpose(2, 3);  // stride(3) = T
      ASSERT_EQ(q.strides()[3], 1);
      ASSERT_EQ(k.strides()[1], 0);
      ASSERT_FALSE(q.is_contiguous() || v.is_contiguous() || g.is_contiguous());
      const double tol = dt == DType::f64 ? 1e-13 : dt == DType::f32 ? 1e-6 : 0.0;
      for (const Tensor& grad : {g, gt}) {
        FwdBwd s = run_both(q, k, v, grad, causal);
        FwdBwd c = run_both(q.contiguous(), k.contiguous(), v.contiguous(), grad.contiguous(), causal);
        EXPECT_TRUE(test::all_close(s.f.out, c.f.out, tol, tol));
        EXPECT_TRUE(test::all_close(s.f.lse, c.f.lse, tol, tol));
        EXPECT_TRUE(test::all_close(s.b.dq, c.b.dq, tol, tol));
        EXPECT_TRUE(test::all_close(s.b.dk, c.b.dk, tol, tol));
        EXPECT_TRUE(test::all_close(s.b.dv, c.b.dv, tol, tol));
      }
    }
  }
}

// The packed op against the f64 composite it replaces (split heads, matmul + mask + softmax +
// matmul, merge heads; dqkv from autograd through select, transpose and contiguous), for
// every qkv layout and a gradient sliced out of a wider buffer.
TEST(Attention, PackedMatchesComposite) {
  struct PCase {
    int64_t B, T, H, D;
    bool causal;
  };
  for (const PCase& c : {PCase{2, 37, 3, 16, true}, PCase{2, 37, 3, 16, false}, PCase{1, 70, 2, 64, true},
                         PCase{1, 1, 1, 8, true}, PCase{2, 65, 2, 24, false}}) {
    for (int layout : {0, 1, 2}) {
      SCOPED_TRACE(str("B", c.B, " T", c.T, " H", c.H, " D", c.D, c.causal ? " causal" : "", " layout ", layout));
      const int64_t C = c.H * c.D;
      Generator gen(22);
      Tensor x = randn({c.B, c.T, 3 * C}, DType::f64, &gen);
      Tensor gwide = randn({c.B, c.T, C + 3}, DType::f64, &gen);
      Tensor g = gwide.narrow(2, 1, C);  // row stride C + 3
      Tensor qkv = packed_layout(x, layout);
      const double scale = 1.0 / std::sqrt(double(c.D));

      ops::AttentionForward f = ops::scaled_dot_product_attention_packed_forward(qkv, c.H, c.causal);
      ASSERT_EQ(f.out.sizes(), (Shape{c.B, c.T, C}));
      EXPECT_TRUE(f.out.is_contiguous());
      EXPECT_EQ(f.lse.sizes(), (Shape{c.B, c.H, c.T}));
      Tensor dqkv = ops::scaled_dot_product_attention_packed_backward(g, qkv, f.out, f.lse, c.H, c.causal);
      ASSERT_EQ(dqkv.sizes(), x.sizes());
      EXPECT_TRUE(dqkv.is_contiguous());

      Tensor xl = x.clone().requires_grad_(true);
      TensorList h = split_heads(xl, c.H);
      Tensor y = merge_heads(composite(h[0], h[1], h[2], c.causal, scale));
      y.backward(g.contiguous());
      EXPECT_TRUE(test::all_close(f.out, y.detach(), 1e-11, 1e-12));
      EXPECT_TRUE(test::all_close(f.lse, composite_lse(h[0].detach(), h[1].detach(), c.causal, scale), 1e-11, 1e-12));
      EXPECT_TRUE(test::all_close(dqkv, xl.grad(), 1e-10, 1e-11));
    }
  }
}

TEST(Attention, PackedBadInputs) {
  auto msg = [](auto f) { return test::message_of<Error>(f); };
  Tensor x = randn({2, 5, 24}, DType::f32);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_packed_forward(x, 5, true); })
                .find("[scaled_dot_product_attention_packed] the last dim of qkv"), std::string::npos);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_packed_forward(x.view({10, 24}), 2, true); })
                .find("expects qkv [B, T, 3 * C]"), std::string::npos);
  EXPECT_THROW(ops::scaled_dot_product_attention_packed_forward(x, 0, true), ValueError);
  ops::AttentionForward f = ops::scaled_dot_product_attention_packed_forward(x, 2, true);
  EXPECT_NE(msg([&] { ops::scaled_dot_product_attention_packed_backward(f.out.narrow(1, 0, 4), x, f.out, f.lse, 2, true); })
                .find("[scaled_dot_product_attention_packed_backward] gradient"), std::string::npos);
  // No tokens: empty results, no kernel.
  Tensor e = randn({2, 0, 24}, DType::f32);
  ops::AttentionForward fe = ops::scaled_dot_product_attention_packed_forward(e, 2, true);
  EXPECT_EQ(fe.out.sizes(), (Shape{2, 0, 8}));
  EXPECT_EQ(ops::scaled_dot_product_attention_packed_backward(fe.out, e, fe.out, fe.lse, 2, true).sizes(), e.sizes());
}

// CUDA packed op against the f64 CPU op from the same rounded inputs (the CPU op equals the
// composite above): bf16 and f32, T not a multiple of 64, D = 64, 128 and 32, causal and not;
// qkv contiguous (aligned: the tensor-core paths) and sliced out of rows of odd pitch at an odd
// offset (no 16-byte alignment: the generic kernels through their strides).
TEST(AttentionCuda, PackedMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  struct PCase {
    int64_t B, T, H, D;
    bool causal;
  };
  for (DType dt : {DType::bf16, DType::f32}) {
    for (const PCase& c : {PCase{2, 100, 3, 64, true}, PCase{1, 257, 2, 128, false}, PCase{2, 77, 4, 32, true},
                           PCase{1, 130, 2, 64, false}, PCase{1, 200, 2, 128, true}}) {
      for (int layout : {0, 1}) {
        SCOPED_TRACE(str(dtype_name(dt), " B", c.B, " T", c.T, " H", c.H, " D", c.D, c.causal ? " causal" : "",
                         " layout ", layout));
        const int64_t C = c.H * c.D;
        Generator gen(23);
        Tensor x = randn({c.B, c.T, 3 * C}, DType::f64, &gen).to(dt);
        Tensor g = randn({c.B, c.T, C}, DType::f64, &gen).to(dt);
        Tensor x64 = x.to(DType::f64), g64 = g.to(DType::f64);
        ops::AttentionForward rf = ops::scaled_dot_product_attention_packed_forward(x64, c.H, c.causal);
        Tensor rd = ops::scaled_dot_product_attention_packed_backward(g64, x64, rf.out, rf.lse, c.H, c.causal);
        Tensor xg = packed_layout(x.to(gpu), layout);
        ASSERT_TRUE(xg.device().is_cuda());
        ops::AttentionForward gf = ops::scaled_dot_product_attention_packed_forward(xg, c.H, c.causal);
        EXPECT_EQ(gf.out.dtype(), dt);
        const double budget = attention_budget(dt, std::max(c.T, c.D));
        EXPECT_TRUE(within_budget(gf.out, rf.out, budget)) << "y";
        EXPECT_TRUE(within_budget(gf.lse, rf.lse, budget)) << "lse";
        Tensor gd = ops::scaled_dot_product_attention_packed_backward(g.to(gpu), xg, gf.out, gf.lse, c.H, c.causal);
        const double bwd = budget + (dt == DType::f32 ? 0.0 : unit_roundoff(dt));
        EXPECT_TRUE(within_budget(gd, rd, bwd, std::sqrt(double(c.D)))) << "dqkv";
      }
    }
  }
}

// Strided q, k, v, grad on the GPU (the views of the CPU test above, D = 64 so that the
// aligned ones may take the tensor-core paths) equal the same op on contiguous copies.
TEST(AttentionCuda, StridedOperandsMatchContiguousCopies) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t B = 2, H = 3, T = 77, D = 64;
  for (DType dt : {DType::bf16, DType::f32}) {
    for (int64_t pad : {0, 8, 5}) {  // row pitches D, D + 8 (aligned) and D + 5 (not)
      SCOPED_TRACE(str(dtype_name(dt), " pad ", pad));
      Generator gen(24);
      Tensor q = randn({B, T, H, D + pad}, DType::f64, &gen).to(gpu, dt).narrow(3, 0, D).transpose(1, 2);
      Tensor k = randn({B, 1, T, D}, DType::f64, &gen).to(gpu, dt).expand({B, H, T, D});
      Tensor v = randn({T, B, H, D}, DType::f64, &gen).to(gpu, dt).permute({1, 2, 0, 3});
      Tensor g = randn({B, T, H, D + pad}, DType::f64, &gen).to(gpu, dt).narrow(3, 0, D).transpose(1, 2);
      FwdBwd s = run_both(q, k, v, g, true);
      FwdBwd c = run_both(q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), true);
      const double budget = attention_budget(dt, T);
      EXPECT_TRUE(within_budget(s.f.out, c.f.out, budget)) << "out";
      EXPECT_TRUE(within_budget(s.b.dq, c.b.dq, 2 * budget)) << "dq";
      EXPECT_TRUE(within_budget(s.b.dk, c.b.dk, 2 * budget)) << "dk";
      EXPECT_TRUE(within_budget(s.b.dv, c.b.dv, 2 * budget)) << "dv";
    }
  }
}
