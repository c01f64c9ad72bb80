// Front of the attention family: validation, the default scale, contiguous copies of strided
// inputs, output allocation, and the degenerate sizes (no batch, no queries), so the drivers
// only see the canonical geometry of ops/kernels/attention.h.
#include "ember/ops/attention.h"

#include <cmath>

#include "ember/ops/elementwise.h"
#include "ember/ops/nn.h"
#include "kernels/attention.h"

namespace ember::ops {

namespace {

struct Geometry {
  int64_t B, H, Tq, Tk, D;
  double scale;
};

Geometry check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                      bool causal, std::optional<double> scale) {
  detail::check_defined(op, q, "query");
  detail::check_defined(op, k, "key");
  detail::check_defined(op, v, "value");
  detail::check_same_device(op, q, k);
  detail::check_same_device(op, q, v);
  EMBER_CHECK(is_floating(q.dtype()), DTypeError, "[", op,
              "] expects floating-point inputs, got ", q.dtype());
  EMBER_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError, "[", op,
              "] query, key and value must share a dtype, got ", q.dtype(), ", ", k.dtype(),
              " and ", v.dtype());
  EMBER_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, ShapeError, "[", op,
              "] expects [B, H, T, D] query, key and value, got shapes ", q.sizes(), ", ",
              k.sizes(), " and ", v.sizes());
  const Shape& qs = q.sizes();
  const Shape& ks = k.sizes();
  EMBER_CHECK(ks[0] == qs[0] && ks[1] == qs[1] && ks[3] == qs[3] && v.sizes() == ks, ShapeError,
              "[", op, "] query ", qs, ", key ", ks, " and value ", v.sizes(),
              " must agree in B, H and D (and key and value in T)");
  Geometry g{qs[0], qs[1], qs[2], ks[2], qs[3], 0.0};
  EMBER_CHECK(g.D >= 1, ShapeError, "[", op, "] head dim must be >= 1, got shape ", qs);
  EMBER_CHECK(!causal || g.Tq <= g.Tk, ShapeError, "[", op, "] causal attention needs Tq <= Tk ",
              "(queries are the last Tq positions), got Tq = ", g.Tq, " and Tk = ", g.Tk);
  EMBER_CHECK(g.Tk >= 1 || g.Tq == 0 || g.B * g.H == 0, ShapeError, "[", op,
              "] no keys to attend to (key shape ", ks, ")");
  g.scale = scale ? *scale : 1.0 / std::sqrt(double(g.D));
  EMBER_CHECK(std::isfinite(g.scale), ValueError, "[", op, "] scale must be finite, got ", g.scale);
  return g;
}

}  // namespace

AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, bool causal,
                                                      std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  AttentionForward f;
  f.out = detail::make_tensor(q.sizes(), q.dtype(), q.device());
  f.lse = detail::make_tensor({g.B, g.H, g.Tq}, stats_dtype(q.dtype()), q.device());
  if (f.out.numel() == 0) return f;
  EMBER_DISPATCH_KERNEL(q.device(), attention_fwd_kernel, contiguous(q), contiguous(k),
                        contiguous(v), f.out, f.lse, causal, g.scale);
  return f;
}

AttentionBackward scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q,
                                                        const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& lse,
                                                        bool causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_backward";
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, out, "output");
  detail::check_defined(op, lse, "logsumexp");
  detail::check_same_device(op, grad, q);
  detail::check_same_device(op, out, q);
  detail::check_same_device(op, lse, q);
  EMBER_CHECK(grad.sizes() == q.sizes() && out.sizes() == q.sizes(), ShapeError, "[", op,
              "] gradient ", grad.sizes(), " and output ", out.sizes(),
              " must have the query's shape ", q.sizes());
  EMBER_CHECK(out.dtype() == q.dtype(), DTypeError, "[", op, "] output dtype ", out.dtype(),
              " differs from the query's ", q.dtype());
  const Shape lse_shape{g.B, g.H, g.Tq};
  EMBER_CHECK(lse.sizes() == lse_shape && lse.dtype() == stats_dtype(q.dtype()), ShapeError,
              "[", op, "] logsumexp must be ", lse_shape, " in ", stats_dtype(q.dtype()),
              ", got ", lse.sizes(), " in ", lse.dtype());
  AttentionBackward b;
  b.dq = detail::make_tensor(q.sizes(), q.dtype(), q.device());
  b.dk = detail::make_tensor(k.sizes(), k.dtype(), k.device());
  b.dv = detail::make_tensor(v.sizes(), v.dtype(), v.device());
  if (g.B * g.H == 0) return b;
  if (g.Tq == 0 || g.Tk == 0) {  // no query sees any key: every gradient is a sum of nothing
    if (b.dk.numel() > 0) fill_(b.dk, 0);
    if (b.dv.numel() > 0) fill_(b.dv, 0);
    if (b.dq.numel() > 0) fill_(b.dq, 0);
    return b;
  }
  const Tensor gr = grad.dtype() == q.dtype() ? grad : to(grad, grad.device(), q.dtype());
  EMBER_DISPATCH_KERNEL(q.device(), attention_bwd_kernel, contiguous(gr), contiguous(q),
                        contiguous(k), contiguous(v), contiguous(out), contiguous(lse), b.dq,
                        b.dk, b.dv, causal, g.scale);
  return b;
}

}  // namespace ember::ops
