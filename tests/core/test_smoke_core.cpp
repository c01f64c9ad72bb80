#include "support/test_support.h"

using namespace ember;

TEST(CoreSmoke, Print) {
  Tensor a = arange(6).view({2, 3});
  EXPECT_EQ(a.dtype(), DType::i64);
  std::string s = a.str();
  EXPECT_NE(s.find("[[0, 1, 2]"), std::string::npos) << s;
}
