// Gradients of the differentiable scaled_dot_product_attention: gradcheck in f64 (finite
// differences of the fused forward, checking the fused backward), gradients through the
// autograd graph against the composite matmul + mask + softmax + matmul, the autocast
// policy (runs in the guard's low-precision dtype, gradients back in each input's dtype), and
// a clear error for double backward.
#include <cmath>
#include <limits>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {

Tensor composite_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
  const int64_t Tq = q.sizes()[2], Tk = k.sizes()[2];
  Tensor s = q.matmul(k.transpose(2, 3)).mul(1.0 / std::sqrt(double(q.sizes()[3])));
  if (causal) {
    std::vector<double> m(size_t(Tq * Tk), 0.0);
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t j = i + Tk - Tq + 1; j < Tk; ++j)
        m[size_t(i * Tk + j)] = -std::numeric_limits<double>::infinity();
    s = s + tensor<double>(m, {Tq, Tk}).to(s.dtype());
  }
  return s.softmax(3).matmul(v);
}

}  // namespace

TEST(AttentionGrad, GradcheckF64) {
  struct Case {
    int64_t Tq, Tk, D;
    bool causal;
  };
  for (const Case& c : {Case{5, 5, 3, true}, Case{5, 5, 3, false}, Case{2, 6, 4, true}, Case{1, 1, 2, true}}) {
    SCOPED_TRACE(str("Tq ", c.Tq, " Tk ", c.Tk, " D ", c.D, c.causal ? " causal" : ""));
    Generator gen(11);
    Tensor q = randn({1, 2, c.Tq, c.D}, DType::f64, &gen).requires_grad_(true);
    Tensor k = randn({1, 2, c.Tk, c.D}, DType::f64, &gen).requires_grad_(true);
    Tensor v = randn({1, 2, c.Tk, c.D}, DType::f64, &gen).requires_grad_(true);
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], c.causal); },
        {q, k, v}));
    // A custom scale too.
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], c.causal, 1.7); },
        {q, k, v}));
  }
}

TEST(AttentionGrad, MatchesCompositeThroughTheGraph) {
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Generator gen(12);
    Tensor x = randn({2, 67, 3, 2, 16}, DType::f64, &gen);  // [B, T, qkv, H, D]
    Tensor w = randn({2, 2, 67, 16}, DType::f64, &gen);
    TensorList fused_grads, comp_grads;
    for (bool fused : {true, false}) {
      Tensor xl = x.clone().requires_grad_(true);
      Tensor q = xl.select(2, 0).transpose(1, 2), k = xl.select(2, 1).transpose(1, 2),
             v = xl.select(2, 2).transpose(1, 2);
      Tensor y = fused ? nn::functional::scaled_dot_product_attention(q, k, v, causal)
                       : composite_attention(q, k, v, causal);
      (y * w).sum().backward();
      (fused ? fused_grads : comp_grads).push_back(xl.grad());
    }
    EXPECT_TRUE(test::all_close(fused_grads[0], comp_grads[0], 1e-10, 1e-11));
  }
}

TEST(AttentionGrad, AutocastRunsInLowPrecision) {
  Generator gen(13);
  Tensor q = randn({1, 2, 9, 16}, DType::f32, &gen).requires_grad_(true);
  Tensor k = randn({1, 2, 9, 16}, DType::f32, &gen).requires_grad_(true);
  Tensor v = randn({1, 2, 9, 16}, DType::f32, &gen).requires_grad_(true);
  Tensor y;
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    y = scaled_dot_product_attention(q, k, v, true);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  y.to(DType::f32).sum().backward();
  ASSERT_TRUE(q.grad().defined());
  EXPECT_EQ(q.grad().dtype(), DType::f32);
  // Against the f32 op: bf16 keeps 8 bits.
  Tensor ref = scaled_dot_product_attention(q.detach(), k.detach(), v.detach(), true);
  EXPECT_TRUE(test::all_close(y.to(DType::f32), ref, 3e-2, 3e-2));
}

TEST(AttentionGrad, DoubleBackwardThrows) {
  Tensor q = randn({1, 1, 3, 2}, DType::f64).requires_grad_(true);
  Tensor y = scaled_dot_product_attention(q, q, q, true).sum();
  TensorList g = autograd::grad({y}, {q}, {}, false, true);
  EXPECT_THROW(g[0].sum().backward(), NotImplementedError);
}

// ---- the packed op: qkv [B, T, 3C] -> y [B, T, C], one dqkv gradient ----

namespace {

// GPT's composite: split the heads by views, attend, merge the heads.
Tensor packed_composite(const Tensor& qkv, int64_t H, bool causal, bool fused) {
  const int64_t B = qkv.sizes()[0], T = qkv.sizes()[1], C = qkv.sizes()[2] / 3;
  Tensor x = qkv.view({B, T, 3, H, C / H});
  Tensor q = x.select(2, 0).transpose(1, 2), k = x.select(2, 1).transpose(1, 2),
         v = x.select(2, 2).transpose(1, 2);
  Tensor y = fused ? nn::functional::scaled_dot_product_attention(q, k, v, causal)
                   : composite_attention(q, k, v, causal);
  return y.transpose(1, 2).reshape({B, T, C});
}

}  // namespace

TEST(AttentionGrad, PackedGradcheckF64) {
  struct Case {
    int64_t T, H, D;
    bool causal;
  };
  for (const Case& c : {Case{5, 2, 3, true}, Case{5, 2, 3, false}, Case{1, 1, 2, true}, Case{4, 1, 4, false}}) {
    SCOPED_TRACE(str("T ", c.T, " H ", c.H, " D ", c.D, c.causal ? " causal" : ""));
    Generator gen(14);
    Tensor qkv = randn({2, c.T, 3 * c.H * c.D}, DType::f64, &gen).requires_grad_(true);
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) { return scaled_dot_product_attention_packed(in[0], c.H, c.causal); }, {qkv}));
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& in) { return scaled_dot_product_attention_packed(in[0], c.H, c.causal, 0.6); },
        {qkv}));
  }
}

// Forward and dqkv equal GPT's composite both with the fused unpacked op and with matmul +
// softmax (the select backwards' zero-filled [B, T, 3C] buffers summed by autograd).
TEST(AttentionGrad, PackedMatchesCompositeThroughTheGraph) {
  const int64_t B = 2, T = 67, H = 2, D = 16, C = H * D;
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    Generator gen(15);
    Tensor x = randn({B, T, 3 * C}, DType::f64, &gen);
    Tensor w = randn({B, T, C}, DType::f64, &gen);
    Tensor xp = x.clone().requires_grad_(true);
    Tensor yp = nn::functional::scaled_dot_product_attention_packed(xp, H, causal);
    ASSERT_EQ(yp.sizes(), (Shape{B, T, C}));
    EXPECT_TRUE(yp.is_contiguous());
    (yp * w).sum().backward();
    for (bool fused : {true, false}) {
      SCOPED_TRACE(fused ? "fused composite" : "matmul composite");
      Tensor xc = x.clone().requires_grad_(true);
      Tensor yc = packed_composite(xc, H, causal, fused);
      (yc * w).sum().backward();
      EXPECT_TRUE(test::all_close(yp, yc, 1e-11, 1e-12));
      EXPECT_TRUE(test::all_close(xp.grad(), xc.grad(), 1e-10, 1e-11));
    }
  }
}

TEST(AttentionGrad, PackedAutocastRunsInLowPrecision) {
  Generator gen(16);
  Tensor qkv = randn({1, 9, 3 * 32}, DType::f32, &gen).requires_grad_(true);
  Tensor y;
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    y = scaled_dot_product_attention_packed(qkv, 2, true);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  y.to(DType::f32).sum().backward();
  ASSERT_TRUE(qkv.grad().defined());
  EXPECT_EQ(qkv.grad().dtype(), DType::f32);
  Tensor ref = scaled_dot_product_attention_packed(qkv.detach(), 2, true);
  EXPECT_TRUE(test::all_close(y.to(DType::f32), ref, 3e-2, 3e-2));
}

TEST(AttentionGrad, PackedDoubleBackwardThrows) {
  Tensor qkv = randn({1, 3, 6}, DType::f64).requires_grad_(true);
  Tensor y = scaled_dot_product_attention_packed(qkv, 1, true).sum();
  TensorList g = autograd::grad({y}, {qkv}, {}, false, true);
  EXPECT_THROW(g[0].sum().backward(), NotImplementedError);
}
