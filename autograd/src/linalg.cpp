// Differentiable matmul and linear: forward (one ops:: call) beside its VJP. The VJPs are
// written with differentiable ember ops, so double backward works.
#include "ember/ops/linalg.h"
#include "inplace.h"
#include "autocast_policy.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::record;
using autograd::save;

namespace {

// g @ b^T summed over the batch dims, for a 2-D a and a batched b ([..., K, N]): one GEMM
// [M, batch*N] @ [batch*N, K] instead of a batched product and a reduction.
Tensor matmul_grad_folded_lhs(const Tensor& g, const Tensor& b) {
  const int64_t r = g.dim();
  Shape to_front;  // [..., M, N] -> [M, ..., N]
  to_front.push_back(r - 2);
  for (int64_t d = 0; d < r - 2; ++d) to_front.push_back(d);
  to_front.push_back(r - 1);
  const int64_t M = g.size(-2), K = b.size(-2);
  Tensor g2 = reshape(permute(g, to_front), {M, -1});
  Tensor b2 = reshape(transpose(b, -1, -2), {-1, K});
  return matmul(g2, b2);
}

}  // namespace

// Note [matmul VJP]: with A, B the operands as matrices (a 1-D a is a row [1, K], a 1-D b a
// column [K, 1]) and G the gradient with those unit dims restored,
//   dA = G @ B^T and dB = A^T @ G, each summed over the batch dims its operand broadcast.
// When one operand is 2-D and the other batched, the batch is folded into the GEMM's inner
// dim instead, which needs no reduction.
Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::matmul, a, b))
      return matmul((*c)[0], (*c)[1]);
  return record("matmul", ops::matmul(a, b), {a, b}, [a = save(a), b = save(b)](const Tensor& g) -> TensorList {
    const Tensor& a0 = a.get();
    const Tensor& b0 = b.get();
    const Tensor A = a0.dim() == 1 ? unsqueeze(a0, 0) : a0;
    const Tensor B = b0.dim() == 1 ? unsqueeze(b0, 1) : b0;
    Tensor G = g;
    if (b0.dim() == 1) G = unsqueeze(G, -1);
    if (a0.dim() == 1) G = unsqueeze(G, G.dim() - 1);
    Tensor da, db;
    if (needs_input_grad(0)) {
      if (A.dim() == 2 && B.dim() > 2) da = matmul_grad_folded_lhs(G, B);
      else da = sum_to(matmul(G, transpose(B, -1, -2)), A.sizes());
      if (da.sizes() != a0.sizes()) da = reshape(da, a0.sizes());
    }
    if (needs_input_grad(1)) {
      if (B.dim() == 2 && A.dim() > 2) {
        const int64_t K = A.size(-1), N = G.size(-1);
        db = matmul(transpose(reshape(A, {-1, K}), 0, 1), reshape(G, {-1, N}));
      } else {
        db = sum_to(matmul(transpose(A, -1, -2), G), B.sizes());
      }
      if (db.sizes() != b0.sizes()) db = reshape(db, b0.sizes());
    }
    return {da, db};
  });
}

// Note [fused VJPs]: a VJP runs with grad mode on only under create_graph. Then its gradients
// must themselves be differentiable, so it is written with differentiable ops (the composite);
// otherwise (every ordinary backward) it calls the fused ops:: kernels, whose results carry
// no graph.

namespace {

// linear's parameter gradients, as the composite computes them (differentiable). `x` is
// read only for dw: a saved input is checked for in-place changes only when it is needed.
TensorList linear_param_grads_composite(const Tensor& g, const autograd::Saved& x, bool want_w, bool want_b) {
  const int64_t out = g.size(-1);
  Tensor dw, db;
  if (want_w) dw = matmul(transpose(reshape(g, {-1, out}), 0, 1), reshape(x.get(), {-1, x->size(-1)}));
  if (want_b) db = g.dim() == 1 ? g : sum(reshape(g, {-1, out}), {0});
  return {dw, db};
}

// linear's parameter gradients: one GEMM with the bias gradient fused in (Note [fused VJPs]).
TensorList linear_param_grads(const Tensor& g, const autograd::Saved& x, bool want_w, bool want_b) {
  if (GradMode::is_enabled() || !want_w) return linear_param_grads_composite(g, x, want_w, want_b);
  auto [dw, db] = ops::linear_weight_grad(g, x.get(), want_b);
  return {dw, db};
}

}  // namespace

// dx = g @ w, dw = g^T @ x over the flattened leading dims, db = g summed over them.
// An undefined bias is an input without an edge: its gradient is never asked for.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::linear, x, weight, bias))
      return linear((*c)[0], (*c)[1], (*c)[2]);
  return record("linear", ops::linear(x, weight, bias), {x, weight, bias},
                [x = save(x), w = save(weight)](const Tensor& g) -> TensorList {
                  Tensor dx;
                  if (needs_input_grad(0)) dx = matmul(g, w.get());
                  TensorList p = linear_param_grads(g, x, needs_input_grad(1), needs_input_grad(2));
                  return {dx, p[0], p[1]};
                });
}

namespace {

// gelu_tanh'(x) = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)),
// written with differentiable ops (the fused gelu_tanh_backward kernel has no double backward).
Tensor gelu_tanh_derivative(const Tensor& x) {
  constexpr double k = 0.79788456080286535588, c = 0.044715;
  const Tensor x2 = mul(x, x);
  const Tensor t = tanh(mul(x, x2 * c + 1.0) * k);
  return (t + 1.0) * 0.5 + mul(mul(x, (mul(t, t) * -1.0 + 1.0)), x2 * (3 * c * k) + k) * 0.5;
}

}  // namespace

// Note [gelu_mlp]: linear(gelu_tanh(linear(x, fc_w, fc_b)), proj_w, proj_b), with the
// pre-activation `pre` and the activation `h` kept from the forward (what the composite's
// gelu and second linear would save). Forward: pre and h from one GEMM (GELU_AUX_BIAS
// epilogue on CUDA), then the second linear. Backward (Note [fused VJPs]):
//   dproj_w, dproj_b = linear_weight_grad(g, h)                     (BGRADB)
//   dpre, dfc_b      = (g @ proj_w) * gelu'(pre), summed over rows   (DGELU_BGRAD)
//   dfc_w            = dpre^T x,   dx = dpre @ fc_w
Tensor gelu_mlp(const Tensor& x, const Tensor& fc_weight, const Tensor& fc_bias, const Tensor& proj_weight,
                const Tensor& proj_bias) {
  EMBER_OP_SCOPE("gelu_mlp");
  if (!fc_bias.defined() || !proj_bias.defined()) [[unlikely]]  // the epilogues need both biases
    return linear(gelu(linear(x, fc_weight, fc_bias), true), proj_weight, proj_bias);
  if (autocast::any_enabled()) [[unlikely]] {
    // linear's policy for both GEMMs (the table's row for linear: docs/amp.md).
    auto c1 = autograd::autocast_inputs(autograd::AutocastOp::linear, x, fc_weight, fc_bias);
    auto c2 = autograd::autocast_inputs(autograd::AutocastOp::linear, proj_weight, proj_bias);
    if (c1 || c2)
      return gelu_mlp(c1 ? (*c1)[0] : x, c1 ? (*c1)[1] : fc_weight, c1 ? (*c1)[2] : fc_bias,
                      c2 ? (*c2)[0] : proj_weight, c2 ? (*c2)[1] : proj_bias);
  }
  auto [h, pre] = ops::linear_gelu(x, fc_weight, fc_bias);
  Tensor y = ops::linear(h, proj_weight, proj_bias);
  return record(
      "gelu_mlp", std::move(y), {x, fc_weight, fc_bias, proj_weight, proj_bias},
      [x = save(x), fw = save(fc_weight), fb = save(fc_bias), pw = save(proj_weight), pre = save(pre),
       h = save(h)](const Tensor& g) -> TensorList {
        const bool want_x = needs_input_grad(0), want_fw = needs_input_grad(1), want_fb = needs_input_grad(2);
        const bool want_pw = needs_input_grad(3), want_pb = needs_input_grad(4);
        const bool want_pre = want_x || want_fw || want_fb;
        Tensor dx, dfw, dfb, dpw, dpb;
        if (GradMode::is_enabled()) {
          // create_graph: the composite's gradients, differentiable in every input (pre and h
          // are recomputed from the saved inputs, whose graphs they need).
          Tensor pre_g;
          if (want_pw || want_pre) pre_g = linear(x.get(), fw.get(), fb.get());
          TensorList p = linear_param_grads_composite(g, autograd::Saved(want_pw ? gelu(pre_g, true) : Tensor()),
                                                      want_pw, want_pb);
          dpw = p[0], dpb = p[1];
          if (want_pre) {
            const Tensor dpre = mul(matmul(g, pw.get()), gelu_tanh_derivative(pre_g));
            if (want_x) dx = matmul(dpre, fw.get());
            TensorList q = linear_param_grads_composite(dpre, x, want_fw, want_fb);
            dfw = q[0], dfb = q[1];
          }
          return {dx, dfw, dfb, dpw, dpb};
        }
        if (want_pw || want_pb) {
          TensorList p = linear_param_grads(g, h, want_pw, want_pb);
          dpw = p[0], dpb = p[1];
        }
        if (want_pre) {
          auto [dpre, dbias] = ops::linear_dgelu_bgrad(g, pw.get(), pre.get());
          if (want_fb) dfb = dbias;
          if (want_x) dx = ops::matmul(dpre, fw.get());
          if (want_fw) dfw = ops::linear_weight_grad(dpre, x.get(), false).first;
        }
        return {dx, dfw, dfb, dpw, dpb};
      });
}

}  // namespace ember
