// Gradients of matmul, linear, conv2d and max_pool2d: gradcheck (central differences in
// f64) for every shape case, plus double backward where it is supported.
#include <functional>
#include <string>
#include <vector>

#include "ember/ops/matmul_config.h"
#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {
using Dims = std::vector<int64_t>;
Tensor leaf(const Dims& shape) { return randn(Shape(shape), DType::f64).requires_grad_(); }
// <a, b> over all elements, as a 1-D matmul (keeps these tests to this family's ops).
Tensor dot_all(const Tensor& a, const Tensor& b) { return matmul(a.flatten(), b.flatten()); }
}  // namespace

TEST(MatmulGrad, AllShapeCases) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{4}, {4}},                  // dot
      {{3, 4}, {4}},               // matrix x vector
      {{4}, {4, 2}},               // vector x matrix
      {{3, 4}, {4, 2}},            // mm
      {{2, 3, 4}, {4, 2}},         // batched x matrix: dB folds the batch into one GEMM
      {{3, 4}, {2, 4, 2}},         // matrix x batched: dA folds the batch into one GEMM
      {{2, 3, 4}, {2, 4, 2}},      // bmm
      {{2, 3, 4}, {4}},            // batched x vector
      {{4}, {2, 4, 3}},            // vector x batched
      {{2, 1, 2, 3}, {3, 3, 2}},   // [B,1,M,K] x [H,K,N]: both gradients reduce over a batch dim
      {{1, 2, 3}, {2, 1, 3, 2}},   // broadcast on both sides
  };
  for (auto& [sa, sb] : cases) {
    SCOPED_TRACE(str(Shape(sa), " x ", Shape(sb)));
    EXPECT_TRUE(gradcheck([](const TensorList& in) { return matmul(in[0], in[1]); }, {leaf(sa), leaf(sb)}));
  }
}

TEST(MatmulGrad, NonContiguousOperands) {
  Tensor a = randn({4, 3}, DType::f64).requires_grad_();
  Tensor b = randn({2, 5, 8}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) { return matmul(in[0].t(), in[1].transpose(1, 2).slice(1, 0, 8, 2)); }, {a, b}));
}

TEST(MatmulGrad, OnlyRequestedGradients) {
  Tensor x = randn({3, 4}, DType::f64);  // data: no gradient wanted
  Tensor w = randn({4, 2}, DType::f64).requires_grad_();
  matmul(x, w).sum().backward();
  EXPECT_FALSE(x.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  // d(sum(x @ w))/dw[k, n] = sum_m x[m, k]
  auto xv = x.to_vector<double>();
  std::vector<double> ref;
  for (int k = 0; k < 4; ++k)
    for (int n = 0; n < 2; ++n) ref.push_back(xv[size_t(k)] + xv[size_t(4 + k)] + xv[size_t(8 + k)]);
  EXPECT_TRUE(test::all_close(w.grad(), {4, 2}, ref, 1e-12, 1e-12));
}

TEST(MatmulGrad, DoubleBackward) {
  // The VJP is written with differentiable ops: gradcheck the gradient itself.
  Tensor a = leaf({2, 3, 4}), b = leaf({4, 2}), v = randn({2, 3, 2}, DType::f64);
  EXPECT_TRUE(gradcheck(
      [v](const TensorList& in) {
        AutoGradMode on(true);  // gradcheck evaluates fn without recording; this fn needs a graph
        Tensor y = matmul(in[0], in[1]);
        TensorList g = autograd::grad({y}, {in[0], in[1]}, {v}, true, true);
        return dot_all(g[0], g[0]) + dot_all(g[1], in[1]);
      },
      {a, b}));
}

TEST(LinearGrad, Gradcheck) {
  for (const Dims& xs : {Dims{4}, Dims{3, 4}, Dims{2, 3, 4}}) {
    SCOPED_TRACE(str(Shape(xs)));
    EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0], in[1], in[2]); },
                          {leaf(xs), leaf({5, 4}), leaf({5})}));
    EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0], in[1]); }, {leaf(xs), leaf({5, 4})}));
  }
  // A transposed weight view and a non-foldable input.
  Tensor w = leaf({4, 5});
  Tensor x = leaf({3, 2, 4});
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return linear(in[0].transpose(0, 1), in[1].t()); }, {x, w}));
}

// linear's VJP takes dw and db from one fused op when grad mode is off (ops::linear_weight_grad)
// and from the composite under create_graph: the second derivative through both parameters
// (d/dx of the weight and bias gradients, which depend on x and w) must be right.
TEST(LinearGrad, DoubleBackward) {
  Tensor x = leaf({2, 3, 4}), w = leaf({5, 4}), b = leaf({5});
  Tensor v = randn({2, 3, 5}, DType::f64);
  EXPECT_TRUE(gradcheck(
      [v](const TensorList& in) {
        AutoGradMode on(true);
        Tensor y = linear(in[0], in[1], in[2]);
        TensorList g = autograd::grad({y * y}, {in[0], in[1], in[2]}, {v}, true, true);
        return dot_all(g[0], g[0]) + dot_all(g[1], in[1]) + dot_all(g[2], g[2]);
      },
      {x, w, b}));
}

// gelu_mlp (the fused GPT-2 MLP): its fused VJP (pre-activation from the forward, the GELU
// derivative and bias gradients in the backward GEMMs' epilogues, or their CPU twins).
TEST(GeluMlpGrad, Gradcheck) {
  auto fn = [](const TensorList& in) { return gelu_mlp(in[0], in[1], in[2], in[3], in[4]); };
  for (const Dims& xs : {Dims{3}, Dims{4, 3}, Dims{2, 3, 3}}) {
    SCOPED_TRACE(str(Shape(xs)));
    EXPECT_TRUE(gradcheck(fn, {leaf(xs), leaf({7, 3}), leaf({7}), leaf({3, 7}), leaf({3})}));
  }
  // A non-contiguous input and only some inputs requiring grad.
  Tensor xt = leaf({3, 2, 3});
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return gelu_mlp(in[0].transpose(0, 1), in[1], in[2], in[3], in[4]); },
                        {xt, leaf({5, 3}), leaf({5}), leaf({3, 5}), leaf({3})}));
  Tensor fw = randn({5, 3}, DType::f64), pb = randn({3}, DType::f64);
  EXPECT_TRUE(gradcheck([fw, pb](const TensorList& in) { return gelu_mlp(in[0], fw, in[1], in[2], pb); },
                        {leaf({4, 3}), leaf({5}), leaf({3, 5})}));
}

// Double backward: under create_graph the VJP is the differentiable composite (GELU's
// derivative spelled out), so second derivatives through every input are right.
TEST(GeluMlpGrad, DoubleBackward) {
  Tensor v = randn({2, 3, 3}, DType::f64);
  EXPECT_TRUE(gradcheck(
      [v](const TensorList& in) {
        AutoGradMode on(true);
        Tensor y = gelu_mlp(in[0], in[1], in[2], in[3], in[4]);
        TensorList g = autograd::grad({y}, {in[0], in[1], in[2], in[3], in[4]}, {v}, true, true);
        return dot_all(g[0], g[0]) + dot_all(g[1], in[1]) + dot_all(g[2], g[2]) + dot_all(g[3], g[3]) +
               dot_all(g[4], in[4]);
      },
      {leaf({2, 3, 3}), leaf({6, 3}), leaf({6}), leaf({3, 6}), leaf({3})}));
  // The first-order gradients of the create_graph path equal the fused path's.
  Tensor x = leaf({2, 3, 3}), fw = leaf({6, 3}), fb = leaf({6}), pw = leaf({3, 6}), pb = leaf({3});
  TensorList fused = autograd::grad({gelu_mlp(x, fw, fb, pw, pb)}, {x, fw, fb, pw, pb}, {v});
  TensorList comp = autograd::grad({gelu_mlp(x, fw, fb, pw, pb)}, {x, fw, fb, pw, pb}, {v}, true, true);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(test::all_close(fused[i], comp[i].detach(), 1e-12, 1e-12)) << i;
}

TEST(LinearGrad, DataInputGetsNoGradient) {
  Tensor x = randn({6, 4}, DType::f64);
  Tensor w = leaf({3, 4}), b = leaf({3});
  linear(x, w, b).sum().backward();
  EXPECT_FALSE(x.grad().defined());
  EXPECT_TRUE(test::all_close(b.grad(), {6, 6, 6}, 1e-12, 1e-12));
  EXPECT_TRUE(w.grad().defined());
}

namespace {
struct ConvGradCase {
  Dims x, w;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool bias;
};
}  // namespace

TEST(Conv2dGrad, Gradcheck) {
  const std::vector<ConvGradCase> cases = {
      {{2, 2, 5, 4}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{1, 2, 5, 5}, {2, 2, 3, 2}, {2, 1}, {1, 1}, {1, 1}, 1, false},
      {{1, 1, 6, 6}, {2, 1, 2, 2}, {1, 2}, {1, 0}, {2, 2}, 1, true},
      {{2, 4, 4, 4}, {4, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},
      {{1, 3, 4, 4}, {3, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 3, false},  // depthwise
      {{2, 3, 3, 3}, {2, 3, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},   // 1x1
      {{1, 16, 3, 3}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},  // Winograd F(2x2, 3x3)
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(str("x", Shape(c.x), " w", Shape(c.w), " s", c.stride[0], c.stride[1], " p", c.padding[0],
                     c.padding[1], " d", c.dilation[0], c.dilation[1], " g", c.groups));
    auto fn = [c](const TensorList& in) {
      return conv2d(in[0], in[1], c.bias ? in[2] : Tensor(), c.stride, c.padding, c.dilation, c.groups);
    };
    TensorList inputs{leaf(c.x), leaf(c.w)};
    if (c.bias) inputs.push_back(leaf({c.w[0]}));
    EXPECT_TRUE(gradcheck(fn, inputs));
  }
  // Unbatched input.
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return conv2d(in[0], in[1], in[2], {1, 1}, {1, 1}); },
                        {leaf({2, 4, 3}), leaf({3, 2, 3, 3}), leaf({3})}));
}

TEST(Conv2dGrad, DoubleBackwardSaysNotImplemented) {
  Tensor x = leaf({1, 1, 4, 4}), w = leaf({1, 1, 3, 3});
  Tensor y = conv2d(x, w);
  TensorList g = autograd::grad({y.sum()}, {x, w}, {}, true, true);
  try {
    g[0].sum().backward();
    FAIL() << "expected NotImplementedError";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("[conv2d] double backward"), std::string::npos) << e.what();
  }
}

namespace {
// Distinct values (no ties, so the max is differentiable), well separated relative to the
// finite-difference step.
Tensor distinct(const Dims& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor perm = randperm(n).to(DType::f64);
  return (perm * 0.1).reshape(Shape(shape)).contiguous().requires_grad_();
}
}  // namespace

TEST(MaxPool2dGrad, Gradcheck) {
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return max_pool2d(in[0], {2, 2}); }, {distinct({2, 2, 4, 4})}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return max_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}); },
                        {distinct({1, 2, 5, 6})}));
  // Overlapping windows: one input can be the max of several outputs.
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return max_pool2d(in[0], {3, 2}, {1, 1}, {1, 1}); },
                        {distinct({1, 1, 4, 5})}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return max_pool2d(in[0], {2, 2}); }, {distinct({2, 4, 4})}));
}

TEST(MaxPool2dGrad, DoubleBackward) {
  Tensor x = distinct({1, 2, 4, 4});
  Tensor v = randn({1, 2, 3, 3}, DType::f64).requires_grad_();
  // d/dv of <grad_x(max_pool(x) . v), x>: the backward is linear in v and differentiable.
  EXPECT_TRUE(gradcheck(
      [x](const TensorList& in) {
        AutoGradMode on(true);  // gradcheck evaluates fn without recording; this fn needs a graph
        Tensor xx = x.detach().requires_grad_();
        Tensor y = max_pool2d(xx, {2, 2}, {1, 1});
        TensorList g = autograd::grad({y}, {xx}, {in[0]}, true, true);
        return dot_all(g[0], g[0]);
      },
      {v}));
}

// ---- linear and matmul forward + backward on every device, against the CPU ----
// f32 runs with TF32 off (tight: 1e-5 relative, plus K-scaled absolute slack for sums
// that cancel); f64 tighter; bf16 at 2e-2 (one bf16 rounding of each f32-accumulated
// result). A body whose CUDA ops are not all implemented yet skips, naming the op.

namespace {

class LinalgGradDevice : public ::testing::TestWithParam<Device> {};

struct GradTol {
  double rtol, atol;
};
GradTol grad_tol(DType dt) {
  switch (dt) {
    case DType::f64: return {1e-10, 1e-10};
    case DType::f32: return {1e-5, 1e-4};
    default: return {2e-2, 2e-2};
  }
}

// Runs fn(inputs) -> y on `dev` and on the CPU from the same values, back-propagates the
// same random cotangent, and compares y and every input's gradient.
void expect_same_as_cpu(Device dev, DType dt, const std::vector<Dims>& shapes,
                        const std::function<Tensor(const TensorList&)>& fn) {
  TensorList cpu_in, dev_in;
  for (const Dims& s : shapes) {
    Tensor v = randn(Shape(s), DType::f64).to(dt);
    cpu_in.push_back(v.clone().requires_grad_());
    dev_in.push_back(v.to(dev).requires_grad_());
  }
  Tensor y_cpu = fn(cpu_in), y_dev = fn(dev_in);
  Tensor g = randn(y_cpu.sizes(), DType::f64).to(dt);
  y_cpu.backward(g);
  y_dev.backward(g.to(dev));
  const GradTol t = grad_tol(dt);
  EXPECT_TRUE(test::all_close(y_dev.cpu(), y_cpu, t.rtol, t.atol)) << "forward";
  for (size_t i = 0; i < shapes.size(); ++i) {
    SCOPED_TRACE("gradient of input " + std::to_string(i));
    ASSERT_TRUE(dev_in[i].grad().defined());
    EXPECT_TRUE(dev_in[i].grad().device() == dev);
    EXPECT_TRUE(test::all_close(dev_in[i].grad().cpu(), cpu_in[i].grad(), t.rtol, t.atol));
  }
}

}  // namespace

TEST_P(LinalgGradDevice, LinearForwardBackwardMatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (const Dims& xs : {Dims{33}, Dims{16, 33}, Dims{2, 8, 33}}) {
      SCOPED_TRACE(str(Shape(xs), " ", dt));
      expect_same_as_cpu(dev, dt, {xs, {20, 33}, {20}},
                         [](const TensorList& in) { return linear(in[0], in[1], in[2]); });
      expect_same_as_cpu(dev, dt, {xs, {20, 33}}, [](const TensorList& in) { return linear(in[0], in[1]); });
    }
  }
}

TEST_P(LinalgGradDevice, MatmulForwardBackwardMatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{9}, {9}}, {{5, 9}, {9}}, {{9}, {9, 6}}, {{5, 9}, {9, 6}}, {{3, 5, 9}, {9, 6}},
      {{5, 9}, {3, 9, 6}}, {{2, 1, 5, 9}, {3, 9, 6}},
  };
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    for (auto& [sa, sb] : cases) {
      SCOPED_TRACE(str(Shape(sa), " x ", Shape(sb), " ", dt));
      expect_same_as_cpu(dev, dt, {sa, sb}, [](const TensorList& in) { return matmul(in[0], in[1]); });
      // Transposed operands on the device too (views through the GEMM, grads through them).
      if (sa.size() == 2 && sb.size() == 2)
        expect_same_as_cpu(dev, dt, {{sa[1], sa[0]}, {sb[1], sb[0]}},
                           [](const TensorList& in) { return matmul(in[0].t(), in[1].t()); });
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, LinalgGradDevice, ::testing::ValuesIn(test::cuda_devices()), test::device_label);
