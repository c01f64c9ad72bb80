// Front of the attention family: validation, the default scale, output allocation, and the
// degenerate sizes (no batch, no queries), so the drivers only see the geometry of Note
// [attention strided operands] (ops/kernels/attention.h). Operands are passed as the views
// they are; only a last dim that is not unit-stride is copied. The packed op makes q, k, v,
// y and dq, dk, dv strided views of its [B, T, 3C] and [B, T, C] buffers the same way.
// The mask becomes a [B, H, Tq, Tk] view with stride 0 on its broadcast dims (Note
// [attention masks and dropout]); only its dtype may be converted, in its own shape.
#include "ember/ops/attention.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include "ember/ops/elementwise.h"
#include "ember/ops/nn.h"
#include "kernels/attention.h"

namespace ember::ops {

namespace {
std::atomic<bool> g_attention_dq_atomics{[] {
  const char* env = std::getenv("EMBER_ATTENTION_DQ_ATOMICS");
  return env && std::string_view(env) == "1";
}()};
}  // namespace

void set_attention_dq_atomics(bool on) { g_attention_dq_atomics.store(on, std::memory_order_relaxed); }
bool attention_dq_atomics() { return g_attention_dq_atomics.load(std::memory_order_relaxed); }

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

// A [B, H, T, D] tensor as a kernel operand (Note [attention strided operands]): the tensor
// itself when its strides already qualify, a restrided view of the same elements when only
// the strides of size-1 dims differ, and a contiguous copy only when the last dim is not
// unit-stride (or a stride is negative).
Tensor as_operand(const Tensor& t) {
  const Shape& sz = t.sizes();
  Tensor s = t;
  for (size_t d = 0; d < 4; ++d)
    if (sz[d] > 1 && (d == 3 ? t.strides()[d] != 1 : t.strides()[d] < 0)) {
      s = contiguous(t);
      break;
    }
  Shape st = s.strides();
  bool restride = false;
  for (size_t d = 0; d < 4; ++d) {
    const int64_t want = d == 3 ? 1 : 0;
    if (sz[d] == 1 && st[d] != want) {
      st[d] = want;
      restride = true;
    }
  }
  return restride ? detail::make_view(s, sz, st, s.storage_offset()) : s;
}

// Validates the mask and dropout of a call and turns them into the kernels' form.
AttentionKernelExtras prepare_extras(const char* op, const Geometry& g, const Tensor& q,
                                     const AttentionExtras& ex, bool causal) {
  EMBER_CHECK(ex.dropout_p >= 0 && ex.dropout_p < 1, ValueError, "[", op,
              "] dropout_p must be in [0, 1), got ", ex.dropout_p);
  AttentionKernelExtras k;
  k.dropout_p = ex.dropout_p;
  k.rng = ex.rng;
  if (!ex.attn_mask.defined()) return k;
  Tensor m = ex.attn_mask;
  EMBER_CHECK(!causal, ValueError, "[", op,
              "] attn_mask and is_causal cannot both be set (as in PyTorch: fold the causal "
              "mask into attn_mask)");
  detail::check_same_device(op, q, m);
  const DType cdt = stats_dtype(q.dtype());
  if (m.dtype() != DType::b8) {
    EMBER_CHECK(is_floating(m.dtype()) && (m.dtype() == q.dtype() || m.dtype() == DType::f32),
                DTypeError, "[", op, "] attn_mask must be bool or a floating mask in the query's "
                "dtype ", q.dtype(), " or f32, got ", m.dtype());
    if (m.dtype() != cdt) m = to(m, m.device(), cdt);  // its own shape, not the broadcast one
  }
  const Shape target{g.B, g.H, g.Tq, g.Tk};
  EMBER_CHECK(m.dim() <= 4, ShapeError, "[", op, "] attn_mask of shape ", m.sizes(),
              " does not broadcast to ", target);
  for (int64_t d = 0; d < m.dim(); ++d)
    if (m.sizes()[size_t(d)] > 1 && m.strides()[size_t(d)] < 0) {
      m = contiguous(m);
      break;
    }
  Shape st(4, 0);
  const size_t lead = 4 - size_t(m.dim());
  for (size_t d = 0; d < size_t(m.dim()); ++d) {
    const int64_t n = m.sizes()[d];
    EMBER_CHECK(n == 1 || n == target[lead + d], ShapeError, "[", op, "] attn_mask of shape ",
                m.sizes(), " does not broadcast to ", target);
    st[lead + d] = n == 1 ? 0 : m.strides()[d];
  }
  k.mask = detail::make_view(m, target, st, m.storage_offset());
  return k;
}

void run_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                 const Tensor& lse, const AttentionKernelExtras& ex, bool causal, double scale) {
  EMBER_DISPATCH_KERNEL(q.device(), attention_fwd_kernel, as_operand(q), as_operand(k),
                        as_operand(v), as_operand(out), lse, ex, causal, scale);
}

// Checks the backward's extra inputs and runs the kernel into dq, dk, dv (allocated by the
// caller, possibly views of one buffer), zero-filling them when no query sees any key.
void run_backward(const char* op, const Geometry& g, const Tensor& grad, const Tensor& q,
                  const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                  const Tensor& dq, const Tensor& dk, const Tensor& dv,
                  const AttentionKernelExtras& ex, bool causal) {
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
  if (g.B * g.H == 0) return;
  if (g.Tq == 0 || g.Tk == 0) {  // no query sees any key: every gradient is a sum of nothing
    if (dk.numel() > 0) fill_(dk, 0);
    if (dv.numel() > 0) fill_(dv, 0);
    if (dq.numel() > 0) fill_(dq, 0);
    return;
  }
  const Tensor gr = to(grad, grad.device(), q.dtype());  // grad itself when it matches
  EMBER_DISPATCH_KERNEL(q.device(), attention_bwd_kernel, as_operand(gr), as_operand(q),
                        as_operand(k), as_operand(v), as_operand(out), contiguous(lse),
                        as_operand(dq), as_operand(dk), as_operand(dv), ex, causal, g.scale);
}

// ---- the packed [B, T, 3C] layout

void check_packed(const char* op, const Tensor& qkv, int64_t n_head) {
  detail::check_defined(op, qkv, "qkv");
  EMBER_CHECK(qkv.dim() == 3, ShapeError, "[", op, "] expects qkv [B, T, 3 * C], got shape ",
              qkv.sizes());
  EMBER_CHECK(n_head >= 1, ValueError, "[", op, "] n_head must be >= 1, got ", n_head);
  EMBER_CHECK(qkv.sizes()[2] > 0 && qkv.sizes()[2] % (3 * n_head) == 0, ShapeError, "[", op,
              "] the last dim of qkv ", qkv.sizes(), " must be a positive multiple of 3 * n_head = ",
              3 * n_head);
}

// `x` [B, T, n * C] with a unit-stride last dim: part `part` of the n, C = H * D, as the
// [B, H, T, D] view x[b, t, part * C + h * D + d] (no copy).
Tensor head_view(const Tensor& x, int64_t H, int64_t n, int64_t part) {
  const int64_t B = x.sizes()[0], T = x.sizes()[1], C = x.sizes()[2] / n, D = C / H;
  return detail::make_view(x, {B, H, T, D}, {x.strides()[0], D, x.strides()[1], 1},
                           x.storage_offset() + part * C);
}

// `x` (3-D) with a unit-stride last dim: itself, else a contiguous copy.
Tensor unit_last(const Tensor& x) {
  return x.sizes()[2] <= 1 || x.strides()[2] == 1 ? x : contiguous(x);
}

}  // namespace

AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, bool causal,
                                                      std::optional<double> scale) {
  return scaled_dot_product_attention_forward(q, k, v, AttentionExtras{}, causal, scale);
}

AttentionForward scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                      const Tensor& v, const AttentionExtras& extras,
                                                      bool causal, std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention";
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  const AttentionKernelExtras ex = prepare_extras(op, g, q, extras, causal);
  AttentionForward f;
  f.out = detail::make_tensor(q.sizes(), q.dtype(), q.device());
  f.lse = detail::make_tensor({g.B, g.H, g.Tq}, stats_dtype(q.dtype()), q.device());
  if (f.out.numel() == 0) return f;
  run_forward(q, k, v, f.out, f.lse, ex, causal, g.scale);
  return f;
}

AttentionBackward scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q,
                                                        const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& lse,
                                                        bool causal, std::optional<double> scale) {
  return scaled_dot_product_attention_backward(grad, q, k, v, out, lse, AttentionExtras{}, causal,
                                               scale);
}

AttentionBackward scaled_dot_product_attention_backward(const Tensor& grad, const Tensor& q,
                                                        const Tensor& k, const Tensor& v,
                                                        const Tensor& out, const Tensor& lse,
                                                        const AttentionExtras& extras, bool causal,
                                                        std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_backward";
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  const AttentionKernelExtras ex = prepare_extras(op, g, q, extras, causal);
  AttentionBackward b;
  b.dq = detail::make_tensor(q.sizes(), q.dtype(), q.device());
  b.dk = detail::make_tensor(k.sizes(), k.dtype(), k.device());
  b.dv = detail::make_tensor(v.sizes(), v.dtype(), v.device());
  run_backward(op, g, grad, q, k, v, out, lse, b.dq, b.dk, b.dv, ex, causal);
  return b;
}

AttentionForward scaled_dot_product_attention_packed_forward(const Tensor& qkv, int64_t n_head,
                                                             bool causal,
                                                             std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_packed";
  check_packed(op, qkv, n_head);
  const Tensor x = unit_last(qkv);
  const Tensor q = head_view(x, n_head, 3, 0), k = head_view(x, n_head, 3, 1),
               v = head_view(x, n_head, 3, 2);
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  AttentionForward f;
  // y [B, T, C], written by the kernel through its [B, H, T, D] view.
  f.out = detail::make_tensor({g.B, g.Tq, g.H * g.D}, qkv.dtype(), qkv.device());
  f.lse = detail::make_tensor({g.B, g.H, g.Tq}, stats_dtype(qkv.dtype()), qkv.device());
  if (f.out.numel() == 0) return f;
  run_forward(q, k, v, head_view(f.out, n_head, 1, 0), f.lse, AttentionKernelExtras{}, causal,
              g.scale);
  return f;
}

Tensor scaled_dot_product_attention_packed_backward(const Tensor& grad, const Tensor& qkv,
                                                   const Tensor& out, const Tensor& lse,
                                                   int64_t n_head, bool causal,
                                                   std::optional<double> scale) {
  const char* op = "scaled_dot_product_attention_packed_backward";
  check_packed(op, qkv, n_head);
  detail::check_defined(op, grad, "gradient");
  detail::check_defined(op, out, "output");
  const Shape y_shape{qkv.sizes()[0], qkv.sizes()[1], qkv.sizes()[2] / 3};
  EMBER_CHECK(grad.sizes() == y_shape && out.sizes() == y_shape, ShapeError, "[", op,
              "] gradient ", grad.sizes(), " and output ", out.sizes(), " must be ", y_shape);
  const Tensor x = unit_last(qkv);
  const Tensor q = head_view(x, n_head, 3, 0), k = head_view(x, n_head, 3, 1),
               v = head_view(x, n_head, 3, 2);
  const Geometry g = check_inputs(op, q, k, v, causal, scale);
  Tensor dqkv = detail::make_tensor(qkv.sizes(), qkv.dtype(), qkv.device());
  if (dqkv.numel() == 0) return dqkv;
  run_backward(op, g, head_view(unit_last(grad), n_head, 1, 0), q, k, v,
               head_view(unit_last(out), n_head, 1, 0), lse, head_view(dqkv, n_head, 3, 0),
               head_view(dqkv, n_head, 3, 1), head_view(dqkv, n_head, 3, 2),
               AttentionKernelExtras{}, causal);
  return dqkv;
}

}  // namespace ember::ops
