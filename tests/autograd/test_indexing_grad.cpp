// Gradients of indexing and the composite tensor ops: gradcheck (f64, central differences)
// for advanced indexing (gather), index_put (plain and accumulate, functional and in place),
// masks, diag, einsum (and einsum against the explicit composite), repeat/tile, meshgrid;
// the gather's gradient against PyTorch with repeated indices; double backward through the
// recorded index backward.
#include "support/test_support.h"

using namespace ember;
using namespace ember::indexing;
using autograd::gradcheck;

namespace {
Tensor leaf(const Shape& shape) { return randn(shape, DType::f64).requires_grad_(); }
Tensor ilist(std::vector<int64_t> v) { return tensor<int64_t>(v); }
}  // namespace

TEST(IndexingGrad, AdvancedIndexGather) {
  Tensor x = leaf({4, 3, 5});
  Tensor i = ilist({2, 0, 2, -1}), j = ilist({1, 1, 0, 2});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].index({i, Slice(), j}); }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].index({Slice(1, None, 2), j}); }, {x}));
  Tensor mask = randn({4, 3}) > 0;
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].index({mask, ilist({4})}); }, {x}));
  // Non-contiguous input.
  Tensor xt = randn({5, 4}, DType::f64).t().requires_grad_();
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].index({None, i}); }, {xt}));
}

TEST(IndexingGrad, GatherGradientMatchesPyTorch) {
  Tensor x = test::load_fixture("indexing_reference.txt", "grad.x").tensor().requires_grad_();
  Tensor idx = test::load_fixture("indexing_reference.txt", "grad.idx").tensor(DType::i64);
  Tensor w = test::load_fixture("indexing_reference.txt", "grad.w").tensor();
  (x.index({idx, Slice(1, 4)}) * w).sum().backward();
  EXPECT_TRUE(test::all_close(x.grad(), test::load_fixture("indexing_reference.txt", "grad.dx").tensor(), 1e-15, 0));
}

TEST(IndexingGrad, IndexPutFunctionalAndInPlace) {
  Tensor x = leaf({4, 3}), v = leaf({3, 3});
  Tensor i = ilist({1, 3, 1});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return index_put(in[0], {i}, in[1], true); }, {x, v}));
  Tensor u = leaf({2, 3});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return index_put(in[0], {ilist({0, 2})}, in[1]); }, {x, u}));
  Tensor col = leaf({4});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return index_put(in[0], {Slice(), 1}, in[1]); }, {x, col}));
  // In place on a non-leaf: the gradient flows to the base and to the values.
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        Tensor y = in[0] * 2.0;
        y.index_put_({ilist({0, 2}), Slice(0, 2)}, in[1] * in[1], true);
        return y.exp();
      },
      {x, leaf({2, 2})}));
  Tensor mask = randn({4, 3}) > 0;
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        Tensor y = in[0].clone();
        y.index_put_({mask}, 0.5);
        return y * in[0];
      },
      {x}));
}

TEST(IndexingGrad, InPlaceOnLeafThatRequiresGradThrows) {
  Tensor x = leaf({3});
  EXPECT_TRUE(test::message_of<AutogradError>([&] { x.index_put_({ilist({0})}, 1.0); }).starts_with("[index_put_]"));
  NoGradGuard no_grad;
  x.index_put_({ilist({0})}, 1.0);  // what an optimizer would do
  EXPECT_EQ(x.index({0}).item<double>(), 1.0);
}

TEST(IndexingGrad, DoubleBackwardThroughIndex) {
  Tensor x = leaf({5});
  Tensor i = ilist({0, 3, 3});
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        AutoGradMode enable(true);  // gradcheck evaluates fn under NoGradGuard for differences
        Tensor y = (in[0].index({i}).pow(2.0)).sum();
        TensorList g = autograd::grad({y}, {in[0]}, {}, true, true);
        return g[0];
      },
      {x}));
}

TEST(IndexingGrad, MaskedSelectDiagEinsumAndShapes) {
  Tensor x = leaf({3, 4});
  Tensor mask = randn({4}) > 0;
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return masked_select(in[0], mask); }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return diag(in[0], -1); }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return diag(in[0], 2) * 3.0; }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return diag(in[0], 1); }, {leaf({3})}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].repeat({2, 1, 3}); }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].tile({2}); }, {x}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return outer(in[0], in[1]); }, {leaf({3}), leaf({2})}));
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        TensorList g = meshgrid({in[0], in[1]}, "xy");
        return g[0] * g[1];
      },
      {leaf({3}), leaf({2})}));
  Tensor a = leaf({2, 3, 4}), b = leaf({2, 4, 5}), c = leaf({5});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return einsum("bij,bjk,k->bi", {in[0], in[1], in[2]}); },
                        {a, b, c}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return einsum("...ij->...ji", {in[0]}); }, {a}));
  // einsum equals the explicit composite.
  Tensor e = einsum("bij,bjk,k->bi", {a, b, c});
  Tensor explicit_ = matmul(matmul(a, b), c.unsqueeze(1)).squeeze(-1);
  EXPECT_TRUE(test::all_close(e, explicit_, 1e-12, 1e-12));
  EXPECT_TRUE(test::all_close(einsum("bij,bij->b", {a, a}), (a * a).sum({1, 2}), 1e-12, 1e-12));
  // Diagonals: torch.diagonal's view and einsum's repeated subscripts (and their double backward).
  Tensor sq = leaf({3, 3}), cube = leaf({3, 4, 3});
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return diagonal(in[0], 1, 2, 0); }, {cube}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].diagonal(-1); }, {sq}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return einsum("ii->", {in[0]}); }, {sq}));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) { return einsum("iji,j->i", {in[0], in[1]}); }, {cube, leaf({4})}));
  // Second order: the diagonal's backward is itself recorded.
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& in) {
        AutoGradMode enable(true);  // gradcheck evaluates finite differences under NoGradGuard
        Tensor y = (diagonal(in[0] * in[0], 0, 0, 2) * in[1]).sum();
        return autograd::grad({y}, {in[0]}, {}, false, true)[0];
      },
      {cube, leaf({4, 3})}));
}
