// Front of the linear-algebra family: torch.matmul's shape rules and linear's folding are
// decided here, once for every backend; the backend's gemm_kernel sees only same-rank
// [..., M, K] x [..., K, N] -> [..., M, N] problems with broadcast dims as stride 0.
#include "ember/ops/linalg.h"

#include <atomic>
#include <optional>

#include "ember/ops/matmul_config.h"

#include "ember/ops/elementwise.h"
#include "kernels/linalg.h"

namespace ember::ops {

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b, const char* a_name,
                    const char* b_name) {
  detail::check_defined(op, a, a_name);
  detail::check_defined(op, b, b_name);
  detail::check_same_device(op, a, b);
  EMBER_CHECK(a.dtype() == b.dtype(), DTypeError, "[", op, "] expected ", a_name, " and ",
              b_name, " to have the same dtype, got ", a.dtype(), " and ", b.dtype());
  EMBER_CHECK(a.dtype() != DType::b8, DTypeError, "[", op, "] is not defined for bool tensors");
}

// t's leading dims (all but the last) viewed as one without copying: [rows, t.size(-1)],
// or nullopt when their strides do not chain.
std::optional<Tensor> fold_leading(const Tensor& t) {
  const int64_t d = t.dim();
  int64_t rows = 1, row_stride = 0, expected = 0;
  bool first = true;
  for (int64_t i = d - 2; i >= 0; --i) {
    const int64_t s = t.sizes()[i];
    rows *= s;
    if (s == 1) continue;
    if (first) {
      row_stride = t.strides()[i];
      first = false;
    } else if (t.strides()[i] != expected) {
      return std::nullopt;
    }
    expected = t.strides()[i] * s;
  }
  if (first) row_stride = std::max<int64_t>(t.sizes()[d - 1], 1);  // one row: any stride works
  return detail::make_view(t, {rows, t.sizes()[d - 1]}, {row_stride, t.strides()[d - 1]},
                           t.storage_offset());
}

// t with sizes `batch` + its last two dims, broadcast batch dims at stride 0.
Tensor expand_batch(const Tensor& t, const Shape& batch) {
  const int64_t nb = int64_t(batch.size()), tb = t.dim() - 2;
  Shape sizes = batch, strides(batch.size(), 0);
  for (int64_t i = 0; i < tb; ++i) {
    const int64_t d = nb - tb + i;
    strides[d] = t.sizes()[i] == batch[d] ? t.strides()[i] : 0;
  }
  for (int64_t i = tb; i < t.dim(); ++i) {
    sizes.push_back(t.sizes()[i]);
    strides.push_back(t.strides()[i]);
  }
  return detail::make_view(t, sizes, strides, t.storage_offset());
}

Shape leading(const Shape& s, int64_t drop) { return Shape(s.data(), s.size() - size_t(drop)); }

}  // namespace

Shape matmul_shape(const Shape& a, const Shape& b) {
  const int64_t da = int64_t(a.size()), db = int64_t(b.size());
  EMBER_CHECK(da >= 1 && db >= 1, ShapeError, "[matmul] both operands need at least 1 dim, got shapes ",
              a, " and ", b);
  const int64_t k_a = a[da - 1], k_b = db == 1 ? b[0] : b[db - 2];
  EMBER_CHECK(k_a == k_b, ShapeError, "[matmul] shapes ", a, " and ", b, " cannot be multiplied (",
              k_a, " != ", k_b, ")");
  const Shape ba = da > 2 ? leading(a, 2) : Shape(), bb = db > 2 ? leading(b, 2) : Shape();
  // broadcast_shapes names the op but not the operands; say which batch dims clash.
  const int64_t n = std::max<int64_t>(int64_t(ba.size()), int64_t(bb.size()));
  Shape out(size_t(n), 1);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ia = i - (n - int64_t(ba.size())), ib = i - (n - int64_t(bb.size()));
    const int64_t sa = ia >= 0 ? ba[size_t(ia)] : 1, sb = ib >= 0 ? bb[size_t(ib)] : 1;
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, ShapeError, "[matmul] batch dims ", ba, " and ", bb,
                " of shapes ", a, " and ", b, " cannot be broadcast (", sa, " vs ", sb, ")");
    out[size_t(i)] = sa == 1 ? sb : sa;
  }
  if (da >= 2) out.push_back(a[da - 2]);
  if (db >= 2) out.push_back(b[db - 1]);
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b, "first operand", "second operand");
  const Shape out_shape = matmul_shape(a.sizes(), b.sizes());
  Tensor out = detail::make_tensor(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;

  // 1-D operands become a row (left) or a column (right); no copy.
  const Tensor A = a.dim() == 1 ? detail::make_view(a, {1, a.sizes()[0]}, {a.sizes()[0], a.strides()[0]},
                                                    a.storage_offset())
                                : a;
  const Tensor B = b.dim() == 1 ? detail::make_view(b, {b.sizes()[0], 1}, {b.strides()[0], 1},
                                                    b.storage_offset())
                                : b;
  const int64_t M = A.sizes()[size_t(A.dim() - 2)], N = B.sizes()[size_t(B.dim() - 1)];

  // [..., M, K] x [K, N]: one GEMM over the folded rows when A's leading dims chain (the
  // common `activations @ weight` case), instead of one GEMM per batch element.
  if (B.dim() == 2 && A.dim() > 2) {
    if (auto A2 = fold_leading(A)) {
      const int64_t rows = A2->sizes()[0];
      Tensor C2 = detail::make_view(out, {rows, N}, {N, 1}, 0);
      EMBER_DISPATCH_KERNEL(out.device(), gemm_kernel, *A2, B, C2, false);
      return out;
    }
  }
  const int64_t nb = std::max(A.dim(), B.dim()) - 2;
  const Shape batch(out_shape.data(), size_t(nb));
  Shape c_sizes = batch;
  c_sizes.push_back(M);
  c_sizes.push_back(N);
  Tensor C = detail::make_view(out, c_sizes, contiguous_strides(c_sizes), 0);
  EMBER_DISPATCH_KERNEL(out.device(), gemm_kernel, expand_batch(A, batch), expand_batch(B, batch), C, false);
  return out;
}

namespace {

void check_linear(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_operands(op, x, weight, "input", "weight");
  EMBER_CHECK(weight.dim() == 2, ShapeError, "[", op, "] weight must be 2-D [out_features, in_features], got shape ",
              weight.sizes());
  EMBER_CHECK(x.dim() >= 1, ShapeError, "[", op, "] input must have at least 1 dim, got shape ", x.sizes());
  const int64_t in = weight.sizes()[1], out_features = weight.sizes()[0];
  EMBER_CHECK(x.sizes()[size_t(x.dim() - 1)] == in, ShapeError, "[", op, "] input of shape ", x.sizes(),
              " does not match weight of shape ", weight.sizes(), " (in_features ",
              x.sizes()[size_t(x.dim() - 1)], " != ", in, ")");
  if (bias.defined()) {
    check_operands(op, x, bias, "input", "bias");
    EMBER_CHECK(bias.dim() == 1 && bias.sizes()[0] == out_features, ShapeError, "[", op, "] bias of shape ",
                bias.sizes(), " does not match weight of shape ", weight.sizes(), " (expected [",
                out_features, "])");
  }
}

// t [..., n] as a matrix [rows, n] over its flattened leading dims: a view when they chain,
// else a contiguous copy's view.
Tensor as_rows(const Tensor& t) {
  const int64_t n = t.sizes()[size_t(t.dim() - 1)];
  if (t.dim() == 1) return detail::make_view(t, {1, n}, {n, t.strides()[0]}, t.storage_offset());
  std::optional<Tensor> r = fold_leading(t);
  return r ? *r : *fold_leading(contiguous(t));
}

// The transposed view of a 2-D tensor (no copy).
Tensor t2(const Tensor& m) {
  return detail::make_view(m, {m.sizes()[1], m.sizes()[0]}, {m.strides()[1], m.strides()[0]}, m.storage_offset());
}

// The fresh row-major [rows, n] view of a fresh output of shape `shape` (its last dim n).
Tensor rows_of(const Tensor& out, int64_t rows) {
  const int64_t n = out.sizes()[size_t(out.dim() - 1)];
  return detail::make_view(out, {rows, n}, {n, 1}, 0);
}

Shape with_last(const Shape& s, int64_t last) {
  Shape out = leading(s, 1);
  out.push_back(last);
  return out;
}

void check_floating(const char* op, const Tensor& t) {
  const DType d = t.dtype();
  EMBER_CHECK(d == DType::f32 || d == DType::f64 || d == DType::f16 || d == DType::bf16, DTypeError, "[", op,
              "] expects a floating-point dtype, got ", d);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear("linear", x, weight, bias);
  const int64_t in = weight.sizes()[1], out_features = weight.sizes()[0];
  Tensor out = detail::make_tensor(with_last(x.sizes(), out_features), x.dtype(), x.device());
  if (out.numel() == 0) return out;

  const Tensor X2 = as_rows(x);
  const int64_t rows = X2.sizes()[0];
  Tensor Wt = detail::make_view(weight, {in, out_features}, {weight.strides()[1], weight.strides()[0]},
                                weight.storage_offset());
  Tensor Y2 = rows_of(out, rows);
  if (bias.defined()) EMBER_DISPATCH_KERNEL(out.device(), gemm_bias_kernel, X2, Wt, bias, Y2);
  else EMBER_DISPATCH_KERNEL(out.device(), gemm_kernel, X2, Wt, Y2, false);
  return out;
}

std::pair<Tensor, Tensor> linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  EMBER_CHECK(bias.defined(), ValueError, "[linear_gelu] requires a bias");
  check_linear("linear_gelu", x, weight, bias);
  check_floating("linear_gelu", x);
  const int64_t out_features = weight.sizes()[0];
  const Shape shape = with_last(x.sizes(), out_features);
  Tensor out = detail::make_tensor(shape, x.dtype(), x.device());
  Tensor pre = detail::make_tensor(shape, x.dtype(), x.device());
  if (out.numel() == 0) return {out, pre};
  const Tensor X2 = as_rows(x);
  const int64_t rows = X2.sizes()[0];
  EMBER_DISPATCH_KERNEL(out.device(), gemm_bias_gelu_kernel, X2, t2(weight), bias, rows_of(out, rows),
                        rows_of(pre, rows));
  return {out, pre};
}

std::pair<Tensor, Tensor> linear_dgelu_bgrad(const Tensor& grad, const Tensor& weight, const Tensor& pre) {
  check_operands("linear_dgelu_bgrad", grad, weight, "grad", "weight");
  check_operands("linear_dgelu_bgrad", grad, pre, "grad", "pre");
  check_floating("linear_dgelu_bgrad", grad);
  EMBER_CHECK(weight.dim() == 2 && grad.dim() >= 1 && pre.dim() == grad.dim() &&
                  leading(grad.sizes(), 1) == leading(pre.sizes(), 1) && grad.size(-1) == weight.size(0) &&
                  pre.size(-1) == weight.size(1),
              ShapeError, "[linear_dgelu_bgrad] grad ", grad.sizes(), ", weight ", weight.sizes(), " and pre ",
              pre.sizes(), " do not match (expected [..., out], [out, in] and [..., in])");
  const int64_t in = weight.sizes()[1];
  Tensor dpre = detail::make_tensor(pre.sizes(), pre.dtype(), pre.device());
  Tensor dbias = detail::make_tensor({in}, pre.dtype(), pre.device());
  const Tensor G2 = as_rows(grad), P2 = as_rows(pre);
  EMBER_DISPATCH_KERNEL(pre.device(), gemm_dgelu_bgrad_kernel, G2, weight, P2, rows_of(dpre, G2.sizes()[0]), dbias);
  return {dpre, dbias};
}

std::pair<Tensor, Tensor> linear_weight_grad(const Tensor& grad, const Tensor& x, bool with_bias) {
  check_operands("linear_weight_grad", grad, x, "grad", "input");
  check_floating("linear_weight_grad", grad);
  EMBER_CHECK(grad.dim() >= 1 && x.dim() == grad.dim() && leading(grad.sizes(), 1) == leading(x.sizes(), 1),
              ShapeError, "[linear_weight_grad] grad ", grad.sizes(), " and input ", x.sizes(),
              " do not match (expected [..., out] and [..., in])");
  const int64_t out_features = grad.size(-1), in = x.size(-1);
  Tensor dw = detail::make_tensor({out_features, in}, x.dtype(), x.device());
  Tensor db = with_bias ? detail::make_tensor({out_features}, x.dtype(), x.device()) : Tensor();
  const Tensor G2 = as_rows(grad), X2 = as_rows(x);
  if (with_bias) EMBER_DISPATCH_KERNEL(x.device(), gemm_bgrad_kernel, t2(G2), X2, dw, db);
  else if (dw.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), gemm_kernel, t2(G2), X2, dw, false);
  return {dw, db};
}

}  // namespace ember::ops

// ---- matmul settings (ember/ops/matmul_config.h) ----
namespace ember::cuda {
namespace {
std::atomic<bool> g_allow_tf32{true};
}  // namespace
void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

}  // namespace ember::cuda
