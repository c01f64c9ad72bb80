// Differentiable reductions: each forward (an ops::reduce / ops::arg_reduce call) beside its
// VJP. The VJPs are written with differentiable ember ops in the incoming gradient and the
// saved input, so double backward works; masks (which element was the max, ties) are
// constants computed with ops:: kernels.
//
// Every VJP starts from `unreduce`: the gradient with the reduced dims put back as size 1 (when
// !keepdim) and expanded to the input's shape.
#include <cmath>

#include "ember/factory.h"
#include "ember/ops/reduce.h"
#include "inplace.h"
#include "autocast_policy.h"

namespace ember {

using autograd::record;
using autograd::save;
using ops::BinaryOp;
using ops::ReduceOp;

namespace {

Tensor unreduce(const Tensor& g, const Shape& sizes, const Shape& rdims, bool keepdim) {
  Tensor gk = keepdim ? g : reshape(g, ops::reduce_shape(sizes, rdims, true));
  return expand(gk, sizes);
}

// A reduction's output (fresh and contiguous) seen in its keepdim shape, outside the graph.
Tensor keepdim_view(const Tensor& y, const Shape& sizes, const Shape& rdims) {
  Shape shape = ops::reduce_shape(sizes, rdims, true);
  EMBER_CHECK(y.is_contiguous() && y.numel() == shape.numel(), Error,
              "[reduce] internal error: output of shape ", y.sizes(), " is not a reduction of ",
              sizes);
  return ember::detail::make_view(y, shape, contiguous_strides(shape), y.storage_offset());
}

Tensor scalar_like(double v, const Tensor& t) { return ops::wrap_scalar(v, t); }
Tensor as_dtype(const Tensor& t, DType dtype) { return ops::to(t, t.device(), dtype); }

// Weights that split a gradient evenly among the elements equal to their extremum:
// (x == y) / count(x == y) over the reduced dims, in `dtype`.
Tensor tie_weights(const Tensor& x, const Tensor& y_keep, const Shape& rdims, DType dtype) {
  Tensor mask = as_dtype(ops::binary(BinaryOp::eq, x, y_keep), dtype);
  Tensor count = ops::reduce(ReduceOp::sum, mask, rdims, true);
  return ops::binary(BinaryOp::div, mask, count);
}

Tensor amax_amin(const char* name, ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim) {
  return record(name, ops::reduce(op, x, dims, keepdim), {x},
                [x = save(x), dims, keepdim, name](const Tensor& g, const Tensor& y) -> TensorList {
                  const Shape rd = ops::reduce_dims(name, dims, x->dim());
                  Tensor w = tie_weights(x.get(), keepdim_view(y, x->sizes(), rd), rd, g.dtype());
                  return {mul(unreduce(g, x->sizes(), rd, keepdim), w)};
                });
}

// max/min(dim): the gradient goes to the reported index (a one-hot mask along dim).
ValuesIndices max_min(const char* name, bool is_max, const Tensor& x, int64_t dim, bool keepdim) {
  EMBER_OP_SCOPE(name);
  ValuesIndices r = ops::arg_reduce(is_max, x, dim, keepdim, /*want_values=*/true);
  r.values = record(name, r.values, {x},
                    [sizes = x.sizes(), dim, keepdim, idx = save(r.indices)](const Tensor& g) -> TensorList {
                      if (sizes.empty()) return {g};  // a 0-d input: the one element
                      const int64_t d = wrap_dim(dim, int64_t(sizes.size()), "max");
                      Shape pos_shape(sizes.size(), 1);
                      pos_shape[size_t(d)] = sizes[size_t(d)];
                      Tensor pos = arange(sizes[size_t(d)], TensorOptions(DType::i64).device(g.device()));
                      pos = ember::detail::make_view(pos, pos_shape, contiguous_strides(pos_shape), 0);
                      Tensor onehot = ops::binary(BinaryOp::eq, pos, keepdim_view(idx.get(), sizes, {d}));
                      return {mul(unreduce(g, sizes, {d}, keepdim), as_dtype(onehot, g.dtype()))};
                    });
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  EMBER_OP_SCOPE("sum");
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::sum, x))
      return sum((*c)[0], dims, keepdim);
  Tensor result = record("sum", ops::reduce(ReduceOp::sum, x, dims, keepdim), {x},
                         [sizes = x.sizes(), dims, keepdim](const Tensor& g) -> TensorList {
                           const Shape rd = ops::reduce_dims("sum", dims, int64_t(sizes.size()));
                           return {unreduce(g, sizes, rd, keepdim)};
                         });
  EMBER_TRACE(result, "sum", {x}, {{"dims", dims}, {"keepdim", keepdim}});
  return result;
}

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  EMBER_OP_SCOPE("mean");
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::mean, x))
      return mean((*c)[0], dims, keepdim);
  Tensor result = record("mean", ops::reduce(ReduceOp::mean, x, dims, keepdim), {x},
                         [sizes = x.sizes(), dims, keepdim](const Tensor& g) -> TensorList {
                           const Shape rd = ops::reduce_dims("mean", dims, int64_t(sizes.size()));
                           const double n = double(ops::reduce_count(sizes, rd));
                           return {unreduce(div(g, scalar_like(n, g)), sizes, rd, keepdim)};
                         });
  EMBER_TRACE(result, "mean", {x}, {{"dims", dims}, {"keepdim", keepdim}});
  return result;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return amax_amin("amax", ReduceOp::amax, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return amax_amin("amin", ReduceOp::amin, x, dims, keepdim);
}

ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim) { return max_min("max", true, x, dim, keepdim); }
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim) { return max_min("min", false, x, dim, keepdim); }

// Indices are not differentiable.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return ops::arg_reduce(true, x, dim, keepdim, false).indices;
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return ops::arg_reduce(false, x, dim, keepdim, false).indices;
}

// d var / dx = 2 (x - mean) / (n - correction).
Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return record("var", ops::reduce(ReduceOp::var, x, dims, keepdim, {correction, 2}), {x},
                [x = save(x), dims, correction, keepdim](const Tensor& g) -> TensorList {
                  const Shape rd = ops::reduce_dims("var", dims, x->dim());
                  const double denom = std::max(0.0, double(ops::reduce_count(x->sizes(), rd) - correction));
                  Tensor centered = sub(x.get(), mean(x.get(), rd, true));
                  Tensor gs = mul(g, scalar_like(2.0 / denom, g));
                  return {mul(centered, unreduce(gs, x->sizes(), rd, keepdim))};
                });
}

// d std / dx = (x - mean) / ((n - correction) std), and 0 where std == 0 (as PyTorch).
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  return record("std", ops::reduce(ReduceOp::std, x, dims, keepdim, {correction, 2}), {x},
                [x = save(x), dims, correction, keepdim](const Tensor& g, const Tensor& y) -> TensorList {
                  const Shape rd = ops::reduce_dims("std", dims, x->dim());
                  const double denom = std::max(0.0, double(ops::reduce_count(x->sizes(), rd) - correction));
                  Tensor centered = sub(x.get(), mean(x.get(), rd, true));
                  Tensor zero = ops::binary(BinaryOp::eq, y, scalar_like(0.0, y));
                  Tensor gs = where(zero, 0.0, div(g, mul(y, scalar_like(denom, y))));
                  return {mul(centered, unreduce(gs, x->sizes(), rd, keepdim))};
                });
}

Tensor norm(const Tensor& x, double p, const Shape& dims, bool keepdim) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::norm, x))
      return norm((*c)[0], p, dims, keepdim);
  return record("norm", ops::reduce(ReduceOp::norm, x, dims, keepdim, {1, p}), {x},
                [x = save(x), p, dims, keepdim](const Tensor& g, const Tensor& y) -> TensorList {
                  const Shape rd = ops::reduce_dims("norm", dims, x->dim());
                  const Shape& sizes = x->sizes();
                  if (p == 0) {  // piecewise constant
                    Tensor z = ember::detail::make_tensor(sizes, g.dtype(), g.device());
                    ops::fill_(z, 0);
                    return {z};
                  }
                  if (p == 1) return {mul(unreduce(g, sizes, rd, keepdim), ops::unary(ops::UnaryOp::sign, x.get()))};
                  if (std::isinf(p)) {  // the gradient of max|x| (or min|x|), split among ties
                    Tensor ax = ops::unary(ops::UnaryOp::abs, x.get());
                    Tensor w = tie_weights(ax, keepdim_view(y, sizes, rd), rd, g.dtype());
                    w = ops::binary(BinaryOp::mul, w, ops::unary(ops::UnaryOp::sign, x.get()));
                    return {mul(unreduce(g, sizes, rd, keepdim), w)};
                  }
                  // x |x|^(p-2) g / y^(p-1), with 0 where y == 0 (and where x == 0 for p < 2).
                  Tensor zero = ops::binary(BinaryOp::eq, y, scalar_like(0.0, y));
                  Tensor gs = where(zero, 0.0, p == 2 ? div(g, y) : div(g, pow(y, p - 1)));
                  Tensor gx = mul(x.get(), unreduce(gs, sizes, rd, keepdim));
                  if (p == 2) return {gx};
                  gx = mul(gx, pow(abs(x.get()), p - 2));
                  if (p < 2) gx = where(ops::binary(BinaryOp::eq, x.get(), scalar_like(0.0, x.get())), 0.0, gx);
                  return {gx};
                });
}

}  // namespace ember
