// The test helpers themselves: a comparison that cannot fail would make every test using it
// vacuous, so each refusal it promises is checked here.
#include <cmath>
#include <cstdlib>
#include <string>

#include "support/test_support.h"

using namespace ember;

TEST(TestSupport, AllCloseRefusesAnotherShapeWithTheSameValues) {
  Tensor x = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  // Same row-major values, other shapes: refused in every form.
  EXPECT_FALSE(test::all_close(x, {1, 2, 3, 4, 5, 6}));                          // a flat list is 1-d
  EXPECT_FALSE(test::all_close(x, Shape{3, 2}, {1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(test::all_close(x, Shape{6}, {1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(test::all_close(x, x.reshape({3, 2})));
  EXPECT_FALSE(test::all_close(x.sum({1}, true), {6, 15}));                      // [2, 1] is not [2]
  EXPECT_FALSE(test::all_close(scalar_tensor(3.0, DType::f64), {3, 3}));
  // The right shape passes, a wrong value fails, a wrong count fails.
  EXPECT_TRUE(test::all_close(x, Shape{2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_FALSE(test::all_close(x, Shape{2, 3}, {1, 2, 3, 4, 5, 7}));
  EXPECT_FALSE(test::all_close(x, Shape{2, 3}, {1, 2, 3, 4, 5}));
  EXPECT_TRUE(test::all_close(x.sum({1}), {6, 15}));
  EXPECT_TRUE(test::all_close(x.sum(), {21}));
  // NaN matches NaN and infinities match themselves only.
  Tensor n = tensor<double>({NAN, INFINITY, -INFINITY}, {3});
  EXPECT_TRUE(test::all_close(n, {NAN, INFINITY, -INFINITY}));
  EXPECT_FALSE(test::all_close(n, {NAN, -INFINITY, -INFINITY}));
  EXPECT_FALSE(test::all_close(n, {0, INFINITY, -INFINITY}));
  EXPECT_FALSE(test::all_close(tensor<double>({0, 1}, {2}), {INFINITY, 1}));  // a finite value is not inf
  EXPECT_FALSE(test::all_close(tensor<double>({INFINITY, 1}, {2}), {1e300, 1}));
}

TEST(TestSupport, CudaSkipsOnlyWhereNoGpuIsExpected) {
  // EMBER_REQUIRE_CUDA forces the answer both ways; the CI machine has no NVIDIA device nodes.
  ::setenv("EMBER_REQUIRE_CUDA", "1", 1);
  EXPECT_TRUE(test::cuda_expected());
  ::setenv("EMBER_REQUIRE_CUDA", "0", 1);
  EXPECT_FALSE(test::cuda_expected());
  ::unsetenv("EMBER_REQUIRE_CUDA");
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  const std::string saved = v ? v : "";
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_FALSE(test::cuda_expected()) << "GPUs hidden on purpose: nothing is expected";
  if (v) ::setenv("CUDA_VISIBLE_DEVICES", saved.c_str(), 1);
  else ::unsetenv("CUDA_VISIBLE_DEVICES");
  // Where a GPU is expected the build must see it (a build without CUDA fails here instead of
  // skipping every CUDA test on the GPU machine).
  if (test::cuda_expected()) {
    EXPECT_TRUE(cuda::is_available()) << "an NVIDIA GPU is present but this build sees none";
  }
}

// The CUDA-only parametrization never lists the CPU: a body comparing a device with the CPU
// must not run as the CPU against itself.
TEST(TestSupport, CudaDevicesExcludeTheCpu) {
  for (Device d : test::cuda_devices()) EXPECT_TRUE(d.is_cuda());
  bool has_cpu = false;
  for (Device d : test::test_devices()) has_cpu = has_cpu || d.is_cpu();
  EXPECT_TRUE(has_cpu);
}
