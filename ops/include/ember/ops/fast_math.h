// Branch-free float exp, tanh, erf, log, log1p and expm1 that a compiler vectorizes: the CPU
// drivers' elementwise loops call them once per element (functors.h; always inlined: a call in
// the loop body would keep it scalar). With libm behind an opaque call every such loop stayed
// scalar (a tanh-GELU over 1M elements: ~8 ms on two cores; ~0.6 ms vectorized). No branches, no
// calls, no tables: selects and straight-line arithmetic only, so GCC turns a loop over them
// into AVX2 code.
//
// Accuracy against the double-precision libm result, in ulps of the float result, measured
// once with GCC 12 -O3 -march=native: exp_f32 at most 1.01 over every float in [-104, 88.72]
// (subnormal results measured in the subnormal spacing), exactly 0 at -inf and below -104, +inf
// above 88.73; tanh_f32 at most 1.32 (every 7th float with |x| < 20), exactly odd, exactly +-1
// from |x| = 9.1 on; erf_f32 at most 1.37 (every float with |x| <= 5), exactly odd, exactly +-1
// from 3.92 on; log_f32 0.82, log1p_f32 1.44, expm1_f32 1.39 over all 2^32 bit patterns (with
// log's and log1p's -inf at 0 and -1, NaN below; expm1 -1 below -30). NaN in, NaN out, for all.
// tests/ops/test_fast_math.cpp keeps a 2-ulp bound on sparser sweeps and checks the edges.
// (PyTorch's CPU kernels use SLEEF's 1-ulp versions; CUDA documents expf, tanhf, erff at 2 ulp.)
//
// exp's and tanh's coefficients are the minimax polynomials of the Cephes library's expf and
// tanhf (S. L. Moshier), the standard public ones for float; erf's and log's are ember's own
// weighted least-squares fits in double (relative error), rounded to float; expm1's are 1/k!.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "ember/macros.h"

namespace ember::ops::fast_math {

EMBER_FORCEINLINE float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
EMBER_FORCEINLINE uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// c ? a : b on the bits. Written as `c ? a : b` with computed arms (or nested, with a
// comparison in an arm), GCC sinks the arm's work into a branch and then refuses to
// if-convert it back, since floating-point operations and comparisons may trap
// (-ftrapping-math): the loop stays scalar. Masks keep every operation unconditional.
EMBER_FORCEINLINE float select(bool c, float a, float b) {
  const uint32_t m = 0u - uint32_t(c);
  return bits_to_float((float_to_bits(a) & m) | (float_to_bits(b) & ~m));
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// c[0] t^(N-1) + c[1] t^(N-2) + ... + c[N-1] by Horner's rule (highest degree first). Fully
// unrolled once inlined, the coefficients folded to constants.
template <size_t N>
EMBER_FORCEINLINE float horner(float t, const float (&c)[N]) {
  float p = c[0];
  for (size_t i = 1; i < N; ++i) p = p * t + c[i];
  return p;
}

// x = n ln 2 + r with n = round(x / ln 2) and r in [-ln2/2, ln2/2] (exp's and expm1's range
// reduction), for |x| < 2^22. ln 2 is split in a 9-bit head (n * head is exact for |n| < 2^15,
// with or without FMA contraction) and a tail.
struct Ln2Reduced {
  float r;    // the remainder
  int32_t n;  // the multiple of ln 2
};
EMBER_FORCEINLINE Ln2Reduced reduce_by_ln2(float x) {
  // Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer in the low mantissa bits (no
  // float -> int conversion, which has no vector form for out-of-range lanes).
  constexpr float kShifter = 12582912.0f;
  const float shifted = x * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  return {r, int32_t(float_to_bits(shifted) - float_to_bits(kShifter))};
}

// e^x = 2^n e^r (reduce_by_ln2), e^r from Cephes' degree-5 minimax polynomial.
EMBER_FORCEINLINE float exp_f32(float x) {
  // Clamped so that n stays within [-151, 129]; NaN passes both comparisons and propagates
  // through the polynomial.
  const float xc = select(x < -104.0f, -104.0f, select(x > 89.0f, 89.0f, x));
  const auto [r, ni] = reduce_by_ln2(xc);
  const float p = horner(r, {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f,
                             1.6666665459e-1f, 5.0000001201e-1f});
  const float er = p * (r * r) + r + 1.0f;
  // 2^n as two factors, each a normal float for every n here: 2^128 (x near 88.7) and
  // 2^-150 (subnormal results) are not, and a single final rounding happens in the second
  // multiplication.
  const int32_t n1 = ni / 2, n2 = ni - n1;
  const float s1 = bits_to_float(uint32_t(n1 + 127) << 23);
  const float s2 = bits_to_float(uint32_t(n2 + 127) << 23);
  const float y = (er * s1) * s2;
  return select(x < -104.0f, 0.0f, y);
}

// tanh: an odd minimax polynomial below |x| = 0.625, 1 - 2 / (e^{2|x|} + 1) above (no
// cancellation there: tanh >= 0.55); computed on |x| with x's sign restored (exactly odd,
// tanh(-0) = -0).
EMBER_FORCEINLINE float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = ax * ax;
  const float p = horner(z, {-5.70498872745e-3f, 2.06390887954e-2f, -5.37397155531e-2f,
                             1.33314422036e-1f, -3.33332819422e-1f});
  const float small = p * z * ax + ax;
  // e^{2|x|} overflows to +inf beyond |x| = 44 and 2 / inf = 0 gives exactly 1.
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  return std::copysign(select(ax < 0.625f, small, large), x);
}

// erf: x (1 + z R(z)) with z = x^2 below |x| = 0.9 (relative accuracy near 0), above it
// 1 - e^{-x^2} Q(|x| - 2.41) with Q a polynomial fit of erfc(x) e^{x^2} on [0.9, 3.92], and 1
// from 3.92 on (erfc there is below half an ulp of 1); odd, computed on |x|. Coefficients:
// weighted least-squares fits in double (relative error), rounded to float.
EMBER_FORCEINLINE float erf_f32(float x) {
  const float ax = std::fabs(x);
  const float z = ax * ax;
  const float r = horner(z, {8.552851194995846e-05f, -8.185888304426464e-04f,
                             5.204867172200719e-03f, -2.686097765810227e-02f,
                             1.128372536851146e-01f, -3.761263589783196e-01f,
                             1.283791669542876e-01f});
  const float small = ax + ax * r;
  // Clamped so that neither factor overflows on the lanes that take `small`; NaN stays NaN.
  const float xb = select(ax > 3.92f, 3.92f, ax);
  const float t = xb - 2.41f;
  const float q = horner(t, {-5.085270401e-07f, 2.175303037e-06f, -5.042732933e-06f,
                             1.768498132e-05f, -7.178333514e-05f, 2.545360635e-04f,
                             -8.584316541e-04f, 2.823034514e-03f, -8.952198064e-03f,
                             2.722413404e-02f, -7.903808739e-02f, 2.177056150e-01f});
  const float large = select(ax > 3.92f, 1.0f, 1.0f - exp_f32(-(xb * xb)) * q);
  return std::copysign(select(ax < 0.9f, small, large), x);
}

// log: x = 2^e m with m in [sqrt(1/2), sqrt(2)) read from the bits (subnormals scaled by 2^23
// first), log(m) = f - f^2/2 + f^3 P(f) with f = m - 1 (exact), P a weighted least-squares fit
// in double of (log1p(f) - f + f^2/2) / f^3 on that interval; e ln 2 added in two parts.
EMBER_FORCEINLINE float log_f32(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const float xs = select(subnormal, x * 8388608.0f, x);
  const uint32_t bits = float_to_bits(xs);
  // Exponent and mantissa of positive finite xs; the selects below take care of the rest.
  const int32_t e0 = int32_t((bits >> 23) & 0xffu) - 127 - (subnormal ? 23 : 0);
  const float m0 = bits_to_float((bits & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  const bool high = m0 > 1.41421356f;
  const float m = select(high, m0 * 0.5f, m0);
  const float e = float(e0 + (high ? 1 : 0));
  const float f = m - 1.0f;
  const float p = horner(f, {6.8009601112e-02f, -1.1726697225e-01f, 1.1891018311e-01f,
                             -1.2396432796e-01f, 1.4217757339e-01f, -1.6668513073e-01f,
                             2.0002246770e-01f, -2.5000000553e-01f, 3.3333310122e-01f});
  const float f2 = f * f;
  const float y = (e * -2.12194440e-4f + (f2 * f * p - 0.5f * f2)) + f + e * 0.693359375f;
  // log(0) = -inf, log(x < 0) = NaN, log(inf) = inf; NaN propagates.
  float r = select(x == 0.0f, -kInf, y);
  r = select(x < 0.0f, kNaN, r);
  r = select(x == kInf, kInf, r);
  return select(x != x, x, r);
}

// log1p: log(u) with u = 1 + x, corrected by the rounding of u: log1p(x) = log(u) - (u - 1 -
// x) / u to first order. x itself where u rounds to 1.
EMBER_FORCEINLINE float log1p_f32(float x) {
  const float u = 1.0f + x;
  const float y = log_f32(u) - ((u - 1.0f) - x) / u;
  float r = select(u == 1.0f, x, y);
  r = select(u == 0.0f, -kInf, r);  // x = -1
  r = select(x == kInf, kInf, r);
  return select(x < -1.0f, kNaN, r);  // NaN stays NaN through log_f32
}

// expm1: e^x - 1 = 2^k (e^r - 1) + (2^k - 1), k = round(x / ln 2), r in [-ln2/2, ln2/2], e^r - 1
// from its Taylor series through r^8 (truncation below 2e-9 relative), so no cancellation near 0.
// Above 88 (2^k would overflow) it is e^x; below -30 it is -1.
EMBER_FORCEINLINE float expm1_f32(float x) {
  const float xc = select(x < -30.0f, -30.0f, select(x > 88.0f, 88.0f, x));
  const auto [r, ki] = reduce_by_ln2(xc);
  const float q = horner(r, {1.0f / 40320.0f, 1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f,
                             1.0f / 24.0f, 1.0f / 6.0f});
  const float r2 = r * r;
  const float em1r = r + (0.5f * r2 + r2 * r * q);
  const float s = bits_to_float(uint32_t(ki + 127) << 23);
  const float y = select(ki == 0, em1r, s * em1r + (s - 1.0f));
  return select(x > 88.0f, exp_f32(x), y);
}

}  // namespace ember::ops::fast_math
