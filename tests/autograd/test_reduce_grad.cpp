// Gradients of the reduce family: gradcheck (f64 finite differences) of every differentiable
// reduction over dim sets, keepdim both ways and non-contiguous inputs; the tie rules
// (amax splits evenly, max(dim) goes to the reported index); the zero-norm/zero-std cases;
// double backward; and the broadcasting gradients of binary ops, which reduce through sum.
#include <cmath>
#include <limits>

#include "support/test_support.h"

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using Fn = std::function<Tensor(const Tensor&)>;

// Leaves of shape [4, 3, 5] in three layouts (values are distinct, so no ties).
std::vector<std::pair<std::string, Tensor>> leaves() {
  Tensor c = randn({4, 3, 5}, DType::f64);
  Tensor p = randn({5, 4, 3}, DType::f64).permute({1, 2, 0}).detach();  // [4, 3, 5]
  Tensor s = randn({4, 6, 5}, DType::f64).slice(1, 0, 6, 2).detach();    // [4, 3, 5]
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_FALSE(s.is_contiguous());
  return {{"contiguous", c.requires_grad_()}, {"permuted", p.requires_grad_()},
          {"sliced", s.requires_grad_()}};
}

const std::vector<Shape> kDims = {{}, {0}, {-1}, {1}, {0, 2}, {2, 1, 0}};

void check_all(const char* name, const std::function<Tensor(const Tensor&, const Shape&, bool)>& f) {
  for (auto& [layout, x] : leaves())
    for (const Shape& dims : kDims)
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(std::string(name) + " on " + layout + " dims " + str(dims) +
                     (keepdim ? " keepdim" : ""));
        EXPECT_TRUE(autograd::gradcheck(
            [&, dims = dims, keepdim](const TensorList& in) { return f(in[0], dims, keepdim); }, {x}));
      }
}

}  // namespace

TEST(ReduceGrad, Sum) { check_all("sum", [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }); }
TEST(ReduceGrad, Mean) { check_all("mean", [](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }); }
TEST(ReduceGrad, AmaxAmin) {
  check_all("amax", [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); });
  check_all("amin", [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); });
}
TEST(ReduceGrad, VarStd) {
  for (int64_t c : {0, 1, 2}) {
    check_all("var", [c](const Tensor& x, const Shape& d, bool k) { return var(x, d, c, k); });
    check_all("std", [c](const Tensor& x, const Shape& d, bool k) { return ember::std(x, d, c, k); });
  }
}
TEST(ReduceGrad, Norms) {
  for (double p : {2.0, 1.0, kInf, -kInf, 3.0, 1.5, 0.5, 0.0})
    check_all("norm", [p](const Tensor& x, const Shape& d, bool k) { return norm(x, p, d, k); });
}

TEST(ReduceGrad, MaxMinAlongDim) {
  for (auto& [layout, x] : leaves())
    for (int64_t d = -3; d < 3; ++d)
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(layout + " dim " + std::to_string(d));
        EXPECT_TRUE(autograd::gradcheck([&](const TensorList& in) { return max(in[0], d, keepdim).values; }, {x}));
        EXPECT_TRUE(autograd::gradcheck([&](const TensorList& in) { return min(in[0], d, keepdim).values; }, {x}));
      }
}

TEST(ReduceGrad, TieRules) {
  // amax/amin split the gradient evenly among tied extrema (as torch.amax).
  Tensor x = tensor<double>({1, 3, 3, 0, 2, 2, 2, 2}, {2, 4}).requires_grad_();
  amax(x, {1}).sum().backward();
  EXPECT_TRUE(test::all_close(x.grad(), {2, 4}, {0, 0.5, 0.5, 0, 0.25, 0.25, 0.25, 0.25}));
  Tensor y = tensor<double>({1, 3, 3, 0, 2, 2, 2, 2}, {2, 4}).requires_grad_();
  amin(y).backward();
  EXPECT_TRUE(test::all_close(y.grad(), {2, 4}, {0, 0, 0, 1, 0, 0, 0, 0}));
  // max(dim) sends the whole gradient to the reported (first) index.
  Tensor z = tensor<double>({1, 3, 3, 0, 2, 2, 2, 2}, {2, 4}).requires_grad_();
  auto [v, i] = max(z, 1);
  v.backward(tensor<double>({10, 20}, {2}));
  EXPECT_TRUE(test::all_close(z.grad(), {2, 4}, {0, 10, 0, 0, 20, 0, 0, 0}));
  // norm(inf) follows |x|, with the sign of x.
  Tensor w = tensor<double>({-3, 1, 3, 2}, {4}).requires_grad_();
  norm(w, kInf).backward();
  EXPECT_TRUE(test::all_close(w.grad(), {-0.5, 0, 0.5, 0}));
}

TEST(ReduceGrad, ZeroNormAndZeroStdGiveZeroGradient) {
  Tensor x = zeros({2, 3}, DType::f64).requires_grad_();
  norm(x, 2, {1}).sum().backward();
  EXPECT_TRUE(test::all_close(x.grad(), {2, 3}, std::vector<double>(6, 0.0)));
  Tensor y = full({2, 3}, 1.5, DType::f64).requires_grad_();
  ember::std(y, {1}).sum().backward();
  EXPECT_TRUE(test::all_close(y.grad(), {2, 3}, std::vector<double>(6, 0.0)));
  Tensor z = tensor<double>({0, 2, 0, -1}, {4}).requires_grad_();
  norm(z, 1.5).backward();
  for (double g : z.grad().to_vector<double>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(ReduceGrad, F32GradientsHaveInputDTypeAndShape) {
  Tensor x = randn({3, 4}).requires_grad_();
  x.mean({0}).sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(x.grad(), {3, 4}, std::vector<double>(12, 1.0 / 3)));
  Tensor h = randn({3, 4}).to(DType::bf16).detach().requires_grad_();
  h.sum().backward();
  EXPECT_EQ(h.grad().dtype(), DType::bf16);
  EXPECT_TRUE(test::all_close(h.grad(), {3, 4}, std::vector<double>(12, 1.0)));
}

// Double backward: the Jacobian of each VJP (a Hessian-vector product) by finite differences.
TEST(ReduceGrad, DoubleBackward) {
  std::vector<std::pair<std::string, Fn>> fns = {
      {"var", [](const Tensor& x) { return var(x, {1}); }},
      {"std", [](const Tensor& x) { return ember::std(x, {0, 2}, 1, true); }},
      {"norm2", [](const Tensor& x) { return norm(x, 2, {2}); }},
      {"norm3", [](const Tensor& x) { return norm(x, 3); }},
      {"mean_sq", [](const Tensor& x) { return mean(x * x, {0}); }},
      {"sum_cube", [](const Tensor& x) { return sum(x * x * x, {1, 2}, true); }},
      {"amax_sq", [](const Tensor& x) { return amax(x * x, {1}); }},
      {"max_sq", [](const Tensor& x) { return max(x * x, 2).values; }},
  };
  for (auto& [name, f] : fns)
    for (auto& [layout, x] : leaves()) {
      SCOPED_TRACE(name + " on " + layout);
      EXPECT_TRUE(autograd::gradcheck(
          [f = f](const TensorList& in) {
            AutoGradMode enable(true);  // gradcheck's finite differences run under NoGradGuard
            Tensor y = f(in[0]);
            Tensor gy = full(y.sizes(), 1.0, DType::f64);
            return autograd::grad({y}, {in[0]}, {gy}, /*retain_graph=*/true, /*create_graph=*/true)[0];
          },
          {x}));
    }
}

// Binary ops reduce broadcast gradients with sum (sum_to), so these depend on this family.
TEST(ReduceGrad, BroadcastingBinaryOps) {
  Tensor a = randn({2, 3}, DType::f64).requires_grad_();
  Tensor b = randn({3}, DType::f64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const TensorList& in) { return in[0] * in[1]; }, {a, b}));
  Tensor c = randn({2, 1, 3}, DType::f64).requires_grad_();
  Tensor d = randn({4, 1}, DType::f64).requires_grad_();
  EXPECT_TRUE(autograd::gradcheck([](const TensorList& in) { return in[0] + in[1]; }, {c, d}));
  EXPECT_TRUE(autograd::gradcheck([](const TensorList& in) { return in[0] - in[1] * in[0]; }, {c, d}));
  EXPECT_TRUE(autograd::gradcheck([](const TensorList& in) { return in[0] / (in[1] * in[1] + 1.0); }, {c, d}));
  // And the values: d(sum(a * b))/db = a summed over dim 0.
  (a * b).sum().backward();
  EXPECT_TRUE(test::all_close(b.grad(), a.detach().sum({0})));
  EXPECT_TRUE(test::all_close(a.grad(), b.detach().unsqueeze(0).expand({2, 3}).contiguous()));
}

// CUDA against the CPU path: the gradients of every differentiable reduction, from the same
// leaves and output gradients (no ties: the values are distinct). f64 tolerance 1e-12, f32
// 1e-5, relative with an absolute floor of the same size times the largest |expected|.
TEST(ReduceGradCuda, GradientsMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  using F = std::function<Tensor(const Tensor&, const Shape&)>;
  const std::vector<std::pair<std::string, F>> fns = {
      {"sum", [](const Tensor& x, const Shape& d) { return sum(x, d); }},
      {"mean", [](const Tensor& x, const Shape& d) { return mean(x, d); }},
      {"amax", [](const Tensor& x, const Shape& d) { return amax(x, d); }},
      {"amin", [](const Tensor& x, const Shape& d) { return amin(x, d, true); }},
      {"var", [](const Tensor& x, const Shape& d) { return var(x, d, 1); }},
      {"std", [](const Tensor& x, const Shape& d) { return ember::std(x, d, 0); }},
      {"norm2", [](const Tensor& x, const Shape& d) { return norm(x, 2, d); }},
      {"norm3", [](const Tensor& x, const Shape& d) { return norm(x, 3, d); }},
      {"norm_inf", [](const Tensor& x, const Shape& d) { return norm(x, kInf, d); }},
      {"max", [](const Tensor& x, const Shape& d) { return max(x, d.empty() ? 0 : d[0]).values; }},
  };
  Tensor base = randn({5, 1025}, DType::f64);
  for (DType dt : {DType::f64, DType::f32}) {
    const double rtol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (bool transposed : {false, true})
      for (const Shape& dims : {Shape{}, Shape{0}, Shape{1}})
        for (auto& [name, f] : fns) {
          SCOPED_TRACE(str(name, " ", dtype_name(dt), transposed ? " transposed" : "", " dims ", dims));
          auto grad_on = [&](Device dev) {
            Tensor x = base.to(dev, dt);
            if (transposed) x = x.t();
            x = x.detach().requires_grad_();
            return std::make_pair(x, f(x, dims));
          };
          auto [xg, yg] = grad_on(gpu);
          auto [xc, yc] = grad_on(Device::cpu());
          Tensor gy = randn(yc.sizes(), DType::f64).to(dt);
          yc.backward(gy);
          yg.backward(gy.to(gpu));
          double scale = 0;
          for (double v : xc.grad().to_vector<double>()) scale = std::max(scale, std::fabs(v));
          EXPECT_TRUE(test::all_close(xg.grad().to(Device::cpu()), xc.grad(), rtol, rtol * scale));
        }
  }
}
