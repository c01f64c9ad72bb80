// Front of the sort family (sort, topk, scans, flip). Sorting works on rows: the sorted dim is
// moved last and, unless that is already the contiguous innermost dim, copied so (the
// backends then read each row with unit stride, which the CUDA radix and bitonic sorts need);
// results are allocated in the moved layout and permuted back into fresh contiguous tensors.
// Scans take any strides as a 3-D view [O, N, K] and write x's own shape contiguously.
#include "ember/ops/sort.h"

#include <vector>

#include "ember/ops/elementwise.h"
#include "kernels/sort.h"

namespace ember::ops {

namespace {

// Sizes/strides of x with dim d moved last (a view, no copy).
Tensor move_last(const Tensor& x, int64_t d) {
  Shape sizes = x.sizes(), strides = x.strides();
  const int64_t n = sizes[size_t(d)], s = strides[size_t(d)];
  sizes.erase(size_t(d));
  strides.erase(size_t(d));
  sizes.push_back(n);
  strides.push_back(s);
  return detail::make_view(x, sizes, strides, x.storage_offset());
}

// The inverse of move_last on a contiguous result: dim `d` back in place, copied contiguous.
Tensor move_back(const Tensor& y, int64_t d) {
  const int64_t nd = y.dim();
  if (d == nd - 1) return y;
  Shape sizes = y.sizes(), strides = y.strides();
  const int64_t n = sizes.back(), s = strides.back();
  sizes.erase(size_t(nd - 1));
  strides.erase(size_t(nd - 1));
  sizes.insert(size_t(d), n);
  strides.insert(size_t(d), s);
  Tensor out = detail::make_tensor(sizes, y.dtype(), y.device());
  copy_(out, detail::make_view(y, sizes, strides, y.storage_offset()));
  return out;
}

// x's dim d as rows [M, N] with unit stride along N (copied when it is not).
Tensor as_rows(const Tensor& x, int64_t d) {
  Tensor m = move_last(x, d);
  const int64_t n = m.sizes().back();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  // One row-stride covers the leading dims when they are jointly strided over whole rows.
  bool direct = m.strides().back() == 1 || n == 1;
  int64_t row_stride = n;
  if (direct) {
    int64_t expect = -1;  // the stride the next-outer dim must have
    for (int64_t i = m.dim() - 2; i >= 0; --i) {
      const int64_t sz = m.sizes()[size_t(i)], st = m.strides()[size_t(i)];
      if (sz == 1) continue;
      if (expect == -1) row_stride = st;
      else if (st != expect) { direct = false; break; }
      expect = st * sz;
    }
  }
  if (!direct) {
    Tensor c = detail::make_tensor(m.sizes(), x.dtype(), x.device());
    copy_(c, m);
    return detail::make_view(c, {rows, n}, {n, 1}, 0);
  }
  return detail::make_view(x, {rows, n}, {row_stride, 1}, x.storage_offset());
}

ValuesIndices sort_like(const char* name, const Tensor& x, int64_t dim, int64_t k, bool largest,
                        bool is_topk) {
  detail::check_defined(name, x);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  if (x.dim() == 0) {
    ValuesIndices r;
    r.values = detail::make_tensor(is_topk && k == 0 ? Shape{0} : Shape{}, x.dtype(), x.device());
    r.indices = detail::make_tensor(r.values.sizes(), DType::i64, x.device());
    if (r.values.numel()) {
      copy_(r.values, x);
      fill_(r.indices, 0);
    }
    return r;
  }
  Tensor m = move_last(x, d);
  Shape out_sizes = m.sizes();
  out_sizes.back() = k;
  ValuesIndices r;
  r.values = detail::make_tensor(out_sizes, x.dtype(), x.device());
  r.indices = detail::make_tensor(out_sizes, DType::i64, x.device());
  if (r.values.numel() > 0) {
    Tensor in = as_rows(x, d);
    const int64_t rows = in.sizes()[0];
    Tensor v = detail::make_view(r.values, {rows, k}, {k, 1}, 0);
    Tensor i = detail::make_view(r.indices, {rows, k}, {k, 1}, 0);
    if (is_topk) EMBER_DISPATCH_KERNEL(x.device(), topk_kernel, in, v, i, largest);
    else EMBER_DISPATCH_KERNEL(x.device(), sort_kernel, in, v, i, largest);
  }
  r.values = move_back(r.values, d);
  r.indices = move_back(r.indices, d);
  return r;
}

}  // namespace

ValuesIndices sort(const Tensor& x, int64_t dim, bool descending) {
  detail::check_defined("sort", x);
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(wrap_dim(dim, x.dim(), "sort"))];
  return sort_like("sort", x, dim, n, descending, false);
}

ValuesIndices topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  (void)sorted;  // always sorted (Note [sort order])
  detail::check_defined("topk", x);
  const int64_t n = x.dim() == 0 ? 1 : x.sizes()[size_t(wrap_dim(dim, x.dim(), "topk"))];
  EMBER_CHECK(k >= 0 && k <= n, IndexError, "[topk] k = ", k, " is out of range for dim ", dim,
              " of size ", n, " (input shape ", x.sizes(), ")");
  return sort_like("topk", x, dim, k, largest, true);
}

const char* op_name(ScanOp op) { return op == ScanOp::cumsum ? "cumsum" : "cumprod"; }

Tensor scan(ScanOp op, const Tensor& x, int64_t dim) {
  const char* name = op_name(op);
  detail::check_defined(name, x);
  const int64_t d = wrap_dim(dim, x.dim(), name);
  const DType dt = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  Tensor in = x.dtype() == dt ? x : to(x, x.device(), dt);
  Tensor out = detail::make_tensor(x.sizes(), dt, x.device());
  if (out.numel() == 0) return out;
  if (x.dim() == 0) {
    copy_(out, in);
    return out;
  }
  // [O, N, K]: the dims before d and after d each merged into one strided dim when possible.
  auto merge = [&](int64_t lo, int64_t hi, int64_t& size, int64_t& stride) {
    size = 1;
    stride = 1;
    for (int64_t i = hi - 1; i >= lo; --i) {  // innermost first
      const int64_t sz = in.sizes()[size_t(i)], st = in.strides()[size_t(i)];
      if (sz == 1) continue;
      if (size == 1) stride = st;
      else if (st != stride * size) return false;
      size *= sz;
    }
    return true;
  };
  int64_t O, os, K, ks;
  if (!merge(0, d, O, os) || !merge(d + 1, in.dim(), K, ks)) {
    in = contiguous(in);
    merge(0, d, O, os);
    merge(d + 1, in.dim(), K, ks);
  }
  const int64_t N = in.sizes()[size_t(d)];
  Tensor v = detail::make_view(in, {O, N, K}, {os, in.strides()[size_t(d)], ks}, in.storage_offset());
  Tensor o = detail::make_view(out, {O, N, K}, {N * K, K, 1}, 0);
  EMBER_DISPATCH_KERNEL(x.device(), scan_kernel, op, v, o);
  return out;
}

Tensor flip(const Tensor& x, const Shape& dims) {
  detail::check_defined("flip", x);
  const int64_t nd = x.dim();
  std::vector<bool> seen(size_t(std::max<int64_t>(nd, 1)), false);
  Shape strides = x.strides();
  int64_t offset = x.storage_offset();
  for (int64_t dim : dims) {
    const int64_t d = wrap_dim(dim, nd, "flip");
    EMBER_CHECK(!seen[size_t(d)], ValueError, "[flip] dim ", d, " appears more than once in ", dims);
    seen[size_t(d)] = true;
    if (nd == 0) continue;
    const int64_t n = x.sizes()[size_t(d)];
    if (n > 1) {
      offset += (n - 1) * strides[size_t(d)];
      strides[size_t(d)] = -strides[size_t(d)];
    }
  }
  // A view with negative strides, read once by the copy (whose loops take signed byte strides)
  // and never returned: ember's views otherwise have non-negative strides.
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) copy_(out, detail::make_view(x, x.sizes(), strides, offset));
  return out;
}

}  // namespace ember::ops
