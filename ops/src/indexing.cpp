// Front of advanced indexing, nonzero and from_blob (ember/ops/indexing.h): index tensors are
// validated and broadcast here, and every index becomes one i64 element-offset tensor over
// the broadcast shape (index_offset_kernel, one launch per index tensor, which is where the
// values are range-checked and negative ones wrapped). The gather and put kernels then see a
// single offset operand whatever the number of index tensors, and iterate with the
// elementwise engines over a "restrided" view of x (stride 0 on the indexed dims), as
// PyTorch's index kernels do. Accumulating puts go through index_add (deterministic on both
// devices) on a zero buffer laid out indexed-dims-first.
#include "ember/ops/indexing.h"

#include <algorithm>

#include "ember/factory.h"
#include "ember/ops/elementwise.h"
#include "ember/ops/index.h"
#include "kernels/indexing.h"

namespace ember::ops {

namespace {

bool is_mask(DType t) { return t == DType::b8 || t == DType::u8; }

struct IndexPlan {
  std::vector<int64_t> dims;  // the indexed dims of x, ascending
  TensorList idx;             // their index tensors
  Shape bshape;               // the broadcast shape of the index tensors
  std::vector<int64_t> rest;  // the other dims of x, in order
  int64_t b_at = 0;           // where bshape starts in the result
  Shape out;                  // the result's shape
};

IndexPlan plan_index(const char* op, const Shape& xs, const TensorList& indices) {
  EMBER_CHECK(indices.size() <= xs.size(), IndexError, "[", op, "] too many indices for a tensor of ",
              int64_t(xs.size()), " dims: got ", int64_t(indices.size()));
  IndexPlan p;
  for (size_t d = 0; d < indices.size(); ++d) {
    const Tensor& t = indices[d];
    if (!t.defined()) continue;
    EMBER_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, DTypeError, "[", op,
                "] tensors used as indices must be i64, i32 or bool, got ", t.dtype());
    p.bshape = p.dims.empty() ? t.sizes() : broadcast_shapes(p.bshape, t.sizes(), op);
    p.dims.push_back(int64_t(d));
    p.idx.push_back(t);
  }
  EMBER_CHECK(!p.dims.empty(), ValueError, "[", op, "] needs at least one index tensor");
  const bool adjacent = p.dims.back() - p.dims.front() + 1 == int64_t(p.dims.size());
  for (int64_t d = 0; d < int64_t(xs.size()); ++d)
    if (std::find(p.dims.begin(), p.dims.end(), d) == p.dims.end()) p.rest.push_back(d);
  p.b_at = adjacent ? p.dims.front() : 0;
  for (int64_t j = 0; j < p.b_at; ++j) p.out.push_back(xs[p.rest[size_t(j)]]);
  for (int64_t s : p.bshape) p.out.push_back(s);
  for (size_t j = size_t(p.b_at); j < p.rest.size(); ++j) p.out.push_back(xs[p.rest[j]]);
  return p;
}

// `t` viewed with `shape` (right-aligned broadcasting; the shapes are known compatible).
Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  const size_t off = shape.size() - size_t(t.dim());
  for (size_t i = 0; i < size_t(t.dim()); ++i)
    st[off + i] = t.sizes()[i] == 1 && shape[off + i] != 1 ? 0 : t.strides()[i];
  return detail::make_view(t, shape, st, t.storage_offset());
}

// sum_k wrap(idx_k) * strides[k] over the broadcast shape (i64, contiguous).
Tensor index_offsets(const char* op, const Shape& xs, const IndexPlan& p, const std::vector<int64_t>& strides,
                     Device device) {
  Tensor off = detail::make_tensor(p.bshape, DType::i64, device);
  fill_(off, 0);
  if (off.numel() == 0) return off;
  for (size_t k = 0; k < p.dims.size(); ++k) {
    // Index tensors may live on the CPU for a CUDA x, as PyTorch allows (a copy).
    const Tensor& ik = p.idx[k];
    Tensor idx = ik.device() == device ? ik : to(ik, device, ik.dtype());
    EMBER_DISPATCH_KERNEL(device, index_offset_kernel, op, broadcast_view(idx, p.bshape), p.dims[k],
                          xs[p.dims[k]], strides[k], off);
  }
  return off;
}

// Strides over the result's shape: `b_strides` on the broadcast dims, `rest_strides` (one
// per entry of p.rest) on the others.
Shape result_strides(const IndexPlan& p, const Shape& b_strides, const std::vector<int64_t>& rest_strides) {
  Shape st;
  for (int64_t j = 0; j < p.b_at; ++j) st.push_back(rest_strides[size_t(j)]);
  for (int64_t s : b_strides) st.push_back(s);
  for (size_t j = size_t(p.b_at); j < p.rest.size(); ++j) st.push_back(rest_strides[j]);
  return st;
}

std::vector<int64_t> strides_of(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> s;
  for (int64_t d : dims) s.push_back(x.strides()[d]);
  return s;
}

}  // namespace

TensorList expand_index_masks(const char* op, const Shape& xs, const TensorList& indices) {
  TensorList out;
  int64_t d = 0;
  for (const Tensor& t : indices) {
    if (t.defined() && is_mask(t.dtype())) {
      EMBER_CHECK(t.dim() > 0, IndexError, "[", op, "] a 0-d mask is not a tensor index here");
      EMBER_CHECK(d + t.dim() <= int64_t(xs.size()), IndexError, "[", op, "] too many indices for a tensor of ",
                  int64_t(xs.size()), " dims: a mask of shape ", t.sizes(), " at dim ", d);
      for (int64_t j = 0; j < t.dim(); ++j)
        EMBER_CHECK(t.sizes()[j] == xs[size_t(d + j)], IndexError, "[", op, "] the shape of the mask ",
                    t.sizes(), " at index ", j, " does not match the shape of the indexed tensor ", xs,
                    " at index ", d + j);
      Tensor nz = nonzero(t);
      const int64_t m = t.dim();
      for (int64_t j = 0; j < m; ++j) out.push_back(detail::make_view(nz, {nz.sizes()[0]}, {m}, j));
      d += m;
      continue;
    }
    if (t.defined())
      EMBER_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, DTypeError, "[", op,
                  "] tensors used as indices must be i64, i32 or bool, got ", t.dtype());
    out.push_back(t);
    ++d;
  }
  EMBER_CHECK(d <= int64_t(xs.size()), IndexError, "[", op, "] too many indices for a tensor of ",
              int64_t(xs.size()), " dims: got ", d);
  return out;
}

Shape index_result_shape(const Shape& x_sizes, const TensorList& indices, const char* op) {
  return plan_index(op, x_sizes, indices).out;
}

Tensor index(const Tensor& x, const TensorList& indices) {
  detail::check_defined("index", x);
  const IndexPlan p = plan_index("index", x.sizes(), indices);
  Tensor off = index_offsets("index", x.sizes(), p, strides_of(x, p.dims), x.device());
  Tensor out = detail::make_tensor(p.out, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor src = detail::make_view(x, p.out, result_strides(p, Shape(p.bshape.size(), 0), strides_of(x, p.rest)),
                                 x.storage_offset());
  Tensor offv = detail::make_view(off, p.out,
                                  result_strides(p, off.strides(), std::vector<int64_t>(p.rest.size(), 0)), 0);
  EMBER_DISPATCH_KERNEL(x.device(), index_gather_kernel, src, offv, out);
  return out;
}

void index_put_(const Tensor& x, const TensorList& indices, const Tensor& values, bool accumulate) {
  detail::check_defined("index_put_", x);
  detail::check_defined("index_put_", values, "values");
  detail::check_no_internal_overlap("index_put_", x);
  const IndexPlan p = plan_index("index_put_", x.sizes(), indices);
  const Shape& xs = x.sizes();
  EMBER_CHECK(values.dim() <= int64_t(p.out.size()), ShapeError, "[index_put_] shape mismatch: values of shape ",
              values.sizes(), " cannot be broadcast to the indexing result of shape ", p.out);
  for (int64_t i = 0; i < values.dim(); ++i) {
    const int64_t v = values.sizes()[size_t(values.dim() - 1 - i)], o = p.out[p.out.size() - 1 - size_t(i)];
    EMBER_CHECK(v == o || v == 1, ShapeError, "[index_put_] shape mismatch: values of shape ", values.sizes(),
                " cannot be broadcast to the indexing result of shape ", p.out);
  }
  Tensor v = values.device() == x.device() && values.dtype() == x.dtype() ? values
                                                                           : to(values, x.device(), x.dtype());
  if (v.storage() == x.storage()) {  // x[i] = x[j]: read everything before writing any of it
    Tensor c = detail::make_tensor(v.sizes(), v.dtype(), v.device());
    copy_(c, v);
    v = c;
  }
  Tensor vb = broadcast_view(v, p.out);
  if (!accumulate) {
    Tensor off = index_offsets("index_put_", xs, p, strides_of(x, p.dims), x.device());
    if (vb.numel() == 0) return;
    Tensor dst = detail::make_view(x, p.out, result_strides(p, Shape(p.bshape.size(), 0), strides_of(x, p.rest)),
                                   x.storage_offset());
    Tensor offv = detail::make_view(off, p.out,
                                    result_strides(p, off.strides(), std::vector<int64_t>(p.rest.size(), 0)), 0);
    EMBER_DISPATCH_KERNEL(x.device(), index_put_kernel, dst, offv, vb);
    return;
  }
  EMBER_CHECK(x.dtype() != DType::b8, DTypeError, "[index_put_] accumulate is not defined for bool tensors");
  // A zero buffer laid out [indexed dims..., other dims...] receives the values by index_add
  // over its first (flattened indexed) dim, then is added to x through a permuted view.
  const size_t K = p.dims.size();
  Shape adv, perm_sizes;
  for (int64_t d : p.dims) adv.push_back(xs[d]);
  std::vector<int64_t> lin(K, 1);
  for (size_t k = K - 1; k > 0; --k) lin[k - 1] = lin[k] * adv[k];
  Tensor flat = index_offsets("index_put_", xs, p, lin, x.device());
  const int64_t nb = flat.numel();
  flat = detail::make_view(flat, {nb}, {1}, 0);
  int64_t rest_numel = 1;
  Shape rest_sizes;
  for (int64_t d : p.rest) {
    rest_numel *= xs[d];
    rest_sizes.push_back(xs[d]);
  }
  // values in [broadcast dims..., other dims...] order, as [nb, rest_numel].
  const int64_t nbd = int64_t(p.bshape.size());
  Shape vs, vst;
  for (int64_t j = 0; j < nbd; ++j) {
    vs.push_back(vb.sizes()[size_t(p.b_at + j)]);
    vst.push_back(vb.strides()[size_t(p.b_at + j)]);
  }
  for (int64_t j = 0; j < int64_t(vb.dim()); ++j) {
    if (j >= p.b_at && j < p.b_at + nbd) continue;
    vs.push_back(vb.sizes()[size_t(j)]);
    vst.push_back(vb.strides()[size_t(j)]);
  }
  Tensor v2 = contiguous(detail::make_view(vb, vs, vst, vb.storage_offset()));
  v2 = detail::make_view(v2, {nb, rest_numel}, {rest_numel, 1}, v2.storage_offset());
  Tensor delta = index_add_into_zeros(v2, 0, flat, {adv.numel(), rest_numel});
  // delta is contiguous over [adv..., rest...]: x's dim d has the stride of its place there.
  Shape ps = adv;
  for (int64_t s : rest_sizes) ps.push_back(s);
  const Shape pst = contiguous_strides(ps);
  Shape dst(xs.size(), 0);
  for (size_t k = 0; k < K; ++k) dst[size_t(p.dims[k])] = pst[k];
  for (size_t j = 0; j < p.rest.size(); ++j) dst[size_t(p.rest[j])] = pst[K + j];
  binary_out(BinaryOp::add, x, detail::make_view(delta, xs, dst, 0), x);
}

Tensor nonzero(const Tensor& x) {
  detail::check_defined("nonzero", x);
  Tensor c = contiguous(x);
  const int64_t n = c.numel();
  Tensor pos = detail::make_tensor({n + 1}, DType::i64, x.device());
  EMBER_DISPATCH_KERNEL(x.device(), nonzero_scan_kernel, c, pos);
  // The one host synchronization (CUDA): the output's size is the count.
  const int64_t total = detail::make_view(pos, {}, {}, n).item<int64_t>();
  Tensor out = detail::make_tensor({total, x.dim()}, DType::i64, x.device());
  if (total > 0 && x.dim() > 0) EMBER_DISPATCH_KERNEL(x.device(), nonzero_fill_kernel, c, pos, out);
  return out;
}

Tensor from_blob(void* data, const Shape& sizes, const std::optional<Shape>& strides,
                 std::function<void(void*)> deleter, DType dtype, Device device) {
  const Shape st = strides ? *strides : contiguous_strides(sizes);
  EMBER_CHECK(st.size() == sizes.size(), ShapeError, "[from_blob] strides ", st, " do not match shape ", sizes);
  int64_t extent = 1;  // elements spanned, from the first to the last
  for (size_t d = 0; d < sizes.size(); ++d) {
    EMBER_CHECK(sizes[d] >= 0, ShapeError, "[from_blob] negative size in shape ", sizes);
    EMBER_CHECK(st[d] >= 0, ShapeError, "[from_blob] negative strides are not supported, got ", st);
    if (sizes[d] > 0) extent += (sizes[d] - 1) * st[d];
  }
  if (sizes.numel() == 0) extent = 0;
  EMBER_CHECK(data != nullptr || extent == 0, ValueError, "[from_blob] data is a null pointer");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, size_t(extent) * itemsize(dtype), device, std::move(deleter));
  impl->sizes = sizes;
  impl->strides = st;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace ember::ops

namespace ember {

Tensor eye(int64_t n, TensorOptions options) { return eye(n, n, options); }

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  EMBER_CHECK(n >= 0 && m >= 0, ShapeError, "[eye] sizes must be non-negative, got ", n, " and ", m);
  const TensorOptions i64 = TensorOptions(DType::i64).device(options.device_);
  Tensor rows = arange(n, i64), cols = arange(m, i64);
  Tensor out = ops::to(ops::binary(ops::BinaryOp::eq, detail::make_view(rows, {n, 1}, {1, 1}, 0), cols),
                       options.device_, options.dtype_);
  if (options.requires_grad_) out.requires_grad_(true);
  return out;
}

Tensor from_blob(void* data, const Shape& sizes, TensorOptions options) {
  return from_blob(data, sizes, contiguous_strides(sizes), {}, options);
}
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, TensorOptions options) {
  return from_blob(data, sizes, strides, {}, options);
}
Tensor from_blob(void* data, const Shape& sizes, std::function<void(void*)> deleter, TensorOptions options) {
  return from_blob(data, sizes, contiguous_strides(sizes), std::move(deleter), options);
}
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, std::function<void(void*)> deleter,
                 TensorOptions options) {
  Tensor t = ops::from_blob(data, sizes, strides, std::move(deleter), options.dtype_, options.device_);
  if (options.requires_grad_) t.requires_grad_(true);
  return t;
}

}  // namespace ember
