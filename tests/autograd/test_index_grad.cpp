// Gradients of the indexing/joining family: gradcheck (f64, central differences) for every
// differentiable op, explicit values where accumulation matters (repeated indices), and
// double backward through the recorded backward ops.
#include <cmath>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {
Tensor leaf(const Shape& shape) { return randn(shape, DType::f64).requires_grad_(); }
}  // namespace

TEST(IndexGrad, Cat) {
  Tensor a = leaf({2, 3}), b = leaf({2, 2}), c = randn({4, 2}, DType::f64).t().requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return cat({in[0], in[1], in[2]}, -1); }, {a, b, c}));
  Tensor d = leaf({1, 3});
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return cat({in[0], in[1], in[0]}, 0); }, {a, d}));
}

TEST(IndexGrad, CatMixedDtypesAndConstants) {
  // An f32 input next to an f64 one: the output is f64, the f32 input's grad comes back f32.
  Tensor a = ones({2}, DType::f32).requires_grad_();
  Tensor b = ones({3}, DType::f64);  // a constant: no grad
  Tensor y = cat({a, b, empty({0})});
  EXPECT_EQ(y.dtype(), DType::f64);
  y.backward(tensor<double>({1, 2, 3, 4, 5}));
  EXPECT_EQ(a.grad().dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(a.grad(), {1, 2}, 0, 0));
  EXPECT_FALSE(b.grad().defined());
}

TEST(IndexGrad, Stack) {
  Tensor a = leaf({2, 3}), b = leaf({2, 3});
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return stack({in[0], in[1], in[0]}, 1); }, {a, b}));
}

TEST(IndexGrad, SplitAndChunk) {
  Tensor x = leaf({5, 3});
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        TensorList p = split(in[0], 2, 0);  // 2, 2, 1 rows
        return cat({p[2] * 3.0, p[0] * 2.0, p[1].exp()}, 0);
      },
      {x}));
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        TensorList p = split(in[0], std::vector<int64_t>{1, 2}, -1);
        return cat({p[1] * p[1], p[0]}, 1);
      },
      {x}));
  EXPECT_TRUE(gradcheck(
      [](const TensorList& in) {
        TensorList p = chunk(in[0], 2, 0);  // only the first chunk is used
        return p[0].tanh();
      },
      {x}));
}

TEST(IndexGrad, IndexSelect) {
  Tensor x = leaf({4, 3});
  for (DType it : {DType::i64, DType::i32}) {
    Tensor idx = tensor<int64_t>({3, 0, 3, 3, 1}).to(it);  // repeated indices accumulate
    EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return index_select(in[0], 0, idx); }, {x}));
    EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return index_select(in[0].t(), -1, idx.narrow(0, 0, 3)); }, {x}));
  }
  // Explicit values: row 3 was picked three times.
  Tensor y = zeros({4, 2}, DType::f64).requires_grad_();
  index_select(y, 0, tensor<int64_t>({3, 0, 3, 3})).backward(ones({4, 2}, DType::f64));
  EXPECT_TRUE(test::all_close(y.grad(), {4, 2}, {1, 1, 0, 0, 0, 0, 3, 3}, 0, 0));
}

TEST(IndexGrad, GatherAndScatterAdd) {
  Tensor x = leaf({3, 4});
  Tensor idx = tensor<int64_t>({0, 0, 3, 1, 2, 2, 3, 3, 0}, {3, 3});
  EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return gather(in[0], 1, idx); }, {x}));
  Tensor idx0 = tensor<int32_t>({2, 2, 1, 0}, {1, 4});
  EXPECT_TRUE(gradcheck([idx0](const TensorList& in) { return gather(in[0], 0, idx0); }, {x}));
  // scatter_add with respect to both x and src; src larger than the index (padding).
  Tensor src = leaf({4, 5});
  EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return scatter_add(in[0], 1, idx, in[1]); }, {x, src}));
  EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return scatter_add(in[0], 1, idx, in[1]).pow(2.0); }, {x, src}));
}

TEST(IndexGrad, Embedding) {
  Tensor w = leaf({6, 3});
  Tensor idx = tensor<int64_t>({5, 1, 5, 0, 1, 5}, {2, 3});
  EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return embedding(in[0], idx); }, {w}));
  EXPECT_TRUE(gradcheck([idx](const TensorList& in) { return embedding(in[0], idx.to(DType::i32)).sigmoid(); }, {w}));
  // Repeated indices accumulate their rows of the gradient; unused rows get zero.
  Tensor v = zeros({4, 2}).requires_grad_();
  Tensor ids = tensor<int64_t>({2, 0, 2, 2}, {2, 2});
  Tensor g = tensor<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  embedding(v, ids).backward(g);
  EXPECT_TRUE(test::all_close(v.grad(), {4, 2}, {3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0}, 0, 0));
}

TEST(IndexGrad, TrilTriu) {
  Tensor x = leaf({2, 3, 4});
  for (int64_t k : {-1, 0, 2}) {
    EXPECT_TRUE(gradcheck([k](const TensorList& in) { return tril(in[0], k); }, {x}));
    EXPECT_TRUE(gradcheck([k](const TensorList& in) { return triu(in[0].transpose(1, 2), k); }, {x}));
  }
}

TEST(IndexGrad, Dropout) {
  // The mask is fixed by reseeding inside fn, so every evaluation sees the same one.
  Tensor x = leaf({4, 5});
  EXPECT_TRUE(gradcheck([](const TensorList& in) {
    manual_seed(2024);
    return dropout(in[0], 0.4);
  }, {x}));
  // The gradient is the saved mask scaled by 1/(1-p).
  Tensor y = ones({1000}, DType::f64).requires_grad_();
  manual_seed(1);
  Tensor out = dropout(y, 0.25);
  out.backward(ones({1000}, DType::f64));
  EXPECT_TRUE(test::all_close(y.grad(), out, 0, 0));
  // Eval mode records nothing: the input itself comes back.
  EXPECT_TRUE(dropout(y, 0.25, false).is_same(y));
}

TEST(IndexGrad, DoubleBackward) {
  // grad of (f(x))^2 with create_graph depends on x through f's backward op, so a gradcheck
  // of that gradient exercises the VJPs of the recorded backward ops.
  auto second = [](std::function<Tensor(const Tensor&)> f, const Shape& out_shape) {
    return [f, out_shape](const TensorList& in) {
      AutoGradMode enable(true);  // gradcheck evaluates fn under NoGradGuard for differences
      Tensor y = f(in[0]);
      Tensor v = ones(out_shape, DType::f64);
      return autograd::grad({y * y}, {in[0]}, {v}, false, true)[0];
    };
  };
  Tensor x = leaf({4, 3});
  Tensor idx = tensor<int64_t>({3, 0, 3});
  EXPECT_TRUE(gradcheck(second([idx](const Tensor& t) { return index_select(t, 0, idx); }, {3, 3}), {x}));
  Tensor ids = tensor<int64_t>({1, 1, 2}, {3});
  EXPECT_TRUE(gradcheck(second([ids](const Tensor& t) { return embedding(t, ids); }, {3, 3}), {x}));
  Tensor gi = tensor<int64_t>({2, 0, 0, 1}, {2, 2});
  EXPECT_TRUE(gradcheck(second([gi](const Tensor& t) { return gather(t, 1, gi); }, {2, 2}), {x}));
  EXPECT_TRUE(gradcheck(second([](const Tensor& t) {
                          manual_seed(5);
                          return dropout(t, 0.5);
                        }, {4, 3}),
                        {x}));
  EXPECT_TRUE(gradcheck(second([](const Tensor& t) { return cat({t, t.tril()}, 0); }, {8, 3}), {x}));
}

// ---- every device: gradients through the CUDA kernels match the CPU's ----

class IndexGradDevices : public ::testing::TestWithParam<Device> {};

namespace {
// The gradients of `fn` (summed against a fixed random cotangent) w.r.t. `inputs` on `dev`.
TensorList grads_on(Device dev, const TensorList& inputs, const Tensor& cotangent,
                    const std::function<Tensor(const TensorList&)>& fn) {
  TensorList leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.to(dev).detach().requires_grad_());
  fn(leaves).backward(cotangent.to(dev));
  TensorList out;
  for (const Tensor& l : leaves) out.push_back(l.grad().cpu());
  return out;
}
}  // namespace

TEST_P(IndexGradDevices, MatchCpuAndAreDeterministic) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  // f32 on purpose: the VJPs are index_add / scatter_add / masks, whose CUDA sums follow the
  // CPU's order, so the gradients must be bit-identical to the CPU's and from run to run.
  Tensor w = randn({50, 24});
  Tensor ids = randint(0, 50, {16, 40});
  ids.narrow(1, 0, 10).fill_(3);  // a hot row
  Tensor x = randn({6, 7}), src = randn({6, 9});
  Tensor sel = tensor<int64_t>({6, 0, 6, 6, 2});
  Tensor gidx = randint(0, 7, {6, 9});
  struct Case {
    const char* name;
    TensorList inputs;
    Shape out;
    std::function<Tensor(const TensorList&)> fn;
  };
  std::vector<Case> cases = {
      {"embedding", {w}, {16, 40, 24}, [&](const TensorList& in) { return embedding(in[0], ids.to(in[0].device())); }},
      {"embedding i32", {w}, {16, 40, 24},
       [&](const TensorList& in) { return embedding(in[0], ids.to(DType::i32).to(in[0].device())); }},
      {"index_select", {x}, {6, 5}, [&](const TensorList& in) { return index_select(in[0], 1, sel.to(in[0].device())); }},
      {"gather", {x}, {6, 9}, [&](const TensorList& in) { return gather(in[0], 1, gidx.to(in[0].device())); }},
      {"scatter_add", {x, src}, {6, 7},
       [&](const TensorList& in) { return scatter_add(in[0], 1, gidx.to(in[0].device()), in[1]); }},
      {"cat/tril", {x, src}, {6, 16},
       [&](const TensorList& in) { return cat({in[0].tril(1), in[1].triu(-1)}, 1); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Tensor cot = randn(c.out);
    TensorList expect = grads_on(Device::cpu(), c.inputs, cot, c.fn);
    TensorList got = grads_on(dev, c.inputs, cot, c.fn);
    TensorList again = grads_on(dev, c.inputs, cot, c.fn);
    for (size_t i = 0; i < expect.size(); ++i) {
      EXPECT_TRUE(test::all_close(got[i], expect[i], 0, 0)) << "input " << i;
      EXPECT_EQ(got[i].to_vector<float>(), again[i].to_vector<float>()) << "input " << i;
    }
  }
  // Dropout: the same seed gives the same mask, so the same gradient, on both devices.
  Tensor d = randn({37, 11});
  Tensor cot = randn({37, 11});
  auto drop = [](const TensorList& in) {
    manual_seed(77);
    return dropout(in[0], 0.3);
  };
  EXPECT_TRUE(test::all_close(grads_on(dev, {d}, cot, drop)[0], grads_on(Device::cpu(), {d}, cot, drop)[0], 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Cuda, IndexGradDevices, ::testing::ValuesIn(test::cuda_devices()), test::device_label);
