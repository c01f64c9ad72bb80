// The structural half of Tensor (Note [Tensor methods] in tensor.h): geometry, element
// access, printing and autograd state. No kernels here: host reads of CUDA tensors copy the
// storage bytes through cuda::detail::copy_bytes.
#include "ember/tensor.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>

#include "ember/cuda.h"

namespace ember {

namespace {
// Host-readable bytes of a tensor's storage: the storage itself on the CPU, a copy for CUDA.
struct HostBytes {
  const char* base = nullptr;
  std::vector<char> copy;
  explicit HostBytes(const Tensor& t) {
    const Storage& s = *t.storage();
    if (s.device().is_cpu()) {
      base = static_cast<const char*>(s.data());
    } else {
      copy.resize(s.nbytes());
      cuda::detail::copy_bytes(copy.data(), Device::cpu(), s.data(), s.device(), s.nbytes());
      base = copy.data();
    }
  }
};

template <class T>
double load_as_double(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) return double(float(v));
  else return double(v);
}

double load(DType dtype, const char* p) {
  return visit_dtype(dtype, [&](auto tag) { return load_as_double<decltype(tag)>(p); });
}

// Integer dtypes read exactly (a double holds only 53 bits of an i64).
int64_t load_int(DType dtype, const char* p) {
  return visit_dtype(dtype, [&](auto tag) -> int64_t {
    using S = decltype(tag);
    if constexpr (std::is_integral_v<S>) {
      S v;
      std::memcpy(&v, p, sizeof(S));
      return int64_t(v);
    } else {
      return int64_t(load_as_double<S>(p));
    }
  });
}

// Calls f(storage element index) for every element in row-major order.
template <class F>
void for_each_offset(const Tensor& t, F&& f) {
  int64_t n = t.numel();
  if (n == 0) return;
  const Shape& sz = t.sizes();
  const Shape& st = t.strides();
  Shape idx(sz.size(), 0);
  int64_t off = t.storage_offset();
  for (int64_t i = 0; i < n; ++i) {
    f(off);
    for (int64_t d = int64_t(sz.size()) - 1; d >= 0; --d) {
      if (++idx[d] < sz[d]) {
        off += st[d];
        break;
      }
      off -= st[d] * (sz[d] - 1);
      idx[d] = 0;
    }
  }
}
}  // namespace

int64_t Tensor::size(int64_t d) const {
  const TensorImpl& impl = checked_impl("size");
  return impl.sizes[wrap_dim(d, int64_t(impl.sizes.size()), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  const TensorImpl& impl = checked_impl("stride");
  return impl.strides[wrap_dim(d, int64_t(impl.strides.size()), "stride")];
}

bool Tensor::is_contiguous() const {
  checked_impl("is_contiguous");
  int64_t expected = 1;
  for (int64_t d = dim() - 1; d >= 0; --d) {
    int64_t s = impl_->sizes[d];
    if (s == 1) continue;
    if (impl_->strides[d] != expected) return false;
    expected *= s;
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const {
  checked_impl("is_contiguous");
  if (format == MemoryFormat::contiguous) return is_contiguous();
  if (dim() != 4) return false;
  // The dims from the innermost in NHWC order: C, W, H, N.
  int64_t expected = 1;
  for (int64_t d : {1, 3, 2, 0}) {
    const int64_t s = impl_->sizes[size_t(d)];
    if (s == 1) continue;
    if (impl_->strides[size_t(d)] != expected) return false;
    expected *= s;
  }
  return true;
}

MemoryFormat Tensor::suggest_memory_format() const {
  checked_impl("suggest_memory_format");
  if (dim() != 4) return MemoryFormat::contiguous;
  const Shape cl = channels_last_strides(impl_->sizes);
  return impl_->strides == cl && cl != contiguous_strides(impl_->sizes) ? MemoryFormat::channels_last
                                                                         : MemoryFormat::contiguous;
}

double Tensor::item_double() const {
  detail::check_defined("item", *this);
  EMBER_CHECK(numel() == 1, ValueError, "[item] a tensor with ", numel(),
              " elements cannot be converted to a scalar (shape ", sizes(), ")");
  char buf[8];
  cuda::detail::copy_bytes(buf, Device::cpu(), data_ptr(), device(), element_size());
  return load(dtype(), buf);
}

int64_t Tensor::item_int() const {
  detail::check_defined("item", *this);
  EMBER_CHECK(numel() == 1, ValueError, "[item] a tensor with ", numel(),
              " elements cannot be converted to a scalar (shape ", sizes(), ")");
  char buf[8];
  cuda::detail::copy_bytes(buf, Device::cpu(), data_ptr(), device(), element_size());
  return load_int(dtype(), buf);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  detail::check_defined("to_vector", *this);
  HostBytes bytes(*this);
  std::vector<T> out;
  out.reserve(size_t(numel()));
  size_t isz = element_size();
  DType dt = dtype();
  if constexpr (std::is_integral_v<T>) {
    if (is_integral(dt, /*include_bool=*/true)) {
      for_each_offset(*this, [&](int64_t off) { out.push_back(T(load_int(dt, bytes.base + off * isz))); });
      return out;
    }
  }
  for_each_offset(*this, [&](int64_t off) { out.push_back(T(load(dt, bytes.base + off * isz))); });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

// ---- autograd state ----

Tensor& Tensor::requires_grad_(bool requires_grad) {
  detail::check_defined("requires_grad_", *this);
  EMBER_CHECK(is_leaf(), AutogradError,
              "[requires_grad_] can only change requires_grad of a leaf tensor; this one was "
              "produced by an op (use detach() to get a leaf)");
  EMBER_CHECK(!requires_grad || is_floating(dtype()), DTypeError,
              "[requires_grad_] only floating-point tensors can require gradients, got ",
              dtype());
  impl_->autograd_meta().requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const TensorImpl& impl = checked_impl("is_leaf");
  return !impl.autograd || !impl.autograd->grad_fn;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  const TensorImpl& impl = checked_impl("grad");
  return impl.autograd ? impl.autograd->grad : undefined;
}

Tensor& Tensor::mutable_grad() { return checked_impl("mutable_grad").autograd_meta().grad; }

void Tensor::set_grad(const Tensor& g) {
  checked_impl("set_grad");
  if (g.defined()) {
    EMBER_CHECK(g.sizes() == sizes(), ShapeError, "[set_grad] gradient shape ", g.sizes(),
                " does not match tensor shape ", sizes());
    EMBER_CHECK(g.device() == device(), DeviceError, "[set_grad] gradient on ", g.device(),
                " but tensor on ", device());
  }
  impl_->autograd_meta().grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  const TensorImpl& impl = checked_impl("grad_fn");
  return impl.autograd ? impl.autograd->grad_fn : none;
}

Tensor Tensor::detach() const {
  detail::check_defined("detach", *this);
  Tensor out = detail::make_view(*this, sizes(), strides(), storage_offset());
  out.impl()->is_view = impl_->is_view;
  return out;
}

Tensor& Tensor::detach_() {
  if (checked_impl("detach_").autograd) {
    impl_->autograd->grad_fn.reset();
    impl_->autograd->requires_grad = false;
  }
  return *this;
}

void Tensor::set_data(const Tensor& src) {
  detail::check_defined("set_data", *this);
  detail::check_defined("set_data", src);
  EMBER_CHECK(is_leaf(), AutogradError,
              "[set_data] only a leaf tensor can take new data; this one was produced by an op");
  EMBER_CHECK(!requires_grad() || is_floating(src.dtype()), DTypeError,
              "[set_data] a tensor that requires grad cannot take ", src.dtype(), " data");
  impl_->storage = src.impl()->storage;
  impl_->sizes = src.sizes();
  impl_->strides = src.strides();
  impl_->offset = src.storage_offset();
  impl_->dtype = src.dtype();
  impl_->is_view = src.impl()->is_view;
  if (impl_->autograd && impl_->autograd->grad.defined()) {
    const Tensor& g = impl_->autograd->grad;
    if (g.sizes() != sizes() || g.dtype() != dtype() || g.device() != device())
      impl_->autograd->grad = Tensor();
  }
}

// ---- printing ----

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  HostBytes bytes(*this);
  const int64_t nd = dim();
  const bool summarize = numel() > 1000;
  const size_t isz = element_size();
  const DType dt = dtype();
  const bool fp = is_floating(dt);

  // One format for all elements, chosen from the largest magnitude, like PyTorch.
  double max_abs = 0;
  bool all_int = true;
  for_each_offset(*this, [&](int64_t off) {
    double v = load(dt, bytes.base + off * isz);
    if (std::isfinite(v)) {
      max_abs = std::max(max_abs, std::fabs(v));
      all_int = all_int && v == std::floor(v);
    }
  });
  const bool sci = fp && (max_abs >= 1e8 || (max_abs > 0 && max_abs < 1e-4));
  auto fmt = [&](double v) {
    char buf[40];
    if (!fp) std::snprintf(buf, sizeof buf, "%lld", (long long)v);
    else if (std::isnan(v)) std::snprintf(buf, sizeof buf, "nan");
    else if (std::isinf(v)) std::snprintf(buf, sizeof buf, v > 0 ? "inf" : "-inf");
    else if (sci) std::snprintf(buf, sizeof buf, "%.4e", v);
    else if (all_int) std::snprintf(buf, sizeof buf, "%.0f.", v);
    else std::snprintf(buf, sizeof buf, "%.4f", v);
    return std::string(buf);
  };

  std::string s = "tensor(";
  const int64_t edge = 3;
  // Recursive printer over dims; `off` is the storage offset of the current sub-tensor.
  auto rec = [&](auto&& self, int64_t d, int64_t off) -> void {
    if (d == nd) {
      s += fmt(load(dt, bytes.base + off * isz));
      return;
    }
    s += '[';
    int64_t n = sizes()[d];
    for (int64_t i = 0; i < n; ++i) {
      if (summarize && n > 2 * edge && i == edge) {
        s += d == nd - 1 ? "..., " : "...,\n" + std::string(size_t(8 + d), ' ');
        i = n - edge - 1;
        continue;
      }
      self(self, d + 1, off + i * strides()[d]);
      if (i + 1 < n) s += d == nd - 1 ? ", " : ",\n" + std::string(size_t(8 + d), ' ');
    }
    s += ']';
  };
  rec(rec, 0, storage_offset());
  s += ember::str(", shape=", sizes(), ", dtype=", dt);
  if (!device().is_cpu()) s += ember::str(", device=", device());
  if (requires_grad()) s += ", requires_grad=true";
  s += ')';
  return s;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

AutogradMeta::~AutogradMeta() { detail::release_node(std::move(grad_fn)); }

namespace detail {

void release_node(std::shared_ptr<autograd::Node>&& node) {
  if (!node) return;
  // The two flags are read on every release (EMBER_HOT_TLS: one load each); the queue, whose
  // first use runs a guard, only when freeing one node frees another.
  EMBER_HOT_TLS thread_local bool draining = false, queued = false;
  thread_local std::vector<std::shared_ptr<autograd::Node>> pending;
  if (draining) {  // an outer call is already freeing; it will reach this one
    pending.push_back(std::move(node));
    queued = true;
    return;
  }
  draining = true;
  node.reset();  // may queue more nodes through the destructors it runs
  if (queued) {
    while (!pending.empty()) {
      std::shared_ptr<autograd::Node> n = std::move(pending.back());
      pending.pop_back();
      n.reset();  // may queue more
    }
    queued = false;
  }
  draining = false;
}

// Impl blocks come from the small-object lists (storage.h): every op makes one or more.
static std::shared_ptr<TensorImpl> new_impl() {
  return std::allocate_shared<TensorImpl>(SmallObjectAllocator<TensorImpl>{});
}

Tensor make_tensor(const Shape& sizes, DType dtype, Device device) {
  for (int64_t s : sizes)
    EMBER_CHECK(s >= 0, ShapeError, "[empty] negative size in shape ", sizes);
  // A wrapped byte count would give a huge tensor a small (or no) allocation: refuse it.
  int64_t nbytes = 0;
  EMBER_CHECK(!__builtin_mul_overflow(sizes.numel(), int64_t(itemsize(dtype)), &nbytes), ShapeError,
              "[empty] a tensor of shape ", sizes, " and dtype ", dtype, " would need more than 2^63 bytes");
  auto impl = new_impl();
  impl->storage = std::allocate_shared<Storage>(SmallObjectAllocator<Storage>{}, size_t(nbytes), device);
  impl->sizes = sizes;
  impl->strides = contiguous_strides(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_tensor(const Shape& sizes, DType dtype, Device device, MemoryFormat format) {
  Tensor t = make_tensor(sizes, dtype, device);
  if (format == MemoryFormat::channels_last) t.impl()->strides = channels_last_strides(sizes);
  return t;
}

Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset) {
  auto impl = new_impl();
  impl->storage = base.storage();
  impl->sizes = sizes;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->is_view = true;
  return Tensor(std::move(impl));
}

EMBER_HOT_TLS constinit thread_local const char* t_op_scope = nullptr;

void throw_released_storage() {
  throw ValueError(
      "[data_ptr] this tensor's storage memory is released (Note [released storage]): it is a "
      "parameter of a fully_shard unit outside the unit's forward and backward; read the full "
      "parameters inside FSDPModule::summon_full_params(), or step an optimizer built over "
      "FSDPModule::parameters() (the shards)");
}

void throw_undefined_tensor(const char* method) {
  constexpr const char* why = "(a default-constructed Tensor, or the grad() of a tensor that has none: "
                              "before backward() or after zero_grad())";
  if (t_op_scope) throw ValueError(str("[", t_op_scope, "] an argument is an undefined tensor ", why,
                                       "; its ", method, "() was read"));
  throw ValueError(str("[", method, "] called on an undefined tensor ", why));
}

void check_defined(const char* op, const Tensor& t, const char* what) {
  if (t.defined()) [[likely]] return;
  // Inside another public op (gelu_mlp reaching linear), the user's call is the one to name.
  if (t_op_scope && std::strcmp(t_op_scope, op) != 0)
    throw ValueError(str("[", t_op_scope, "] ", what, " of ", op, " is an undefined tensor"));
  throw ValueError(str("[", op, "] ", what, " is an undefined tensor"));
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a);
  check_defined(op, b);
  EMBER_CHECK(a.device() == b.device(), DeviceError, "[", op,
              "] expected all tensors on the same device, got ", a.device(), " and ",
              b.device());
}

bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0 && t.sizes()[d] > 1) return true;
  return false;
}

void check_no_internal_overlap(const char* op, const Tensor& t) {
  EMBER_CHECK(!has_internal_overlap(t), ValueError, "[", op, "] the output of shape ", t.sizes(),
              " and strides ", t.strides(), " has several elements in one memory location (an expand()ed ",
              "view); writing it is undefined: clone() it first");
}

}  // namespace detail

void str_append(std::string& s, const Tensor& t) {
  if (!t.defined()) {
    s += "Tensor(undefined)";
    return;
  }
  s += str("Tensor", t.sizes(), " ", t.dtype(), " ", t.device());
}
}  // namespace ember
