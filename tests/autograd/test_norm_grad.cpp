// Gradients of the fused normalization ops: gradcheck in f64 (finite differences of the
// forward, so each fused backward is checked against the op it differentiates), on
// contiguous and non-contiguous inputs; the autocast policy; double backward throws.
#include <cmath>
#include <limits>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

TEST(NormGrad, BatchNormTrainingGradcheck) {
  manual_seed(21);
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 3, 5}, Shape{3, 2, 4, 3}}) {
    SCOPED_TRACE(str(shape));
    const int64_t C = shape[1];
    Tensor x = randn(shape, DType::f64).requires_grad_();
    Tensor w = randn({C}, DType::f64).requires_grad_(), b = randn({C}, DType::f64).requires_grad_();
    // Running statistics are updated on every call of the forward: gradcheck calls it many
    // times, which must not change the output (training mode normalizes with batch stats).
    Tensor rm = zeros({C}, DType::f64), rv = ones({C}, DType::f64);
    EXPECT_TRUE(gradcheck([&](const TensorList& in) {
      return batch_norm(in[0], rm, rv, in[1], in[2], true, 0.1, 1e-5);
    }, {x, w, b}));
    // No running statistics, no affine.
    EXPECT_TRUE(gradcheck([&](const TensorList& in) {
      return batch_norm(in[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
    }, {x}));
  }
}

TEST(NormGrad, BatchNormEvalGradcheck) {
  manual_seed(22);
  Tensor x = randn({4, 3, 5}, DType::f64).requires_grad_();
  Tensor w = randn({3}, DType::f64).requires_grad_(), b = randn({3}, DType::f64).requires_grad_();
  Tensor rm = randn({3}, DType::f64), rv = add(rand({3}, DType::f64), full({}, 0.5, DType::f64));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return batch_norm(in[0], rm, rv, in[1], in[2], false, 0.1, 1e-5);
  }, {x, w, b}));
}

TEST(NormGrad, BatchNormNonContiguousInput) {
  // x as a permuted, sliced view: the op reads it through a contiguous copy and its gradient
  // flows back through the view.
  manual_seed(23);
  Tensor base = randn({3, 6, 4, 4}, DType::f64).requires_grad_();
  Tensor w = randn({3}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    Tensor v = in[0].permute({1, 0, 2, 3}).slice(0, 0, 6, 2);  // [3, 3, 4, 4], strided
    return batch_norm(v, Tensor(), Tensor(), in[1], Tensor(), true, 0.1, 1e-5);
  }, {base, w}));
}

TEST(NormGrad, GroupNormGradcheck) {
  manual_seed(24);
  for (const Shape& shape : {Shape{2, 6, 5}, Shape{3, 4, 2, 3}, Shape{2, 4}}) {
    SCOPED_TRACE(str(shape));
    const int64_t C = shape[1];
    Tensor x = randn(shape, DType::f64).requires_grad_();
    Tensor w = randn({C}, DType::f64).requires_grad_(), b = randn({C}, DType::f64).requires_grad_();
    EXPECT_TRUE(gradcheck([&](const TensorList& in) {
      return group_norm(in[0], 2, in[1], in[2], 1e-5);
    }, {x, w, b}));
  }
  Tensor base = randn({4, 3, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return group_norm(in[0].transpose(0, 2), 1);  // [5, 3, 4], strided
  }, {base}));
}

TEST(NormGrad, RmsNormGradcheck) {
  manual_seed(25);
  Tensor x = randn({4, 3, 5}, DType::f64).requires_grad_();
  Tensor w1 = randn({5}, DType::f64).requires_grad_(), w2 = randn({3, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return rms_norm(in[0], {5}, in[1], 1e-6); },
                        {x, w1}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return rms_norm(in[0], {3, 5}, in[1]); },
                        {x, w2}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return rms_norm(in[0].transpose(0, 2), {4});  // strided rows
  }, {x}));
}

TEST(NormGrad, RmsNormDefaultEpsIsTheDtypeEpsilon) {
  // A zero row: y = 0 * rsqrt(0 + eps) = 0; a row of tiny values shows eps: x / sqrt(x^2 + eps).
  Tensor x = full({1, 1}, 1e-4);
  const double eps = double(std::numeric_limits<float>::epsilon());
  EXPECT_NEAR(rms_norm(x, {1}).item<double>(), 1e-4 / std::sqrt(1e-8 + eps), 1e-6);
  Tensor xh = full({1, 1}, 0.03125, DType::bf16);  // bf16 eps 2^-7
  EXPECT_NEAR(rms_norm(xh, {1}).item<double>(), 0.03125 / std::sqrt(0.03125 * 0.03125 + 0.0078125),
              2e-3);
}

TEST(NormGrad, AutocastPolicy) {
  // group_norm and rms_norm run in f32 for a 16-bit input (layer_norm's row); batch_norm is
  // not in the table: a bf16 activation stays bf16 with f32 parameters and running stats.
  manual_seed(26);
  Tensor h = randn({4, 6, 3}).to(DType::bf16);
  Tensor w = ones({6}), b = zeros({6}), rm = zeros({6}), rv = ones({6});
  amp::autocast ac(Device::cpu(), DType::bf16);
  EXPECT_EQ(group_norm(h, 3, w, b).dtype(), DType::f32);
  EXPECT_EQ(rms_norm(h, {3}).dtype(), DType::f32);
  Tensor y = batch_norm(h, rm, rv, w, b, true, 0.1, 1e-5);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(rm.dtype(), DType::f32);
  EXPECT_GT(rm.abs().sum().item<double>(), 0.0);
}

TEST(NormGrad, DoubleBackwardThrows) {
  Tensor x = randn({4, 3}, DType::f64).requires_grad_();
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
  TensorList gs = autograd::grad({y.mul(y).sum()}, {x}, {}, true, true);
  EXPECT_NE(test::message_of<NotImplementedError>([&] { gs[0].sum().backward(); })
                .find("[batch_norm_backward] double backward"),
            std::string::npos);
}
