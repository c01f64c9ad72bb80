// Front of the reduce family: dims, dtypes and output shapes are decided here; the input is
// handed to the backend as a 3-D view [O, R, K].
//
// Note [reduce geometry]: output element o*K + k reduces in[o, :, k]. Size-1 dims are dropped
// (they change neither the output order nor a row-major index over the reduced dims). When
// the remaining reduced dims are one consecutive block, the kept dims before it (O), the block
// (R) and the kept dims after it (K) each merge into one strided dim if their strides allow.
// Then, without a copy:
//   rows:    K == 1 (or O == 1) and R has stride 1 -> each output reduces a contiguous run;
//   columns: the K (or, with K == 1, the O) dim has stride 1 -> outputs are contiguous
//            columns, reduced down strided rows (e.g. sum over dim 0 of a [N, C] matrix).
// Anything else is permuted (kept dims first, reduced dims last, each in their original
// order) and copied contiguous: rows of a [M, R] matrix. In every case an index along R is
// the row-major index over the reduced dims, which is what argmax/max(dim) report.
#include "ember/ops/reduce.h"

#include <cmath>
#include <vector>

#include "ember/ops/elementwise.h"
#include "kernels/reduce.h"

namespace ember::ops {

namespace {

struct Dim {
  int64_t size;
  int64_t stride;
};

// Merges dims (outermost first) into one when they are jointly strided; {1, 0} when empty.
std::optional<Dim> merge(const std::vector<Dim>& ds) {
  if (ds.empty()) return Dim{1, 0};
  Dim m = ds.back();
  for (size_t i = ds.size() - 1; i-- > 0;) {
    if (ds[i].stride != m.stride * m.size) return std::nullopt;
    m.size *= ds[i].size;
  }
  return m;
}

Tensor view3(const Tensor& x, int64_t o, int64_t os, int64_t r, int64_t rs, int64_t k, int64_t ks) {
  return detail::make_view(x, {o, r, k}, {os, rs, ks}, x.storage_offset());
}

// The [O, R, K] view the kernels consume (Note [reduce geometry]).
Tensor reduce_view(const Tensor& x, const Shape& rdims) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : rdims) reduced[size_t(d)] = true;

  std::vector<Dim> pre, red, post;
  bool block = true;  // the reduced dims are consecutive (ignoring size-1 dims)
  for (int64_t d = 0; d < nd; ++d) {
    const Dim dim{x.sizes()[d], x.strides()[d]};
    if (dim.size == 1) continue;
    if (reduced[size_t(d)]) {
      if (!post.empty()) block = false;
      red.push_back(dim);
    } else {
      (red.empty() ? pre : post).push_back(dim);
    }
  }
  if (block) {
    auto o = merge(pre), r = merge(red), k = merge(post);
    if (o && r && k) {
      if (r->size <= 1) r->stride = 1;
      if (k->size == 1) k->stride = 1;
      if (k->size == 1 && r->stride == 1) return view3(x, o->size, o->stride, r->size, 1, 1, 1);
      if (o->size == 1 && r->stride == 1) return view3(x, k->size, k->stride, r->size, 1, 1, 1);
      if (k->size > 1 && k->stride == 1)
        return view3(x, o->size, o->stride, r->size, r->stride, k->size, 1);
      if (k->size == 1 && o->stride == 1) return view3(x, 1, 0, r->size, r->stride, o->size, 1);
    }
  }
  // Copy: kept dims first, then reduced dims, into a contiguous [M, R].
  Shape sizes, strides;
  int64_t m = 1, r = 1;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < nd; ++d)
      if (reduced[size_t(d)] == (pass == 1)) {
        sizes.push_back(x.sizes()[d]);
        strides.push_back(x.strides()[d]);
        (pass == 0 ? m : r) *= x.sizes()[d];
      }
  Tensor c = contiguous(detail::make_view(x, sizes, strides, x.storage_offset()));
  return view3(c, m, r, r, 1, 1, 1);
}

bool is_arg_like(ReduceOp op, const ReduceParams& p) {
  return op == ReduceOp::amax || op == ReduceOp::amin || (op == ReduceOp::norm && std::isinf(p.p));
}

}  // namespace

const char* op_name(ReduceOp op) {
  static const char* names[] = {"sum", "mean", "amax", "amin", "var", "std", "norm"};
  return names[int(op)];
}

Shape reduce_dims(const char* op, const Shape& dims, int64_t ndim) {
  Shape out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(size_t(std::max<int64_t>(ndim, 1)), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    EMBER_CHECK(!seen[size_t(w)], ValueError, "[", op, "] dim ", w, " appears more than once in ",
                dims);
    seen[size_t(w)] = true;
  }
  for (int64_t d = 0; d < ndim; ++d)
    if (seen[size_t(d)]) out.push_back(d);
  return out;  // a 0-d tensor's dim 0 / -1 reduces nothing
}

Shape reduce_shape(const Shape& sizes, const Shape& rdims, bool keepdim) {
  Shape out;
  size_t j = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    const bool r = j < rdims.size() && rdims[j] == int64_t(d);
    if (r) ++j;
    if (!r) out.push_back(sizes[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t reduce_count(const Shape& sizes, const Shape& rdims) {
  int64_t n = 1;
  for (int64_t d : rdims) n *= sizes[size_t(d)];
  return n;
}

DType reduce_result_dtype(ReduceOp op, DType input) {
  switch (op) {
    case ReduceOp::sum: return is_floating(input) ? input : DType::i64;
    case ReduceOp::amax:
    case ReduceOp::amin: return input;
    case ReduceOp::mean:
    case ReduceOp::var:
    case ReduceOp::std:
    case ReduceOp::norm:
      EMBER_CHECK(is_floating(input), DTypeError, "[", op_name(op),
                  "] expects a floating-point input, got ", input,
                  " (cast it first, e.g. x.to(DType::f32))");
      return input;
  }
  return input;
}

Tensor reduce(ReduceOp op, const Tensor& x, const Shape& dims, bool keepdim,
              const ReduceParams& params) {
  const char* name = op_name(op);
  detail::check_defined(name, x);
  const DType dt = reduce_result_dtype(op, x.dtype());
  const Shape rdims = reduce_dims(name, dims, x.dim());
  const int64_t count = reduce_count(x.sizes(), rdims);
  EMBER_CHECK(count > 0 || !is_arg_like(op, params), IndexError, "[", name,
              "] cannot reduce over an empty dim (input shape ", x.sizes(), ", dims ", rdims,
              "): the result has no identity");
  Tensor out = detail::make_tensor(reduce_shape(x.sizes(), rdims, keepdim), dt, x.device());
  if (out.numel() == 0) return out;
  Tensor in = reduce_view(x, rdims);
  EMBER_DISPATCH_KERNEL(x.device(), reduce_kernel, op, in, out, params);
  return out;
}

ValuesIndices arg_reduce(bool is_max, const Tensor& x, std::optional<int64_t> dim, bool keepdim,
                         bool want_values) {
  const char* name = want_values ? (is_max ? "max" : "min") : (is_max ? "argmax" : "argmin");
  detail::check_defined(name, x);
  const Shape rdims = dim ? reduce_dims(name, {*dim}, x.dim()) : reduce_dims(name, {}, x.dim());
  EMBER_CHECK(reduce_count(x.sizes(), rdims) > 0, IndexError, "[", name,
              "] cannot reduce over an empty dim (input shape ", x.sizes(), ", dims ", rdims, ")");
  const Shape shape = reduce_shape(x.sizes(), rdims, keepdim);
  ValuesIndices out;
  out.indices = detail::make_tensor(shape, DType::i64, x.device());
  if (want_values) out.values = detail::make_tensor(shape, x.dtype(), x.device());
  if (out.indices.numel() == 0) return out;
  Tensor in = reduce_view(x, rdims);
  EMBER_DISPATCH_KERNEL(x.device(), arg_reduce_kernel, is_max, in, out.values, out.indices);
  return out;
}

}  // namespace ember::ops
