// channels_last (Note [Memory format]): the layout itself (PyTorch's strides and contiguity
// rules), and the CPU ops that keep it (elementwise, batch norm, convolution: each checked
// against the same op on plain NCHW tensors, whose values the other suites check against
// PyTorch and f64 loops, and batch norm's gradient against finite differences).
#include <cmath>
#include <vector>

#include "ember/ember.h"
#include "ember/ops/conv.h"
#include "support/test_support.h"

using namespace ember;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::channels_last;

bool same_values(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace

TEST(MemoryFormat, ChannelsLastStridesAndContiguityAreTorchs) {
  Tensor x = randn({2, 3, 4, 5});
  EXPECT_EQ(x.suggest_memory_format(), MemoryFormat::contiguous);
  EXPECT_FALSE(x.is_contiguous(kCL));
  Tensor y = x.contiguous(kCL);
  // torch.empty(2, 3, 4, 5).contiguous(memory_format=torch.channels_last).stride()
  EXPECT_EQ(y.strides(), (Shape{60, 1, 15, 3}));
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_TRUE(y.is_contiguous(kCL));
  EXPECT_EQ(y.suggest_memory_format(), kCL);
  EXPECT_TRUE(same_values(y, x));
  EXPECT_TRUE(y.contiguous(kCL).is_same(y));  // already that layout: no copy
  Tensor back = y.contiguous();
  EXPECT_TRUE(back.is_contiguous());
  EXPECT_TRUE(same_values(back, x));
  // One channel: both contiguity tests hold, and the strides say which layout it was made in.
  Tensor one = randn({2, 1, 4, 5});
  Tensor one_cl = one.contiguous(kCL);
  EXPECT_EQ(one_cl.strides(), (Shape{20, 1, 5, 1}));
  EXPECT_TRUE(one.is_contiguous(kCL));
  EXPECT_EQ(one.suggest_memory_format(), MemoryFormat::contiguous);
  EXPECT_EQ(one_cl.suggest_memory_format(), kCL);
  EXPECT_TRUE(same_values(one_cl, one));
  EXPECT_THROW(randn({3, 4, 5}).contiguous(kCL), ShapeError);
  EXPECT_FALSE(randn({3, 4, 5}).is_contiguous(kCL));
  // Differentiable: the gradient comes back in the input's shape and values.
  Tensor leaf = randn({2, 3, 4, 5}).requires_grad_(true);
  Tensor g = randn({2, 3, 4, 5});
  (leaf.contiguous(kCL) * g).sum().backward();
  EXPECT_TRUE(same_values(leaf.grad(), g));
}

TEST(MemoryFormat, ElementwiseOutputsTakeTheFirstFullShapedInputsLayout) {
  Tensor a = randn({2, 3, 4, 5}), b = randn({2, 3, 4, 5}), bias = randn({1, 3, 1, 1});
  Tensor acl = a.contiguous(kCL), bcl = b.contiguous(kCL);
  const Tensor sum = a + b;
  for (const Tensor& r : {acl + bcl, acl + b}) {
    EXPECT_EQ(r.suggest_memory_format(), kCL);
    EXPECT_TRUE(same_values(r, sum));
  }
  EXPECT_EQ((a + bcl).suggest_memory_format(), MemoryFormat::contiguous);
  EXPECT_TRUE(same_values(a + bcl, sum));
  for (const Tensor& r : {acl + bias, bias + acl}) {  // broadcasting keeps the full-shaped input's
    EXPECT_EQ(r.suggest_memory_format(), kCL);
    EXPECT_TRUE(same_values(r, a + bias));
  }
  EXPECT_EQ(relu(acl).suggest_memory_format(), kCL);
  EXPECT_TRUE(same_values(relu(acl), relu(a)));
  // The gradient of relu(x) * x through channels_last tensors: the same values.
  Tensor x = a.clone().requires_grad_(true), xcl = acl.clone().requires_grad_(true);
  (relu(x) * x * b).sum().backward();
  (relu(xcl) * xcl * bcl).sum().backward();
  EXPECT_TRUE(same_values(xcl.grad(), x.grad()));
  // An in-place op on a transposed (not dense-in-order) output still writes every element.
  Tensor t = zeros({4, 6});
  Tensor tt = t.t();
  tt.add_(randn({6, 4}) * 0 + 1);
  EXPECT_EQ(t.sum().item<double>(), 24.0);
}

TEST(MemoryFormat, BatchNormKeepsChannelsLastAndMatchesNchw) {
  // M = N*H*W = 3*20*21 = 1260 rows: ten chunks of the rows kernel, the last one partial.
  for (DType dt : {DType::f64, DType::f32}) {
    for (double offset : {0.0, 1e3}) {  // a large mean: the chunk merge must not cancel
      SCOPED_TRACE(str(dtype_name(dt), " offset ", offset));
      // Against the NCHW path on the same values in f64: f32 data 1e3 from its mean resolves
      // it to ~6e-5, which the normalization divides by the std (2).
      const double tol = dt == DType::f64 ? 1e-12 : offset > 0 ? 1e-4 : 2e-5;
      Tensor x = (randn({3, 5, 20, 21}, DType::f64) * 2 + offset).to(dt);
      Tensor w = randn({5}, dt), b = randn({5}, dt), g = randn({3, 5, 20, 21}, dt);
      Tensor rm = zeros({5}, dt), rv = ones({5}, dt), rm_cl = zeros({5}, dt), rv_cl = ones({5}, dt);
      Tensor xp = x.to(DType::f64).detach().requires_grad_(true), wp = w.to(DType::f64).detach().requires_grad_(true);
      Tensor xc = x.contiguous(kCL).detach().requires_grad_(true), wc = w.clone().requires_grad_(true);
      rm = rm.to(DType::f64), rv = rv.to(DType::f64);
      Tensor y = batch_norm(xp, rm, rv, wp, b.to(DType::f64), true, 0.1, 1e-5);
      Tensor ycl = batch_norm(xc, rm_cl, rv_cl, wc, b, true, 0.1, 1e-5);
      EXPECT_EQ(ycl.suggest_memory_format(), kCL);
      EXPECT_TRUE(test::all_close(ycl, y, tol, tol));
      EXPECT_TRUE(test::all_close(rm_cl, rm, tol, tol * std::max(1.0, offset)));
      EXPECT_TRUE(test::all_close(rv_cl, rv, tol, tol));
      (y * g.to(DType::f64)).sum().backward();
      (ycl * g.contiguous(kCL)).sum().backward();
      EXPECT_EQ(xc.grad().suggest_memory_format(), kCL);
      EXPECT_TRUE(test::all_close(xc.grad(), xp.grad(), tol, tol));
      EXPECT_TRUE(test::all_close(wc.grad(), wp.grad(), tol, tol * 100));
      // Evaluation mode normalizes with the running statistics.
      EXPECT_TRUE(test::all_close(batch_norm(xc.detach(), rm_cl, rv_cl, w, b, false),
                                  batch_norm(x.to(DType::f64), rm, rv, w.to(DType::f64), b.to(DType::f64), false),
                                  tol, tol));
    }
  }
  // Finite differences through the channels_last kernels (f64).
  Tensor x = randn({2, 3, 3, 4}, DType::f64).contiguous(kCL).requires_grad_(true);
  Tensor w = randn({3}, DType::f64).requires_grad_(true), b = randn({3}, DType::f64).requires_grad_(true);
  EXPECT_TRUE(autograd::gradcheck(
      [](const TensorList& in) { return batch_norm(in[0], Tensor(), Tensor(), in[1], in[2], true); }, {x, w, b}));
}

TEST(MemoryFormat, ConvolutionKeepsChannelsLastOnEveryAlgorithm) {
  // Values on every algorithm are checked against f64 loops in test_conv.cpp; here the layout
  // of each pass's output, and each algorithm's channels_last result against its NCHW one.
  Tensor x = randn({2, 16, 9, 8}), w = randn({32, 16, 3, 3}), bias = randn({32});
  const ops::Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  for (const char* algorithm : {"im2col", "winograd", "onednn", "auto"}) {
    SCOPED_TRACE(algorithm);
    test::CpuConvAlgorithm setting(algorithm);
    Tensor y = conv2d(x, w, bias, {1, 1}, {1, 1});
    Tensor ycl = conv2d(x.contiguous(kCL), w, bias, {1, 1}, {1, 1});
    EXPECT_EQ(ycl.suggest_memory_format(), kCL);
    EXPECT_TRUE(test::all_close(ycl, y, 1e-4, 1e-4));
    Tensor dy = randn(y.sizes());
    Tensor gx = ops::conv2d_backward_input(dy.contiguous(kCL), w, x.sizes(), p);
    EXPECT_EQ(gx.suggest_memory_format(), kCL);
    EXPECT_TRUE(test::all_close(gx, ops::conv2d_backward_input(dy, w, x.sizes(), p), 1e-4, 1e-4));
    EXPECT_TRUE(test::all_close(ops::conv2d_backward_weight(dy.contiguous(kCL), x.contiguous(kCL), w.sizes(), p),
                                ops::conv2d_backward_weight(dy, x, w.sizes(), p), 1e-4, 1e-3));
  }
  if (!ops::onednn_version().empty()) {
    // NHWC is what oneDNN's kernels read directly: it has one for each pass of this shape.
    for (ops::ConvPass pass : {ops::ConvPass::forward, ops::ConvPass::backward_input,
                               ops::ConvPass::backward_weight}) {
      test::CpuConvAlgorithm setting("onednn");
      const std::string a = ops::cpu_conv_algorithm(pass, x.sizes(), w.sizes(), p, DType::f32, false, kCL);
      EXPECT_EQ(a.rfind("onednn:", 0), 0u) << a;
    }
  }
}

TEST(MemoryFormat, ResidualBlockTrainsTheSameInEitherLayout) {
  // conv-BN-ReLU-conv-BN + shortcut, ReLU, pool, linear: the resnet example's block. Its loss and
  // every parameter gradient are the same from a channels_last input as from an NCHW one.
  manual_seed(3);
  nn::Conv2d c1(8, 16, 3, {.padding = 1, .bias = false}), c2(16, 16, 3, {.padding = 1, .bias = false});
  nn::Conv2d down(8, 16, 1, {.bias = false});
  nn::BatchNorm2d b1(16), b2(16), b3(16);
  nn::Linear fc(16, 4);
  std::vector<nn::Module*> modules{&c1, &c2, &down, &b1, &b2, &b3, &fc};
  Tensor x = randn({4, 8, 10, 10});
  Tensor target = randint(0, 4, {4}, TensorOptions(DType::i64));
  std::vector<TensorList> grads;
  std::vector<double> losses;
  for (MemoryFormat f : {MemoryFormat::contiguous, kCL}) {
    for (nn::Module* m : modules) m->zero_grad();
    Tensor in = x.contiguous(f);
    Tensor h = relu(b1(c1(in)));
    h = b2(c2(h));
    if (f == kCL) {
      EXPECT_EQ(h.suggest_memory_format(), kCL);
    }
    Tensor out = relu(h + b3(down(in)));
    Tensor loss = cross_entropy(fc(adaptive_avg_pool2d(out, {1, 1}).flatten(1)), target);
    loss.backward();
    losses.push_back(loss.item<double>());
    TensorList g;
    for (nn::Module* m : modules)
      for (const Tensor& prm : m->parameters()) g.push_back(prm.grad().clone());
    grads.push_back(g);
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i) EXPECT_TRUE(test::all_close(grads[1][i], grads[0][i], 1e-3, 1e-4)) << i;
}
