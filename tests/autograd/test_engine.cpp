// The autograd engine: accumulation, retain_graph, implicit and explicit root gradients,
// NoGradGuard, detach, hooks, retain_grad, autograd::grad, double backward, saved-tensor
// version checks, checkpointing, diamonds and long chains.
//
// Most cases use elementwise ops only and pass explicit root gradients, so that they test the
// engine rather than the reduction family.
#include <cmath>

#include "support/test_support.h"

using namespace ember;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
Tensor leaf(std::vector<double> v) {
  Shape s{int64_t(v.size())};
  return tensor(v, s).requires_grad_();
}
Tensor ones_f64(const Shape& s) { return ones(s, DType::f64); }
using test::message_of;
}  // namespace

TEST(Engine, LeafState) {
  Tensor x = leaf({1, 2});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_EQ(x.grad_fn(), nullptr);
  Tensor y = x * 2;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_NE(y.grad_fn(), nullptr);
  EXPECT_STREQ(y.grad_fn()->name(), "mul");
  Tensor c = ones_f64({2});  // a constant
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
  EXPECT_FALSE((c * 2).requires_grad());
  EXPECT_EQ((c * 2).grad_fn(), nullptr);
  EXPECT_THROW(y.requires_grad_(false), AutogradError);  // only leaves
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
  EXPECT_FALSE((x * 2).requires_grad());
}

TEST(Engine, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3});
  (x * x).backward(ones_f64({3}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 4, 6}));
  (x * 3).backward(ones_f64({3}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{5, 7, 9}));
  // The gradient argument weights the outputs.
  x.mutable_grad() = Tensor();
  (x * x).backward(tensor<double>({1, 0, -1}, {3}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 0, -6}));
  // .grad is its own tensor: it does not alias the gradient passed in or any other tensor.
  Tensor g = tensor<double>({1, 1, 1}, {3});
  Tensor z = leaf({0, 0, 0});
  (z + 1).backward(g);
  EXPECT_EQ(vals(z.grad()), (std::vector<double>{1, 1, 1}));
  (z + 1).backward(g);
  EXPECT_EQ(vals(g), (std::vector<double>{1, 1, 1})) << "accumulating must not write into g";
  EXPECT_EQ(vals(z.grad()), (std::vector<double>{2, 2, 2}));
  EXPECT_FALSE(z.grad().requires_grad());
  // Two leaves that receive the very same gradient tensor (add passes g through to both)
  // must not end up sharing one .grad buffer.
  Tensor p = leaf({1, 2}), q = leaf({3, 4});
  (p + q).backward(tensor<double>({1, 1}, {2}));
  EXPECT_NE(p.grad().storage(), q.grad().storage());
  (p * 2 + q).backward(tensor<double>({1, 1}, {2}));
  EXPECT_EQ(vals(p.grad()), (std::vector<double>{3, 3}));
  EXPECT_EQ(vals(q.grad()), (std::vector<double>{2, 2}));
}

TEST(Engine, RetainGraph) {
  Tensor x = leaf({1, 2});
  Tensor y = (x * x).exp();
  y.backward(ones_f64({2}), /*retain_graph=*/true);
  y.backward(ones_f64({2}));  // allowed: the graph was retained
  std::vector<double> once{2 * std::exp(1.0), 4 * std::exp(4.0)};
  EXPECT_TRUE(test::all_close(x.grad(), {2 * once[0], 2 * once[1]}, 1e-14));
  // Without retain_graph the saved tensors are freed: a second backward is an error.
  std::string msg = message_of<AutogradError>([&] { y.backward(ones_f64({2})); });
  EXPECT_EQ(msg[0], '[') << msg;
  EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;
  EXPECT_NE(msg.find("second time"), std::string::npos) << msg;
}

TEST(Engine, NonScalarOutputsNeedAGradient) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2;
  std::string msg = message_of<AutogradError>([&] { y.backward(); });
  EXPECT_EQ(msg.rfind("[backward]", 0), 0u) << msg;
  EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  EXPECT_FALSE(x.grad().defined());
  // A gradient of the wrong shape is an error too.
  EXPECT_THROW(y.backward(ones_f64({2})), ShapeError);
  y.backward(tensor<double>({1, 2, 3}, {3}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{2, 4, 6}));
  // Single-element outputs (0-dim or not) get an implicit gradient of one.
  Tensor s = leaf({3});
  (s * s).backward();
  EXPECT_EQ(vals(s.grad()), (std::vector<double>{6}));
  Tensor s0 = tensor<double>({2.0}, Shape{}).requires_grad_();
  (s0 * s0 * s0).backward();
  EXPECT_EQ(s0.grad().item<double>(), 12);
  EXPECT_EQ(s0.grad().dim(), 0);
  // An output that does not require grad has nothing to differentiate.
  std::string msg2 = message_of<AutogradError>([] { ones_f64({1}).backward(); });
  EXPECT_EQ(msg2.rfind("[backward]", 0), 0u) << msg2;
}

TEST(Engine, NoGradGuardStopsRecording) {
  Tensor x = leaf({1, 2});
  Tensor y;
  {
    NoGradGuard guard;
    EXPECT_FALSE(GradMode::is_enabled());
    y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      AutoGradMode enable(true);
      EXPECT_TRUE((x * 2).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_EQ(vals(y), (std::vector<double>{2, 4}));
  Tensor z = x * 3 + y;  // y is a constant here
  z.backward(ones_f64({2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{3, 3}));
}

TEST(Engine, Detach) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.storage(), y.storage());
  EXPECT_EQ(vals(d), (std::vector<double>{2, 4}));
  // Gradient does not flow through the detached branch.
  Tensor z = y * d;  // d(z)/dx = 2 * d = [4, 8]
  z.backward(ones_f64({2}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{4, 8}));
  // detach_ cuts a tensor out of the graph in place.
  Tensor w = x * 5;
  w.detach_();
  EXPECT_FALSE(w.requires_grad());
  EXPECT_EQ(w.grad_fn(), nullptr);
}

TEST(Engine, TensorHooks) {
  // On a leaf: the hook sees the incoming gradient and may replace it.
  Tensor x = leaf({1, 2});
  std::vector<double> seen;
  x.register_hook([&](const Tensor& g) {
    seen = vals(g);
    return g * 10;
  });
  (x * x).backward(ones_f64({2}));
  EXPECT_EQ(seen, (std::vector<double>{2, 4}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{20, 40}));
  // A hook returning an undefined tensor keeps the gradient.
  Tensor k = leaf({1});
  int calls = 0;
  k.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  (k * 7).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(vals(k.grad()), (std::vector<double>{7}));
  // On a non-leaf: the hook sees the total gradient of that tensor (both uses summed) and its
  // replacement flows on to the inputs.
  Tensor a = leaf({1, 2});
  Tensor h = a * 3;
  std::vector<double> seen_h;
  h.register_hook([&](const Tensor& g) {
    seen_h = vals(g);
    return g * 2;
  });
  Tensor out = h * h + h;  // d out / d h = 2h + 1 = [7, 13]
  out.backward(ones_f64({2}));
  EXPECT_EQ(seen_h, (std::vector<double>{7, 13}));
  EXPECT_EQ(vals(a.grad()), (std::vector<double>{42, 78}));  // 3 * 2 * [7, 13]
  EXPECT_FALSE(h.grad().defined()) << "a non-leaf keeps no .grad unless retain_grad()";
  EXPECT_THROW(ones_f64({1}).register_hook([](const Tensor& g) { return g; }), AutogradError);
}

// A hook may change a gradient's values, not its shape: named as the hook's fault, not by the
// op that would meet the mismatch later ("[reshape]").
TEST(Engine, HooksReturningAnotherShapeAreRefusedNamingTheHook) {
  Tensor x = leaf({1, 2});
  x.register_hook([](const Tensor& g) { return g.sum(); });
  std::string msg = message_of<ValueError>([&] { (x * x).sum().backward(); });
  EXPECT_NE(msg.find("[backward] a gradient hook of a leaf returned"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape []"), std::string::npos) << msg;
  Tensor a = leaf({1, 2, 3, 4});
  Tensor h = a * 3;
  h.register_hook([](const Tensor& g) { return g.reshape({2, 2}); });
  msg = message_of<ValueError>([&] { h.sum().backward(); });
  EXPECT_NE(msg.find("[backward] a gradient hook of the output of mul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape [2, 2]"), std::string::npos) << msg;
}

TEST(Engine, PostAccumulateGradHooks) {
  Tensor w = leaf({1, 2, 3});
  int calls = 0;
  std::vector<double> grad_in_hook;
  w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    EXPECT_TRUE(t.is_same(w));
    ASSERT_TRUE(t.grad().defined()) << "runs after .grad is set";
    grad_in_hook = vals(t.grad());
  });
  // w is used three times: the hook still fires once per backward, with the summed gradient.
  Tensor y = w * w + w * 2 + w.exp();
  y.backward(ones_f64({3}));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(test::all_close(tensor(grad_in_hook, {3}),
                              {2 + 2 + std::exp(1.0), 4 + 2 + std::exp(2.0), 6 + 2 + std::exp(3.0)}, 1e-14));
  (w * 1).backward(ones_f64({3}));
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(test::all_close(tensor(grad_in_hook, {3}),
                              {5 + std::exp(1.0), 7 + std::exp(2.0), 9 + std::exp(3.0)}, 1e-14))
      << "the second call sees the accumulated gradient";
  // autograd::grad does not accumulate, so the hook does not fire.
  autograd::grad({w * 2}, {w}, {ones_f64({3})});
  EXPECT_EQ(calls, 2);
  // Only leaves that require grad accept it.
  Tensor nl = w * 2;
  EXPECT_THROW(nl.register_post_accumulate_grad_hook([](const Tensor&) {}), AutogradError);
}

TEST(Engine, RetainGradOnNonLeaf) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  y.retain_grad();
  Tensor z = y * y;
  z.backward(ones_f64({2}), /*retain_graph=*/true);  // y's own graph is used again below
  EXPECT_EQ(vals(y.grad()), (std::vector<double>{6, 12}));
  EXPECT_EQ(vals(x.grad()), (std::vector<double>{18, 36}));
  // It accumulates like a leaf's gradient.
  Tensor z2 = y * 2;
  z2.backward(ones_f64({2}));
  EXPECT_EQ(vals(y.grad()), (std::vector<double>{8, 14}));
  x.retain_grad();  // a no-op on leaves
  EXPECT_THROW(ones_f64({1}).retain_grad(), AutogradError);
}

TEST(Engine, AutogradGrad) {
  Tensor x = leaf({1, 2}), w = leaf({3, 4}), unused = leaf({5});
  Tensor y = x * w + x;
  TensorList g = autograd::grad({y}, {x, w}, {ones_f64({2})}, /*retain_graph=*/true);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(vals(g[0]), (std::vector<double>{4, 5}));
  EXPECT_EQ(vals(g[1]), (std::vector<double>{1, 2}));
  EXPECT_FALSE(x.grad().defined()) << "grad() returns gradients without touching .grad";
  EXPECT_FALSE(w.grad().defined());
  // Only the requested inputs: w is not computed into .grad either.
  TensorList gx = autograd::grad({y}, {x}, {tensor<double>({2, 0}, {2})}, true);
  EXPECT_EQ(vals(gx[0]), (std::vector<double>{8, 0}));
  EXPECT_FALSE(w.grad().defined());
  // An input the outputs do not depend on is an error unless allow_unused.
  std::string msg = message_of<AutogradError>([&] { autograd::grad({y}, {x, unused}, {ones_f64({2})}, true); });
  EXPECT_EQ(msg.rfind("[grad]", 0), 0u) << msg;
  EXPECT_NE(msg.find("allow_unused"), std::string::npos) << msg;
  TensorList gu = autograd::grad({y}, {x, unused}, {ones_f64({2})}, true, false, /*allow_unused=*/true);
  EXPECT_EQ(vals(gu[0]), (std::vector<double>{4, 5}));
  EXPECT_FALSE(gu[1].defined());
  // Gradients with respect to an intermediate tensor.
  Tensor h = x * 2;
  Tensor o = h * h;
  TensorList gh = autograd::grad({o}, {h}, {ones_f64({2})});
  EXPECT_EQ(vals(gh[0]), (std::vector<double>{4, 8}));
  // Several outputs: their gradients add.
  Tensor o1 = x * 2, o2 = x * x;
  TensorList gs = autograd::grad({o1, o2}, {x}, {ones_f64({2}), ones_f64({2})});
  EXPECT_EQ(vals(gs[0]), (std::vector<double>{4, 6}));
  EXPECT_THROW(autograd::grad({y}, {ones_f64({2})}, {ones_f64({2})}), AutogradError);
}

TEST(Engine, DoubleBackward) {
  // create_graph keeps the graph (retain_graph defaults to it, as in PyTorch): the gradient
  // refers to the forward's saved tensors.
  // d/dx x^3 = 3x^2, d2/dx2 = 6x, through mul and through pow.
  Tensor x = leaf({0.5, -1.5, 2.0});
  for (int variant = 0; variant < 2; ++variant) {
    Tensor y = variant == 0 ? x * x * x : x.pow(3);
    TensorList g1 = autograd::grad({y}, {x}, {ones_f64({3})}, false, /*create_graph=*/true);
    EXPECT_TRUE(test::all_close(g1[0], {0.75, 6.75, 12.0}, 1e-14));
    ASSERT_TRUE(g1[0].requires_grad()) << "create_graph makes the gradient differentiable";
    TensorList g2 = autograd::grad({g1[0]}, {x}, {ones_f64({3})}, false, true);
    EXPECT_TRUE(test::all_close(g2[0], {3.0, -9.0, 12.0}, 1e-14)) << "variant " << variant;
    TensorList g3 = autograd::grad({g2[0]}, {x}, {ones_f64({3})});
    EXPECT_TRUE(test::all_close(g3[0], {6.0, 6.0, 6.0}, 1e-14)) << "variant " << variant;
  }
  // backward(create_graph) leaves a differentiable .grad.
  Tensor z = leaf({3.0});
  (z * z * z).backward(Tensor(), false, /*create_graph=*/true);
  Tensor gz = z.grad();
  EXPECT_EQ(gz.item<double>(), 27.0);
  EXPECT_TRUE(gz.requires_grad());
  TensorList gg = autograd::grad({gz}, {z});
  EXPECT_EQ(gg[0].item<double>(), 18.0);
  // A .grad built with create_graph holds the graph that computed it, and that graph holds z:
  // a reference cycle (PyTorch warns about the same one). Breaking it is the caller's job.
  gz = Tensor();
  z.set_grad(Tensor());
  // Through exp, tanh, sigmoid, div (VJPs that use the output).
  Tensor u = leaf({0.3, -0.7});
  Tensor e = u.exp() / (u * u + 1);
  TensorList d1 = autograd::grad({e}, {u}, {ones_f64({2})}, false, true);
  TensorList d2 = autograd::grad({d1[0]}, {u}, {ones_f64({2})});
  for (int i = 0; i < 2; ++i) {
    double a = vals(u)[size_t(i)];
    auto f = [](double t) { return std::exp(t) / (t * t + 1); };
    double h = 1e-4, numeric = (f(a + h) - 2 * f(a) + f(a - h)) / (h * h);
    EXPECT_NEAR(vals(d2[0])[size_t(i)], numeric, 1e-5);
  }
}

TEST(Engine, InPlaceModificationOfASavedTensorIsDetected) {
  // A constant saved by mul, modified afterwards.
  Tensor x = leaf({1, 2});
  Tensor c = tensor<double>({3, 4}, {2});
  Tensor y = x * c;
  c.add_(1);
  std::string msg = message_of<AutogradError>([&] { y.backward(ones_f64({2})); });
  EXPECT_EQ(msg[0], '[') << msg;
  EXPECT_NE(msg.find("in-place"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version"), std::string::npos) << msg;
  // A non-leaf saved by mul, modified by an op that is itself recorded.
  Tensor a = x * 2;
  Tensor b = a * x;
  a.mul_(3);
  EXPECT_THROW(b.backward(ones_f64({2})), AutogradError);
  // A saved output (exp saves its result), modified through a view.
  Tensor e = x.exp();
  Tensor f = e * 1;  // f's graph saves nothing of e's storage...
  Tensor g = e.exp();  // ...but exp saves its own output g
  {
    NoGradGuard no_grad;
    g.select(0, 0).fill_(0);
  }
  EXPECT_THROW(g.backward(ones_f64({2})), AutogradError);
  f.backward(ones_f64({2}));  // unaffected
  EXPECT_TRUE(test::all_close(x.grad(), {std::exp(1.0), std::exp(2.0)}, 1e-14));
  // Recorded in-place ops on a non-leaf join the graph; an op that only needs the old
  // value's shape (mul_ or div_ by a constant, add_) must not trip the version check.
  Tensor p = leaf({1, 2});
  Tensor q = p * 2;
  q.add_(p);                          // q = 3p
  q.mul_(4);                          // q = 12p
  q.div_(tensor<double>({2, 3}, {2}));  // q = [6p0, 4p1]
  q.sub_(1);
  q.relu_();                          // positive here: passes the gradient
  q.exp_();                           // exp saves its output, not q
  q.backward(ones_f64({2}));
  std::vector<double> expected{6 * std::exp(6.0 - 1), 4 * std::exp(8.0 - 1)};
  EXPECT_TRUE(test::all_close(p.grad(), expected, 1e-13));
  EXPECT_EQ(vals(q), (std::vector<double>{std::exp(5.0), std::exp(7.0)}));
  // But an op whose gradient needs the overwritten value is detected, as in PyTorch:
  // q.mul_(r) with r requiring grad needs the old q for r's gradient.
  Tensor r = leaf({5, 6});
  Tensor q2 = p * 1;
  q2.mul_(r);
  EXPECT_THROW(q2.backward(ones_f64({2})), AutogradError);
}

TEST(Engine, InPlaceOnViewsWhileRecording) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 1;
  // Unsupported (the base would not see the new history): a clear error, not a wrong grad.
  EXPECT_THROW(y.select(0, 0).mul_(2), AutogradError);
  EXPECT_THROW(y.unsqueeze(0).add_(1), AutogradError);
  EXPECT_THROW(y.view({3, 1}).t().zero_(), AutogradError);
}

TEST(Engine, DiamondAccumulates) {
  Tensor x = leaf({0.5, -1.0});
  Tensor a = x * 2;
  Tensor b = x.exp();
  Tensor y = a * b;  // 2x e^x: dy/dx = 2 e^x + 2x e^x
  y.backward(ones_f64({2}));
  std::vector<double> expected;
  for (double v : {0.5, -1.0}) expected.push_back(2 * std::exp(v) + 2 * v * std::exp(v));
  EXPECT_TRUE(test::all_close(x.grad(), expected, 1e-14));
  // A wider diamond with a view in one branch and a broadcast leaf.
  Tensor m = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor top = m.select(0, 0) * m.select(0, 1);   // [3]
  Tensor side = m.t().select(1, 1).exp();          // row 1 again, through a transpose
  Tensor out = top + side;
  out.backward(ones_f64({3}));
  EXPECT_TRUE(test::all_close(m.grad(), {2, 3}, {4, 5, 6, 1 + std::exp(4.0), 2 + std::exp(5.0), 3 + std::exp(6.0)}, 1e-14));
}

TEST(Engine, LongChainDoesNotOverflowTheStack) {
  Tensor x = leaf({1.0});
  Tensor y = x;
  for (int i = 0; i < 10000; ++i) y = y * 1.0001;
  y.backward();
  EXPECT_NEAR(x.grad().item<double>(), std::pow(1.0001, 10000), 1e-9);
  // Freeing the graph (a 10000-node chain of shared pointers) must not recurse too deeply.
  y = Tensor();
  // Also a chain that is never run backward, dropped at once.
  Tensor z = x;
  for (int i = 0; i < 10000; ++i) z = z.exp().log();
  z = Tensor();
  SUCCEED();
}

TEST(Engine, CastsAreDifferentiable) {
  Tensor x = leaf({1.5, -2.0});
  Tensor y = x.to(DType::f32);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(y.requires_grad());
  (y * y).backward(ones({2}));
  EXPECT_EQ(x.grad().dtype(), DType::f64) << "the gradient comes back in the input's dtype";
  EXPECT_TRUE(test::all_close(x.grad(), {3.0, -4.0}, 1e-6));
  // Casting to an integer dtype would cut the graph: an error under grad mode.
  EXPECT_THROW(x.to(DType::i64), DTypeError);
  {
    NoGradGuard g;
    EXPECT_EQ(x.to(DType::i64).dtype(), DType::i64);
  }
  EXPECT_EQ(x.detach().to(DType::i64).dtype(), DType::i64);
  // Integer tensors cannot require grad.
  EXPECT_THROW(tensor<int64_t>({1}).requires_grad_(), DTypeError);
}

// ---- checkpoint ----

TEST(Checkpoint, GradientsMatchTheDirectComputation) {
  manual_seed(1);
  Tensor w = randn({4}, DType::f64).requires_grad_();  // used inside fn, not passed as input
  auto fn = [&](const TensorList& in) { return ((in[0] * w).tanh() * in[1]).sigmoid() + in[0].exp(); };
  Tensor a = randn({4}, DType::f64).requires_grad_();
  Tensor b = randn({4}, DType::f64).requires_grad_();
  Tensor g = randn({4}, DType::f64);

  Tensor ref = fn({a, b});
  ref.backward(g);
  auto ga = vals(a.grad()), gb = vals(b.grad()), gw = vals(w.grad());
  a.mutable_grad() = Tensor();
  b.mutable_grad() = Tensor();
  w.mutable_grad() = Tensor();

  Tensor out = autograd::checkpoint(fn, {a, b});
  EXPECT_TRUE(out.requires_grad());
  EXPECT_EQ(vals(out), vals(ref));
  EXPECT_STREQ(out.grad_fn()->name(), "checkpoint");
  out.backward(g);
  EXPECT_TRUE(test::all_close(a.grad(), ga, 1e-14));
  EXPECT_TRUE(test::all_close(b.grad(), gb, 1e-14));
  ASSERT_TRUE(w.grad().defined()) << "parameters used inside fn get gradients";
  EXPECT_TRUE(test::all_close(w.grad(), gw, 1e-14));
  // Inputs that do not require grad get none; the parameters still do.
  w.mutable_grad() = Tensor();
  Tensor c = a.detach();
  Tensor out2 = autograd::checkpoint(fn, {c, b.detach()});
  EXPECT_TRUE(out2.requires_grad());
  out2.backward(g);
  EXPECT_TRUE(test::all_close(w.grad(), gw, 1e-14));
  EXPECT_FALSE(c.grad().defined());
}

TEST(Checkpoint, DropsActivationsAndRecomputes) {
  int calls = 0;
  std::vector<bool> recording;
  auto fn = [&](const TensorList& in) {
    ++calls;
    recording.push_back(GradMode::is_enabled());
    return in[0].exp().exp();
  };
  Tensor x = leaf({0.1, 0.2});
  Tensor y = autograd::checkpoint(fn, {x});
  EXPECT_EQ(calls, 1);
  y.backward(ones_f64({2}));
  EXPECT_EQ(calls, 2) << "backward recomputes fn once";
  EXPECT_EQ(recording, (std::vector<bool>{false, true})) << "the forward records nothing; the recompute does";
  std::vector<double> expected;
  for (double v : {0.1, 0.2}) expected.push_back(std::exp(std::exp(v)) * std::exp(v));
  EXPECT_TRUE(test::all_close(x.grad(), expected, 1e-14));
  // Under NoGradGuard, checkpoint just runs fn.
  NoGradGuard g;
  EXPECT_FALSE(autograd::checkpoint(fn, {x}).requires_grad());
}

TEST(Checkpoint, DropoutMaskIsReplayedOnRecompute) {
  Tensor w = ones({64}, DType::f64).mul(0.5).requires_grad_();
  auto fn = [&](const TensorList& in) { return ember::dropout(in[0] * w, 0.5, true).exp(); };
  Tensor x = linspace(-1, 1, 64, DType::f64).requires_grad_();
  Tensor g = linspace(1, 2, 64, DType::f64);

  manual_seed(77);
  Tensor ref = fn({x});
  ref.backward(g);
  auto gx = vals(x.grad()), gw = vals(w.grad());
  x.mutable_grad() = Tensor();
  w.mutable_grad() = Tensor();
  int zeros_in_mask = 0;
  for (double v : vals(ref)) zeros_in_mask += v == 1.0;  // exp(0)
  EXPECT_GT(zeros_in_mask, 10) << "dropout really dropped something";
  EXPECT_LT(zeros_in_mask, 54);

  manual_seed(77);
  Tensor out = autograd::checkpoint(fn, {x});
  EXPECT_EQ(vals(out), vals(ref));
  rand({1000});  // consume random numbers between forward and backward
  out.backward(g);
  EXPECT_TRUE(test::all_close(x.grad(), gx, 1e-14));
  EXPECT_TRUE(test::all_close(w.grad(), gw, 1e-14));
  // The generator continues where it was, not where the recompute left it.
  manual_seed(77);
  fn({x});
  rand({1000});
  Tensor next_ref = rand({5});
  manual_seed(77);
  Tensor o2 = autograd::checkpoint(fn, {x});
  rand({1000});
  o2.backward(g);
  EXPECT_EQ(vals(rand({5})), vals(next_ref));
}

// Note [Iterative graph release]: freeing a deep graph that never ran backward must not
// recurse once per node (200k nodes overflowed the stack before).
TEST(Engine, DroppingADeepUnusedGraphDoesNotOverflowTheStack) {
  Tensor x = ones({1}, DType::f64).requires_grad_();
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = z.exp().log();
  EXPECT_TRUE(z.requires_grad());
  z = Tensor();
  EXPECT_TRUE(x.grad_fn() == nullptr);
}

// A recorded in-place op must not make its tensor own itself through its own grad_fn.
TEST(Engine, RecordedInPlaceOpLeavesNoReferenceCycle) {
  std::weak_ptr<TensorImpl> weak;
  {
    Tensor x = ones({3}, DType::f64).requires_grad_();
    Tensor h = x * 2.0;
    h.mul_(3.0);
    h.exp_();
    weak = h.impl_ptr();
  }
  EXPECT_TRUE(weak.expired());
}
