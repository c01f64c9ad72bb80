// Differentiable views and shape ops. A view shares storage (ember::detail::make_view); its
// VJP maps the gradient back to the input's shape. Slicing-like views scatter the gradient
// into zeros through the same view function, so double backward differentiates through it.
#include <algorithm>

#include "inplace.h"

namespace ember {

using autograd::record;

namespace {
// Strides for viewing (sizes, strides) as `shape` without copying, if possible (the
// chunk-matching rule PyTorch uses: dims can merge or split only within contiguous chunks).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& shape) {
  Shape out(shape.size(), 1);
  if (sizes.empty()) return out;
  if (sizes.numel() == 0) return contiguous_strides(shape);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    bool chunk_ends = d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_base_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// Resolves one -1 in `shape` against numel; checks the element count.
Shape infer_shape(const char* op, const Shape& in, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      EMBER_CHECK(infer < 0, ShapeError, "[", op, "] only one dimension can be -1 in ", shape);
      infer = int64_t(i);
    } else {
      EMBER_CHECK(shape[i] >= 0, ShapeError, "[", op, "] invalid size ", shape[i], " in ", shape);
      known *= shape[i];
    }
  }
  const int64_t numel = in.numel();
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, ShapeError, "[", op, "] shape ", shape,
                " is invalid for an input of shape ", in, " (", numel, " elements)");
    shape[size_t(infer)] = numel / known;
  }
  EMBER_CHECK(shape.numel() == numel, ShapeError, "[", op, "] shape ", shape,
              " is invalid for an input of shape ", in, " (", numel, " elements)");
  return shape;
}

Tensor raw_view(const Tensor& x, const Shape& sizes, const Shape& strides, int64_t offset) {
  return ember::detail::make_view(x, sizes, strides, offset);
}

// The gradient of a view that selects part of x: zeros of x's shape with g written through
// `view_of` (the same view applied to those zeros). Recorded so double backward works.
template <class ViewOf>
Tensor scatter_into_zeros(const Tensor& g, const Shape& sizes, ViewOf view_of) {
  Tensor z = ember::detail::make_tensor(sizes, g.dtype(), g.device());
  ops::fill_(z, 0);
  {
    NoGradGuard no_grad;
    ops::copy_(view_of(z), g);
  }
  return record("view_backward", z, {g}, [view_of](const Tensor& gg) -> TensorList { return {view_of(gg)}; });
}
}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  ember::detail::check_defined("view", x);
  Shape s = infer_shape("view", x.sizes(), shape);
  auto st = view_strides(x.sizes(), x.strides(), s);
  EMBER_CHECK(st.has_value(), ShapeError, "[view] a tensor of shape ", x.sizes(), " and strides ",
              x.strides(), " cannot be viewed as ", s,
              " without a copy; use reshape() (or contiguous() first)");
  return record("view", raw_view(x, s, *st, x.storage_offset()), {x},
                [in = x.sizes()](const Tensor& g) -> TensorList { return {reshape(g, in)}; });
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  ember::detail::check_defined("reshape", x);
  Shape s = infer_shape("reshape", x.sizes(), shape);
  if (view_strides(x.sizes(), x.strides(), s)) return view(x, s);
  return view(contiguous(x), s);
}

Tensor permute(const Tensor& x, const Shape& dims) {
  ember::detail::check_defined("permute", x);
  const int64_t n = x.dim();
  EMBER_CHECK(int64_t(dims.size()) == n, ShapeError, "[permute] got ", int64_t(dims.size()),
              " dims ", dims, " for a tensor with ", n, " dims");
  Shape sizes(static_cast<size_t>(n), 0), strides(static_cast<size_t>(n), 0), inverse(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    EMBER_CHECK(inverse[d] == -1, ShapeError, "[permute] dim ", d, " repeats in ", dims);
    inverse[d] = i;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  Tensor result = record("permute", raw_view(x, sizes, strides, x.storage_offset()), {x},
                         [inverse](const Tensor& g) -> TensorList { return {permute(g, inverse)}; });
  EMBER_TRACE(result, "permute", {x}, {{"dims", dims}});
  return result;
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  ember::detail::check_defined("transpose", x);
  const int64_t n = x.dim();
  Shape dims(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) dims[i] = i;
  if (n == 0) return permute(x, dims);
  std::swap(dims[wrap_dim(dim0, n, "transpose")], dims[wrap_dim(dim1, n, "transpose")]);
  return permute(x, dims);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  ember::detail::check_defined("slice", x);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[slice] cannot slice a 0-d tensor");
  EMBER_CHECK(step > 0, ValueError, "[slice] step must be positive, got ", step);
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  const int64_t n = x.sizes()[d];
  const int64_t given_start = start, given_end = end;  // as written: -1 stays "the last" for export
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  Tensor result = record("slice", raw_view(x, sizes, strides, x.storage_offset() + start * x.strides()[d]), {x},
                         [in = x.sizes(), d, start, end, step](const Tensor& g) -> TensorList {
                           return {scatter_into_zeros(g, in, [=](const Tensor& t) { return slice(t, d, start, end, step); })};
                         });
  EMBER_TRACE(result, "slice", {x}, {{"dim", d}, {"start", given_start}, {"end", given_end}, {"step", step}});
  return result;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  ember::detail::check_defined("narrow", x);
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.sizes()[d];
  if (start < 0) start += n;
  // `length <= n - start`, not `start + length <= n`: the sum of two huge values wraps negative.
  EMBER_CHECK(start >= 0 && start <= n && length >= 0 && length <= n - start, IndexError, "[narrow] start ",
              start, " and length ", length, " are out of bounds for dim ", d, " of size ", n);
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  ember::detail::check_defined("select", x);
  EMBER_CHECK(x.dim() > 0, ShapeError, "[select] cannot select from a 0-d tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.sizes()[d];
  EMBER_CHECK(index >= -n && index < n, IndexError, "[select] index ", index,
              " is out of range for dim ", d, " of size ", n);
  const int64_t given = index;  // as written: -1 stays "the last" for export
  if (index < 0) index += n;
  Shape sizes = x.sizes(), strides = x.strides();
  sizes.erase(size_t(d));
  strides.erase(size_t(d));
  Tensor result = record("select", raw_view(x, sizes, strides, x.storage_offset() + index * x.strides()[d]), {x},
                         [in = x.sizes(), d, index](const Tensor& g) -> TensorList {
                           return {scatter_into_zeros(g, in, [=](const Tensor& t) { return select(t, d, index); })};
                         });
  EMBER_TRACE(result, "select", {x}, {{"dim", d}, {"index", given}});
  return result;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  ember::detail::check_defined("expand", x);
  const size_t n = shape.size(), xd = size_t(x.dim());
  EMBER_CHECK(n >= xd, ShapeError, "[expand] cannot expand shape ", x.sizes(), " to ", shape,
              " (fewer dims)");
  Shape sizes(n), strides(n);
  for (size_t i = 0; i < n; ++i) {
    if (i < n - xd) {
      EMBER_CHECK(shape[i] >= 0, ShapeError, "[expand] size ", shape[i], " is not allowed for new leading dim ",
                  int64_t(i), " in ", shape, " (sizes are >= 0; -1 keeps an existing dim only)");
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    size_t j = i - (n - xd);
    int64_t have = x.sizes()[j], want = shape[i] == -1 ? have : shape[i];
    EMBER_CHECK(want >= 0, ShapeError, "[expand] size ", want, " at dim ", int64_t(i), " of ", shape,
                " is negative (-1 keeps the dim's size)");
    EMBER_CHECK(have == want || have == 1, ShapeError, "[expand] cannot expand shape ", x.sizes(),
                " to ", shape, " (dim ", int64_t(i), ": ", have, " vs ", want, ")");
    sizes[i] = want;
    strides[i] = have == want ? x.strides()[j] : 0;
  }
  // A view whose element count passes int64 would be indexed with wrapped offsets (sums of 0
  // or NaN): refused here, naming expand, as a factory refuses such a shape.
  int64_t count = 1;
  bool overflow = false;
  for (int64_t s : sizes) overflow |= __builtin_mul_overflow(count, s, &count);
  EMBER_CHECK(!overflow || std::find(sizes.begin(), sizes.end(), int64_t(0)) != sizes.end(),
              ShapeError, "[expand] the shape ", shape, " has more than 2^63 elements");
  if (sizes == x.sizes()) return x;
  return record("expand", raw_view(x, sizes, strides, x.storage_offset()), {x},
                [in = x.sizes()](const Tensor& g) -> TensorList { return {sum_to(g, in)}; });
}

Tensor squeeze(const Tensor& x, std::optional<int64_t> dim) {
  ember::detail::check_defined("squeeze", x);
  Shape sizes;
  if (dim) {
    int64_t d = wrap_dim(*dim, x.dim(), "squeeze");
    sizes = x.sizes();
    if (x.dim() > 0 && sizes[d] == 1) sizes.erase(size_t(d));
  } else {
    for (int64_t s : x.sizes())
      if (s != 1) sizes.push_back(s);
  }
  return view(x, sizes);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  ember::detail::check_defined("unsqueeze", x);
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape sizes = x.sizes();
  sizes.insert(size_t(d), 1);
  return view(x, sizes);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  ember::detail::check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  EMBER_CHECK(s <= e, ShapeError, "[flatten] start_dim ", s, " comes after end_dim ", e);
  Shape sizes;
  for (int64_t i = 0; i < s; ++i) sizes.push_back(x.sizes()[i]);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.sizes()[i];
  sizes.push_back(merged);
  for (int64_t i = e + 1; i < x.dim(); ++i) sizes.push_back(x.sizes()[i]);
  return reshape(x, sizes);
}

Tensor unflatten(const Tensor& x, int64_t dim, const Shape& sizes) {
  ember::detail::check_defined("unflatten", x);
  const int64_t d = wrap_dim(dim, x.dim(), "unflatten");
  const int64_t n = x.sizes()[d];
  EMBER_CHECK(sizes.size() > 0, ShapeError, "[unflatten] sizes must not be empty");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      EMBER_CHECK(infer < 0, ShapeError, "[unflatten] only one size may be -1, got ", sizes);
      infer = int64_t(i);
      continue;
    }
    EMBER_CHECK(sizes[i] >= 0, ShapeError, "[unflatten] size ", sizes[i], " in ", sizes, " is negative");
    EMBER_CHECK(!__builtin_mul_overflow(known, sizes[i], &known), ShapeError, "[unflatten] sizes ", sizes,
                " overflow int64");
  }
  Shape split = sizes;
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && n % known == 0, ShapeError, "[unflatten] sizes ", sizes,
                " cannot be inferred to split dim ", d, " of size ", n);
    split[size_t(infer)] = n / known;
  } else {
    EMBER_CHECK(known == n, ShapeError, "[unflatten] sizes ", sizes, " multiply to ", known, ", not to dim ", d,
                "'s size ", n);
  }
  Shape out;
  for (int64_t i = 0; i < d; ++i) out.push_back(x.sizes()[i]);
  for (int64_t s : split) out.push_back(s);
  for (int64_t i = d + 1; i < x.dim(); ++i) out.push_back(x.sizes()[i]);
  return reshape(x, out);  // splitting one dim is always a view
}

Tensor contiguous(const Tensor& x) {
  ember::detail::check_defined("contiguous", x);
  if (x.is_contiguous()) return x;
  return record("contiguous", ops::contiguous(x), {x},
                [](const Tensor& g) -> TensorList { return {g}; });
}

Tensor contiguous(const Tensor& x, MemoryFormat format) {
  ember::detail::check_defined("contiguous", x);
  Tensor out = ops::contiguous(x, format);
  if (out.is_same(x)) return x;
  return record("contiguous", std::move(out), {x}, [](const Tensor& g) -> TensorList { return {g}; });
}

Tensor clone(const Tensor& x) {
  ember::detail::check_defined("clone", x);
  Tensor out = ember::detail::make_tensor(x.sizes(), x.dtype(), x.device());
  ops::copy_(out, x);
  return record("clone", out, {x}, [](const Tensor& g) -> TensorList { return {g}; });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  EMBER_OP_SCOPE("sum_to");
  if (g.sizes() == shape) return g;
  const int64_t lead = g.dim() - int64_t(shape.size());
  EMBER_CHECK(lead >= 0, ShapeError, "[sum_to] cannot reduce shape ", g.sizes(), " to ", shape);
  Shape dims;
  for (int64_t i = 0; i < g.dim(); ++i)
    if (i < lead || (shape[size_t(i - lead)] == 1 && g.sizes()[i] != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? g : sum(g, dims, true);
  return r.sizes() == shape ? r : reshape(r, shape);
}

}  // namespace ember
