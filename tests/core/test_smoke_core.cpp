// Smoke tests of the core, and a canary for a known compiler miscompilation.
#include "support/test_support.h"

using namespace ember;

TEST(CoreSmoke, Print) {
  Tensor a = arange(6).view({2, 3});
  EXPECT_EQ(a.dtype(), DType::i64);
  std::string s = a.str();
  EXPECT_NE(s.find("[[0, 1, 2]"), std::string::npos) << s;
}

namespace {
// Out of line so the constants are materialized the way ordinary code materializes them.
[[gnu::noinline]] std::vector<double> doubles_1100() { return {1, 1, 0, 0}; }
[[gnu::noinline]] std::vector<int64_t> ints_5500() { return {5, 5, 0, 0}; }
[[gnu::noinline]] Shape shape_2200() { return Shape{2, 2, 0, 0}; }
}  // namespace

// GCC 12.2 (Debian 12's compiler) with -mavx512f (which -march=native turns on for CPUs with
// AVX-512, EMBER_NATIVE=ON) emits a broadcast for 64-bit vector constants whose tail is
// zero: {1, 1, 0, 0} is stored as {1, 1, 1, 1}. Any ember code with such a literal would be
// silently wrong. Tuning for an AVX-512 core (-mtune=icelake/rocketlake, implied by
// -march=native there) triggers it even with -mno-avx512f, so EMBER_NATIVE adds
// -mno-avx512f -mtune=generic; or build with -DEMBER_NATIVE=OFF.
TEST(Toolchain, VectorConstantsWithAZeroTailAreNotMiscompiled) {
  // Compared element by element against scalars: a second literal could be miscompiled too.
  std::vector<double> d = doubles_1100();
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(d[0], 1.0);
  EXPECT_EQ(d[2], 0.0) << "the compiler miscompiled a vector constant; see the comment above this test";
  EXPECT_EQ(d[3], 0.0);
  std::vector<int64_t> i = ints_5500();
  ASSERT_EQ(i.size(), 4u);
  EXPECT_EQ(i[2], 0) << "the compiler miscompiled a vector constant; see the comment above this test";
  EXPECT_EQ(i[3], 0);
  Shape s = shape_2200();
  EXPECT_EQ(s[2], 0) << "the compiler miscompiled a Shape literal; see the comment above this test";
  EXPECT_EQ(s.numel(), 0);
}
