// gradcheck (f64 finite differences) of the sort/scan slice's differentiable ops: sort and
// topk values (through the indices), cumsum, cumprod (with zeros in the input, Note [cumprod
// backward]), logsumexp, flip, roll, and sin/cos/square/floor/ceil/trunc/round; over dims,
// directions and non-contiguous inputs; double backward where the VJP is differentiable.
#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {
using Fn = std::function<Tensor(const TensorList&)>;

// Distinct values (no ties, so sort/topk are differentiable at the point) in three layouts.
std::vector<std::pair<std::string, Tensor>> leaves(uint64_t seed) {
  Generator g(seed);
  Tensor c = randn({3, 4, 5}, DType::f64, &g);
  Tensor p = randn({5, 4, 3}, DType::f64, &g).permute({2, 1, 0}).detach();
  Tensor s = randn({3, 8, 5}, DType::f64, &g).slice(1, 0, 8, 2).detach();
  return {{"contiguous", c.requires_grad_()}, {"permuted", p.requires_grad_()},
          {"sliced", s.requires_grad_()}};
}

void check(const std::string& what, const Fn& fn, const TensorList& in) {
  SCOPED_TRACE(what);
  EXPECT_TRUE(gradcheck(fn, in));
}

// d/dx of sum(w * f(x)) with create_graph: its own gradcheck is a second-order check.
Fn first_derivative(std::function<Tensor(const Tensor&)> f, const Tensor& w) {
  return [f, w](const TensorList& in) {
    AutoGradMode enable(true);  // gradcheck evaluates finite differences under NoGradGuard
    Tensor y = f(in[0]).mul(w).sum();
    return autograd::grad({y}, {in[0]}, {}, true, true)[0];
  };
}
}  // namespace

TEST(SortScanGrad, SortTopk) {
  for (auto& [layout, x] : leaves(1))
    for (int64_t d : {0, 1, -1})
      for (bool desc : {false, true}) {
        const std::string w = layout + " dim " + std::to_string(d) + (desc ? " desc" : "");
        check("sort " + w, [d, desc](const TensorList& in) { return sort(in[0], d, desc).values; }, {x});
        check("topk " + w, [d, desc](const TensorList& in) { return topk(in[0], 2, d, desc).values; }, {x});
      }
}

TEST(SortScanGrad, Cumsum) {
  for (auto& [layout, x] : leaves(2))
    for (int64_t d : {0, 1, 2})
      check("cumsum " + layout, [d](const TensorList& in) { return cumsum(in[0], d); }, {x});
}

TEST(SortScanGrad, CumprodWithAndWithoutZeros) {
  for (auto& [layout, x] : leaves(3))
    for (int64_t d : {0, 1, 2})
      check("cumprod " + layout, [d](const TensorList& in) { return cumprod(in[0], d); }, {x});
  // One zero, two zeros, a zero first and last in a row, and an all-zero row.
  Tensor z = tensor(std::vector<double>{1.5, 0, 2, -1, 0.5, /**/ 0, 0, 3, 2, 1, /**/ 2, -1, 0.5, 3, 0,
                                        /**/ 0, 0, 0, 0, 0},
                    {4, 5})
                 .requires_grad_();
  for (int64_t d : {0, 1}) {
    check("cumprod zeros", [d](const TensorList& in) { return cumprod(in[0], d); }, {z});
    check("cumprod zeros, second order",
          first_derivative([d](const Tensor& t) { return cumprod(t, d); }, randn({4, 5}, DType::f64)), {z});
  }
}

// The two VJPs of Note [cumprod backward] (O(n) masks without create_graph, O(n^2) with it)
// give the same first derivative, zeros included.
TEST(SortScanGrad, CumprodBackwardFormsAgree) {
  Tensor x = tensor(std::vector<double>{1.5, 0, 2, -1, 0, 3, 0, 0, 2, 1, 2, -1}, {3, 4}).requires_grad_();
  Tensor w = randn({3, 4}, DType::f64);
  for (int64_t d : {0, 1}) {
    Tensor plain = autograd::grad({cumprod(x, d).mul(w).sum()}, {x})[0];
    Tensor graph = autograd::grad({cumprod(x, d).mul(w).sum()}, {x}, {}, true, true)[0];
    EXPECT_TRUE(graph.requires_grad());
    EXPECT_TRUE(test::all_close(graph.detach(), plain, 1e-14, 1e-14)) << "dim " << d;
  }
}

TEST(SortScanGrad, Logsumexp) {
  for (auto& [layout, x] : leaves(4))
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, 2}, Shape{-1}})
      for (bool keepdim : {false, true})
        check("logsumexp " + layout + " " + str(dims),
              [dims, keepdim](const TensorList& in) { return logsumexp(in[0], dims, keepdim); }, {x});
  Tensor x = leaves(5)[0].second;
  check("logsumexp second order", first_derivative([](const Tensor& t) { return logsumexp(t, {1}); },
                                                   randn({3, 5}, DType::f64)), {x});
}

TEST(SortScanGrad, FlipRoll) {
  for (auto& [layout, x] : leaves(6)) {
    check("flip " + layout, [](const TensorList& in) { return flip(in[0], {0, 2}); }, {x});
    check("roll " + layout, [](const TensorList& in) { return roll(in[0], {1, -2}, {1, 2}); }, {x});
    check("roll flat " + layout, [](const TensorList& in) { return roll(in[0], {7}); }, {x});
  }
}

TEST(SortScanGrad, ElementwiseMath) {
  for (auto& [layout, x] : leaves(7)) {
    check("sin " + layout, [](const TensorList& in) { return sin(in[0]); }, {x});
    check("cos " + layout, [](const TensorList& in) { return cos(in[0]); }, {x});
    check("square " + layout, [](const TensorList& in) { return square(in[0]); }, {x});
    // Random values sit far from the jumps (an FD step of 1e-6 never crosses one).
    check("floor " + layout, [](const TensorList& in) { return floor(in[0]); }, {x});
    check("ceil " + layout, [](const TensorList& in) { return ceil(in[0]); }, {x});
    check("trunc " + layout, [](const TensorList& in) { return trunc(in[0]); }, {x});
    check("round " + layout, [](const TensorList& in) { return round(in[0], 1); }, {x});
  }
  Tensor x = leaves(8)[1].second;
  check("sin second order", first_derivative([](const Tensor& t) { return sin(t); }, randn({3, 4, 5}, DType::f64)), {x});
  check("square second order",
        first_derivative([](const Tensor& t) { return square(t); }, randn({3, 4, 5}, DType::f64)), {x});
}
