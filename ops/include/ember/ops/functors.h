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
#include "ember/ops/fast_math.h"

namespace ember::ops {

// Extra parameters of parameterized ops (clamp bounds, the exponent of pow_scalar, the slope
// of leaky_relu), unary ones and the fused backward binaries of parameterized activations.
struct UnaryParams {
  double a = 0;
  double b = 0;
};

namespace fn {

using std::abs, std::sqrt, std::pow;

// exp, tanh, erf, log, log1p, expm1: for float on the host, ember's branch-free versions
// (fast_math.h, within 1.5 ulp) so that the CPU loops over these functors vectorize; libm's
// (libdevice's on the GPU) for double and in device code. f16/bf16 compute in float and take
// the fast path too. Always inlined, like the fast_math functions: GCC's heuristics otherwise
// leave a call to the (large) float version in the loop body, and the loop scalar.
#define EMBER_FAST_FLOAT_MATH(name)                                                           \
  template <class T>                                                                          \
  EMBER_HD EMBER_FORCEINLINE T name(T x) {                                                    \
    if constexpr (std::is_same_v<T, float> && !EMBER_DEVICE_CODE) return fast_math::name##_f32(x); \
    else return T(std::name(x));                                                              \
  }
EMBER_FAST_FLOAT_MATH(exp)
EMBER_FAST_FLOAT_MATH(tanh)
EMBER_FAST_FLOAT_MATH(erf)
EMBER_FAST_FLOAT_MATH(log)
EMBER_FAST_FLOAT_MATH(log1p)
EMBER_FAST_FLOAT_MATH(expm1)
#undef EMBER_FAST_FLOAT_MATH

// The floating type an activation computes in: T itself, or float for the integer
// instantiations the drivers compile but never run (floating_only ops promote integers).
template <class T>
using float_of = std::conditional_t<std::is_floating_point_v<T>, T, float>;

// floor/ceil/trunc/round: f applied to floating x, integers returned unchanged.
template <class T, class F>
EMBER_HD T round_like(T x, F f) {
  if constexpr (std::is_integral_v<T>) return x;
  else return T(f(x));
}
// x rounded half to even at 10^-decimals, PyTorch's formula: the power of ten is computed in
// double and cast to T, and x is scaled by it (multiplied, or divided for decimals < 0).
template <class T>
EMBER_HD T round_decimals(T x, double decimals) {
  if (decimals == 0) return T(std::rint(x));
  if (decimals > 0) {
    const T s = T(std::pow(10.0, decimals));
    return T(std::rint(x * s)) / s;
  }
  const T s = T(std::pow(10.0, -decimals));
  return T(std::rint(x / s)) * s;
}

// The parameters are converted up front, unconditionally (pa, pb): read inside a conditional
// arm (`x < 0 ? x * T(p.a) : x`) they become a masked double load per element and the CPU
// loop stays scalar.
#define EMBER_UNARY_FUNCTOR(Name, expr)                   \
  struct Name {                                           \
    UnaryParams p;                                        \
    template <class T>                                    \
    EMBER_HD EMBER_FORCEINLINE T operator()(T x) const {  \
      [[maybe_unused]] const T pa = T(p.a), pb = T(p.b);  \
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
EMBER_UNARY_FUNCTOR(Clamp, x < pa ? pa : (x > pb ? pb : x))
EMBER_UNARY_FUNCTOR(ClampMin, x < pa ? pa : x)
EMBER_UNARY_FUNCTOR(ClampMax, x > pa ? pa : x)
EMBER_UNARY_FUNCTOR(PowScalar, T(pow(x, pa)))
// sin/cos are floating_only (integers never reach them; float_of keeps those instantiations
// compiling). The rounding ops keep integer dtypes as PyTorch does (an integer is its own floor).
EMBER_UNARY_FUNCTOR(Sin, T(std::sin(float_of<T>(x))))
EMBER_UNARY_FUNCTOR(Cos, T(std::cos(float_of<T>(x))))
EMBER_UNARY_FUNCTOR(Floor, round_like<T>(x, [](auto v) { return std::floor(v); }))
EMBER_UNARY_FUNCTOR(Ceil, round_like<T>(x, [](auto v) { return std::ceil(v); }))
EMBER_UNARY_FUNCTOR(Trunc, round_like<T>(x, [](auto v) { return std::trunc(v); }))
// p.a: decimals (PyTorch's round(decimals)); rint rounds half to even in the default mode.
EMBER_UNARY_FUNCTOR(Round, round_like<T>(x, [d = p.a](auto v) { return round_decimals(v, d); }))
EMBER_UNARY_FUNCTOR(Square, x * x)
#undef EMBER_UNARY_FUNCTOR

template <class T>
EMBER_HD EMBER_FORCEINLINE T relu6(T x) {
  x = x < T(0) ? T(0) : x;
  return x > T(6) ? T(6) : x;
}

// Activations: x and the parameters in F = float_of<T> (never double math on float data).
#define EMBER_ACTIVATION_FUNCTOR(Name, expr)          \
  struct Name {                                       \
    UnaryParams p;                                    \
    template <class T>                                \
    EMBER_HD EMBER_FORCEINLINE T operator()(T in) const { \
      using F = float_of<T>;                          \
      const F x = F(in);                              \
      [[maybe_unused]] const F pa = F(p.a), pb = F(p.b); \
      return T(expr);                                 \
    }                                                 \
  };
// p.a: negative_slope.
EMBER_ACTIVATION_FUNCTOR(LeakyRelu, x > F(0) ? x : x * pa)
// p.a: alpha.
EMBER_ACTIVATION_FUNCTOR(Elu, x > F(0) ? x : pa * F(expm1(x)))
// p.a: beta, p.b: threshold; linear above the threshold, where log1p(exp(bx))/b == x in the
// dtype's precision (PyTorch's form: no overflow in exp).
EMBER_ACTIVATION_FUNCTOR(Softplus, x * pa > pb ? x : F(log1p(exp(x * pa))) / pa)
// x tanh(softplus(x)); exp overflows to inf for large x, and tanh(inf) = 1 gives x.
EMBER_ACTIVATION_FUNCTOR(Mish, x * F(tanh(F(log1p(exp(x))))))
// PyTorch's formulas, x * relu6(x + 3) / 6 and relu6(x + 3) / 6 (NaN propagates).
EMBER_ACTIVATION_FUNCTOR(Hardswish, x * relu6(x + F(3)) / F(6))
EMBER_ACTIVATION_FUNCTOR(Hardsigmoid, relu6(x + F(3)) / F(6))
#undef EMBER_ACTIVATION_FUNCTOR

template <class T>
EMBER_HD EMBER_FORCEINLINE T mish_backward(T g, T x) {
  const T sp = T(log1p(exp(x)));
  const T tsp = T(tanh(sp));
  const T s = T(1) / (T(1) + T(exp(-x)));
  return g * (tsp + x * s * (T(1) - tsp * tsp));
}
template <class T>
EMBER_HD EMBER_FORCEINLINE T softplus_backward(T g, T x, T beta, T threshold) {
  if (x * beta > threshold) return g;
  const T z = T(exp(x * beta));
  return g * z / (z + T(1));
}

template <class T>
EMBER_HD EMBER_FORCEINLINE T gelu_tanh_backward(T g, T x) {
  const T k = T(0.79788456080286535588), c = T(0.044715);
  T inner = k * (x + c * x * x * x);
  T th = T(tanh(inner));
  return g * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * k * (T(1) + T(3) * c * x * x));
}
template <class T>
EMBER_HD EMBER_FORCEINLINE T silu_backward(T g, T x) {
  T s = T(1) / (T(1) + T(exp(-x)));
  return g * s * (T(1) + x * (T(1) - s));
}
// SwiGLU, silu(gate) * up, and its two gradients from one sigmoid, in the compute type T: the
// math ops/cpu/swiglu.cpp and ops/cuda/swiglu.cu share. d_gate = go up silu'(gate) (the
// silu_backward formula), d_up = go silu(gate); a result not used is dead code once inlined.
template <class T>
EMBER_HD EMBER_FORCEINLINE T swiglu(T gate, T up) {
  return gate * (T(1) / (T(1) + T(exp(-gate)))) * up;
}
template <class T>
struct SwigluGrads {
  T dgate, dup;
};
template <class T>
EMBER_HD EMBER_FORCEINLINE SwigluGrads<T> swiglu_backward(T go, T gate, T up) {
  const T s = T(1) / (T(1) + T(exp(-gate)));
  return {go * up * s * (T(1) + gate * (T(1) - s)), go * gate * s};
}

#define EMBER_BITWISE_HELPER(name, op)                    \
  template <class T>                                      \
  EMBER_HD T name(T a, T b) {                             \
    if constexpr (std::is_integral_v<T>) return T(a op b); \
    else return T(int64_t(a) op int64_t(b));              \
  }
EMBER_BITWISE_HELPER(bit_and, &)
EMBER_BITWISE_HELPER(bit_or, |)
EMBER_BITWISE_HELPER(bit_xor, ^)
#undef EMBER_BITWISE_HELPER

#define EMBER_BINARY_FUNCTOR(Name, expr)        \
  struct Name {                                 \
    UnaryParams p;                              \
    template <class T>                          \
    EMBER_HD EMBER_FORCEINLINE T operator()(T a, T b) const { \
      [[maybe_unused]] const T pa = T(p.a), pb = T(p.b); \
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
// Logic (bool results, any dtype: nonzero is true) and bitwise ops (meant for integers and
// bool; ember's bitwise_* reject floating tensors, on which the kernels truncate to int64).
EMBER_BINARY_FUNCTOR(LogicalAnd, T((a != T(0)) && (b != T(0))))
EMBER_BINARY_FUNCTOR(LogicalOr, T((a != T(0)) || (b != T(0))))
EMBER_BINARY_FUNCTOR(LogicalXor, T((a != T(0)) != (b != T(0))))
EMBER_BINARY_FUNCTOR(BitwiseAnd, bit_and(a, b))
EMBER_BINARY_FUNCTOR(BitwiseOr, bit_or(a, b))
EMBER_BINARY_FUNCTOR(BitwiseXor, bit_xor(a, b))
// Fused derivatives used by VJPs: (grad, saved) -> grad_in, one pass instead of three.
EMBER_BINARY_FUNCTOR(ReluBackward, b > T(0) ? a : T(0))  // (g, x)
EMBER_BINARY_FUNCTOR(SigmoidBackward, a * b * (T(1) - b))  // (g, y)
EMBER_BINARY_FUNCTOR(TanhBackward, a * (T(1) - b * b))     // (g, y)
EMBER_BINARY_FUNCTOR(GeluBackward,                          // (g, x)
                     a * T(T(0.5) * (T(1) + erf(b * T(0.70710678118654752440))) +
                           b * T(0.39894228040143267794) * T(exp(T(-0.5) * b * b))))
EMBER_BINARY_FUNCTOR(GeluTanhBackward, gelu_tanh_backward(a, b))  // (g, x)
EMBER_BINARY_FUNCTOR(SiluBackward, silu_backward(a, b))           // (g, x)
// The parameterized ones read the forward's UnaryParams (ops::binary's params argument).
EMBER_BINARY_FUNCTOR(LeakyReluBackward, b > T(0) ? a : a * pa)  // (g, x)
EMBER_BINARY_FUNCTOR(EluBackward, b > T(0) ? a : a * pa * T(exp(b)))  // (g, x)
EMBER_BINARY_FUNCTOR(SoftplusBackward, softplus_backward(a, b, pa, pb))  // (g, x)
EMBER_BINARY_FUNCTOR(MishBackward, mish_backward(a, b))  // (g, x)
// PyTorch's (1.13) boundaries: hardswish takes the middle branch at x = -3 and passes g from
// x = 3 on; hardsigmoid's gradient is nonzero only strictly inside (-3, 3).
EMBER_BINARY_FUNCTOR(HardswishBackward, b < T(-3) ? T(0) : (b < T(3) ? a * (b / T(3) + T(0.5)) : a))
EMBER_BINARY_FUNCTOR(HardsigmoidBackward, b > T(-3) && b < T(3) ? a / T(6) : T(0))  // (g, x)
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
  X(pow_scalar, PowScalar, true)      \
  X(sin, Sin, true)                   \
  X(cos, Cos, true)                   \
  X(floor, Floor, false)              \
  X(ceil, Ceil, false)                \
  X(trunc, Trunc, false)              \
  X(round, Round, false)              \
  X(square, Square, false)            \
  X(leaky_relu, LeakyRelu, true)      \
  X(elu, Elu, true)                   \
  X(softplus, Softplus, true)         \
  X(mish, Mish, true)                 \
  X(hardswish, Hardswish, true)       \
  X(hardsigmoid, Hardsigmoid, true)

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
  X(logical_and, LogicalAnd, compare)              \
  X(logical_or, LogicalOr, compare)                \
  X(logical_xor, LogicalXor, compare)              \
  X(bitwise_and, BitwiseAnd, arith)                \
  X(bitwise_or, BitwiseOr, arith)                  \
  X(bitwise_xor, BitwiseXor, arith)                \
  X(relu_backward, ReluBackward, floating)         \
  X(sigmoid_backward, SigmoidBackward, floating)   \
  X(tanh_backward, TanhBackward, floating)         \
  X(gelu_backward, GeluBackward, floating)         \
  X(gelu_tanh_backward, GeluTanhBackward, floating) \
  X(silu_backward, SiluBackward, floating)         \
  X(leaky_relu_backward, LeakyReluBackward, floating) \
  X(elu_backward, EluBackward, floating)           \
  X(softplus_backward, SoftplusBackward, floating) \
  X(mish_backward, MishBackward, floating)         \
  X(hardswish_backward, HardswishBackward, floating) \
  X(hardsigmoid_backward, HardsigmoidBackward, floating)

}  // namespace ember::ops
