// Front of the elementwise family: dtype promotion, broadcasting, aliasing and devices are
// decided here once; the backend drivers only iterate.
#include "ember/ops/elementwise.h"

#include "kernels/elementwise.h"

namespace ember::ops {

namespace {
int category(DType t) { return t == DType::b8 ? 0 : is_floating(t) ? 2 : 1; }

// A result of dtype `from` may be written into a tensor of dtype `to` (PyTorch's can_cast).
bool can_cast(DType from, DType to) {
  return category(from) <= category(to);
}

constexpr bool kUnaryFloatingOnly[] = {
#define EMBER_FLOATING_ONLY(name, Functor, floating_only) floating_only,
    EMBER_UNARY_OPS(EMBER_FLOATING_ONLY)
#undef EMBER_FLOATING_ONLY
};
enum class BinaryKind { arith, compare, floating };
constexpr BinaryKind kBinaryKind[] = {
#define EMBER_BINARY_KIND(name, Functor, kind) BinaryKind::kind,
    EMBER_BINARY_OPS(EMBER_BINARY_KIND)
#undef EMBER_BINARY_KIND
};

// Note [Layout propagation]: a new elementwise output takes the memory format of its first
// input that has the output's shape and is not broadcast (an expand()ed gradient of sum()
// has no layout of its own); PyTorch's TensorIterator does the same by strides. So a
// channels_last CNN (Note [Memory format]) stays channels_last through ReLU, residual adds and
// their gradients, and the loops stream both in memory order (kernels/loop_plan.h). CPU only:
// ember's CUDA ops have not yet run on channels_last tensors, and their outputs stay plain.
MemoryFormat output_format(const Shape& shape, const Tensor& a, const Tensor* b = nullptr) {
  if (shape.size() != 4 || !a.is_cpu()) return MemoryFormat::contiguous;
  for (const Tensor* t : {&a, b}) {
    if (!t || t->sizes() != shape) continue;
    if (t->suggest_memory_format() == MemoryFormat::channels_last) return MemoryFormat::channels_last;
    bool broadcast = false;
    for (size_t d = 0; d < 4; ++d) broadcast = broadcast || (t->strides()[d] == 0 && shape[d] > 1);
    if (!broadcast) return MemoryFormat::contiguous;
  }
  return MemoryFormat::contiguous;
}

// The other operand on `t`'s device when it is a CPU 0-dim tensor (PyTorch allows
// `cuda_tensor * cpu_scalar_tensor`); otherwise both must already share a device. The CPU value
// is read on the host (its own memory: no wait) and filled in on the device, never copied: a
// copy from pageable memory would make the host wait for the device inside every such op
// (loss scaling, ignore_index comparisons) and is illegal under graph capture.
Tensor on_device_of(const char* op, const Tensor& other, const Tensor& t) {
  if (other.device() != t.device() && other.dim() == 0 && other.is_cpu()) {
    const DType dt = other.dtype();
    const Scalar value = dt == DType::b8      ? Scalar(other.item<int64_t>() != 0)
                         : is_integral(dt) ? Scalar(other.item<int64_t>())
                                           : Scalar(other.item<double>());
    return scalar_tensor(value, dt, t.device());
  }
  detail::check_same_device(op, t, other);
  return other;
}

Tensor cast(const Tensor& t, DType dtype) {
  return t.dtype() == dtype ? t : to(t, t.device(), dtype);
}

// True when `out` shares memory with `in` in any way other than being the same view, in
// which case an elementwise kernel could read an element after overwriting it.
bool partially_overlaps(const Tensor& out, const Tensor& in) {
  if (out.storage() != in.storage()) return false;
  return !(out.storage_offset() == in.storage_offset() && out.sizes() == in.sizes() &&
           out.strides() == in.strides());
}
}  // namespace

const char* op_name(UnaryOp op) {
  static const char* names[] = {
#define EMBER_NAME(name, Functor, kind) #name,
      EMBER_UNARY_OPS(EMBER_NAME)
#undef EMBER_NAME
  };
  return names[int(op)];
}

const char* op_name(BinaryOp op) {
  static const char* names[] = {
#define EMBER_NAME(name, Functor, kind) #name,
      EMBER_BINARY_OPS(EMBER_NAME)
#undef EMBER_NAME
  };
  return names[int(op)];
}

DType result_type(const Tensor& a, const Tensor& b) {
  const bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  const Tensor& dimmed = za ? b : a;
  const Tensor& zero = za ? a : b;
  return category(zero.dtype()) > category(dimmed.dtype()) ? zero.dtype() : dimmed.dtype();
}

DType result_dtype(BinaryOp op, const Tensor& a, const Tensor& b) {
  DType t = result_type(a, b);
  switch (kBinaryKind[int(op)]) {
    case BinaryKind::compare: return DType::b8;
    case BinaryKind::floating: return is_floating(t) ? t : DType::f32;
    case BinaryKind::arith: return t;
  }
  return t;
}

DType result_dtype(UnaryOp op, DType input) {
  if (kUnaryFloatingOnly[int(op)] && !is_floating(input)) return DType::f32;
  EMBER_CHECK(input != DType::b8 || op == UnaryOp::identity, DTypeError, "[", op_name(op),
              "] is not defined for bool tensors");
  return input;
}

Tensor unary(UnaryOp op, const Tensor& x, UnaryParams params) {
  detail::check_defined(op_name(op), x);
  DType dt = result_dtype(op, x.dtype());
  Tensor in = cast(x, dt);
  Tensor out = detail::make_tensor(in.sizes(), dt, in.device(), output_format(in.sizes(), in));
  EMBER_DISPATCH_KERNEL(in.device(), unary_kernel, op, in, out, params);
  return out;
}

void unary_out(UnaryOp op, const Tensor& x, const Tensor& out, UnaryParams params) {
  detail::check_same_device(op_name(op), x, out);
  detail::check_no_internal_overlap(op_name(op), out);
  EMBER_CHECK(x.sizes() == out.sizes(), ShapeError, "[", op_name(op), "] output shape ",
              out.sizes(), " does not match input shape ", x.sizes());
  DType dt = result_dtype(op, x.dtype());
  if (dt != out.dtype() || partially_overlaps(out, x)) {
    EMBER_CHECK(can_cast(dt, out.dtype()), DTypeError, "[", op_name(op), "] result dtype ", dt,
                " cannot be written into an output of dtype ", out.dtype());
    copy_(out, unary(op, x, params));
    return;
  }
  EMBER_DISPATCH_KERNEL(x.device(), unary_kernel, op, x, out, params);
}

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, UnaryParams params) {
  detail::check_defined(op_name(op), a);
  detail::check_defined(op_name(op), b, "second input");
  // Fast path (the common case): one device, one dtype, no cast needed; no handle copies.
  if (a.device() == b.device() && a.dtype() == b.dtype()) {
    DType out_dtype = result_dtype(op, a, b);
    if (out_dtype == a.dtype() || out_dtype == DType::b8) {
      const Shape shape =
          a.sizes() == b.sizes() ? a.sizes() : broadcast_shapes(a.sizes(), b.sizes(), op_name(op));
      Tensor out = detail::make_tensor(shape, out_dtype, a.device(), output_format(shape, a, &b));
      EMBER_DISPATCH_KERNEL(a.device(), binary_kernel, op, a, b, out, params);
      return out;
    }
  }
  Tensor bb = on_device_of(op_name(op), b, a);
  Tensor aa = on_device_of(op_name(op), a, bb);
  DType compute = result_type(aa, bb);
  DType out_dtype = result_dtype(op, aa, bb);
  if (out_dtype != DType::b8) compute = out_dtype;
  Tensor x = cast(aa, compute), y = cast(bb, compute);
  Shape shape = x.sizes() == y.sizes() ? x.sizes() : broadcast_shapes(x.sizes(), y.sizes(), op_name(op));
  Tensor out = detail::make_tensor(shape, out_dtype, x.device(), output_format(shape, x, &y));
  EMBER_DISPATCH_KERNEL(x.device(), binary_kernel, op, x, y, out, params);
  return out;
}

void binary_out(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  detail::check_defined(op_name(op), out, "output");
  detail::check_no_internal_overlap(op_name(op), out);
  Tensor bb = on_device_of(op_name(op), b, out);
  Tensor aa = on_device_of(op_name(op), a, out);
  Shape shape = broadcast_shapes(aa.sizes(), bb.sizes(), op_name(op));
  EMBER_CHECK(shape == out.sizes(), ShapeError, "[", op_name(op), "] result shape ", shape,
              " does not match the output shape ", out.sizes(),
              " (an in-place op cannot change its tensor's shape)");
  DType out_dtype = result_dtype(op, aa, bb);
  EMBER_CHECK(can_cast(out_dtype, out.dtype()), DTypeError, "[", op_name(op), "] result dtype ",
              out_dtype, " cannot be written into an output of dtype ", out.dtype());
  DType compute = out_dtype == DType::b8 ? result_type(aa, bb) : out_dtype;
  bool direct = out_dtype == out.dtype() && !partially_overlaps(out, aa) &&
                !partially_overlaps(out, bb);
  if (!direct) {
    copy_(out, binary(op, aa, bb));
    return;
  }
  Tensor x = cast(aa, compute), y = cast(bb, compute);
  EMBER_DISPATCH_KERNEL(out.device(), binary_kernel, op, x, y, out, UnaryParams{});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  detail::check_defined("where", cond, "condition");
  EMBER_CHECK(cond.dtype() == DType::b8, DTypeError,
              "[where] condition must be a bool tensor, got ", cond.dtype());
  Tensor bb = on_device_of("where", b, a);
  Tensor aa = on_device_of("where", a, bb);
  Tensor c = on_device_of("where", cond, aa);
  DType dt = result_type(aa, bb);
  Shape shape = broadcast_shapes(broadcast_shapes(c.sizes(), aa.sizes(), "where"), bb.sizes(), "where");
  Tensor out = detail::make_tensor(shape, dt, aa.device());
  EMBER_DISPATCH_KERNEL(out.device(), where_kernel, c, cast(aa, dt), cast(bb, dt), out);
  return out;
}

Tensor scalar_tensor(Scalar value, DType dtype, Device device) {
  Tensor t = detail::make_tensor({}, dtype, device);
  EMBER_DISPATCH_KERNEL(device, fill_kernel, t, value);
  return t;
}

Tensor wrap_scalar(Scalar value, const Tensor& t) {
  DType st = value.default_dtype();
  DType dt = category(st) > category(t.dtype()) ? st : t.dtype();
  return scalar_tensor(value, dt, t.device());
}

void copy_(const Tensor& dst, const Tensor& src, bool non_blocking) {
  detail::check_defined("copy_", dst, "destination");
  detail::check_defined("copy_", src, "source");
  // fill_ may write an expanded tensor (every write is the same value, as PyTorch allows);
  // copy_ and the in-place ops may not.
  detail::check_no_internal_overlap("copy_", dst);
  Shape shape = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  EMBER_CHECK(shape == dst.sizes(), ShapeError, "[copy_] source of shape ", src.sizes(),
              " cannot be broadcast to the destination shape ", dst.sizes());
  if (dst.device() == src.device()) {
    Tensor s = src;
    if (partially_overlaps(dst, src)) {  // read every element before writing any
      s = detail::make_tensor(src.sizes(), src.dtype(), src.device());
      EMBER_DISPATCH_KERNEL(src.device(), copy_kernel, s, src);
    }
    EMBER_DISPATCH_KERNEL(dst.device(), copy_kernel, dst, s);
    return;
  }
  // Across devices: make a contiguous source of the destination dtype on its own device,
  // move the bytes, then let the destination device lay them out.
  Tensor s = contiguous(cast(src, dst.dtype()));
  if (dst.is_contiguous() && s.sizes() == dst.sizes()) {
    ::ember::cuda::detail::copy_bytes(dst.data_ptr(), dst.device(), s.data_ptr(), s.device(),
                             size_t(s.numel()) * s.element_size(), non_blocking);
    return;
  }
  Tensor staged = detail::make_tensor(s.sizes(), s.dtype(), dst.device());
  ::ember::cuda::detail::copy_bytes(staged.data_ptr(), staged.device(), s.data_ptr(), s.device(),
                           size_t(s.numel()) * s.element_size(), false);
  EMBER_DISPATCH_KERNEL(dst.device(), copy_kernel, dst, staged);
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = detail::make_tensor(t.sizes(), t.dtype(), t.device());
  EMBER_DISPATCH_KERNEL(t.device(), copy_kernel, out, t);
  return out;
}

Tensor contiguous(const Tensor& t, MemoryFormat format) {
  if (format == MemoryFormat::contiguous) return contiguous(t);
  EMBER_CHECK(t.dim() == 4, ShapeError, "[contiguous] channels_last needs a 4-D [N, C, H, W] tensor, got shape ",
              t.sizes());
  if (t.strides() == channels_last_strides(t.sizes())) return t;
  Tensor out = detail::make_tensor(t.sizes(), t.dtype(), t.device(), format);
  EMBER_DISPATCH_KERNEL(t.device(), copy_kernel, out, t);
  return out;
}

Tensor to(const Tensor& t, Device device, DType dtype, bool non_blocking) {
  detail::check_defined("to", t);
  if (t.device() == device && t.dtype() == dtype) return t;
  ::ember::cuda::detail::check_device("to", device);
  Tensor out = detail::make_tensor(t.sizes(), dtype, device);
  copy_(out, t, non_blocking);
  return out;
}

void fill_(const Tensor& t, Scalar value) {
  detail::check_defined("fill_", t);
  EMBER_DISPATCH_KERNEL(t.device(), fill_kernel, t, value);
}

}  // namespace ember::ops
