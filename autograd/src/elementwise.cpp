// Differentiable elementwise ops: each forward beside its VJP.
#include "inplace.h"
#include "autocast_policy.h"

namespace ember {

using autograd::record;
using autograd::save;
using autograd::fused_backward;
using autograd::needs_input_grad;
using ops::BinaryOp;
using ops::UnaryOp;

namespace {
Tensor zeros_like_(const Tensor& t) {
  Tensor z = ember::detail::make_tensor(t.sizes(), t.dtype(), t.device());
  ops::fill_(z, 0);
  return z;
}
// A tensor operand for a Scalar next to `t` (see ops::wrap_scalar).
Tensor scalar_like(Scalar s, const Tensor& t) { return ops::wrap_scalar(s, t); }
// The mask as a 0/1 tensor of g's dtype.
Tensor as_weight(const Tensor& mask, const Tensor& g) { return ops::to(mask, g.device(), g.dtype()); }
}  // namespace

namespace autograd {
Tensor fused_backward(ops::BinaryOp op, const Tensor& grad, const Tensor& saved, ops::UnaryParams params) {
  const char* name = ops::op_name(op);
  return record(name, ops::binary(op, grad, saved, params), {grad, saved},
                [name](const Tensor&) -> TensorList {
                  throw NotImplementedError(str("[", name, "] double backward is not implemented"));
                });
}
}  // namespace autograd

// ---- arithmetic ----

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  EMBER_OP_SCOPE("add");
  Tensor bs = alpha.to_double() == 1.0 ? b : mul(b, scalar_like(alpha, b));
  return record("add", ops::binary(BinaryOp::add, a, bs), {a, bs},
                [sa = a.sizes(), sb = bs.sizes()](const Tensor& g) -> TensorList {
                  // Skipping unneeded inputs matters: `x + 1` would otherwise reduce the whole
                  // gradient to the constant's 0-dim shape on every backward.
                  return {needs_input_grad(0) ? sum_to(g, sa) : Tensor(),
                          needs_input_grad(1) ? sum_to(g, sb) : Tensor()};
                });
}

Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  EMBER_OP_SCOPE("sub");
  Tensor bs = alpha.to_double() == 1.0 ? b : mul(b, scalar_like(alpha, b));
  return record("sub", ops::binary(BinaryOp::sub, a, bs), {a, bs},
                [sa = a.sizes(), sb = bs.sizes()](const Tensor& g) -> TensorList {
                  return {needs_input_grad(0) ? sum_to(g, sa) : Tensor(),
                          needs_input_grad(1) ? sum_to(neg(g), sb) : Tensor()};
                });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  EMBER_OP_SCOPE("mul");
  return record("mul", ops::binary(BinaryOp::mul, a, b), {a, b},
                // Shapes are captured apart from the saved tensors: a saved tensor is read
                // (and version-checked) only when its values are needed, so `h.mul_(2)` on a
                // recorded h (which overwrites the saved h) still differentiates.
                [a = save(a), b = save(b), sa = a.sizes(), sb = b.sizes()](const Tensor& g) -> TensorList {
                  return {needs_input_grad(0) ? sum_to(mul(g, b), sa) : Tensor(),
                          needs_input_grad(1) ? sum_to(mul(g, a), sb) : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  EMBER_OP_SCOPE("div");
  return record("div", ops::binary(BinaryOp::div, a, b), {a, b},
                [b = save(b), sa = a.sizes(), sb = b.sizes()](const Tensor& g, const Tensor& y) -> TensorList {
                  return {needs_input_grad(0) ? sum_to(div(g, b), sa) : Tensor(),
                          needs_input_grad(1) ? sum_to(neg(div(mul(g, y), b)), sb) : Tensor()};
                });
}

Tensor pow(const Tensor& a, const Tensor& b) {
  EMBER_OP_SCOPE("pow");
  return record("pow", ops::binary(BinaryOp::pow, a, b), {a, b},
                [a = save(a), b = save(b), sa = a.sizes(), sb = b.sizes()](const Tensor& g, const Tensor& y) -> TensorList {
                  Tensor ga, gb;
                  if (needs_input_grad(0)) ga = sum_to(mul(mul(g, b), pow(a, sub(b, scalar_like(1, b)))), sa);
                  if (needs_input_grad(1)) gb = sum_to(mul(mul(g, y), log(a)), sb);
                  return {ga, gb};
                });
}

Tensor pow(const Tensor& x, Scalar exponent) {
  double p = exponent.to_double();
  Tensor result = record("pow", ops::unary(UnaryOp::pow_scalar, x, {p, 0}), {x},
                         [x = save(x), p](const Tensor& g) -> TensorList {
                           return {mul(g, mul(pow(x, p - 1), scalar_like(p, g)))};
                         });
  EMBER_TRACE(result, "pow", {x}, {{"exponent", p}});
  return result;
}

// Ties split the gradient evenly between the two inputs, as in PyTorch.
static Tensor min_max(const char* name, BinaryOp op, BinaryOp wins, const Tensor& a, const Tensor& b) {
  return record(name, ops::binary(op, a, b), {a, b},
                [a = save(a), b = save(b), wins](const Tensor& g) -> TensorList {
                  Tensor half_tie = mul(as_weight(ops::binary(BinaryOp::eq, a, b), g), scalar_like(0.5, g));
                  Tensor wa = add(as_weight(ops::binary(wins, a, b), g), half_tie);
                  Tensor wb = add(as_weight(ops::binary(wins, b, a), g), half_tie);
                  return {sum_to(mul(g, wa), a->sizes()), sum_to(mul(g, wb), b->sizes())};
                });
}
Tensor maximum(const Tensor& a, const Tensor& b) { return min_max("maximum", BinaryOp::maximum, BinaryOp::gt, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return min_max("minimum", BinaryOp::minimum, BinaryOp::lt, a, b); }

// ---- unary ----

Tensor neg(const Tensor& x) {
  return record("neg", ops::unary(UnaryOp::neg, x), {x},
                [](const Tensor& g) -> TensorList { return {neg(g)}; });
}
Tensor exp(const Tensor& x) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::exp, x))
      return exp((*c)[0]);
  return record("exp", ops::unary(UnaryOp::exp, x), {x},
                [](const Tensor& g, const Tensor& y) -> TensorList { return {mul(g, y)}; });
}
Tensor log(const Tensor& x) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::log, x))
      return log((*c)[0]);
  return record("log", ops::unary(UnaryOp::log, x), {x},
                [x = save(x)](const Tensor& g) -> TensorList { return {div(g, x)}; });
}
Tensor sqrt(const Tensor& x) {
  return record("sqrt", ops::unary(UnaryOp::sqrt, x), {x}, [](const Tensor& g, const Tensor& y) -> TensorList {
    return {div(g, mul(y, scalar_like(2, y)))};
  });
}
Tensor rsqrt(const Tensor& x) {
  return record("rsqrt", ops::unary(UnaryOp::rsqrt, x), {x}, [](const Tensor& g, const Tensor& y) -> TensorList {
    return {mul(g, mul(pow(y, 3), scalar_like(-0.5, y)))};
  });
}
Tensor reciprocal(const Tensor& x) {
  return record("reciprocal", ops::unary(UnaryOp::reciprocal, x), {x},
                [](const Tensor& g, const Tensor& y) -> TensorList { return {neg(mul(g, mul(y, y)))}; });
}
Tensor abs(const Tensor& x) {
  return record("abs", ops::unary(UnaryOp::abs, x), {x},
                [x = save(x)](const Tensor& g) -> TensorList { return {mul(g, sign(x))}; });
}
Tensor sign(const Tensor& x) {
  return record("sign", ops::unary(UnaryOp::sign, x), {x},
                [](const Tensor& g) -> TensorList { return {zeros_like_(g)}; });
}
Tensor tanh(const Tensor& x) {
  return record("tanh", ops::unary(UnaryOp::tanh, x), {x}, [](const Tensor& g, const Tensor& y) -> TensorList {
    return {fused_backward(BinaryOp::tanh_backward, g, y)};
  });
}
Tensor sigmoid(const Tensor& x) {
  return record("sigmoid", ops::unary(UnaryOp::sigmoid, x), {x}, [](const Tensor& g, const Tensor& y) -> TensorList {
    return {fused_backward(BinaryOp::sigmoid_backward, g, y)};
  });
}
Tensor relu(const Tensor& x) {
  // The output decides the mask (y > 0 exactly where x > 0), so relu_ stays differentiable.
  return record("relu", ops::unary(UnaryOp::relu, x), {x}, [](const Tensor& g, const Tensor& y) -> TensorList {
    return {fused_backward(BinaryOp::relu_backward, g, y)};
  });
}
Tensor gelu(const Tensor& x, bool tanh_approximation) {
  UnaryOp op = tanh_approximation ? UnaryOp::gelu_tanh : UnaryOp::gelu;
  BinaryOp bwd = tanh_approximation ? BinaryOp::gelu_tanh_backward : BinaryOp::gelu_backward;
  Tensor result = record("gelu", ops::unary(op, x), {x}, [x = save(x), bwd](const Tensor& g) -> TensorList {
    return {fused_backward(bwd, g, x)};
  });
  EMBER_TRACE(result, "gelu", {x}, {{"tanh_approximation", tanh_approximation}});
  return result;
}
Tensor silu(const Tensor& x) {
  return record("silu", ops::unary(UnaryOp::silu, x), {x}, [x = save(x)](const Tensor& g) -> TensorList {
    return {fused_backward(BinaryOp::silu_backward, g, x)};
  });
}
Tensor sin(const Tensor& x) {
  return record("sin", ops::unary(UnaryOp::sin, x), {x},
                [x = save(x)](const Tensor& g) -> TensorList { return {mul(g, cos(x))}; });
}
Tensor cos(const Tensor& x) {
  return record("cos", ops::unary(UnaryOp::cos, x), {x},
                [x = save(x)](const Tensor& g) -> TensorList { return {neg(mul(g, sin(x)))}; });
}
Tensor square(const Tensor& x) {
  return record("square", ops::unary(UnaryOp::square, x), {x},
                [x = save(x)](const Tensor& g) -> TensorList { return {mul(g, mul(x, scalar_like(2, x)))}; });
}
// Piecewise constant: zero gradient almost everywhere (PyTorch's choice at the jumps too).
#define EMBER_ROUNDING(name)                                                       \
  Tensor name(const Tensor& x) {                                                   \
    return record(#name, ops::unary(UnaryOp::name, x), {x},                        \
                  [](const Tensor& g) -> TensorList { return {zeros_like_(g)}; }); \
  }
EMBER_ROUNDING(floor)
EMBER_ROUNDING(ceil)
EMBER_ROUNDING(trunc)
#undef EMBER_ROUNDING
Tensor round(const Tensor& x, int64_t decimals) {
  return record("round", ops::unary(UnaryOp::round, x, {double(decimals), 0}), {x},
                [](const Tensor& g) -> TensorList { return {zeros_like_(g)}; });
}

// Activations with parameters: the forward's UnaryParams go to the fused backward as they are.
// Their VJPs read x (not y): leaky_relu with a negative slope, softplus and the hard ones are
// not invertible from y alone at every point.
static Tensor activation(const char* name, UnaryOp op, BinaryOp bwd, const Tensor& x, ops::UnaryParams p = {}) {
  Tensor result = record(name, ops::unary(op, x, p), {x}, [x = save(x), bwd, p](const Tensor& g) -> TensorList {
    return {fused_backward(bwd, g, x, p)};
  });
  EMBER_TRACE(result, name, {x}, {{"a", p.a}, {"b", p.b}});
  return result;
}
Tensor leaky_relu(const Tensor& x, double negative_slope) {
  return activation("leaky_relu", UnaryOp::leaky_relu, BinaryOp::leaky_relu_backward, x, {negative_slope, 0});
}
Tensor elu(const Tensor& x, double alpha) {
  return activation("elu", UnaryOp::elu, BinaryOp::elu_backward, x, {alpha, 0});
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  EMBER_CHECK(beta != 0, ValueError, "[softplus] beta must be nonzero");
  return activation("softplus", UnaryOp::softplus, BinaryOp::softplus_backward, x, {beta, threshold});
}
Tensor mish(const Tensor& x) { return activation("mish", UnaryOp::mish, BinaryOp::mish_backward, x); }
Tensor hardswish(const Tensor& x) {
  return activation("hardswish", UnaryOp::hardswish, BinaryOp::hardswish_backward, x);
}
Tensor hardsigmoid(const Tensor& x) {
  return activation("hardsigmoid", UnaryOp::hardsigmoid, BinaryOp::hardsigmoid_backward, x);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  EMBER_CHECK(min || max, ValueError, "[clamp] at least one of min and max must be given");
  Tensor y;
  if (min && max) y = ops::unary(UnaryOp::clamp, x, {min->to_double(), max->to_double()});
  else if (min) y = ops::unary(UnaryOp::clamp_min, x, {min->to_double(), 0});
  else y = ops::unary(UnaryOp::clamp_max, x, {max->to_double(), 0});
  Tensor result = record("clamp", y, {x}, [x = save(x), min, max](const Tensor& g) -> TensorList {
    // Gradient passes where x lies inside [min, max] (bounds included, as in PyTorch).
    Tensor inside;
    if (min) inside = ops::binary(BinaryOp::ge, x, scalar_like(*min, x));
    if (max) {
      Tensor below = ops::binary(BinaryOp::le, x, scalar_like(*max, x));
      inside = inside.defined() ? ops::binary(BinaryOp::mul, inside, below) : below;
    }
    return {mul(g, as_weight(inside, g))};
  });
  EMBER_TRACE(result, "clamp", {x},
              {{"has_min", min.has_value()}, {"min", min ? min->to_double() : 0.0},
               {"has_max", max.has_value()}, {"max", max ? max->to_double() : 0.0}});
  return result;
}

// ---- selection ----

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  EMBER_OP_SCOPE("where");
  Tensor result = record("where", ops::where(cond, a, b), {a, b},
                         [cond, sa = a.sizes(), sb = b.sizes()](const Tensor& g) -> TensorList {
                           Tensor zero = scalar_like(0, g);
                           return {needs_input_grad(0) ? sum_to(where(cond, g, zero), sa) : Tensor(),
                                   needs_input_grad(1) ? sum_to(where(cond, zero, g), sb) : Tensor()};
                         });
  EMBER_TRACE(result, "where", {cond, a, b});
  return result;
}
Tensor where(const Tensor& cond, const Tensor& a, Scalar b) {
  EMBER_OP_SCOPE("where");
  return where(cond, a, scalar_like(b, a));
}
Tensor where(const Tensor& cond, Scalar a, const Tensor& b) {
  EMBER_OP_SCOPE("where");
  return where(cond, scalar_like(a, b), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  EMBER_OP_SCOPE("masked_fill");
  ember::detail::check_defined("masked_fill", x);
  // The value is converted to x's dtype first, so x's own elements never pass through another
  // dtype (an i64 tensor filled with 2.5 must not round its other elements through f32).
  Tensor out = where(mask, ops::scalar_tensor(value, x.dtype(), x.device()), x);
  EMBER_CHECK(out.sizes() == x.sizes(), ShapeError, "[masked_fill] mask of shape ", mask.sizes(),
              " must broadcast to the input shape ", x.sizes());
  return out;
}

#define EMBER_COMPARISON(name)                                 \
  Tensor name(const Tensor& a, const Tensor& b) {              \
    Tensor y = ops::binary(BinaryOp::name, a, b);              \
    EMBER_TRACE(y, #name, {a, b});                             \
    return y;                                                  \
  }
EMBER_COMPARISON(eq)
EMBER_COMPARISON(ne)
EMBER_COMPARISON(lt)
EMBER_COMPARISON(le)
EMBER_COMPARISON(gt)
EMBER_COMPARISON(ge)
#undef EMBER_COMPARISON

Tensor to(const Tensor& x, Device device, DType dtype, bool non_blocking) {
  ember::detail::check_defined("to", x);
  if (x.device() == device && x.dtype() == dtype) return x;
  EMBER_CHECK(!x.requires_grad() || !GradMode::is_enabled() || is_floating(dtype), DTypeError,
              "[to] casting a tensor that requires grad to ", dtype,
              " would cut the graph; detach() it first");
  return record("to", ops::to(x, device, dtype, non_blocking), {x},
                [d = x.device(), t = x.dtype()](const Tensor& g) -> TensorList { return {to(g, d, t)}; });
}

}  // namespace ember
