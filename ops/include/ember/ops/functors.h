// The math of every elementwise op, one tiny functor each, usable on host and device.
// A functor sees values in the compute type (float for f16/bf16/f32, double for f64, the
// integer type itself for integer tensors); the family drivers in ops/cpu and ops/cuda own
// iteration, broadcasting, dtype dispatch and stores.
//
// To add a unary op: write its functor here, add one X(...) line to EMBER_UNARY_OPS below,
// declare it in autograd (autograd/src/elementwise.cpp) with its VJP, and add a test.
#pragma once

#include <cmath>
#include <type_traits>

#include "ember/macros.h"

namespace ember::ops {

// Extra parameters of parameterized ops (clamp bounds, the exponent of pow_scalar).
struct UnaryParams {
  double a = 0;
  double b = 0;
};

namespace fn {

using std::abs, std::exp, std::log, std::sqrt, std::tanh, std::erf, std::pow;

#define EMBER_UNARY_FUNCTOR(Name, expr)                   \
  struct Name {                                           \
    UnaryParams p;                                        \
    template <class T>                                    \
    EMBER_HD T operator()(T x) const {                    \
      (void)p;                                            \
      return expr;                                        \
    }                                                     \
  };

EMBER_UNARY_FUNCTOR(Identity, x)
EMBER_UNARY_FUNCTOR(Neg, -x)
EMBER_UNARY_FUNCTOR(Exp, T(exp(x)))
EMBER_UNARY_FUNCTOR(Log, T(log(x)))
EMBER_UNARY_FUNCTOR(Sqrt, T(sqrt(x)))
EMBER_UNARY_FUNCTOR(Rsqrt, T(T(1) / sqrt(x)))
EMBER_UNARY_FUNCTOR(Reciprocal, T(T(1) / x))
EMBER_UNARY_FUNCTOR(Abs, std::is_unsigned_v<T> ? x : (x < T(0) ? T(-x) : x))
EMBER_UNARY_FUNCTOR(Sign, std::is_unsigned_v<T> ? T(x != T(0)) : T((T(0) < x) - (x < T(0))))
EMBER_UNARY_FUNCTOR(Tanh, T(tanh(x)))
EMBER_UNARY_FUNCTOR(Sigmoid, T(T(1) / (T(1) + exp(-x))))
EMBER_UNARY_FUNCTOR(Relu, x > T(0) ? x : T(0))
// gelu(x) = x * Phi(x), Phi the standard normal CDF.
EMBER_UNARY_FUNCTOR(Gelu, T(T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)))))
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), GPT-2's approximation.
EMBER_UNARY_FUNCTOR(GeluTanh, T(T(0.5) * x *
                                (T(1) + tanh(T(0.79788456080286535588) *
                                             (x + T(0.044715) * x * x * x)))))
EMBER_UNARY_FUNCTOR(Silu, T(x / (T(1) + exp(-x))))
EMBER_UNARY_FUNCTOR(Clamp, x < T(p.a) ? T(p.a) : (x > T(p.b) ? T(p.b) : x))
EMBER_UNARY_FUNCTOR(ClampMin, x < T(p.a) ? T(p.a) : x)
EMBER_UNARY_FUNCTOR(ClampMax, x > T(p.a) ? T(p.a) : x)
EMBER_UNARY_FUNCTOR(PowScalar, T(pow(x, T(p.a))))
#undef EMBER_UNARY_FUNCTOR

template <class T>
EMBER_HD T gelu_tanh_backward(T g, T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  T inner = k * (x + c * x * x * x);
  T th = T(tanh(inner));
  return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x));
}
template <class T>
EMBER_HD T silu_backward(T g, T x) {
  T s = T(1) / (T(1) + T(exp(-x)));
  return g * s * (T(1) + x * (T(1) - s));
}

#define EMBER_BINARY_FUNCTOR(Name, expr)        \
  struct Name {                                 \
    template <class T>                          \
    EMBER_HD T operator()(T a, T b) const {     \
      return expr;                              \
    }                                           \
  };

EMBER_BINARY_FUNCTOR(Add, a + b)
EMBER_BINARY_FUNCTOR(Sub, a - b)
EMBER_BINARY_FUNCTOR(Mul, a * b)
EMBER_BINARY_FUNCTOR(Div, a / b)
EMBER_BINARY_FUNCTOR(Pow, T(pow(a, b)))
// NaN propagates through maximum/minimum, as in PyTorch.
EMBER_BINARY_FUNCTOR(Maximum, (a != a) ? a : ((b != b) ? b : (a > b ? a : b)))
EMBER_BINARY_FUNCTOR(Minimum, (a != a) ? a : ((b != b) ? b : (a < b ? a : b)))
// Comparisons produce 0/1 in T; the driver stores them as bool.
EMBER_BINARY_FUNCTOR(Eq, T(a == b))
EMBER_BINARY_FUNCTOR(Ne, T(a != b))
EMBER_BINARY_FUNCTOR(Lt, T(a < b))
EMBER_BINARY_FUNCTOR(Le, T(a <= b))
EMBER_BINARY_FUNCTOR(Gt, T(a > b))
EMBER_BINARY_FUNCTOR(Ge, T(a >= b))
// Fused derivatives used by VJPs: (grad, saved) -> grad_in, one pass instead of three.
EMBER_BINARY_FUNCTOR(ReluBackward, b > T(0) ? a : T(0))  // (g, x)
EMBER_BINARY_FUNCTOR(SigmoidBackward, a * b * (T(1) - b))  // (g, y)
EMBER_BINARY_FUNCTOR(TanhBackward, a * (T(1) - b * b))     // (g, y)
EMBER_BINARY_FUNCTOR(GeluBackward,                          // (g, x)
                     a * T(T(0.5) * (T(1) + erf(b * T(0.70710678118654752440))) +
                           b * T(0.39894228040143267794) * T(exp(T(-0.5) * b * b))))
EMBER_BINARY_FUNCTOR(GeluTanhBackward, gelu_tanh_backward(a, b))  // (g, x)
EMBER_BINARY_FUNCTOR(SiluBackward, silu_backward(a, b))           // (g, x)
#undef EMBER_BINARY_FUNCTOR

}  // namespace fn

// The registries: X(enum name, functor, floating_only). A floating_only op promotes integer
// inputs to f32 (as torch.exp does); the others keep integer dtypes.
#define EMBER_UNARY_OPS(X)            \
  X(identity, Identity, false)        \
  X(neg, Neg, false)                  \
  X(exp, Exp, true)                   \
  X(log, Log, true)                   \
  X(sqrt, Sqrt, true)                 \
  X(rsqrt, Rsqrt, true)               \
  X(reciprocal, Reciprocal, true)     \
  X(abs, Abs, false)                  \
  X(sign, Sign, false)                \
  X(tanh, Tanh, true)                 \
  X(sigmoid, Sigmoid, true)           \
  X(relu, Relu, false)                \
  X(gelu, Gelu, true)                 \
  X(gelu_tanh, GeluTanh, true)        \
  X(silu, Silu, true)                 \
  X(clamp, Clamp, false)              \
  X(clamp_min, ClampMin, false)       \
  X(clamp_max, ClampMax, false)       \
  X(pow_scalar, PowScalar, true)

// X(enum name, functor, kind): kind is arith (result in the promoted dtype), compare (result
// is bool) or floating (promoted dtype, integers promote to f32).
#define EMBER_BINARY_OPS(X)                        \
  X(add, Add, arith)                               \
  X(sub, Sub, arith)                               \
  X(mul, Mul, arith)                               \
  X(div, Div, floating)                            \
  X(pow, Pow, floating)                            \
  X(maximum, Maximum, arith)                       \
  X(minimum, Minimum, arith)                       \
  X(eq, Eq, compare)                               \
  X(ne, Ne, compare)                               \
  X(lt, Lt, compare)                               \
  X(le, Le, compare)                               \
  X(gt, Gt, compare)                               \
  X(ge, Ge, compare)                               \
  X(relu_backward, ReluBackward, floating)         \
  X(sigmoid_backward, SigmoidBackward, floating)   \
  X(tanh_backward, TanhBackward, floating)         \
  X(gelu_backward, GeluBackward, floating)         \
  X(gelu_tanh_backward, GeluTanhBackward, floating) \
  X(silu_backward, SiluBackward, floating)

}  // namespace ember::ops
