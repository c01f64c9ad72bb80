// Tensor's differentiable methods (Note [Tensor methods] in tensor.h): each forwards to the
// free function in ember/functions.h, so there is one definition per op.
#include "ember/autograd/engine.h"
#include "ember/autograd/node.h"
#include "inplace.h"

namespace ember {

using ops::BinaryOp;
using ops::UnaryOp;

// ---- autograd ----
void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> fn) const {
  EMBER_OP_SCOPE("register_hook");
  EMBER_CHECK(requires_grad(), AutogradError,
              "[register_hook] cannot register a hook on a tensor that does not require grad");
  if (grad_fn()) grad_fn()->pre_hooks.push_back(std::move(fn));
  else impl_->autograd_meta().hooks.push_back(std::move(fn));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  EMBER_OP_SCOPE("register_post_accumulate_grad_hook");
  EMBER_CHECK(is_leaf() && requires_grad(), AutogradError,
              "[register_post_accumulate_grad_hook] only leaf tensors that require grad "
              "accumulate gradients");
  impl_->autograd_meta().post_accumulate_hooks.push_back(std::move(fn));
}

void Tensor::retain_grad() const {
  EMBER_OP_SCOPE("retain_grad");
  EMBER_CHECK(requires_grad(), AutogradError,
              "[retain_grad] cannot retain the gradient of a tensor that does not require grad");
  if (is_leaf()) return;  // leaves keep their gradient anyway
  AutogradMeta& meta = impl_->autograd_meta();
  if (meta.retains_grad) return;
  meta.retains_grad = true;
  // Weak: the node must not keep its own output alive (that would be a cycle).
  std::weak_ptr<TensorImpl> weak = impl_;
  grad_fn()->pre_hooks.push_back([weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor& acc = impl->autograd_meta().grad;
      acc = acc.defined() ? ops::binary(BinaryOp::add, acc, g) : ember::clone(g).detach();
    }
    return Tensor();
  });
}

// ---- views ----
Tensor Tensor::view(const Shape& shape) const { return ember::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return ember::reshape(*this, shape); }
Tensor Tensor::permute(const Shape& dims) const { return ember::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return ember::transpose(*this, d0, d1); }
Tensor Tensor::t() const {
  EMBER_OP_SCOPE("t");
  EMBER_CHECK(dim() <= 2, ShapeError, "[t] expects a tensor with at most 2 dims, got ", sizes(),
              "; use transpose(dim0, dim1)");
  return dim() < 2 ? *this : ember::transpose(*this, 0, 1);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return ember::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return ember::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return ember::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& shape) const { return ember::expand(*this, shape); }
Tensor Tensor::squeeze() const { return ember::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return ember::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return ember::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return ember::flatten(*this, s, e); }
Tensor Tensor::unflatten(int64_t dim, const Shape& sizes) const { return ember::unflatten(*this, dim, sizes); }
Tensor Tensor::contiguous() const { return ember::contiguous(*this); }
Tensor Tensor::contiguous(MemoryFormat format) const { return ember::contiguous(*this, format); }

// ---- conversion and copies ----
Tensor Tensor::to(DType dtype) const {
  EMBER_OP_SCOPE("to");
  return ember::to(*this, device(), dtype);
}
Tensor Tensor::to(Device device, bool non_blocking) const {
  EMBER_OP_SCOPE("to");
  return ember::to(*this, device, dtype(), non_blocking);
}
Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  return ember::to(*this, device, dtype, non_blocking);
}
Tensor Tensor::clone() const { return ember::clone(*this); }

Tensor& Tensor::copy_(const Tensor& src) {
  EMBER_OP_SCOPE("copy_");
  return autograd::apply_inplace(
      "copy_", *this, src.requires_grad(),
      [&](const Tensor&) {  // d(copy_)/d(src): the gradient reshaped to src (summed over broadcast dims)
        Tensor expanded = ember::expand(ember::to(src, device(), dtype()), sizes());
        return ember::clone(expanded);
      },
      [&] { ops::copy_(*this, src); });
}
Tensor& Tensor::fill_(Scalar value) {
  EMBER_OP_SCOPE("fill_");
  return autograd::apply_inplace(
      "fill_", *this, false,
      [&](const Tensor&) {
        Tensor t = ember::detail::make_tensor(sizes(), dtype(), device());
        ops::fill_(t, value);
        return t;
      },
      [&] { ops::fill_(*this, value); });
}
Tensor& Tensor::zero_() {
  EMBER_OP_SCOPE("zero_");
  return fill_(0);
}

// ---- elementwise ----
Tensor Tensor::add(const Tensor& o, Scalar alpha) const { return ember::add(*this, o, alpha); }
Tensor Tensor::sub(const Tensor& o, Scalar alpha) const { return ember::sub(*this, o, alpha); }
Tensor Tensor::mul(const Tensor& o) const { return ember::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return ember::div(*this, o); }
#define EMBER_SCALAR_METHOD(name)                       \
  Tensor Tensor::name(Scalar o) const {                 \
    EMBER_OP_SCOPE(#name);                              \
    return ember::name(*this, ops::wrap_scalar(o, *this)); \
  }
EMBER_SCALAR_METHOD(add)
EMBER_SCALAR_METHOD(sub)
EMBER_SCALAR_METHOD(mul)
EMBER_SCALAR_METHOD(div)
#undef EMBER_SCALAR_METHOD
Tensor Tensor::pow(const Tensor& e) const { return ember::pow(*this, e); }
Tensor Tensor::pow(Scalar e) const { return ember::pow(*this, e); }
Tensor Tensor::maximum(const Tensor& o) const { return ember::maximum(*this, o); }
Tensor Tensor::minimum(const Tensor& o) const { return ember::minimum(*this, o); }

#define EMBER_INPLACE_BINARY(method, op, OPERAND_EXPR, REQ)                                   \
  Tensor& Tensor::method {                                                                    \
    EMBER_OP_SCOPE(#op "_");                                                                  \
    const Tensor operand = OPERAND_EXPR;                                                      \
    return autograd::apply_inplace(                                                           \
        #op "_", *this, REQ, [&](const Tensor& self) { return ember::op(self, operand); },                       \
        [&] { ops::binary_out(BinaryOp::op, *this, operand, *this); });                       \
  }
EMBER_INPLACE_BINARY(mul_(const Tensor& o), mul, o, o.requires_grad())
EMBER_INPLACE_BINARY(div_(const Tensor& o), div, o, o.requires_grad())
EMBER_INPLACE_BINARY(add_(Scalar o), add, ops::wrap_scalar(o, *this), false)
EMBER_INPLACE_BINARY(sub_(Scalar o), sub, ops::wrap_scalar(o, *this), false)
EMBER_INPLACE_BINARY(mul_(Scalar o), mul, ops::wrap_scalar(o, *this), false)
EMBER_INPLACE_BINARY(div_(Scalar o), div, ops::wrap_scalar(o, *this), false)
EMBER_INPLACE_BINARY(add_(const Tensor& o, Scalar alpha),
                     add, alpha.to_double() == 1.0 ? o : ember::mul(o, ops::wrap_scalar(alpha, o)),
                     o.requires_grad())
EMBER_INPLACE_BINARY(sub_(const Tensor& o, Scalar alpha),
                     sub, alpha.to_double() == 1.0 ? o : ember::mul(o, ops::wrap_scalar(alpha, o)),
                     o.requires_grad())
#undef EMBER_INPLACE_BINARY

Tensor& Tensor::pow_(Scalar e) {
  return autograd::apply_inplace(
      "pow_", *this, false, [&](const Tensor& self) { return ember::pow(self, e); },
      [&] { ops::unary_out(UnaryOp::pow_scalar, *this, *this, {e.to_double(), 0}); });
}

#define EMBER_UNARY_METHOD(name)                                                          \
  Tensor Tensor::name() const { return ember::name(*this); }                              \
  Tensor& Tensor::name##_() {                                                             \
    return autograd::apply_inplace(                                                       \
        #name "_", *this, false, [&](const Tensor& self) { return ember::name(self); },                      \
        [&] { ops::unary_out(UnaryOp::name, *this, *this); });                            \
  }
EMBER_UNARY_METHOD(neg)
EMBER_UNARY_METHOD(exp)
EMBER_UNARY_METHOD(log)
EMBER_UNARY_METHOD(sqrt)
EMBER_UNARY_METHOD(rsqrt)
EMBER_UNARY_METHOD(abs)
EMBER_UNARY_METHOD(tanh)
EMBER_UNARY_METHOD(sigmoid)
EMBER_UNARY_METHOD(relu)
EMBER_UNARY_METHOD(silu)
#undef EMBER_UNARY_METHOD

Tensor Tensor::gelu(bool tanh_approximation) const { return ember::gelu(*this, tanh_approximation); }
Tensor Tensor::clamp(Scalar min, Scalar max) const { return ember::clamp(*this, min, max); }
Tensor Tensor::clamp_min(Scalar min) const { return ember::clamp(*this, min, std::nullopt); }
Tensor Tensor::clamp_max(Scalar max) const { return ember::clamp(*this, std::nullopt, max); }
Tensor& Tensor::clamp_(Scalar min, Scalar max) {
  return autograd::apply_inplace(
      "clamp_", *this, false, [&](const Tensor& self) { return ember::clamp(self, min, max); },
      [&] { ops::unary_out(UnaryOp::clamp, *this, *this, {min.to_double(), max.to_double()}); });
}

#define EMBER_COMPARE_METHOD(name)                                                          \
  Tensor Tensor::name(const Tensor& o) const { return ember::name(*this, o); }              \
  Tensor Tensor::name(Scalar o) const {                                                     \
    EMBER_OP_SCOPE(#name);                                                                  \
    return ember::name(*this, ops::wrap_scalar(o, *this));                                  \
  }
EMBER_COMPARE_METHOD(eq)
EMBER_COMPARE_METHOD(ne)
EMBER_COMPARE_METHOD(lt)
EMBER_COMPARE_METHOD(le)
EMBER_COMPARE_METHOD(gt)
EMBER_COMPARE_METHOD(ge)
#undef EMBER_COMPARE_METHOD

Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return ember::masked_fill(*this, mask, value);
}
Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  EMBER_OP_SCOPE("masked_fill_");
  return autograd::apply_inplace(
      "masked_fill_", *this, false, [&](const Tensor& self) { return ember::masked_fill(self, mask, value); },
      [&] { ops::copy_(*this, ops::where(mask, ops::scalar_tensor(value, dtype(), device()), *this)); });
}

Tensor operator-(Scalar a, const Tensor& b) {
  EMBER_OP_SCOPE("sub");
  return b.neg().add(a);
}
Tensor operator/(Scalar a, const Tensor& b) {
  EMBER_OP_SCOPE("div");
  return ember::mul(ember::reciprocal(b), ops::wrap_scalar(a, b));
}

// ---- reductions ----
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return ember::mean(*this, dims, keepdim); }
Tensor Tensor::max() const {
  EMBER_OP_SCOPE("max");
  return ember::amax(*this);
}
Tensor Tensor::min() const {
  EMBER_OP_SCOPE("min");
  return ember::amin(*this);
}
ValuesIndices Tensor::max(int64_t dim, bool keepdim) const { return ember::max(*this, dim, keepdim); }
ValuesIndices Tensor::min(int64_t dim, bool keepdim) const { return ember::min(*this, dim, keepdim); }
Tensor Tensor::argmax() const { return ember::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return ember::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return ember::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const Shape& dims, int64_t correction, bool keepdim) const {
  return ember::std(*this, dims, correction, keepdim);
}
Tensor Tensor::norm(double p, const Shape& dims, bool keepdim) const {
  return ember::norm(*this, p, dims, keepdim);
}

// ---- linear algebra, nn, indexing ----
Tensor Tensor::matmul(const Tensor& o) const { return ember::matmul(*this, o); }
Tensor Tensor::softmax(int64_t dim) const { return ember::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return ember::log_softmax(*this, dim); }
Tensor Tensor::tril(int64_t k) const { return ember::tril(*this, k); }
Tensor Tensor::triu(int64_t k) const { return ember::triu(*this, k); }
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return ember::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return ember::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return ember::scatter_add(*this, dim, index, src);
}
TensorList Tensor::split(int64_t size, int64_t dim) const { return ember::split(*this, size, dim); }
TensorList Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  return ember::split(*this, sizes, dim);
}
TensorList Tensor::chunk(int64_t chunks, int64_t dim) const { return ember::chunk(*this, chunks, dim); }

}  // namespace ember
