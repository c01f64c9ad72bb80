// DType basics, the 16-bit float conversions (checked against IEEE bit patterns), and
// PyTorch's type promotion: promote_types, result_type with 0-dim tensors, and Scalars.
#include <cmath>
#include <cstring>
#include <limits>

#include <ember/ops/elementwise.h>

#include "support/test_support.h"

using namespace ember;

namespace {
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t half_bits(float f) { return Half(f).bits; }
uint16_t bf16_bits(float f) { return BFloat16(f).bits; }
float half_value(uint16_t bits) {
  Half h;
  h.bits = bits;
  return float(h);
}
float bf16_value(uint16_t bits) {
  BFloat16 b;
  b.bits = bits;
  return float(b);
}
constexpr DType kAll[] = {DType::b8, DType::u8, DType::i32, DType::i64,
                          DType::f16, DType::bf16, DType::f32, DType::f64};
}  // namespace

TEST(DType, ItemsizeNamesAndCategories) {
  EXPECT_EQ(itemsize(DType::b8), 1u);
  EXPECT_EQ(itemsize(DType::u8), 1u);
  EXPECT_EQ(itemsize(DType::i32), 4u);
  EXPECT_EQ(itemsize(DType::i64), 8u);
  EXPECT_EQ(itemsize(DType::f16), 2u);
  EXPECT_EQ(itemsize(DType::bf16), 2u);
  EXPECT_EQ(itemsize(DType::f32), 4u);
  EXPECT_EQ(itemsize(DType::f64), 8u);
  EXPECT_STREQ(dtype_name(DType::b8), "bool");
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::f64), "f64");
  EXPECT_TRUE(is_floating(DType::f16));
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i64));
  EXPECT_TRUE(is_integral(DType::u8));
  EXPECT_FALSE(is_integral(DType::b8));
  EXPECT_TRUE(is_integral(DType::b8, /*include_bool=*/true));
  EXPECT_EQ(str(DType::i32), "i32");
}

// ---- Half: IEEE binary16 ----

TEST(Half, ExactValues) {
  EXPECT_EQ(half_bits(0.0f), 0x0000);
  EXPECT_EQ(half_bits(-0.0f), 0x8000);
  EXPECT_EQ(half_bits(1.0f), 0x3C00);
  EXPECT_EQ(half_bits(-2.0f), 0xC000);
  EXPECT_EQ(half_bits(0.5f), 0x3800);
  EXPECT_EQ(half_bits(65504.0f), 0x7BFF);       // largest finite
  EXPECT_EQ(half_bits(6.103515625e-05f), 0x0400);  // smallest normal 2^-14
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(half_bits(-std::ldexp(3.0f, -24)), 0x8003);
}

TEST(Half, InfAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(half_bits(inf), 0x7C00);
  EXPECT_EQ(half_bits(-inf), 0xFC00);
  uint16_t n = half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(n & 0x7C00, 0x7C00);
  EXPECT_NE(n & 0x03FF, 0);
  EXPECT_TRUE(std::isnan(half_value(n)));
  // A signalling NaN whose payload lives only in the low mantissa bits must stay a NaN.
  EXPECT_TRUE(std::isnan(half_value(half_bits(from_bits(0x7F800001u)))));
  // Overflow: values from the midpoint 65520 up round to inf; just below stays 65504.
  EXPECT_EQ(half_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(half_bits(65520.0f), 0x7C00);
  EXPECT_EQ(half_bits(1e6f), 0x7C00);
  EXPECT_EQ(half_bits(-1e6f), 0xFC00);
  EXPECT_EQ(half_value(0x7C00), inf);
  EXPECT_EQ(half_value(0xFC00), -inf);
}

TEST(Half, RoundToNearestEven) {
  // Normal range: the spacing at 1 is 2^-10.
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even (down)
  EXPECT_EQ(half_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);  // above tie
  EXPECT_EQ(half_bits(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)), 0x3C00);  // below tie
  EXPECT_EQ(half_bits(2049.0f), 0x6800);  // between 2048 and 2050: even is 2048
  EXPECT_EQ(half_bits(2051.0f), 0x6802);  // between 2050 and 2052: even is 2052
  // Subnormal range: the spacing is 2^-24.
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal -> 0
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp -> 1 ulp
  EXPECT_EQ(half_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp -> 2 (even)
  EXPECT_EQ(half_bits(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 ulp -> 2 (even)
  EXPECT_EQ(half_bits(std::ldexp(1.0f, -30)), 0x0000);  // underflow to zero
  EXPECT_EQ(half_bits(-std::ldexp(1.0f, -30)), 0x8000);  // keeps the sign
  // Largest subnormal + half ulp rounds up into the smallest normal.
  EXPECT_EQ(half_bits(std::ldexp(2047.0f, -25)), 0x0400);
}

TEST(Half, ToFloat) {
  EXPECT_EQ(half_value(0x3C00), 1.0f);
  EXPECT_EQ(half_value(0x7BFF), 65504.0f);
  EXPECT_EQ(half_value(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_value(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_value(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(half_value(0x3555), 0.333251953125f);
  EXPECT_EQ(half_value(0xC000), -2.0f);
  EXPECT_TRUE(std::signbit(half_value(0x8000)));
  EXPECT_TRUE(std::isnan(half_value(0x7E00)));
  // Every finite half survives a round trip through float exactly.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7C00) == 0x7C00) continue;
    ASSERT_EQ(half_bits(half_value(uint16_t(b))), b) << "bits " << b;
  }
}

// ---- BFloat16: the top half of a float, rounded to nearest even ----

TEST(BFloat16, BitPatterns) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(inf), 0x7F80);
  EXPECT_EQ(bf16_bits(-inf), 0xFF80);
  EXPECT_EQ(bf16_bits(3.3895313892515355e38f), 0x7F7F);  // largest finite bf16
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);  // rounds past it: inf
  uint16_t n = bf16_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(n & 0x7F80, 0x7F80);
  EXPECT_NE(n & 0x007F, 0);
  // A NaN whose payload lies only in the dropped low bits must not become inf.
  EXPECT_TRUE(std::isnan(bf16_value(bf16_bits(from_bits(0x7F800001u)))));
  // Round to nearest even at 1 (spacing 2^-7).
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);
  // Subnormals are kept (bf16 has float's exponent range).
  EXPECT_EQ(bf16_bits(from_bits(0x00010000u)), 0x0001);
  EXPECT_EQ(bf16_bits(from_bits(0x00018000u)), 0x0002);  // tie -> even
  EXPECT_EQ(bf16_value(0x3F80), 1.0f);
  EXPECT_EQ(bf16_value(0x4049), 3.140625f);
  EXPECT_EQ(bf16_value(0x0001), from_bits(0x00010000u));
}

// ---- promotion ----

TEST(Promotion, PromoteTypesTable) {
  using D = DType;
  // Rows and columns in kAll order: bool u8 i32 i64 f16 bf16 f32 f64 (PyTorch's table).
  const DType expected[8][8] = {
      /* b8   */ {D::b8, D::u8, D::i32, D::i64, D::f16, D::bf16, D::f32, D::f64},
      /* u8   */ {D::u8, D::u8, D::i32, D::i64, D::f16, D::bf16, D::f32, D::f64},
      /* i32  */ {D::i32, D::i32, D::i32, D::i64, D::f16, D::bf16, D::f32, D::f64},
      /* i64  */ {D::i64, D::i64, D::i64, D::i64, D::f16, D::bf16, D::f32, D::f64},
      /* f16  */ {D::f16, D::f16, D::f16, D::f16, D::f16, D::f32, D::f32, D::f64},
      /* bf16 */ {D::bf16, D::bf16, D::bf16, D::bf16, D::f32, D::bf16, D::f32, D::f64},
      /* f32  */ {D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f64},
      /* f64  */ {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
  };
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j)
      EXPECT_EQ(promote_types(kAll[i], kAll[j]), expected[i][j])
          << dtype_name(kAll[i]) << " + " << dtype_name(kAll[j]);
}

TEST(Promotion, ResultTypeOfDimensionedTensorsFollowsTheTable) {
  for (DType a : kAll)
    for (DType b : kAll) {
      Tensor x = zeros({2}, a), y = zeros({3, 1}, b);
      EXPECT_EQ(ops::result_type(x, y), promote_types(a, b)) << dtype_name(a) << " " << dtype_name(b);
      // The elementwise op really produces it.
      Tensor s = x + y;
      EXPECT_EQ(s.dtype(), promote_types(a, b)) << dtype_name(a) << " " << dtype_name(b);
      EXPECT_EQ(s.sizes(), Shape({3, 2}));
      // Two 0-dim tensors promote like two dimensioned ones.
      EXPECT_EQ(ops::result_type(zeros({}, a), zeros({}, b)), promote_types(a, b))
          << "0-dim " << dtype_name(a) << " + 0-dim " << dtype_name(b);
    }
}

TEST(Promotion, ZeroDimTensorsRankBelowDimensionedOnesInTheirCategory) {
  struct Case { DType dimmed, zero, expected; };
  const Case cases[] = {
      {DType::f16, DType::f64, DType::f16},   // same category: the dimensioned dtype wins
      {DType::f16, DType::f32, DType::f16},
      {DType::bf16, DType::f64, DType::bf16},
      {DType::f32, DType::f64, DType::f32},
      {DType::i32, DType::i64, DType::i32},
      {DType::u8, DType::i64, DType::u8},
      {DType::i32, DType::f32, DType::f32},   // higher category: the 0-dim dtype wins
      {DType::i64, DType::f16, DType::f16},
      {DType::i32, DType::f64, DType::f64},
      {DType::b8, DType::i32, DType::i32},
      {DType::b8, DType::f64, DType::f64},
      {DType::f64, DType::i64, DType::f64},   // lower category: ignored
      {DType::i32, DType::b8, DType::i32},
      {DType::f16, DType::i64, DType::f16},
  };
  for (const Case& c : cases) {
    Tensor d = ones({2, 2}, c.dimmed), z = ones({}, c.zero);
    EXPECT_EQ(ops::result_type(d, z), c.expected) << dtype_name(c.dimmed) << " with 0-dim " << dtype_name(c.zero);
    EXPECT_EQ(ops::result_type(z, d), c.expected) << "0-dim " << dtype_name(c.zero) << " with " << dtype_name(c.dimmed);
    EXPECT_EQ((d * z).dtype(), c.expected);
    EXPECT_EQ((z * d).dtype(), c.expected);
  }
  // A one-element tensor with a dim is dimensioned, not 0-dim.
  EXPECT_EQ(ops::result_type(ones({2}, DType::f16), ones({1}, DType::f64)), DType::f64);
}

TEST(Promotion, ScalarOperands) {
  EXPECT_EQ((ones({2}, DType::i64) * 2.5).dtype(), DType::f32);
  EXPECT_EQ((ones({2}, DType::i32) * 2.5).dtype(), DType::f32);
  EXPECT_EQ((ones({2}, DType::u8) + 1.5).dtype(), DType::f32);
  EXPECT_EQ((ones({2}, DType::f16) + 1).dtype(), DType::f16);
  EXPECT_EQ((ones({2}, DType::f16) + 1.5).dtype(), DType::f16);
  EXPECT_EQ((ones({2}, DType::bf16) * 3.0).dtype(), DType::bf16);
  EXPECT_EQ((ones({2}, DType::f64) * 3.0).dtype(), DType::f64);
  EXPECT_EQ((ones({2}, DType::i64) + 1).dtype(), DType::i64);
  EXPECT_EQ((ones({2}, DType::i32) + 1).dtype(), DType::i32);
  EXPECT_EQ((ones({2}, DType::u8) + 1).dtype(), DType::u8);
  EXPECT_EQ((ones({2}, DType::b8) + 1).dtype(), DType::i64);
  EXPECT_EQ((ones({2}, DType::b8) * 2.5).dtype(), DType::f32);
  EXPECT_EQ((ones({}, DType::i32) + 2.5).dtype(), DType::f32);
  EXPECT_EQ((ones({}, DType::f64) + 2.5).dtype(), DType::f64);
  EXPECT_EQ((ones({}, DType::i32) + 2).dtype(), DType::i32);
  // The values follow the dtype: 3 * 2.5 in f32, 7 + 1 exactly in i64.
  EXPECT_DOUBLE_EQ((full({1}, 3, DType::i64) * 2.5).item<double>(), 7.5);
  EXPECT_EQ((full({1}, int64_t(1) << 40, DType::i64) + 1).item<int64_t>(), (int64_t(1) << 40) + 1);
  // Division and floating-only unary ops turn integers into the default float dtype.
  EXPECT_EQ((ones({2}, DType::i64) / 2).dtype(), DType::f32);
  EXPECT_DOUBLE_EQ((full({1}, 3, DType::i64) / 2).item<double>(), 1.5);
  EXPECT_EQ(ones({2}, DType::i32).exp().dtype(), DType::f32);
  EXPECT_EQ(ones({2}, DType::i32).neg().dtype(), DType::i32);
  // Comparisons are bool whatever the operands.
  EXPECT_EQ((ones({2}, DType::f16).lt(2.5)).dtype(), DType::b8);
  EXPECT_EQ((ones({2}, DType::i64).eq(ones({2}, DType::f64))).dtype(), DType::b8);
}
