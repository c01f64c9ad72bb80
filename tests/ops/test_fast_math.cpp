// ember's vectorizable float exp, tanh, erf, log, log1p and expm1 (ops/include/ember/ops/fast_math.h) against the
// double-precision libm results, measured in units in the last place of the float result.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <ember/ops/fast_math.h>
#include <ember/ops/functors.h>

namespace {

using ember::ops::fast_math::erf_f32;
using ember::ops::fast_math::exp_f32;
using ember::ops::fast_math::expm1_f32;
using ember::ops::fast_math::log1p_f32;
using ember::ops::fast_math::log_f32;
using ember::ops::fast_math::tanh_f32;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// |got - ref| in ulps of the float nearest ref (the subnormal spacing below FLT_MIN).
double ulp_error(float got, double ref) {
  const double mag = std::abs(ref);
  const double ulp = mag < double(std::numeric_limits<float>::min())
                         ? std::ldexp(1.0, -149)
                         : std::ldexp(1.0, std::ilogb(float(mag)) - 23);
  return std::abs(double(got) - ref) / ulp;
}

// Every `stride`-th float between lo and hi (both signs are walked by bit pattern).
std::vector<float> sweep(float lo, float hi, uint32_t stride) {
  std::vector<float> xs;
  for (uint64_t u = 0; u < 0x7f800000u; u += stride) {
    const float x = from_bits(uint32_t(u));
    if (x <= hi) xs.push_back(x);
    if (-x >= lo) xs.push_back(-x);
  }
  return xs;
}

// The largest ulp_error of f(x) against the double reference ref(x) over xs, and where. f is a
// lambda, not the function itself: the fast_math functions are always_inline, and an indirect
// call through a pointer cannot be inlined (an error in the sanitizer build).
struct Worst {
  double ulp = 0;
  float x = 0;
};
template <class F, class Ref>
Worst worst_error(const std::vector<float>& xs, F f, Ref ref) {
  Worst w;
  for (float x : xs) {
    const double err = ulp_error(f(x), ref(double(x)));
    if (err > w.ulp) w = {err, x};
  }
  return w;
}

TEST(FastMath, ExpIsWithinTwoUlpOverTheWholeFloatRange) {
  const Worst w = worst_error(sweep(-104.0f, 88.72f, 4099), [](float x) { return exp_f32(x); }, [](double x) { return std::exp(x); });
  EXPECT_LE(w.ulp, 2.0) << "at x = " << w.x;
  // Around 0, where e^x is 1 + x: the relative error stays at the float's precision.
  for (float x : {1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.0f, -0.0f, 0.3466f, -0.3466f})
    EXPECT_LE(ulp_error(exp_f32(x), std::exp(double(x))), 1.0) << x;
}

TEST(FastMath, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);
  EXPECT_EQ(exp_f32(-1000.0f), 0.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(88.73f), inf);
  EXPECT_EQ(exp_f32(1000.0f), inf);
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  // The largest finite result and the subnormal range (2^n split into two normal factors).
  EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));
  EXPECT_LE(ulp_error(exp_f32(88.72f), std::exp(double(88.72f))), 2.0);
  for (float x : {-87.5f, -90.0f, -95.0f, -100.0f, -103.0f})
    EXPECT_LE(ulp_error(exp_f32(x), std::exp(double(x))), 1.0) << x;
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
}

TEST(FastMath, TanhIsWithinTwoUlpAndOdd) {
  const std::vector<float> xs = sweep(-20.0f, 20.0f, 4099);
  const Worst w = worst_error(xs, [](float x) { return tanh_f32(x); }, [](double x) { return std::tanh(x); });
  EXPECT_LE(w.ulp, 2.0) << "at x = " << w.x;
  for (float x : xs) ASSERT_EQ(tanh_f32(-x), -tanh_f32(x)) << x;
  // Both sides of the switch between the polynomial and the exp form.
  for (float x : {0.6249999f, 0.625f, 0.6250001f, 1e-20f, 1e-3f})
    EXPECT_LE(ulp_error(tanh_f32(x), std::tanh(double(x))), 2.0) << x;
}

TEST(FastMath, TanhEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(tanh_f32(inf), 1.0f);
  EXPECT_EQ(tanh_f32(-inf), -1.0f);
  EXPECT_EQ(tanh_f32(9.1f), 1.0f);
  EXPECT_EQ(tanh_f32(10.0f), 1.0f);
  EXPECT_EQ(tanh_f32(-100.0f), -1.0f);
  EXPECT_TRUE(std::isnan(tanh_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(tanh_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(tanh_f32(-0.0f)));
}

TEST(FastMath, ErfIsWithinTwoUlpAndOdd) {
  const std::vector<float> xs = sweep(-6.0f, 6.0f, 1031);
  const Worst w = worst_error(xs, [](float x) { return erf_f32(x); }, [](double x) { return std::erf(x); });
  EXPECT_LE(w.ulp, 2.0) << "at x = " << w.x;
  for (float x : xs) ASSERT_EQ(erf_f32(-x), -erf_f32(x)) << x;
  // Both sides of each switch: the small-|x| polynomial, the e^{-x^2} form, the constant 1.
  for (float x : {0.8999999f, 0.9f, 0.9000001f, 3.9199998f, 3.92f, 1e-30f, 1e-4f})
    EXPECT_LE(ulp_error(erf_f32(x), std::erf(double(x))), 2.0) << x;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(erf_f32(inf), 1.0f);
  EXPECT_EQ(erf_f32(-inf), -1.0f);
  EXPECT_EQ(erf_f32(1e30f), 1.0f);
  EXPECT_TRUE(std::isnan(erf_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(erf_f32(-0.0f)));
}

// Every positive float (subnormals included) by bit pattern, and the special values.
TEST(FastMath, LogIsWithinTwoUlp) {
  std::vector<float> xs;
  for (uint32_t u = 1; u < 0x7f800000u; u += 997) xs.push_back(from_bits(u));
  const Worst w = worst_error(xs, [](float x) { return log_f32(x); }, [](double x) { return std::log(x); });
  EXPECT_LE(w.ulp, 2.0) << "at x = " << w.x;
  for (float x : {1.0f, 1.41421354f, 1.41421366f, 0.70710677f, 2.0f, 1e-45f, 3.4e38f})
    EXPECT_LE(ulp_error(log_f32(x), std::log(double(x))), 2.0) << x;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(log_f32(1.0f), 0.0f);
  EXPECT_EQ(log_f32(0.0f), -inf);
  EXPECT_EQ(log_f32(-0.0f), -inf);
  EXPECT_EQ(log_f32(inf), inf);
  EXPECT_TRUE(std::isnan(log_f32(-1.0f)));
  EXPECT_TRUE(std::isnan(log_f32(-inf)));
  EXPECT_TRUE(std::isnan(log_f32(std::numeric_limits<float>::quiet_NaN())));
}

TEST(FastMath, Log1pAndExpm1AreWithinTwoUlp) {
  const Worst wl = worst_error(sweep(-1.0f, 3e38f, 1009), [](float x) { return log1p_f32(x); }, [](double x) { return std::log1p(x); });
  const Worst we = worst_error(sweep(-100.0f, 88.7f, 1009), [](float x) { return expm1_f32(x); }, [](double x) { return std::expm1(x); });
  EXPECT_LE(wl.ulp, 2.0) << "log1p at x = " << wl.x;
  EXPECT_LE(we.ulp, 2.0) << "expm1 at x = " << we.x;
  // Near 0 both are x to first order: relative accuracy there is the point of the functions.
  for (float x : {1e-30f, -1e-30f, 1e-8f, -1e-8f, 3e-5f, -0.34f, 0.35f, 88.5f})
    EXPECT_LE(ulp_error(expm1_f32(x), std::expm1(double(x))), 2.0) << x;
  for (float x : {1e-30f, -1e-30f, 1e-8f, -1e-8f, 3e-5f, -0.999f, 1e20f})
    EXPECT_LE(ulp_error(log1p_f32(x), std::log1p(double(x))), 2.0) << x;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(log1p_f32(-1.0f), -inf);
  EXPECT_EQ(log1p_f32(inf), inf);
  EXPECT_TRUE(std::isnan(log1p_f32(-2.0f)));
  EXPECT_TRUE(std::isnan(log1p_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(expm1_f32(-inf), -1.0f);
  EXPECT_EQ(expm1_f32(-50.0f), -1.0f);
  EXPECT_EQ(expm1_f32(inf), inf);
  EXPECT_EQ(expm1_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::isnan(expm1_f32(std::numeric_limits<float>::quiet_NaN())));
}

// The functors pick the fast versions for float and libm's for double.
TEST(FastMath, FunctorsUseTheFastPathForFloatOnly) {
  namespace fn = ember::ops::fn;
  // Read at run time: with a constant argument the compiler folds std::tanh(double(x)) with
  // its own correctly rounded arithmetic, which may differ from libm's by an ulp, on one side
  // of the comparison but not the other (test code is built at -O0 in the sanitizer build).
  volatile float opaque = 0.8123f;
  const float x = opaque;
  EXPECT_EQ(fn::Tanh{}(x), tanh_f32(x));
  EXPECT_EQ(fn::Exp{}(x), exp_f32(x));
  EXPECT_EQ(fn::erf(x), erf_f32(x));
  EXPECT_EQ(fn::Log{}(x), log_f32(x));
  EXPECT_EQ(fn::log1p(x), log1p_f32(x));
  EXPECT_EQ(fn::expm1(x), expm1_f32(x));
  EXPECT_EQ(fn::Tanh{}(double(x)), std::tanh(double(x)));
  EXPECT_EQ(fn::Exp{}(double(x)), std::exp(double(x)));
}

}  // namespace
