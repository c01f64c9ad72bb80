// Front of the indexing/joining family: shapes, dtypes and devices are validated here once,
// outputs are allocated contiguous, and the backend drivers only iterate. Inputs that a
// driver wants contiguous (index_select's source, index_add's src, index tensors) are made
// so here, which keeps every driver to one layout case.
#include "ember/ops/index.h"

#include "ember/ops/elementwise.h"
#include "kernels/index.h"

namespace ember::ops {

namespace {

void check_index_dtype(const char* op, const Tensor& index, const char* what = "index") {
  EMBER_CHECK(index.dtype() == DType::i64 || index.dtype() == DType::i32, DTypeError, "[", op,
              "] ", what, " must be i64 or i32, got ", index.dtype());
}

// `t` as a contiguous 1-D tensor of its elements (a copy only when t is not contiguous).
Tensor flat_contiguous(const Tensor& t) {
  Tensor c = contiguous(t);
  return detail::make_view(c, {c.numel()}, {1}, c.storage_offset());
}

// A 0-d tensor seen as [1] (gather/scatter_add accept 0-d operands, as PyTorch does).
Tensor at_least_1d(const Tensor& t) {
  if (t.dim() > 0) return t;
  return detail::make_view(t, {1}, {1}, t.storage_offset());
}

Tensor zeros_of(const Shape& sizes, DType dtype, Device device) {
  Tensor z = detail::make_tensor(sizes, dtype, device);
  fill_(z, 0);
  return z;
}

// Checks shared by gather and scatter_add: same rank, index no larger than `bound` in the
// dims other than dim (and, for scatter_add's src, in every dim).
void check_index_within(const char* op, const Tensor& index, const Tensor& bound,
                        const char* bound_name, int64_t skip_dim) {
  EMBER_CHECK(index.dim() == bound.dim(), ShapeError, "[", op, "] index of shape ",
              index.sizes(), " must have as many dims as ", bound_name, " of shape ",
              bound.sizes());
  for (int64_t d = 0; d < index.dim(); ++d)
    EMBER_CHECK(d == skip_dim || index.sizes()[d] <= bound.sizes()[d], ShapeError, "[", op,
                "] index of shape ", index.sizes(), " is larger than ", bound_name, " of shape ",
                bound.sizes(), " in dim ", d);
}

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), ValueError, "[cat] expects a non-empty list of tensors");
  int64_t ref = -1;
  DType dtype = DType::b8;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), ValueError, "[cat] input ", uint64_t(i), " is an undefined tensor");
    EMBER_CHECK(t.dim() > 0, ShapeError, "[cat] input ", uint64_t(i),
                " is zero-dimensional and cannot be concatenated");
    EMBER_CHECK(t.device() == tensors[0].device(), DeviceError, "[cat] input ", uint64_t(i),
                " is on ", t.device(), " but input 0 is on ", tensors[0].device());
    dtype = i == 0 ? t.dtype() : promote_types(dtype, t.dtype());
    if (ref < 0 && !cat_skips(t)) ref = int64_t(i);
  }
  const Device device = tensors[0].device();
  if (ref < 0) return detail::make_tensor({0}, dtype, device);  // every input is [0]
  const Tensor& r = tensors[size_t(ref)];
  const int64_t d = wrap_dim(dim, r.dim(), "cat");
  Shape shape = r.sizes();
  shape[d] = 0;
  TensorList live;
  live.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (cat_skips(t)) continue;
    EMBER_CHECK(t.dim() == r.dim(), ShapeError, "[cat] input ", uint64_t(i), " has shape ",
                t.sizes(), " (", t.dim(), " dims) but input ", ref, " has shape ", r.sizes(),
                " (", r.dim(), " dims)");
    for (int64_t k = 0; k < r.dim(); ++k)
      EMBER_CHECK(k == d || t.sizes()[k] == r.sizes()[k], ShapeError, "[cat] input ",
                  uint64_t(i), " has shape ", t.sizes(), " but input ", ref, " has shape ",
                  r.sizes(), ": sizes must match except in the cat dim ", d, " (dim ", k,
                  " differs)");
    shape[d] += t.sizes()[d];
    live.push_back(t);
  }
  Tensor out = detail::make_tensor(shape, dtype, device);
  if (out.numel() > 0) EMBER_DISPATCH_KERNEL(device, cat_kernel, live, d, out);
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("index_select", x);
  detail::check_defined("index_select", index, "index");
  detail::check_same_device("index_select", x, index);
  check_index_dtype("index_select", index);
  EMBER_CHECK(index.dim() <= 1, ShapeError, "[index_select] index must be 0-d or 1-D, got shape ",
              index.sizes());
  EMBER_CHECK(x.dim() >= 1, ShapeError, "[index_select] input must have at least 1 dim, got a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  Tensor idx = flat_contiguous(index);
  Shape shape = x.sizes();
  shape[d] = idx.numel();
  Tensor out = detail::make_tensor(shape, x.dtype(), x.device());
  EMBER_DISPATCH_KERNEL(x.device(), index_select_kernel, "index_select", contiguous(x), d, idx, out);
  return out;
}

Tensor index_add_into_zeros(const Tensor& src, int64_t dim, const Tensor& index, const Shape& sizes) {
  detail::check_defined("index_add", src, "source");
  detail::check_defined("index_add", index, "index");
  detail::check_same_device("index_add", src, index);
  check_index_dtype("index_add", index);
  EMBER_CHECK(src.dtype() != DType::b8, DTypeError, "[index_add] is not defined for bool tensors");
  EMBER_CHECK(index.dim() <= 1, ShapeError, "[index_add] index must be 0-d or 1-D, got shape ",
              index.sizes());
  EMBER_CHECK(src.dim() == int64_t(sizes.size()) && src.dim() >= 1, ShapeError,
              "[index_add] source of shape ", src.sizes(), " does not fit an output of shape ", sizes);
  const int64_t d = wrap_dim(dim, src.dim(), "index_add");
  for (int64_t k = 0; k < src.dim(); ++k)
    EMBER_CHECK(src.sizes()[k] == (k == d ? index.numel() : sizes[k]), ShapeError,
                "[index_add] source of shape ", src.sizes(), " does not match an output of shape ",
                sizes, " with ", index.numel(), " indices along dim ", d);
  Tensor out = zeros_of(sizes, src.dtype(), src.device());
  if (src.numel() > 0 || index.numel() > 0)
    EMBER_DISPATCH_KERNEL(src.device(), index_add_kernel, "index_add", out, d,
                          flat_contiguous(index), contiguous(src));
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  detail::check_defined("gather", x);
  detail::check_defined("gather", index, "index");
  detail::check_same_device("gather", x, index);
  check_index_dtype("gather", index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_index_within("gather", index, x, "input", d);
  Tensor out = detail::make_tensor(index.sizes(), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  Tensor xx = at_least_1d(x), ii = at_least_1d(index);
  Tensor oo = at_least_1d(out);
  EMBER_DISPATCH_KERNEL(x.device(), gather_kernel, xx, d, ii, oo);
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_defined("scatter_add", x);
  detail::check_defined("scatter_add", index, "index");
  detail::check_defined("scatter_add", src, "source");
  detail::check_same_device("scatter_add", x, index);
  detail::check_same_device("scatter_add", x, src);
  check_index_dtype("scatter_add", index);
  EMBER_CHECK(src.dtype() == x.dtype(), DTypeError, "[scatter_add] source dtype ", src.dtype(),
              " must match the input dtype ", x.dtype());
  EMBER_CHECK(x.dtype() != DType::b8, DTypeError, "[scatter_add] is not defined for bool tensors");
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  check_index_within("scatter_add", index, x, "input", d);
  check_index_within("scatter_add", index, src, "source", -1);
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  copy_(out, x);
  if (index.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(x.device(), scatter_add_kernel, at_least_1d(out), d, at_least_1d(index),
                        at_least_1d(src));
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined("embedding", weight, "weight");
  detail::check_defined("embedding", indices, "indices");
  detail::check_same_device("embedding", weight, indices);
  check_index_dtype("embedding", indices, "indices");
  EMBER_CHECK(weight.dim() == 2, ShapeError,
              "[embedding] weight must be 2-D [num_embeddings, embedding_dim], got shape ",
              weight.sizes());
  const int64_t n = indices.numel(), dim = weight.sizes()[1];
  Shape shape = indices.sizes();
  shape.push_back(dim);
  Tensor out = detail::make_tensor(shape, weight.dtype(), weight.device());
  EMBER_DISPATCH_KERNEL(weight.device(), index_select_kernel, "embedding", contiguous(weight), 0,
                        flat_contiguous(indices), detail::make_view(out, {n, dim}, {dim, 1}, 0));
  return out;
}

Tensor embedding_backward(const Tensor& grad, const Tensor& indices, int64_t num_weights) {
  detail::check_defined("embedding_backward", grad, "gradient");
  detail::check_same_device("embedding_backward", grad, indices);  // the kernel reads both
  check_index_dtype("embedding_backward", indices, "indices");
  EMBER_CHECK(grad.dim() == indices.dim() + 1, ShapeError, "[embedding_backward] gradient of shape ",
              grad.sizes(), " does not match indices of shape ", indices.sizes());
  for (int64_t k = 0; k < indices.dim(); ++k)
    EMBER_CHECK(grad.sizes()[k] == indices.sizes()[k], ShapeError,
                "[embedding_backward] gradient of shape ", grad.sizes(),
                " does not match indices of shape ", indices.sizes());
  const int64_t dim = grad.sizes().back();
  Tensor g = contiguous(grad);
  g = detail::make_view(g, {indices.numel(), dim}, {dim, 1}, g.storage_offset());
  Tensor out = zeros_of({num_weights, dim}, grad.dtype(), grad.device());
  if (indices.numel() > 0)
    EMBER_DISPATCH_KERNEL(grad.device(), index_add_kernel, "embedding", out, 0,
                          flat_contiguous(indices), g);
  return out;
}

namespace {
Tensor tri(const char* op, const Tensor& x, int64_t diagonal, bool upper) {
  detail::check_defined(op, x);
  EMBER_CHECK(x.dim() >= 2, ShapeError, "[", op, "] input must have at least 2 dims, got shape ",
              x.sizes());
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), tri_kernel, x, out, diagonal, upper);
  return out;
}
}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return tri("tril", x, diagonal, false); }
Tensor triu(const Tensor& x, int64_t diagonal) { return tri("triu", x, diagonal, true); }

Tensor dropout_mask(const Shape& sizes, Device device, Generator::State s, double p) {
  EMBER_CHECK(p >= 0 && p < 1, ValueError, "[dropout] p must be in [0, 1), got ", p);
  Tensor mask = detail::make_tensor(sizes, DType::b8, device);
  if (mask.numel() > 0) EMBER_DISPATCH_KERNEL(device, dropout_mask_kernel, mask, s, p);
  return mask;
}

Tensor masked_scale(const Tensor& x, const Tensor& mask, double scale) {
  detail::check_defined("dropout", x);
  detail::check_same_device("dropout", x, mask);
  EMBER_CHECK(is_floating(x.dtype()), DTypeError, "[dropout] needs a floating tensor, got ",
              x.dtype());
  EMBER_CHECK(mask.dtype() == DType::b8 && mask.sizes() == x.sizes(), ShapeError,
              "[dropout] mask of shape ", mask.sizes(), " and dtype ", mask.dtype(),
              " must be bool with the input's shape ", x.sizes());
  Tensor out = detail::make_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) EMBER_DISPATCH_KERNEL(x.device(), masked_scale_kernel, x, mask, scale, out);
  return out;
}

}  // namespace ember::ops
