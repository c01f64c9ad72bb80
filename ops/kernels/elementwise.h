#pragma once
#include "ember/ops/elementwise.h"
#include "dispatch.h"
#include "ember/macros.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

// Preconditions the front guarantees: tensors on one device; unary: x and out have one shape
// and one dtype; binary: a and b have one dtype and broadcast to out's shape, out's dtype is
// that dtype or bool (comparisons); where: cond is bool; copy: src broadcasts to dst's shape,
// any two dtypes.
// arange: t contiguous 1-d; element i is ArangeTerms::at(i) converted to t's dtype.
#define EMBER_ELEMENTWISE_KERNELS                                                         \
  void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& p); \
  void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,     \
                     const UnaryParams& p = {});                                           \
  void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out); \
  void copy_kernel(const Tensor& dst, const Tensor& src);                                  \
  void fill_kernel(const Tensor& t, Scalar value);                                         \
  void arange_kernel(const Tensor& t, const ArangeTerms& terms);

namespace ember::ops {
// One element converted between dtypes, the same on every backend (copy_, to(), casts):
// - to bool: nonzero (NaN is nonzero);
// - 16-bit values go through f32 both ways (their only arithmetic type);
// - a floating value to an integer type goes through int64, as PyTorch does for uint8: the
//   fraction is dropped and the result wraps (-1.0 -> 255 in u8; CUDA's direct conversion
//   would saturate to 0). NaN, infinities and values outside int64 give INT64_MIN's low bits,
//   what x86 gives, instead of undefined behaviour.
template <class To, class From>
EMBER_HD EMBER_FORCEINLINE To cast_value(From v) {
  constexpr bool from16 = sizeof(From) == 2 && !std::is_integral_v<From>;
  constexpr bool to16 = sizeof(To) == 2 && !std::is_integral_v<To>;
  if constexpr (std::is_same_v<To, bool>) {
    if constexpr (from16) return float(v) != 0.0f;
    else return v != From(0);
  } else if constexpr (std::is_integral_v<To> && (from16 || std::is_floating_point_v<From>)) {
    const double d = from16 ? double(float(v)) : double(v);
    const int64_t i = d > -9.2233720368547758e18 && d < 9.2233720368547758e18 ? int64_t(d) : INT64_MIN;
    return To(i);
  } else if constexpr (from16 || to16) {
    return To(float(v));
  } else {
    return To(v);
  }
}

// The values of arange, one formula for every backend so that they agree bit for bit:
// integers in int64 (exact), anything else start + i * step as one fused multiply-add in f64
// (one rounding, the same on the host and on the device, which contracts a * b + c freely).
struct ArangeTerms {
  bool integral;
  int64_t istart, istep;
  double start, step;
  template <class S>
  EMBER_HD S at(int64_t i) const {
    if (integral) return cast_value<S, int64_t>(istart + i * istep);
    // Through cast_value: a floating value into an integer dtype truncates through int64 on
    // every backend (a direct conversion saturates on CUDA and is undefined on the host).
    return cast_value<S, double>(fma(double(i), step, start));
  }
};
}  // namespace ember::ops

EMBER_DECLARE_KERNELS(EMBER_ELEMENTWISE_KERNELS)
