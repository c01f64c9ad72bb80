// Differentiable sorting and scans (sort, topk, cumsum, cumprod, logsumexp, flip, roll), the
// predicates any/all/isnan/isinf/isfinite/isclose, and the Tensor methods of these and of the
// rounding ops. Each forward beside its VJP; VJPs are written with differentiable ops, so
// double backward works.
//
// - sort/topk: the gradient goes back through the indices (a scatter_add into zeros: the
//   indices of one row are distinct, so each input element receives at most one value).
// - cumprod: Note [cumprod backward].
#include <cmath>
#include <limits>

#include "ember/factory.h"
#include "ember/ops/reduce.h"
#include "ember/ops/sort.h"
#include "inplace.h"

namespace ember {

using autograd::record;
using autograd::save;
using ops::BinaryOp;
using ops::ReduceOp;
using ops::ScanOp;
using ops::UnaryOp;

namespace {

Tensor full_bool(const Shape& sizes, bool value, Device device) {
  Tensor t = ember::detail::make_tensor(sizes, DType::b8, device);
  if (t.numel() > 0) ops::fill_(t, value);
  return t;
}

Tensor scalar_of(double v, const Tensor& like) { return ops::scalar_tensor(v, like.dtype(), like.device()); }

// The VJP of selecting x's elements at `indices` along dim d (sort, topk).
Tensor scatter_back(const Tensor& g, const Tensor& indices, const Shape& sizes, int64_t d) {
  if (sizes.empty()) return g;  // a 0-d input: its one element
  return scatter_add(zeros(sizes, TensorOptions(g.dtype()).device(g.device())), d, indices, g);
}

ValuesIndices select_along(const char* name, ValuesIndices r, const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), name);
  r.values = record(name, r.values, {x},
                    [sizes = x.sizes(), d, idx = r.indices](const Tensor& g) -> TensorList {
                      return {scatter_back(g, idx, sizes, d)};
                    });
  return r;
}

// sum_{j >= i} g_j along d: the VJP of cumsum.
Tensor reverse_cumsum(const Tensor& g, int64_t d) { return flip(cumsum(flip(g, {d}), d), {d}); }

// The boolean predicates of floating tensors; integers are never NaN or infinite.
Tensor nan_mask(const Tensor& x) { return ops::binary(BinaryOp::ne, x, x); }
Tensor abs_of(const Tensor& x) { return ops::unary(UnaryOp::abs, x); }

Tensor any_all(const char* name, bool is_any, const Tensor& x, const Shape& dims, bool keepdim) {
  ember::detail::check_defined(name, x);
  const Shape rd = ops::reduce_dims(name, dims, x.dim());
  const Shape shape = ops::reduce_shape(x.sizes(), rd, keepdim);
  if (ops::reduce_count(x.sizes(), rd) == 0) return full_bool(shape, !is_any, x.device());
  Tensor nz = x.dtype() == DType::b8 ? x : ops::binary(BinaryOp::ne, x, scalar_of(0, x));
  return ops::reduce(is_any ? ReduceOp::amax : ReduceOp::amin, nz, rd, keepdim);
}

Tensor bool_or(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::maximum, a, b); }
Tensor bool_and(const Tensor& a, const Tensor& b) { return ops::binary(BinaryOp::mul, a, b); }

}  // namespace

// ---- sorting ----

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  (void)stable;  // always stable (Note [sort order])
  return select_along("sort", ops::sort(x, dim, descending), x, dim);
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  EMBER_OP_SCOPE("argsort");
  (void)stable;
  return ops::sort(x, dim, descending).indices;
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  return select_along("topk", ops::topk(x, k, dim, largest, sorted), x, dim);
}

// ---- scans ----

Tensor cumsum(const Tensor& x, int64_t dim) {
  return record("cumsum", ops::scan(ScanOp::cumsum, x, dim), {x}, [dim](const Tensor& g) -> TensorList {
    return {g.dim() == 0 ? g : reverse_cumsum(g, wrap_dim(dim, g.dim(), "cumsum"))};
  });
}

// Note [cumprod backward]: dx_k = sum_{j >= k} g_j prod_{i <= j, i != k} x_i. Along a row whose
// first zero is at z (z = n when there is none):
// - k < z: x_k != 0 and y_j = prod_{i <= j} x_i, so dx_k = (sum_{j >= k} g_j y_j) / x_k (every
//   term with j >= z is 0, as it must be);
// - k = z: the products skip x_z, so dx_z = sum_{j >= z} g_j y'_j with y' the cumprod of x with
//   x_z replaced by 1 (later zeros stay and zero their terms);
// - k > z: every product contains x_z = 0, so dx_k = 0.
// No division by zero anywhere (where() picks x_k only for k < z). That formula is exact but
// its masks are constants: at a zero, the gradient of dx_k (k > z) with respect to x_z is lost.
// So when the backward itself is recorded (create_graph), the VJP is PyTorch's O(n^2) form
// instead, differentiable everywhere: P[k, j] = prod_{i <= j, i != k} x_i as the cumprod of x
// with x_k replaced by 1 (one row per k), and dx_k = sum_{j >= k} g_j P[k, j].
Tensor cumprod(const Tensor& x, int64_t dim) {
  return record("cumprod", ops::scan(ScanOp::cumprod, x, dim), {x},
                [x = save(x), dim](const Tensor& g, const Tensor& y) -> TensorList {
                  const Tensor xv = x.get();
                  if (xv.dim() == 0) return {g};
                  const int64_t d = wrap_dim(dim, xv.dim(), "cumprod");
                  if (GradMode::is_enabled()) {
                    const int64_t n = xv.sizes()[size_t(d)];
                    Tensor xl = transpose(xv, d, -1), gl = transpose(g, d, -1);  // [..., n]
                    Tensor ar = arange(n, TensorOptions(DType::i64).device(xv.device()));
                    Tensor kk = ar.reshape({n, 1}), jj = ar.reshape({1, n});
                    Shape nn = xl.sizes();
                    nn.insert(nn.size() - 1, n);  // [..., k, i]
                    Tensor rows = where(ops::binary(BinaryOp::eq, kk, jj), 1.0, expand(unsqueeze(xl, -2), nn));
                    Tensor p = cumprod(rows, -1);  // [..., k, j]
                    Tensor upper = ops::to(ops::binary(BinaryOp::ge, jj, kk), xv.device(), g.dtype());
                    Tensor dx = sum(mul(mul(unsqueeze(gl, -2), p), upper), {-1});
                    return {transpose(dx, d, -1)};
                  }
                  Tensor is_zero = ops::binary(BinaryOp::eq, xv, scalar_of(0, xv));
                  Tensor zeros_so_far = ops::scan(ScanOp::cumsum, is_zero, d);  // i64
                  Tensor before = ops::binary(BinaryOp::eq, zeros_so_far, scalar_of(0, zeros_so_far));
                  Tensor first = bool_and(is_zero, ops::binary(BinaryOp::eq, zeros_so_far, scalar_of(1, zeros_so_far)));
                  Tensor lead = div(reverse_cumsum(mul(g, y), d), where(before, xv, 1.0));
                  Tensor at_zero = reverse_cumsum(mul(g, cumprod(where(first, 1.0, xv), d)), d);
                  return {where(before, lead, where(first, at_zero, 0.0))};
                });
}

// ---- logsumexp ----

// m + log(sum(exp(x - m))) with m the max over dims (0 where it is infinite, so an all -inf or
// a +inf slice gives -inf or inf instead of NaN). The VJP is g * exp(x - y), softmax weights.
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  ember::detail::check_defined("logsumexp", x);
  const Tensor xf = is_floating(x.dtype()) ? x : ops::to(x, x.device(), DType::f32);
  const Shape rd = ops::reduce_dims("logsumexp", dims, xf.dim());
  const Shape keep_shape = ops::reduce_shape(xf.sizes(), rd, true);
  Tensor y;
  if (ops::reduce_count(xf.sizes(), rd) == 0) {
    y = ember::detail::make_tensor(ops::reduce_shape(xf.sizes(), rd, keepdim), xf.dtype(), xf.device());
    if (y.numel() > 0) ops::fill_(y, -std::numeric_limits<double>::infinity());
  } else {
    Tensor m = ops::reduce(ReduceOp::amax, xf, rd, true);
    Tensor inf = ops::binary(BinaryOp::eq, abs_of(m), scalar_of(std::numeric_limits<double>::infinity(), m));
    m = ops::where(inf, scalar_of(0, m), m);
    Tensor s = ops::reduce(ReduceOp::sum, ops::unary(UnaryOp::exp, ops::binary(BinaryOp::sub, xf, m)), rd, true);
    y = ops::binary(BinaryOp::add, ops::unary(UnaryOp::log, s), m);
    if (!keepdim) y = ember::detail::make_view(y, ops::reduce_shape(xf.sizes(), rd, false),
                                               contiguous_strides(ops::reduce_shape(xf.sizes(), rd, false)), 0);
  }
  return record("logsumexp", y, {xf},
                [x = save(xf), keep_shape](const Tensor& g, const Tensor& out) -> TensorList {
                  const Tensor xv = x.get();
                  Tensor w = exp(sub(xv, reshape(out, keep_shape)));
                  return {mul(expand(reshape(g, keep_shape), xv.sizes()), w)};
                });
}

// ---- flip, roll ----

Tensor flip(const Tensor& x, const Shape& dims) {
  return record("flip", ops::flip(x, dims), {x}, [dims](const Tensor& g) -> TensorList { return {flip(g, dims)}; });
}

// A composite of narrow and cat (each differentiable): one copy per rolled dim.
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  ember::detail::check_defined("roll", x);
  if (dims.empty()) {
    EMBER_CHECK(shifts.size() == 1, ValueError, "[roll] without dims takes exactly one shift, got ", shifts);
    return reshape(roll(flatten(x), shifts, {0}), x.sizes());
  }
  EMBER_CHECK(shifts.size() == dims.size(), ValueError, "[roll] shifts ", shifts, " and dims ", dims,
              " must have the same length");
  Tensor y = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], x.dim(), "roll");
    const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(d)];
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    y = cat({narrow(y, d, n - s, s), narrow(y, d, 0, n - s)}, d);
  }
  return y.is_same(x) ? clone(x) : y;
}

// ---- predicates ----

Tensor any(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("any", true, x, dims, keepdim); }
Tensor all(const Tensor& x, const Shape& dims, bool keepdim) { return any_all("all", false, x, dims, keepdim); }

Tensor isnan(const Tensor& x) {
  ember::detail::check_defined("isnan", x);
  return is_floating(x.dtype()) ? nan_mask(x) : full_bool(x.sizes(), false, x.device());
}
Tensor isinf(const Tensor& x) {
  ember::detail::check_defined("isinf", x);
  if (!is_floating(x.dtype())) return full_bool(x.sizes(), false, x.device());
  return ops::binary(BinaryOp::eq, abs_of(x), scalar_of(std::numeric_limits<double>::infinity(), x));
}
Tensor isfinite(const Tensor& x) {
  ember::detail::check_defined("isfinite", x);
  if (!is_floating(x.dtype())) return full_bool(x.sizes(), true, x.device());
  // |NaN| < inf is false, as is inf < inf.
  return ops::binary(BinaryOp::lt, abs_of(x), scalar_of(std::numeric_limits<double>::infinity(), x));
}

// PyTorch's isclose: a == b, or (with equal_nan) both NaN, or a finite |a - b| within
// atol + |rtol * b|; integer and bool inputs compare their difference in f32.
Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  ember::detail::check_defined("isclose", a);
  ember::detail::check_defined("isclose", b, "second input");
  EMBER_CHECK(a.dtype() == b.dtype(), DTypeError, "[isclose] expects inputs of one dtype, got ", a.dtype(),
              " and ", b.dtype());
  EMBER_CHECK(rtol >= 0 && atol >= 0, ValueError, "[isclose] rtol (", rtol, ") and atol (", atol,
              ") must be non-negative");
  Tensor close = ops::binary(BinaryOp::eq, a, b);
  if (equal_nan && is_floating(a.dtype())) close = bool_or(close, bool_and(nan_mask(a), nan_mask(b)));
  if (rtol == 0 && atol == 0) return close;
  const DType dt = is_floating(a.dtype()) ? a.dtype() : DType::f32;
  Tensor af = a.dtype() == dt ? a : ops::to(a, a.device(), dt);
  Tensor bf = b.dtype() == dt ? b : ops::to(b, b.device(), dt);
  Tensor allowed = ops::binary(BinaryOp::add, scalar_of(atol, bf), abs_of(ops::binary(BinaryOp::mul, bf, scalar_of(rtol, bf))));
  Tensor actual = abs_of(ops::binary(BinaryOp::sub, af, bf));
  Tensor within = bool_and(isfinite(actual), ops::binary(BinaryOp::le, actual, allowed));
  return bool_or(close, within);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  EMBER_OP_SCOPE("allclose");
  return all(isclose(a, b, rtol, atol, equal_nan)).item<int64_t>() != 0;
}

// ---- Tensor methods (Note [Tensor methods] in tensor.h) ----

ValuesIndices Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return ember::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return ember::argsort(*this, dim, descending, stable);
}
ValuesIndices Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ember::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::cumsum(int64_t dim) const { return ember::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return ember::cumprod(*this, dim); }
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return ember::logsumexp(*this, dims, keepdim); }
Tensor Tensor::flip(const Shape& dims) const { return ember::flip(*this, dims); }
Tensor Tensor::roll(const Shape& shifts, const Shape& dims) const { return ember::roll(*this, shifts, dims); }
Tensor Tensor::any(const Shape& dims, bool keepdim) const { return ember::any(*this, dims, keepdim); }
Tensor Tensor::all(const Shape& dims, bool keepdim) const { return ember::all(*this, dims, keepdim); }
Tensor Tensor::isnan() const { return ember::isnan(*this); }
Tensor Tensor::isinf() const { return ember::isinf(*this); }
Tensor Tensor::isfinite() const { return ember::isfinite(*this); }
Tensor Tensor::isclose(const Tensor& o, double rtol, double atol, bool equal_nan) const {
  return ember::isclose(*this, o, rtol, atol, equal_nan);
}
bool Tensor::allclose(const Tensor& o, double rtol, double atol, bool equal_nan) const {
  return ember::allclose(*this, o, rtol, atol, equal_nan);
}
Tensor Tensor::sin() const { return ember::sin(*this); }
Tensor Tensor::cos() const { return ember::cos(*this); }
Tensor Tensor::square() const { return ember::square(*this); }
Tensor Tensor::floor() const { return ember::floor(*this); }
Tensor Tensor::ceil() const { return ember::ceil(*this); }
Tensor Tensor::trunc() const { return ember::trunc(*this); }
Tensor Tensor::round(int64_t decimals) const { return ember::round(*this, decimals); }

}  // namespace ember
