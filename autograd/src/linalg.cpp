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

// dx = g @ w, dw = g^T @ x over the flattened leading dims, db = g summed over them.
// An undefined bias is an input without an edge: its gradient is never asked for.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::linear, x, weight, bias))
      return linear((*c)[0], (*c)[1], (*c)[2]);
  return record("linear", ops::linear(x, weight, bias), {x, weight, bias},
                [x = save(x), w = save(weight)](const Tensor& g) -> TensorList {
                  const int64_t out = w->size(0), in = w->size(1);
                  Tensor dx, dw, db;
                  if (needs_input_grad(0)) dx = matmul(g, w.get());
                  if (needs_input_grad(1))
                    dw = matmul(transpose(reshape(g, {-1, out}), 0, 1), reshape(x.get(), {-1, in}));
                  if (needs_input_grad(2)) db = g.dim() == 1 ? g : sum(reshape(g, {-1, out}), {0});
                  return {dx, dw, db};
                });
}

}  // namespace ember
