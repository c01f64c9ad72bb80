// Gradients of the Llama ops: gradcheck in f64 (finite differences of the forward) on
// contiguous and strided inputs, the backward against PyTorch's (tests/fixtures/
// rope_swiglu_reference.txt), rotary_embedding's double backward (its VJP is itself a
// rotation), cos/sin as constants, swiglu's dtype promotion and autocast behaviour, and the
// fused swiglu backward refusing double backward.
#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;
using test::all_close;

namespace {

const char* kRef = "rope_swiglu_reference.txt";
Tensor ref(const std::string& name) { return test::load_fixture(kRef, name).tensor(); }

}  // namespace

TEST(RopeGrad, Gradcheck) {
  manual_seed(51);
  const auto tables = rope_cos_sin(12, 6, 10000.0, DType::f64);
  // A KV-cache step's positions 4 .. 4 + T.
  const Tensor c = tables.first.narrow(0, 4, 5), s = tables.second.narrow(0, 4, 5);
  Tensor x = randn({2, 5, 3, 6}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return rotary_embedding(in[0], c, s); }, {x}));
  // q as attention holds it, [B, H, T, D], handed over as the strided [B, T, H, D] view.
  Tensor q = randn({2, 3, 5, 6}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return rotary_embedding(in[0].transpose(1, 2), c, s);
  }, {q}));
  // Strided along D too: every other element of a wider head.
  Tensor w = randn({2, 5, 3, 12}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return rotary_embedding(in[0].slice(3, 1, 12, 2), c, s);
  }, {w}));
}

TEST(RopeGrad, DoubleBackward) {
  // g = d sum(rope(x) * v) / dx = R^T v (the recorded inverse rotation of v); then
  // d sum(g * w) / dv = R w, the forward rotation of w.
  manual_seed(52);
  const auto tables = rope_cos_sin(4, 4, 100.0, DType::f64);
  Tensor x = randn({1, 4, 2, 4}, DType::f64).requires_grad_();
  Tensor v = randn({1, 4, 2, 4}, DType::f64).requires_grad_();
  Tensor w = randn({1, 4, 2, 4}, DType::f64);
  Tensor y = rotary_embedding(x, tables.first, tables.second);
  Tensor g = autograd::grad({y.mul(v).sum()}, {x}, {}, true, true)[0];
  ASSERT_TRUE(g.requires_grad());
  Tensor dv = autograd::grad({g.mul(w).sum()}, {v})[0];
  EXPECT_TRUE(all_close(dv, rotary_embedding(w, tables.first, tables.second), 1e-13, 1e-14));
  EXPECT_FALSE(all_close(dv, w, 1e-3, 1e-3));  // the rotation is not the identity here
}

TEST(RopeGrad, MatchesTorch) {
  Tensor q = ref("rope.q").requires_grad_();
  const int64_t T = q.size(2);
  Tensor y = rotary_embedding(q.transpose(1, 2), ref("rope.cos").narrow(0, 3, T),
                              ref("rope.sin").narrow(0, 3, T));
  EXPECT_TRUE(all_close(y, ref("rope.y"), 1e-13, 1e-14));
  y.mul(ref("rope.gy")).sum().backward();
  EXPECT_TRUE(all_close(q.grad(), ref("rope.dq"), 1e-13, 1e-14));
}

TEST(RopeGrad, TablesAreConstants) {
  const auto tables = rope_cos_sin(3, 4);
  Tensor x = randn({1, 3, 2, 4}).requires_grad_();
  Tensor c = tables.first.clone().requires_grad_();
  EXPECT_EQ(test::message_of<NotImplementedError>([&] { rotary_embedding(x, c, tables.second); })
                .rfind("[rotary_embedding] no gradient flows to cos and sin", 0),
            0u);
  NoGradGuard ng;  // without recording, a table that requires grad is only read
  EXPECT_EQ(rotary_embedding(x, c, tables.second).sizes(), (Shape{1, 3, 2, 4}));
}

TEST(SwigluGrad, Gradcheck) {
  manual_seed(53);
  Tensor g = randn({4, 5}, DType::f64).mul(2.0).detach().requires_grad_();
  Tensor u = randn({4, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return swiglu(in[0], in[1]); }, {g, u}));
  // Strided: the two halves of one fused projection, and a transposed gate.
  Tensor h = randn({3, 8}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) {
    return swiglu(in[0].slice(1, 0, 4), in[0].slice(1, 4, 8));
  }, {h}));
  Tensor gt = randn({5, 4}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return swiglu(in[0].transpose(0, 1), in[1]); },
                        {gt, u}));
  // One input requiring grad at a time.
  Tensor uc = randn({4, 5}, DType::f64);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return swiglu(in[0], uc); }, {g}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return swiglu(uc, in[0]); }, {u}));
}

TEST(SwigluGrad, MatchesTorch) {
  Tensor gb = ref("swiglu.gate_base").requires_grad_();
  Tensor up = ref("swiglu.up").requires_grad_();
  Tensor y = swiglu(gb.transpose(0, 2), up);
  EXPECT_TRUE(all_close(y, ref("swiglu.y"), 1e-13, 1e-14));
  y.mul(ref("swiglu.gy")).sum().backward();
  EXPECT_TRUE(all_close(gb.grad(), ref("swiglu.dgate_base"), 1e-13, 1e-14));
  EXPECT_TRUE(all_close(up.grad(), ref("swiglu.dup"), 1e-13, 1e-14));
}

TEST(SwigluGrad, MixedDtypesPromote) {
  // As silu(gate) * up would: f32 gate and f64 up compute in f64; each gradient comes back in
  // its input's dtype.
  manual_seed(54);
  Tensor g = randn({3, 4}).requires_grad_();
  Tensor u = randn({3, 4}, DType::f64).requires_grad_();
  Tensor y = swiglu(g, u);
  EXPECT_EQ(y.dtype(), DType::f64);
  Tensor gd = g.detach().to(DType::f64);
  EXPECT_TRUE(all_close(y, silu(gd).mul(u.detach()), 1e-13, 1e-14));
  y.sum().backward();
  EXPECT_EQ(g.grad().dtype(), DType::f32);
  EXPECT_EQ(u.grad().dtype(), DType::f64);
  EXPECT_TRUE(all_close(u.grad(), silu(gd), 1e-13, 1e-14));
}

TEST(LlamaOpsGrad, AutocastKeepsTheInputDtype) {
  // Neither op has a row in the autocast policy: bf16 activations from autocast GEMMs stay
  // bf16 (with f32 rope tables), and f32 inputs stay f32.
  manual_seed(55);
  const auto tables = rope_cos_sin(3, 8);
  amp::autocast ac(Device::cpu(), DType::bf16);
  Tensor xh = randn({1, 3, 2, 8}).to(DType::bf16);
  EXPECT_EQ(rotary_embedding(xh, tables.first, tables.second).dtype(), DType::bf16);
  EXPECT_EQ(rotary_embedding(xh.to(DType::f32), tables.first, tables.second).dtype(), DType::f32);
  Tensor a = randn({2, 3}).to(DType::bf16), b = randn({2, 3}).to(DType::bf16);
  EXPECT_EQ(swiglu(a, b).dtype(), DType::bf16);
  EXPECT_EQ(swiglu(a.to(DType::f32), b.to(DType::f32)).dtype(), DType::f32);
}

TEST(SwigluGrad, DoubleBackwardThrows) {
  Tensor g = randn({4}, DType::f64).requires_grad_(), u = randn({4}, DType::f64).requires_grad_();
  TensorList gs = autograd::grad({swiglu(g, u).sum()}, {g}, {}, true, true);
  EXPECT_NE(test::message_of<NotImplementedError>([&] { gs[0].sum().backward(); })
                .find("[swiglu_backward] double backward"),
            std::string::npos);
}
