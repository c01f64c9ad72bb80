// gradcheck (f64 finite differences) of every differentiable elementwise op and every view
// op, with broadcasting and non-contiguous inputs; second-order checks where the VJP is
// itself differentiable; and a check that gradcheck does catch a wrong VJP.
#include <cmath>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {
using Fn = std::function<Tensor(const TensorList&)>;

// Values with |x| in [lo, hi] and random signs (or positive), so that kinks (abs, relu,
// clamp, maximum) and singularities (log, div) stay further away than the FD step.
Tensor away_from_zero(const Shape& shape, uint64_t seed, bool positive = false, double lo = 0.2,
                      double hi = 2.0) {
  Generator g(seed);
  auto u = rand(shape, DType::f64, &g).to_vector<double>();
  auto s = rand(shape, DType::f64, &g).to_vector<double>();
  std::vector<double> v(u.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double mag = lo + (hi - lo) * u[i];
    v[i] = positive || s[i] < 0.5 ? mag : -mag;
  }
  return tensor(v, shape);
}
Tensor leaf(const Shape& shape, uint64_t seed, bool positive = false) {
  return away_from_zero(shape, seed, positive).requires_grad_();
}
// A non-contiguous leaf of the given shape: the transpose of a fresh [s1, s0] tensor.
Tensor leaf_t(const Shape& shape, uint64_t seed, bool positive = false) {
  return away_from_zero({shape[1], shape[0]}, seed, positive).t().requires_grad_();
}
// A strided (every other column) leaf.
Tensor leaf_strided(const Shape& shape, uint64_t seed, bool positive = false) {
  return away_from_zero({shape[0], shape[1] * 2}, seed, positive).slice(1, 0, shape[1] * 2, 2).requires_grad_();
}

void check(const char* what, const Fn& fn, const TensorList& inputs) {
  SCOPED_TRACE(what);
  try {
    EXPECT_TRUE(gradcheck(fn, inputs));
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what();
  }
}

// gradcheck of the gradient itself: d/dx of (d/dx fn(x) . v) with a fixed v.
void check_second_order(const char* what, const Fn& fn, const TensorList& inputs) {
  Generator g(1234);
  Tensor out = fn(inputs);
  Tensor v = randn(out.sizes(), DType::f64, &g);
  check(what, [&, v](const TensorList& in) {
    AutoGradMode enable(true);  // gradcheck evaluates finite differences under NoGradGuard
    TensorList wrt;
    for (const Tensor& t : in)
      if (t.requires_grad()) wrt.push_back(t);
    TensorList gs = autograd::grad({fn(in)}, wrt, {v}, true, /*create_graph=*/true, true);
    // All inputs here share one shape: combine their gradients with distinct weights so that
    // errors in one cannot hide behind another.
    Tensor acc;
    for (size_t k = 0; k < gs.size(); ++k) {
      if (!gs[k].defined()) continue;
      Tensor term = gs[k] * double(k + 1);
      acc = acc.defined() ? acc + term : term;
    }
    return acc;
  }, inputs);
}
}  // namespace

// ---- binary ----

TEST(ElementwiseGrad, Arithmetic) {
  Tensor a = leaf({3, 4}, 1), b = leaf({3, 4}, 2);
  check("add", [](const TensorList& t) { return t[0] + t[1]; }, {a, b});
  check("add alpha", [](const TensorList& t) { return ember::add(t[0], t[1], 2.5); }, {a, b});
  check("sub", [](const TensorList& t) { return t[0] - t[1]; }, {a, b});
  check("sub alpha", [](const TensorList& t) { return t[0].sub(t[1], -0.5); }, {a, b});
  check("mul", [](const TensorList& t) { return t[0] * t[1]; }, {a, b});
  check("div", [](const TensorList& t) { return t[0] / t[1]; }, {a, b});
  check("mul self", [](const TensorList& t) { return t[0] * t[0]; }, {a});
  check("maximum", [](const TensorList& t) { return ember::maximum(t[0], t[1]); }, {a, b});
  check("minimum", [](const TensorList& t) { return t[0].minimum(t[1]); }, {a, b});
  Tensor p = leaf({3, 4}, 3, /*positive=*/true);
  check("pow tensor", [](const TensorList& t) { return ember::pow(t[0], t[1]); }, {p, b});
  // Only one side requiring grad.
  Tensor c = away_from_zero({3, 4}, 4);
  check("mul const", [c](const TensorList& t) { return t[0] * c; }, {a});
  check("div const numerator", [c](const TensorList& t) { return c / t[0]; }, {a});
  check("pow const base", [](const TensorList& t) { return ember::pow(full({3, 4}, 1.7, DType::f64), t[0]); }, {a});
}

TEST(ElementwiseGrad, ArithmeticWithScalars) {
  Tensor a = leaf({2, 5}, 5);
  Tensor p = leaf({2, 5}, 6, true);
  check("x + 2", [](const TensorList& t) { return t[0] + 2; }, {a});
  check("2 + x", [](const TensorList& t) { return 2 + t[0]; }, {a});
  check("x - 0.5", [](const TensorList& t) { return t[0] - 0.5; }, {a});
  check("0.5 - x", [](const TensorList& t) { return 0.5 - t[0]; }, {a});
  check("x * 3", [](const TensorList& t) { return t[0] * 3; }, {a});
  check("x / 4", [](const TensorList& t) { return t[0] / 4; }, {a});
  check("3 / x", [](const TensorList& t) { return 3.0 / t[0]; }, {a});
  check("pow 2.5", [](const TensorList& t) { return t[0].pow(2.5); }, {p});
  check("pow 3", [](const TensorList& t) { return t[0].pow(3); }, {a});
  check("pow -1.5", [](const TensorList& t) { return ember::pow(t[0], -1.5); }, {p});
  check("pow 0", [](const TensorList& t) { return t[0].pow(0) + t[0]; }, {a});
}

TEST(ElementwiseGrad, BinaryBroadcasting) {
  Tensor a = leaf({2, 1, 3}, 7), b = leaf({4, 1}, 8);
  check("add bcast", [](const TensorList& t) { return t[0] + t[1]; }, {a, b});
  check("add alpha bcast", [](const TensorList& t) { return ember::add(t[0], t[1], -2); }, {a, b});
  check("sub bcast", [](const TensorList& t) { return t[0] - t[1]; }, {a, b});
  check("mul bcast", [](const TensorList& t) { return t[0] * t[1]; }, {a, b});
  check("div bcast", [](const TensorList& t) { return t[0] / t[1]; }, {a, b});
  check("maximum bcast", [](const TensorList& t) { return ember::maximum(t[0], t[1]); }, {a, b});
  check("minimum bcast", [](const TensorList& t) { return ember::minimum(t[0], t[1]); }, {a, b});
  Tensor p = leaf({2, 1, 3}, 9, true);
  check("pow bcast", [](const TensorList& t) { return ember::pow(t[0], t[1]); }, {p, b});
  // A 0-dim operand that requires grad.
  Tensor s = tensor<double>({0.7}, Shape{}).requires_grad_();
  check("mul 0-dim", [](const TensorList& t) { return t[0] * t[1]; }, {a, s});
  check("sub 0-dim", [](const TensorList& t) { return t[1] - t[0]; }, {a, s});
  // Same-rank broadcasting on both sides: [3, 1] with [1, 4].
  Tensor r = leaf({3, 1}, 10), q = leaf({1, 4}, 11);
  check("mul [3,1]x[1,4]", [](const TensorList& t) { return t[0] * t[1]; }, {r, q});
}

TEST(ElementwiseGrad, NonContiguousInputs) {
  Tensor a = leaf_t({3, 4}, 12), b = leaf_strided({3, 4}, 13);
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  check("add nc", [](const TensorList& t) { return t[0] + t[1]; }, {a, b});
  check("mul nc", [](const TensorList& t) { return t[0] * t[1]; }, {a, b});
  check("div nc", [](const TensorList& t) { return t[0] / t[1]; }, {a, b});
  check("maximum nc", [](const TensorList& t) { return ember::maximum(t[0], t[1]); }, {a, b});
  check("exp nc", [](const TensorList& t) { return t[0].exp(); }, {a});
  check("tanh nc", [](const TensorList& t) { return t[0].tanh(); }, {b});
  check("gelu nc", [](const TensorList& t) { return t[0].gelu(); }, {b});
  Tensor p = leaf_t({3, 4}, 14, true);
  check("log nc", [](const TensorList& t) { return t[0].log(); }, {p});
  check("pow nc", [](const TensorList& t) { return ember::pow(t[0], t[1]); }, {p, b});
  // Broadcasting and non-contiguity together.
  Tensor r = away_from_zero({4, 1}, 15).t().requires_grad_();  // [1, 4], stride [1, 1]
  check("mul nc bcast", [](const TensorList& t) { return t[0] * t[1]; }, {a, r});
}

// ---- unary ----

TEST(ElementwiseGrad, Unary) {
  Tensor x = leaf({3, 5}, 20);
  Tensor p = leaf({3, 5}, 21, true);
  check("neg", [](const TensorList& t) { return -t[0]; }, {x});
  check("exp", [](const TensorList& t) { return ember::exp(t[0]); }, {x});
  check("log", [](const TensorList& t) { return ember::log(t[0]); }, {p});
  check("sqrt", [](const TensorList& t) { return t[0].sqrt(); }, {p});
  check("rsqrt", [](const TensorList& t) { return t[0].rsqrt(); }, {p});
  check("reciprocal", [](const TensorList& t) { return ember::reciprocal(t[0]); }, {x});
  check("abs", [](const TensorList& t) { return t[0].abs(); }, {x});
  check("sign", [](const TensorList& t) { return ember::sign(t[0]) + t[0]; }, {x});
  check("tanh", [](const TensorList& t) { return t[0].tanh(); }, {x});
  check("sigmoid", [](const TensorList& t) { return t[0].sigmoid(); }, {x});
  check("relu", [](const TensorList& t) { return t[0].relu(); }, {x});
  check("gelu", [](const TensorList& t) { return t[0].gelu(); }, {x});
  check("gelu tanh", [](const TensorList& t) { return t[0].gelu(true); }, {x});
  check("silu", [](const TensorList& t) { return t[0].silu(); }, {x});
  // Wider inputs for the smooth activations (their curvature lives near 0 and +-3).
  Tensor w = (randn({4, 6}, DType::f64) * 3).requires_grad_();
  check("gelu wide", [](const TensorList& t) { return t[0].gelu(); }, {w});
  check("gelu tanh wide", [](const TensorList& t) { return ember::gelu(t[0], true); }, {w});
  check("silu wide", [](const TensorList& t) { return ember::silu(t[0]); }, {w});
  check("sigmoid wide", [](const TensorList& t) { return ember::sigmoid(t[0]); }, {w});
  check("tanh wide", [](const TensorList& t) { return ember::tanh(t[0]); }, {w});
}

TEST(ElementwiseGrad, Clamp) {
  // Values in [0.2, 2] with signs; bounds at +-1.1 are never within the FD step of a value.
  Tensor x = leaf({4, 5}, 30);
  check("clamp", [](const TensorList& t) { return t[0].clamp(-1.1, 1.1); }, {x});
  check("clamp_min", [](const TensorList& t) { return t[0].clamp_min(-1.1); }, {x});
  check("clamp_max", [](const TensorList& t) { return t[0].clamp_max(1.1); }, {x});
  check("clamp optional", [](const TensorList& t) { return ember::clamp(t[0], std::nullopt, 0.1); }, {x});
  check("clamp int bounds", [](const TensorList& t) { return ember::clamp(t[0], -1, 1); }, {x});
  // The gradient passes at the bounds themselves (as in PyTorch) and is zero outside.
  Tensor e = tensor<double>({-1.0, 0.0, 1.0, 2.0, -3.0}, {5}).requires_grad_();
  e.clamp(-1, 1).backward(ones({5}, DType::f64));
  EXPECT_EQ(e.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 0, 0}));
}

TEST(ElementwiseGrad, WhereAndMaskedFill) {
  Tensor cond = tensor<double>({1, 0, 1, 1, 0, 0}, {2, 3}).gt(0.5);
  Tensor a = leaf({2, 3}, 40), b = leaf({2, 3}, 41);
  check("where", [cond](const TensorList& t) { return ember::where(cond, t[0], t[1]); }, {a, b});
  check("where scalar b", [cond](const TensorList& t) { return ember::where(cond, t[0], 0.5); }, {a});
  check("where scalar a", [cond](const TensorList& t) { return ember::where(cond, -1.0, t[0]); }, {b});
  Tensor row = leaf({3}, 42), col = leaf({2, 1}, 43);
  check("where bcast", [cond](const TensorList& t) { return ember::where(cond, t[0], t[1]); }, {row, col});
  Tensor mask = tensor<double>({0, 1, 1}, {3}).gt(0.5);
  check("masked_fill", [mask](const TensorList& t) { return t[0].masked_fill(mask, 3.0); }, {a});
  check("masked_fill nc", [mask](const TensorList& t) { return ember::masked_fill(t[0], mask, -INFINITY).exp(); },
        {leaf_t({2, 3}, 44)});
}

TEST(ElementwiseGrad, CastsAndCopies) {
  Tensor x = leaf({2, 3}, 50);
  check("to f64", [](const TensorList& t) { return t[0].to(DType::f64) * 2; }, {x});
  check("to same", [](const TensorList& t) { return ember::to(t[0], Device::cpu(), DType::f64); }, {x});
  check("clone", [](const TensorList& t) { return t[0].clone() * t[0]; }, {x});
  check("copy_ into a fresh tensor", [](const TensorList& t) {
    Tensor z = zeros({2, 3}, DType::f64);
    z.copy_(t[0]);
    return z * 3;
  }, {x});
  check("copy_ broadcast", [](const TensorList& t) {
    Tensor z = zeros({4, 3}, DType::f64);
    z.copy_(t[0]);
    return z;
  }, {leaf({3}, 51)});
  // In-place ops on a recorded non-leaf are differentiable.
  check("in-place chain", [](const TensorList& t) {
    Tensor z = t[0] * t[1];
    z.mul_(1.5);
    z.add_(t[0], 0.5);
    z.exp_();
    z.sub_(1);
    z.div_(2);
    return z;
  }, {x, leaf({2, 3}, 52)});
  check("in-place unary", [](const TensorList& t) {
    Tensor z = t[0] + 0;
    z.tanh_();
    z.sigmoid_();
    z.neg_();
    z.relu_();  // everything is negative here: the gradient is zero
    return z + t[0];
  }, {x});
}

// ---- views ----

TEST(ViewGrad, EveryViewOp) {
  Tensor x = leaf({2, 3, 4}, 60);
  check("view", [](const TensorList& t) { return t[0].view({6, 4}) * 2; }, {x});
  check("view -1", [](const TensorList& t) { return t[0].view({-1}); }, {x});
  check("reshape (view)", [](const TensorList& t) { return t[0].reshape({4, 6}); }, {x});
  check("reshape (copy)", [](const TensorList& t) { return t[0].transpose(0, 2).reshape({24}); }, {x});
  check("permute", [](const TensorList& t) { return t[0].permute({2, 0, 1}); }, {x});
  check("transpose", [](const TensorList& t) { return t[0].transpose(-1, 0); }, {x});
  check("t", [](const TensorList& t) { return t[0].select(0, 1).t(); }, {x});
  check("narrow", [](const TensorList& t) { return t[0].narrow(2, 1, 2); }, {x});
  check("slice step", [](const TensorList& t) { return t[0].slice(2, 0, 4, 3); }, {x});
  check("slice negative", [](const TensorList& t) { return t[0].slice(1, -2, 3); }, {x});
  check("select", [](const TensorList& t) { return t[0].select(1, -1); }, {x});
  check("select twice", [](const TensorList& t) { return t[0].select(0, 1).select(1, 2); }, {x});
  check("squeeze", [](const TensorList& t) { return t[0].narrow(1, 1, 1).squeeze(); }, {x});
  check("squeeze dim", [](const TensorList& t) { return t[0].narrow(1, 1, 1).squeeze(1); }, {x});
  check("unsqueeze", [](const TensorList& t) { return t[0].unsqueeze(1) * 3; }, {x});
  check("flatten", [](const TensorList& t) { return t[0].flatten(1); }, {x});
  check("flatten nc", [](const TensorList& t) { return t[0].transpose(0, 1).flatten(); }, {x});
  check("contiguous", [](const TensorList& t) { return t[0].transpose(0, 1).contiguous(); }, {x});
  check("expand", [](const TensorList& t) { return t[0].unsqueeze(0).expand({3, 2, 3, 4}); }, {x});
  Tensor c = leaf({3, 1}, 61);
  check("expand size-1", [](const TensorList& t) { return t[0].expand({2, 3, 5}); }, {c});
  check("expand_as", [](const TensorList& t) { return t[0].expand_as(zeros({3, 4})); }, {c});
  // Views of non-contiguous leaves, and views used twice (their gradients add).
  Tensor n = leaf_t({4, 3}, 62);
  check("view chain nc", [](const TensorList& t) { return t[0].slice(0, 1, 4, 2).t().unsqueeze(0); }, {n});
  check("overlapping uses", [](const TensorList& t) {
    return t[0].narrow(0, 0, 3) * t[0].narrow(0, 1, 3) + t[0].select(1, 0).narrow(0, 1, 3).unsqueeze(1);
  }, {n});
}

// ---- second order (VJPs written with differentiable ops) ----

TEST(ElementwiseGrad, SecondOrder) {
  Tensor a = leaf({2, 3}, 70), b = leaf({2, 3}, 71);
  Tensor p = leaf({2, 3}, 72, true);
  check_second_order("mul", [](const TensorList& t) { return t[0] * t[1] * t[0]; }, {a, b});
  check_second_order("div", [](const TensorList& t) { return t[0] / t[1]; }, {a, b});
  check_second_order("exp", [](const TensorList& t) { return t[0].exp() * t[1]; }, {a, b});
  check_second_order("log", [](const TensorList& t) { return t[0].log(); }, {p});
  check_second_order("sqrt", [](const TensorList& t) { return t[0].sqrt(); }, {p});
  check_second_order("rsqrt", [](const TensorList& t) { return t[0].rsqrt(); }, {p});
  check_second_order("reciprocal", [](const TensorList& t) { return ember::reciprocal(t[0]); }, {a});
  check_second_order("pow scalar", [](const TensorList& t) { return t[0].pow(3); }, {a});
  check_second_order("pow tensor", [](const TensorList& t) { return ember::pow(t[0], t[1]); }, {p, b});
  check_second_order("views", [](const TensorList& t) {
    return (t[0].t().select(0, 1) * t[0].slice(1, 0, 3, 2).flatten().narrow(0, 0, 2)).unsqueeze(0);
  }, {a});
}

// ---- gradcheck can fail ----

TEST(Gradcheck, CatchesAWrongVjp) {
  // y = x^2 with a VJP that forgets the factor 2.
  auto wrong_square = [](const TensorList& t) {
    Tensor x = t[0];
    Tensor y;
    {
      NoGradGuard g;
      y = x * x;
    }
    return autograd::record("wrong_square", y, {x}, [x](const Tensor& g) -> TensorList { return {g * x}; });
  };
  Tensor x = leaf({3}, 80);
  try {
    gradcheck(wrong_square, {x});
    ADD_FAILURE() << "gradcheck accepted a wrong VJP";
  } catch (const AutogradError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[gradcheck]", 0), 0u) << msg;
    EXPECT_NE(msg.find("mismatch"), std::string::npos) << msg;
  }
  EXPECT_THROW(gradcheck([](const TensorList& t) { return t[0] * 2; }, {leaf({3}, 81).to(DType::f32).detach().requires_grad_()}),
               DTypeError);
  EXPECT_THROW(gradcheck([](const TensorList& t) { return t[0] * 2; }, {away_from_zero({3}, 82)}), ValueError);
}
