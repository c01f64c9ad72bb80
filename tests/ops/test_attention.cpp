// The fused attention op (ops::scaled_dot_product_attention_forward / _backward) against the
// composite it replaces, matmul + mask + softmax + matmul, built from ember ops in f64 (its
// gradients from autograd through the composite). Causal and not, odd T (not a multiple of
// the block sizes), D = 16 and 64, Tq < Tk (KV-cache steps), non-contiguous inputs, the
// 16-bit dtypes against f32, bad inputs, and CUDA against the CPU (skips without a device).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include <ember/ops/attention.h>

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

// CUDA against the CPU from the same rounded inputs: forward, lse and backward, every dtype
// the CUDA kernels take, causal and not, odd T, D = 16, 64, 128 and 40 (the generic kernel).
TEST(AttentionCuda, ForwardAndBackwardMatchCpu) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  const Device gpu = Device::cuda(0);
  const Case cases[] = {{2, 3, 65, 65, 64, true},   {2, 3, 65, 65, 64, false}, {1, 2, 130, 130, 16, true},
                        {1, 2, 200, 200, 128, true}, {1, 1, 3, 70, 64, true},  {2, 2, 77, 77, 40, false},
                        {1, 1, 1, 1, 64, true},      {1, 2, 257, 257, 128, false}};
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    // Both sides compute in f32; what differs is the summation order (and, for 16-bit, the
    // P and dS operands rounded to 16 bits for the tensor cores on the GPU).
    const double tol = dt == DType::f32 ? 2e-5 : dt == DType::f16 ? 1e-2 : 5e-2;
    for (const Case& c : cases) {
      SCOPED_TRACE(str(dtype_name(dt), " ", label(c)));
      Inputs in = make_inputs(c, 6);
      Tensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt), g = in.g.to(dt);
      ops::AttentionForward cf = ops::scaled_dot_product_attention_forward(q, k, v, c.causal);
      ops::AttentionForward gf = ops::scaled_dot_product_attention_forward(q.to(gpu), k.to(gpu), v.to(gpu), c.causal);
      auto near = [&](const Tensor& a, const Tensor& r, double t) {
        Tensor r32 = r.to(DType::f32);
        return test::all_close(a.to(Device::cpu(), DType::f32), r32, t, t * std::max(1.0, max_abs(r32)));
      };
      EXPECT_TRUE(near(gf.out, cf.out, tol));
      EXPECT_TRUE(near(gf.lse, cf.lse, tol));
      ops::AttentionBackward cb = ops::scaled_dot_product_attention_backward(g, q, k, v, cf.out, cf.lse, c.causal);
      ops::AttentionBackward gb = ops::scaled_dot_product_attention_backward(
          g.to(gpu), q.to(gpu), k.to(gpu), v.to(gpu), gf.out, gf.lse, c.causal);
      EXPECT_TRUE(near(gb.dq, cb.dq, 2 * tol));
      EXPECT_TRUE(near(gb.dk, cb.dk, 2 * tol));
      EXPECT_TRUE(near(gb.dv, cb.dv, 2 * tol));
    }
    // A contiguous view at an odd storage offset (no 16-byte alignment): the generic path.
    Inputs in = make_inputs({1, 2, 70, 70, 64, true}, 7);
    Tensor flat = zeros({1 + 2 * 70 * 64}, DType::f64);
    flat.narrow(0, 1, 2 * 70 * 64).copy_(in.q.flatten());
    Tensor qo = flat.to(gpu, dt).narrow(0, 1, 2 * 70 * 64).view({1, 2, 70, 64});
    Tensor ref = ops::scaled_dot_product_attention_forward(in.q.to(dt), in.k.to(dt), in.v.to(dt), true).out;
    Tensor got = ops::scaled_dot_product_attention_forward(qo, in.k.to(gpu, dt), in.v.to(gpu, dt), true).out;
    EXPECT_TRUE(test::all_close(got.to(Device::cpu(), DType::f32), ref.to(DType::f32), tol, tol * 4));
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
