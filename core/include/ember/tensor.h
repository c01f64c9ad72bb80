// Tensor: a cheap handle (shared_ptr) to a TensorImpl = storage + sizes + strides + offset +
// dtype, plus autograd metadata when it takes part in a graph. Copying a Tensor shares the
// impl; views share the storage.
//
// Note [Tensor methods]: this header declares the whole method API, but only the structural
// methods (sizes, dtype, data_ptr, item, grad accessors, detach) are defined in core. The
// differentiable methods (view, add, matmul, sum, ...) are defined in the autograd library
// (autograd/src/tensor_methods.cpp) on top of the ops kernels, as PyTorch's TensorBody is.
// Code in core/ and ops/ must therefore never call a differentiable method: kernels work on
// raw storage, and ops/ builds views with detail::make_view.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/macros.h"
#include "ember/scalar.h"
#include "ember/shape.h"
#include "ember/storage.h"

namespace ember {

namespace autograd {
class Node;
}
namespace indexing {
class TensorIndex;
}

class Tensor;
struct TensorImpl;

// Note [Memory format]: how a 4-D [N, C, H, W] tensor's elements lie in memory, as PyTorch's
// torch.contiguous_format / torch.channels_last. channels_last keeps the logical shape and
// indexing (x[n][c][h][w] is the same element) and stores it as a dense NHWC block, strides
// [H*W*C, 1, W*C, C]: what oneDNN's CPU convolutions read without reordering. A tensor made
// with contiguous(MemoryFormat::channels_last) keeps that layout through the CPU ops of a CNN
// (convolutions, batch norm, elementwise ops follow their input; Note [Layout propagation] in
// ops/src/elementwise.cpp); every other op accepts it as any strided tensor.
enum class MemoryFormat : uint8_t { contiguous, channels_last };
struct ValuesIndices;
using TensorList = std::vector<Tensor>;

namespace detail {
// Throws ValueError "[method] called on an undefined tensor ...", or "[op] ..." naming the op the
// user called when an OpScope is open (Note [undefined tensors]).
[[noreturn]] void throw_undefined_tensor(const char* method);
// Reading a tensor whose storage memory is released (Note [released storage]).
[[noreturn]] void throw_released_storage();
// The pieces of a split as a fixed-size array, for structured bindings (Tensor::chunk<N>).
template <size_t N>
std::array<Tensor, N> unpack(TensorList pieces, const char* op);

// Note [op scope]: ember has no dispatcher, and an op often reads its arguments (sizes() in a
// VJP capture, dtype() for a scalar operand) before any check of its own, so the accessor that
// meets an undefined tensor does not know which op the user called. The public op says so on
// entry with EMBER_OP_SCOPE("name"); the outermost scope on the thread wins (it is the call the
// user wrote; ops called inside it leave it alone). It is a pointer store and a branch, no
// allocation, and it is read only when an error is raised.
EMBER_HOT_TLS extern constinit thread_local const char* t_op_scope;
class OpScope {
 public:
  explicit OpScope(const char* op) noexcept : owner_(t_op_scope == nullptr) {
    if (owner_) t_op_scope = op;
  }
  ~OpScope() {
    if (owner_) t_op_scope = nullptr;
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  bool owner_;
};
#define EMBER_OP_SCOPE(name) const ::ember::detail::OpScope ember_op_scope_(name)
}  // namespace detail

// Options for factories; converts from a DType or a Device so `zeros({2}, DType::f64)` and
// `zeros({2}, Device::cuda())` both read naturally.
struct TensorOptions {
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}
  TensorOptions(Device d) : device_(d) {}
  TensorOptions dtype(DType d) const { auto o = *this; o.dtype_ = d; return o; }
  TensorOptions device(Device d) const { auto o = *this; o.device_ = d; return o; }
  TensorOptions requires_grad(bool r = true) const { auto o = *this; o.requires_grad_ = r; return o; }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- structure (core) ----
  bool defined() const { return impl_ != nullptr; }
  int64_t dim() const;
  const Shape& sizes() const;
  const Shape& shape() const { return sizes(); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Shape& strides() const;
  int64_t stride(int64_t dim) const;
  int64_t numel() const;
  DType dtype() const;
  Device device() const;
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_contiguous() const;
  // Dense in that format (size-1 dims are free), as PyTorch's is_contiguous(memory_format).
  bool is_contiguous(MemoryFormat format) const;
  // channels_last when a 4-D tensor has exactly the channels_last strides (and they differ
  // from the plain ones), else contiguous: the layout ops give their outputs.
  MemoryFormat suggest_memory_format() const;
  int64_t storage_offset() const;
  size_t element_size() const { return itemsize(dtype()); }
  // Pointer to the first element (storage data + offset). Typed version checks the dtype.
  void* data_ptr() const;
  template <class T>
  T* data_ptr() const {
    EMBER_CHECK(dtype_v<T> == dtype(), DTypeError, "[data_ptr] tensor has dtype ", dtype(),
                " but ", dtype_name(dtype_v<T>), " was requested");
    return static_cast<T*>(data_ptr());
  }
  const std::shared_ptr<Storage>& storage() const;
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  // The one value of a single-element tensor, converted to T (copies from the GPU if needed).
  template <class T>
  T item() const {
    if constexpr (std::is_floating_point_v<T>) return T(item_double());
    else return T(item_int());
  }
  double item_double() const;
  int64_t item_int() const;
  // Copies all elements (any layout, any device) to a host vector of T.
  template <class T>
  std::vector<T> to_vector() const;
  std::string str() const;  // what operator<< prints

  // ---- autograd state (core) ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  // The accumulated gradient of a leaf (undefined until backward reaches it).
  const Tensor& grad() const;
  Tensor& mutable_grad();
  void set_grad(const Tensor& g);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  uint32_t version() const;
  void bump_version() const;
  // A new tensor sharing storage but cut out of the graph.
  Tensor detach() const;
  Tensor& detach_();
  // Makes this leaf take `src`'s storage, shape, strides and dtype while keeping its identity
  // (every handle, an optimizer's included, sees the change) and its requires_grad: what
  // Module::to() does to parameters, like PyTorch's `param.data = new_data`. A gradient is
  // kept only when it still matches (same shape, dtype and device); otherwise it is dropped.
  void set_data(const Tensor& src);

  // ---- autograd (autograd/) ----
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // fn(grad) may return a replacement gradient or an undefined Tensor to keep it.
  void register_hook(std::function<Tensor(const Tensor&)> fn) const;
  // Leaves only: runs after the gradient has been accumulated into .grad().
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  void retain_grad() const;

  // ---- views (autograd/) ----
  Tensor view(const Shape& shape) const;  // one dim may be -1
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const {
    EMBER_OP_SCOPE("expand_as");
    return expand(other.sizes());
  }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor contiguous() const;
  // A dense copy in `format` (this tensor when it already has exactly that layout).
  Tensor contiguous(MemoryFormat format) const;

  // ---- conversion and copies (autograd/) ----
  Tensor to(DType dtype) const;
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor clone() const;
  // A copy in page-locked host memory (CPU tensors only), so that a later
  // to(Device::cuda(), true) is asynchronous. Without a CUDA device it returns *this.
  Tensor pin_memory() const;
  bool is_pinned() const;
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype and device
  Tensor& fill_(Scalar value);
  Tensor& zero_();

  // ---- elementwise (autograd/) ----
  Tensor add(const Tensor& o, Scalar alpha = 1) const;
  Tensor sub(const Tensor& o, Scalar alpha = 1) const;
  Tensor mul(const Tensor& o) const;
  Tensor div(const Tensor& o) const;
  Tensor add(Scalar o) const;
  Tensor sub(Scalar o) const;
  Tensor mul(Scalar o) const;
  Tensor div(Scalar o) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor pow(Scalar exponent) const;
  Tensor maximum(const Tensor& o) const;
  Tensor minimum(const Tensor& o) const;
  Tensor& add_(const Tensor& o, Scalar alpha = 1);
  Tensor& sub_(const Tensor& o, Scalar alpha = 1);
  Tensor& mul_(const Tensor& o);
  Tensor& div_(const Tensor& o);
  Tensor& add_(Scalar o);
  Tensor& sub_(Scalar o);
  Tensor& mul_(Scalar o);
  Tensor& div_(Scalar o);
  Tensor& pow_(Scalar exponent);
#define EMBER_DECLARE_UNARY_METHOD(name) \
  Tensor name() const;                   \
  Tensor& name##_();
  EMBER_DECLARE_UNARY_METHOD(neg)
  EMBER_DECLARE_UNARY_METHOD(exp)
  EMBER_DECLARE_UNARY_METHOD(log)
  EMBER_DECLARE_UNARY_METHOD(sqrt)
  EMBER_DECLARE_UNARY_METHOD(rsqrt)
  EMBER_DECLARE_UNARY_METHOD(abs)
  EMBER_DECLARE_UNARY_METHOD(tanh)
  EMBER_DECLARE_UNARY_METHOD(sigmoid)
  EMBER_DECLARE_UNARY_METHOD(relu)
  EMBER_DECLARE_UNARY_METHOD(silu)
#undef EMBER_DECLARE_UNARY_METHOD
  Tensor gelu(bool tanh_approximation = false) const;
  Tensor clamp(Scalar min, Scalar max) const;
  Tensor clamp_min(Scalar min) const;
  Tensor clamp_max(Scalar max) const;
  Tensor& clamp_(Scalar min, Scalar max);
  // Comparisons return bool tensors.
  Tensor eq(const Tensor& o) const;
  Tensor ne(const Tensor& o) const;
  Tensor lt(const Tensor& o) const;
  Tensor le(const Tensor& o) const;
  Tensor gt(const Tensor& o) const;
  Tensor ge(const Tensor& o) const;
  Tensor eq(Scalar o) const;
  Tensor ne(Scalar o) const;
  Tensor lt(Scalar o) const;
  Tensor le(Scalar o) const;
  Tensor gt(Scalar o) const;
  Tensor ge(Scalar o) const;
  Tensor masked_fill(const Tensor& mask, Scalar value) const;
  Tensor& masked_fill_(const Tensor& mask, Scalar value);

  // ---- reductions (autograd/); empty dims = all dims ----
  Tensor sum(const Shape& dims = {}, bool keepdim = false) const;
  Tensor mean(const Shape& dims = {}, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  ValuesIndices max(int64_t dim, bool keepdim = false) const;
  ValuesIndices min(int64_t dim, bool keepdim = false) const;
  Tensor argmax() const;  // index into the flattened tensor
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  // correction = 1 is the unbiased (Bessel) estimate, as in torch.var.
  Tensor var(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor norm(double p = 2, const Shape& dims = {}, bool keepdim = false) const;

  // ---- sorting, scans, predicates, rounding (autograd/src/sort.cpp, elementwise.cpp) ----
  ValuesIndices sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  ValuesIndices topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  Tensor logsumexp(const Shape& dims = {}, bool keepdim = false) const;
  Tensor flip(const Shape& dims) const;
  Tensor roll(const Shape& shifts, const Shape& dims = {}) const;
  Tensor any(const Shape& dims = {}, bool keepdim = false) const;
  Tensor all(const Shape& dims = {}, bool keepdim = false) const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor isclose(const Tensor& o, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool allclose(const Tensor& o, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor square() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor trunc() const;
  Tensor round(int64_t decimals = 0) const;

  // ---- linear algebra and nn ops (autograd/) ----
  Tensor matmul(const Tensor& o) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  TensorList split(int64_t split_size, int64_t dim = 0) const;
  TensorList split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  TensorList chunk(int64_t chunks, int64_t dim = 0) const;
  // Python's unpacking, `q, k, v = qkv.chunk(3, -1)`, as structured bindings over a count known
  // when compiling: `auto [q, k, v] = qkv.chunk<3>(-1)`. A ShapeError when the op gives another
  // count (chunk, like PyTorch's, may give fewer pieces than asked: 4 rows in 3 chunks are 2).
  template <size_t N>
  std::array<Tensor, N> chunk(int64_t dim = 0) const { return detail::unpack<N>(chunk(int64_t(N), dim), "chunk"); }
  template <size_t N>
  std::array<Tensor, N> split(int64_t split_size, int64_t dim = 0) const {
    return detail::unpack<N>(split(split_size, dim), "split");
  }
  template <size_t N>
  std::array<Tensor, N> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const {
    return detail::unpack<N>(split(sizes, dim), "split");
  }

  // ---- indexing, tensor ops and conversions (autograd/; ember/indexing.h) ----
  // x.index({0, Slice(1, None, 2), None, Ellipsis, mask}): PyTorch's x[0, 1::2, None, ..., mask].
  Tensor index(std::initializer_list<indexing::TensorIndex> indices) const;
  Tensor index(const std::vector<indexing::TensorIndex>& indices) const;
  // x[indices] = values (accumulate: +=, repeated indices summed); values broadcast to the
  // shape x.index(indices) has.
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& values,
                     bool accumulate = false);
  Tensor& index_put_(std::initializer_list<indexing::TensorIndex> indices, Scalar value);
  Tensor& index_put_(const std::vector<indexing::TensorIndex>& indices, Scalar value);
  // x[i] is select(0, i); x[t] and x[{...}] are index().
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Tensor operator[](I i) const { return select(0, int64_t(i)); }
  Tensor operator[](const Tensor& index) const;
  Tensor operator[](std::initializer_list<indexing::TensorIndex> indices) const { return index(indices); }
  Tensor nonzero() const;
  Tensor masked_select(const Tensor& mask) const;
  Tensor bmm(const Tensor& o) const;
  Tensor outer(const Tensor& o) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor tile(const Shape& dims) const;
  TensorList unbind(int64_t dim = 0) const;
  template <size_t N>
  std::array<Tensor, N> unbind(int64_t dim = 0) const { return detail::unpack<N>(unbind(dim), "unbind"); }
  Tensor diag(int64_t diagonal = 0) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor logical_not() const;
  Tensor logical_and(const Tensor& o) const;
  Tensor logical_or(const Tensor& o) const;
  Tensor logical_xor(const Tensor& o) const;
  Tensor bitwise_not() const;
  Tensor bitwise_and(const Tensor& o) const;
  Tensor bitwise_or(const Tensor& o) const;
  Tensor bitwise_xor(const Tensor& o) const;
  // x.sum(1) next to x.sum({1}): templates, so that x.sum({}) still means "all dims".
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Tensor sum(I dim, bool keepdim = false) const { return sum(Shape{int64_t(dim)}, keepdim); }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Tensor mean(I dim, bool keepdim = false) const { return mean(Shape{int64_t(dim)}, keepdim); }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Tensor var(I dim, int64_t correction = 1, bool keepdim = false) const {
    return var(Shape{int64_t(dim)}, correction, keepdim);
  }
  template <class I>
    requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
  Tensor std(I dim, int64_t correction = 1, bool keepdim = false) const {
    return std(Shape{int64_t(dim)}, correction, keepdim);
  }
  // PyTorch's .float() .double() .long() .int() .bool() are C++ keywords: to_float() etc.
  Tensor half() const { return to(DType::f16); }
  Tensor bfloat16() const { return to(DType::bf16); }
  Tensor to_float() const { return to(DType::f32); }
  Tensor to_double() const { return to(DType::f64); }
  Tensor to_long() const { return to(DType::i64); }
  Tensor to_int() const { return to(DType::i32); }
  Tensor to_bool() const { return to(DType::b8); }

  // ---- operators ----
  Tensor operator-() const { return neg(); }
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator+=(Scalar o) { return add_(o); }
  Tensor& operator-=(Scalar o) { return sub_(o); }
  Tensor& operator*=(Scalar o) { return mul_(o); }
  Tensor& operator/=(Scalar o) { return div_(o); }

 private:
  // Note [undefined tensors]: every accessor that reads the impl (sizes, dtype, device, grad,
  // ...) goes through here, so an undefined tensor (Tensor(), or a grad() that does not exist)
  // reaching any op or method throws ValueError instead of crashing. The message names the
  // op the user called when one is open on the thread (Note [op scope]) or the op's own
  // check_defined ran first, else the accessor ("[sizes] called on an undefined tensor"). Only
  // defined(), impl(), impl_ptr(), is_same() and str() accept an undefined tensor.
  TensorImpl& checked_impl(const char* method) const;

  std::shared_ptr<TensorImpl> impl_;
};

struct ValuesIndices {
  Tensor values;
  Tensor indices;
};

// Comparisons and logic give bool tensors, as in PyTorch (`a > 0`, `a == b`, `m1 & ~m2`);
// handle identity is Tensor::is_same. & | ^ ~ are logical on bool tensors, bitwise on integers.
inline Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
inline Tensor operator==(const Tensor& a, Scalar b) { return a.eq(b); }
inline Tensor operator!=(const Tensor& a, Scalar b) { return a.ne(b); }
inline Tensor operator<(const Tensor& a, Scalar b) { return a.lt(b); }
inline Tensor operator<=(const Tensor& a, Scalar b) { return a.le(b); }
inline Tensor operator>(const Tensor& a, Scalar b) { return a.gt(b); }
inline Tensor operator>=(const Tensor& a, Scalar b) { return a.ge(b); }
inline Tensor operator==(Scalar a, const Tensor& b) { return b.eq(a); }
inline Tensor operator!=(Scalar a, const Tensor& b) { return b.ne(a); }
inline Tensor operator<(Scalar a, const Tensor& b) { return b.gt(a); }
inline Tensor operator<=(Scalar a, const Tensor& b) { return b.ge(a); }
inline Tensor operator>(Scalar a, const Tensor& b) { return b.lt(a); }
inline Tensor operator>=(Scalar a, const Tensor& b) { return b.le(a); }
inline Tensor operator&(const Tensor& a, const Tensor& b) { return a.bitwise_and(b); }
inline Tensor operator|(const Tensor& a, const Tensor& b) { return a.bitwise_or(b); }
inline Tensor operator^(const Tensor& a, const Tensor& b) { return a.bitwise_xor(b); }
inline Tensor operator~(const Tensor& a) { return a.bitwise_not(); }

inline Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
inline Tensor operator+(const Tensor& a, Scalar b) { return a.add(b); }
inline Tensor operator-(const Tensor& a, Scalar b) { return a.sub(b); }
inline Tensor operator*(const Tensor& a, Scalar b) { return a.mul(b); }
inline Tensor operator/(const Tensor& a, Scalar b) { return a.div(b); }
inline Tensor operator+(Scalar a, const Tensor& b) { return b.add(a); }
inline Tensor operator*(Scalar a, const Tensor& b) { return b.mul(a); }
Tensor operator-(Scalar a, const Tensor& b);  // (-b) + a
Tensor operator/(Scalar a, const Tensor& b);  // a * b^-1 as one kernel

std::ostream& operator<<(std::ostream& os, const Tensor& t);
void str_append(std::string& s, const Tensor& t);  // "Tensor[2, 3] f32 cpu"

// Autograd bookkeeping a tensor carries once it requires grad or has a grad_fn.
struct AutogradMeta {
  AutogradMeta() = default;
  AutogradMeta(const AutogradMeta&) = delete;
  AutogradMeta& operator=(const AutogradMeta&) = delete;
  ~AutogradMeta();  // releases grad_fn through detail::release_node (no deep recursion)
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  // The AccumulateGrad node of a leaf, created on first use and shared by all its uses.
  std::weak_ptr<autograd::Node> grad_accumulator;
  std::vector<std::function<Tensor(const Tensor&)>> hooks;  // leaves only
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  bool is_view = false;  // shares storage with a tensor it was derived from
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& autograd_meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

inline TensorImpl& Tensor::checked_impl(const char* method) const {
  if (!impl_) [[unlikely]] detail::throw_undefined_tensor(method);
  return *impl_;
}
inline int64_t Tensor::dim() const { return int64_t(checked_impl("dim").sizes.size()); }
inline const Shape& Tensor::sizes() const { return checked_impl("sizes").sizes; }
inline const Shape& Tensor::strides() const { return checked_impl("strides").strides; }
inline int64_t Tensor::numel() const { return checked_impl("numel").sizes.numel(); }
inline DType Tensor::dtype() const { return checked_impl("dtype").dtype; }
inline Device Tensor::device() const { return checked_impl("device").storage->device(); }
inline int64_t Tensor::storage_offset() const { return checked_impl("storage_offset").offset; }
inline const std::shared_ptr<Storage>& Tensor::storage() const { return checked_impl("storage").storage; }
inline void* Tensor::data_ptr() const {
  const TensorImpl& impl = checked_impl("data_ptr");
  if (impl.storage->is_released()) [[unlikely]] detail::throw_released_storage();
  return static_cast<char*>(impl.storage->data()) + impl.offset * int64_t(itemsize(impl.dtype));
}
inline bool Tensor::requires_grad() const {
  const TensorImpl& impl = checked_impl("requires_grad");
  return impl.autograd && (impl.autograd->requires_grad || impl.autograd->grad_fn);
}
inline uint32_t Tensor::version() const { return checked_impl("version").storage->version(); }
inline void Tensor::bump_version() const { checked_impl("bump_version").storage->bump_version(); }

namespace detail {
// Note [Iterative graph release]: dropping the last handle to a deep graph would free node
// after node recursively (node -> saved tensor -> its grad_fn -> ...) and overflow the stack.
// Every owner of a node (a tensor's grad_fn, a node's edges) hands it here instead; the
// outermost call frees the queued nodes one at a time, each queuing its own edges.
void release_node(std::shared_ptr<autograd::Node>&& node);

// A new tensor (no autograd state) on fresh storage. Contiguous strides.
Tensor make_tensor(const Shape& sizes, DType dtype, Device device);
// The same with the strides of `format` (channels_last needs a 4-D shape).
Tensor make_tensor(const Shape& sizes, DType dtype, Device device, MemoryFormat format);
// A view of `base`'s storage with the given geometry (no autograd state, no checks).
Tensor make_view(const Tensor& base, const Shape& sizes, const Shape& strides, int64_t offset);
// Throws naming `op` unless every tensor is defined and on the same device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_defined(const char* op, const Tensor& t, const char* what = "input");
// True when two elements of `t` are one memory location: a dim of stride 0 and size > 1 (an
// expand()ed view). Writing such a tensor elementwise races on CUDA and loses all but one
// write on the CPU.
bool has_internal_overlap(const Tensor& t);
// Throws ValueError naming `op` when `t` (an op's output) has internal overlap, as PyTorch
// does ("clone() it first").
void check_no_internal_overlap(const char* op, const Tensor& t);

template <size_t N>
std::array<Tensor, N> unpack(TensorList pieces, const char* op) {
  EMBER_CHECK(pieces.size() == N, ShapeError, "[", op, "] gives ", pieces.size(), " tensors here, not the ", N,
              " being unpacked");
  std::array<Tensor, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = std::move(pieces[i]);
  return out;
}
}  // namespace detail

}  // namespace ember

// After Tensor is complete: the index types hold Tensors.
#include "ember/indexing.h"
