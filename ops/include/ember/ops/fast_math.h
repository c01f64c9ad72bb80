// Branch-free float exp and tanh that a compiler vectorizes: the CPU drivers' elementwise
// loops call them once per element (functors.h), and with libm's expf/tanhf behind an opaque
// call every such loop stayed scalar (a tanh-GELU over 1M elements: ~8 ms on two cores; ~1 ms
// vectorized). No branches, no calls, no tables: selects and straight-line arithmetic only, so
// GCC turns a loop over them into AVX2 code.
//
// Accuracy against the double-precision libm result, in ulps of the float result: exp_f32 at
// most 1.01 over every float in [-104, 88.72] (subnormal results measured in the subnormal
// spacing), exactly 0 at -inf and below -104, +inf above 88.73, NaN in NaN out; tanh_f32 at
// most 1.32 (every 7th float with |x| < 20), exactly odd, exactly +-1 from |x| = 9.1 on, NaN in
// NaN out. Measured exhaustively once with GCC 12 -O3 -march=native; tests/ops/test_fast_math.cpp
// keeps a 2-ulp bound on a sparser sweep. (PyTorch's CPU kernels use SLEEF's 1-ulp versions;
// CUDA's expf/tanhf are documented at 2 ulp.)
//
// The coefficients are the minimax polynomials of the Cephes library's expf and tanhf
// (S. L. Moshier), the standard public ones for float.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ember::ops::fast_math {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
// c ? a : b on the bits. Written as `c ? a : b` with computed arms (or nested, with a
// comparison in an arm), GCC sinks the arm's work into a branch and then refuses to
// if-convert it back, since floating-point operations and comparisons may trap
// (-ftrapping-math): the loop stays scalar. Masks keep every operation unconditional.
inline float select(bool c, float a, float b) {
  const uint32_t m = 0u - uint32_t(c);
  return bits_to_float((float_to_bits(a) & m) | (float_to_bits(b) & ~m));
}

// e^x = 2^n e^r with n = round(x / ln 2) and r = x - n ln 2 in [-ln2/2, ln2/2], ln 2 split in
// a 9-bit head (n * head is exact for |n| < 2^15, with or without FMA contraction) and a tail.
inline float exp_f32(float x) {
  // Clamped so that n stays within [-151, 129]; NaN passes both comparisons and propagates
  // through the polynomial.
  const float xc = select(x < -104.0f, -104.0f, select(x > 89.0f, 89.0f, x));
  // Adding 1.5 * 2^23 rounds x / ln 2 to the nearest integer in the low mantissa bits (no
  // float -> int conversion, which has no vector form for out-of-range lanes).
  constexpr float kShifter = 12582912.0f;
  const float shifted = xc * 1.44269504088896341f + kShifter;
  const float n = shifted - kShifter;
  const int32_t ni = int32_t(float_to_bits(shifted) - float_to_bits(kShifter));
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
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
inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = ax * ax;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * ax + ax;
  // e^{2|x|} overflows to +inf beyond |x| = 44 and 2 / inf = 0 gives exactly 1.
  const float large = 1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f);
  return std::copysign(select(ax < 0.625f, small, large), x);
}

}  // namespace ember::ops::fast_math
