#include <cmath>

#include "support/test_support.h"

using namespace ember;

TEST(Smoke, ElementwiseAndViews) {
  Tensor a = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor<float>({10, 20, 30}, {3});
  Tensor c = a + b;
  EXPECT_TRUE(test::all_close(c, {2, 3}, {11, 22, 33, 14, 25, 36}));
  Tensor t = a.t();
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_TRUE(test::all_close(t.contiguous(), {3, 2}, {1, 4, 2, 5, 3, 6}));
  EXPECT_TRUE(test::all_close((t * 2.0).exp().log(), {3, 2}, {2, 8, 4, 10, 6, 12}));
}

TEST(Smoke, GradOfMulExp) {
  Tensor x = tensor<double>({0.5, -1.0, 2.0}, {3}).requires_grad_();
  Tensor y = tensor<double>({1.5, 2.0, -0.5}, {3}).requires_grad_();
  Tensor z = (x * y).exp();
  z.backward(ones({3}, DType::f64));
  std::vector<double> xv{0.5, -1.0, 2.0}, yv{1.5, 2.0, -0.5}, gx, gy;
  for (int i = 0; i < 3; ++i) {
    gx.push_back(std::exp(xv[i] * yv[i]) * yv[i]);
    gy.push_back(std::exp(xv[i] * yv[i]) * xv[i]);
  }
  EXPECT_TRUE(test::all_close(x.grad(), gx));
  EXPECT_TRUE(test::all_close(y.grad(), gy));
}

TEST(Smoke, Gradcheck) {
  Tensor x = randn({3, 4}, DType::f64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const TensorList& in) { return in[0].tanh().mul(in[0].t().t()); }, {x}));
}
