// Elementwise ops against std:: math in f64: every entry of the unary and binary registries
// (ops/include/ember/ops/functors.h), the differentiable front (ember::exp, ...), broadcasting,
// non-contiguous operands, the parallel path, lower-precision dtypes, in-place variants,
// comparisons, where and masked_fill.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>

#include <ember/ops/elementwise.h>

#include "support/test_support.h"

using namespace ember;
using ops::BinaryOp;
using ops::UnaryOp;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x * sigmoid_ref(x); }
double mish_ref(double x) { return x * std::tanh(std::log1p(std::exp(x))); }
double hardswish_ref(double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; }
// Central difference of f at x, for the fused derivative functors.
double deriv(const std::function<double(double)>& f, double x) {
  const double h = 1e-5;
  return (f(x + h) - f(x - h)) / (2 * h);
}

// Inputs in a domain where every unary op is defined and smooth: |x| in [0.2, 3].
Tensor domain_input(const Shape& shape, bool positive, uint64_t seed) {
  Generator g(seed);
  Tensor u = rand(shape, DType::f64, &g);
  Tensor s = rand(shape, DType::f64, &g);
  auto uv = vals(u), sv = vals(s);
  std::vector<double> v(uv.size());
  for (size_t i = 0; i < v.size(); ++i) {
    double mag = 0.2 + 2.8 * uv[i];
    v[i] = positive || sv[i] < 0.5 ? mag : -mag;
  }
  return tensor(v, shape);
}

struct UnaryRef {
  std::function<double(double)> f;
  bool positive = false;  // input domain
  ops::UnaryParams params{};
};

std::map<UnaryOp, UnaryRef> unary_refs() {
  std::map<UnaryOp, UnaryRef> m;
  m[UnaryOp::identity] = {[](double x) { return x; }};
  m[UnaryOp::neg] = {[](double x) { return -x; }};
  m[UnaryOp::exp] = {[](double x) { return std::exp(x); }};
  m[UnaryOp::log] = {[](double x) { return std::log(x); }, true};
  m[UnaryOp::sqrt] = {[](double x) { return std::sqrt(x); }, true};
  m[UnaryOp::rsqrt] = {[](double x) { return 1.0 / std::sqrt(x); }, true};
  m[UnaryOp::reciprocal] = {[](double x) { return 1.0 / x; }};
  m[UnaryOp::abs] = {[](double x) { return std::fabs(x); }};
  m[UnaryOp::sign] = {[](double x) { return double((x > 0) - (x < 0)); }};
  m[UnaryOp::tanh] = {[](double x) { return std::tanh(x); }};
  m[UnaryOp::sigmoid] = {sigmoid_ref};
  m[UnaryOp::relu] = {[](double x) { return x > 0 ? x : 0.0; }};
  m[UnaryOp::gelu] = {gelu_ref};
  m[UnaryOp::gelu_tanh] = {gelu_tanh_ref};
  m[UnaryOp::silu] = {silu_ref};
  m[UnaryOp::clamp] = {[](double x) { return std::min(std::max(x, -1.0), 1.5); }, false, {-1.0, 1.5}};
  m[UnaryOp::clamp_min] = {[](double x) { return std::max(x, -0.5); }, false, {-0.5, 0}};
  m[UnaryOp::clamp_max] = {[](double x) { return std::min(x, 0.7); }, false, {0.7, 0}};
  m[UnaryOp::pow_scalar] = {[](double x) { return std::pow(x, 2.5); }, true, {2.5, 0}};
  m[UnaryOp::sin] = {[](double x) { return std::sin(x); }};
  m[UnaryOp::cos] = {[](double x) { return std::cos(x); }};
  m[UnaryOp::floor] = {[](double x) { return std::floor(x); }};
  m[UnaryOp::ceil] = {[](double x) { return std::ceil(x); }};
  m[UnaryOp::trunc] = {[](double x) { return std::trunc(x); }};
  m[UnaryOp::round] = {[](double x) { return std::nearbyint(x); }};  // half to even (default mode)
  m[UnaryOp::square] = {[](double x) { return x * x; }};
  m[UnaryOp::leaky_relu] = {[](double x) { return x > 0 ? x : 0.2 * x; }, false, {0.2, 0}};
  m[UnaryOp::elu] = {[](double x) { return x > 0 ? x : 1.5 * std::expm1(x); }, false, {1.5, 0}};
  m[UnaryOp::softplus] = {[](double x) { return 2 * x > 3 ? x : std::log1p(std::exp(2 * x)) / 2; }, false, {2, 3}};
  m[UnaryOp::mish] = {mish_ref};
  m[UnaryOp::hardswish] = {hardswish_ref};
  m[UnaryOp::hardsigmoid] = {[](double x) { return std::min(std::max(x + 3, 0.0), 6.0) / 6; }};
  return m;
}

struct BinaryRef {
  std::function<double(double, double)> f;
  bool positive_a = false;  // pow: positive base
  bool compare = false;     // bool result
  bool b_is_output = false;  // sigmoid_backward / tanh_backward take (g, y)
};

std::map<BinaryOp, BinaryRef> binary_refs() {
  std::map<BinaryOp, BinaryRef> m;
  m[BinaryOp::add] = {[](double a, double b) { return a + b; }};
  m[BinaryOp::sub] = {[](double a, double b) { return a - b; }};
  m[BinaryOp::mul] = {[](double a, double b) { return a * b; }};
  m[BinaryOp::div] = {[](double a, double b) { return a / b; }};
  m[BinaryOp::pow] = {[](double a, double b) { return std::pow(a, b); }, true};
  m[BinaryOp::maximum] = {[](double a, double b) { return std::max(a, b); }};
  m[BinaryOp::minimum] = {[](double a, double b) { return std::min(a, b); }};
  m[BinaryOp::eq] = {[](double a, double b) { return double(a == b); }, false, true};
  m[BinaryOp::ne] = {[](double a, double b) { return double(a != b); }, false, true};
  m[BinaryOp::lt] = {[](double a, double b) { return double(a < b); }, false, true};
  m[BinaryOp::le] = {[](double a, double b) { return double(a <= b); }, false, true};
  m[BinaryOp::gt] = {[](double a, double b) { return double(a > b); }, false, true};
  m[BinaryOp::ge] = {[](double a, double b) { return double(a >= b); }, false, true};
  m[BinaryOp::logical_and] = {[](double a, double b) { return double(a != 0 && b != 0); }, false, true};
  m[BinaryOp::logical_or] = {[](double a, double b) { return double(a != 0 || b != 0); }, false, true};
  m[BinaryOp::logical_xor] = {[](double a, double b) { return double((a != 0) != (b != 0)); }, false, true};
  // Bitwise ops on floating kernels truncate to int64 (ember::bitwise_* refuse floats).
  m[BinaryOp::bitwise_and] = {[](double a, double b) { return double(int64_t(a) & int64_t(b)); }};
  m[BinaryOp::bitwise_or] = {[](double a, double b) { return double(int64_t(a) | int64_t(b)); }};
  m[BinaryOp::bitwise_xor] = {[](double a, double b) { return double(int64_t(a) ^ int64_t(b)); }};
  // Fused derivatives (grad, saved): checked against finite differences of the forward.
  m[BinaryOp::relu_backward] = {[](double g, double x) { return x > 0 ? g : 0.0; }};
  m[BinaryOp::sigmoid_backward] = {[](double g, double y) {
    double x = std::log(y / (1 - y));  // sigmoid^-1
    return g * deriv(sigmoid_ref, x);
  }, false, false, true};
  m[BinaryOp::tanh_backward] = {[](double g, double y) {
    return g * deriv([](double x) { return std::tanh(x); }, std::atanh(y));
  }, false, false, true};
  m[BinaryOp::gelu_backward] = {[](double g, double x) { return g * deriv(gelu_ref, x); }};
  m[BinaryOp::gelu_tanh_backward] = {[](double g, double x) { return g * deriv(gelu_tanh_ref, x); }};
  m[BinaryOp::silu_backward] = {[](double g, double x) { return g * deriv(silu_ref, x); }};
  // The parameterized ones with ops::binary's default (zero) parameters: slope 0, alpha 0,
  // softplus beta 0 (sigmoid(0) = 1/2); tests/nn/test_activations.cpp checks real ones.
  m[BinaryOp::leaky_relu_backward] = {[](double g, double x) { return x > 0 ? g : 0.0; }};
  m[BinaryOp::elu_backward] = {[](double g, double x) { return x > 0 ? g : 0.0; }};
  m[BinaryOp::softplus_backward] = {[](double g, double x) { return g / 2; }};
  m[BinaryOp::mish_backward] = {[](double g, double x) {  // d/dx x tanh(sp(x)) = tanh(sp) + x sech^2(sp) sigmoid(x)
    const double t = std::tanh(std::log1p(std::exp(x)));
    return g * (t + x * (1 - t * t) * sigmoid_ref(x));
  }};
  m[BinaryOp::hardswish_backward] = {[](double g, double x) {
    return x < -3 ? 0.0 : x < 3 ? g * (2 * x + 3) / 6 : g;
  }};
  m[BinaryOp::hardsigmoid_backward] = {[](double g, double x) { return std::fabs(x) < 3 ? g / 6 : 0.0; }};
  return m;
}

constexpr UnaryOp kAllUnary[] = {
#define EMBER_LIST(name, Functor, kind) UnaryOp::name,
    EMBER_UNARY_OPS(EMBER_LIST)
#undef EMBER_LIST
};
constexpr BinaryOp kAllBinary[] = {
#define EMBER_LIST(name, Functor, kind) BinaryOp::name,
    EMBER_BINARY_OPS(EMBER_LIST)
#undef EMBER_LIST
};

std::vector<double> map_each(const std::function<double(double)>& f, const std::vector<double>& x) {
  std::vector<double> out;
  for (double v : x) out.push_back(f(v));
  return out;
}
// The same, shaped like x: an elementwise op keeps its input's shape.
Tensor map_each(const std::function<double(double)>& f, const Tensor& x) {
  return tensor(map_each(f, vals(x)), x.sizes());
}

// Reference for a broadcast binary op, computed by explicit index arithmetic.
Tensor broadcast_ref(const std::function<double(double, double)>& f, const Tensor& a,
                                  const Tensor& b, const Shape& out) {
  auto av = vals(a), bv = vals(b);
  const size_t nd = out.size();
  auto index_of = [&](const Shape& s, const Shape& idx) {
    int64_t flat = 0;
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t i = idx[nd - s.size() + d];
      flat = flat * s[d] + (s[d] == 1 ? 0 : i);
    }
    return flat;
  };
  std::vector<double> r;
  Shape idx(nd, 0);
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t rem = n;
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    r.push_back(f(av[size_t(index_of(a.sizes(), idx))], bv[size_t(index_of(b.sizes(), idx))]));
  }
  return tensor(r, out);
}

Tensor binary_b_input(const BinaryRef& ref, const Tensor& b_raw) {
  // Second operands stay away from 0 (div) and inside (-1, 1) for (g, y) derivatives.
  if (ref.b_is_output) return ember::tanh(b_raw).mul(0.9).abs().clamp(0.05, 0.95);
  return b_raw;
}
}  // namespace

// ---- the registries, entry by entry ----

TEST(Unary, EveryRegistryOpMatchesStdMathInF64) {
  auto refs = unary_refs();
  for (UnaryOp op : kAllUnary) {
    SCOPED_TRACE(ops::op_name(op));
    auto it = refs.find(op);
    ASSERT_NE(it, refs.end()) << "no reference for unary op " << ops::op_name(op)
                              << ": add one to this test";
    const UnaryRef& ref = it->second;
    Tensor x = domain_input({5, 7}, ref.positive, 10 + uint64_t(op));
    Tensor y = ops::unary(op, x, ref.params);
    EXPECT_EQ(y.dtype(), DType::f64);
    EXPECT_EQ(y.sizes(), x.sizes());
    EXPECT_TRUE(test::all_close(y, map_each(ref.f, x), 1e-13, 1e-15));
    // Non-contiguous input (a transposed view) gives the same values in its logical order.
    Tensor xt = x.t();
    EXPECT_TRUE(test::all_close(ops::unary(op, xt, ref.params), map_each(ref.f, xt), 1e-13, 1e-15));
    // Large enough for the parallel path, strided.
    Tensor big = domain_input({300, 250}, ref.positive, 99).slice(1, 0, 250, 2);
    EXPECT_TRUE(test::all_close(ops::unary(op, big, ref.params), map_each(ref.f, big), 1e-13, 1e-15));
    // f32 computes in float: close to the f64 reference.
    Tensor xf = x.to(DType::f32);
    Tensor yf = ops::unary(op, xf, ref.params);
    EXPECT_EQ(yf.dtype(), DType::f32);
    EXPECT_TRUE(test::all_close(yf, map_each(ref.f, xf), 2e-6, 1e-6));
    // f16 and bf16 compute in float and round once on store.
    for (DType lp : {DType::f16, DType::bf16}) {
      Tensor xl = x.to(lp);
      Tensor yl = ops::unary(op, xl, ref.params);
      EXPECT_EQ(yl.dtype(), lp);
      double rtol = lp == DType::f16 ? 1e-3 : 8e-3;
      EXPECT_TRUE(test::all_close(yl, map_each(ref.f, xl), rtol, 1e-3)) << dtype_name(lp);
    }
  }
}

TEST(Binary, EveryRegistryOpMatchesStdMathWithBroadcasting) {
  auto refs = binary_refs();
  for (BinaryOp op : kAllBinary) {
    SCOPED_TRACE(ops::op_name(op));
    auto it = refs.find(op);
    ASSERT_NE(it, refs.end()) << "no reference for binary op " << ops::op_name(op)
                              << ": add one to this test";
    const BinaryRef& ref = it->second;
    const DType out_dt = ref.compare ? DType::b8 : DType::f64;
    // [2, 1, 3] op [4, 1] -> [2, 4, 3]
    Tensor a = domain_input({2, 1, 3}, ref.positive_a, 1);
    Tensor b = binary_b_input(ref, domain_input({4, 1}, false, 2));
    Tensor y = ops::binary(op, a, b);
    EXPECT_EQ(y.sizes(), Shape({2, 4, 3}));
    EXPECT_EQ(y.dtype(), out_dt);
    const double rtol = ref.b_is_output || op == BinaryOp::gelu_backward ||
                                op == BinaryOp::gelu_tanh_backward || op == BinaryOp::silu_backward
                            ? 1e-7
                            : 1e-13;
    EXPECT_TRUE(test::all_close(y, broadcast_ref(ref.f, a, b, {2, 4, 3}), rtol, 1e-12));
    // Same shapes, with ties so that comparisons see equal elements.
    Tensor c = domain_input({3, 4}, ref.positive_a, 3);
    Tensor d = binary_b_input(ref, domain_input({3, 4}, false, 4));
    if (!ref.b_is_output && !ref.positive_a) {
      d = d.clone();
      d.select(0, 1).copy_(c.select(0, 1));
    }
    EXPECT_TRUE(test::all_close(ops::binary(op, c, d), broadcast_ref(ref.f, c, d, {3, 4}), rtol, 1e-12));
    // Non-contiguous both sides, and tensor-scalar / scalar-tensor shapes.
    Tensor ct = domain_input({4, 3}, ref.positive_a, 5).t();
    Tensor dt = binary_b_input(ref, domain_input({4, 3}, false, 6)).t();
    EXPECT_TRUE(test::all_close(ops::binary(op, ct, dt), broadcast_ref(ref.f, ct, dt, {3, 4}), rtol, 1e-12));
    Tensor s = binary_b_input(ref, full({}, 0.75, DType::f64));
    EXPECT_TRUE(test::all_close(ops::binary(op, c, s), broadcast_ref(ref.f, c, s, {3, 4}), rtol, 1e-12));
    Tensor sa = ref.positive_a ? full({}, 1.25, DType::f64) : full({}, -0.6, DType::f64);
    EXPECT_TRUE(test::all_close(ops::binary(op, sa, d), broadcast_ref(ref.f, sa, d, {3, 4}), rtol, 1e-12));
    // Parallel path with broadcasting: [64, 1, 64] op [48, 1] -> [64, 48, 64].
    Tensor ba = domain_input({64, 1, 64}, ref.positive_a, 7);
    Tensor bb = binary_b_input(ref, domain_input({48, 1}, false, 8));
    EXPECT_TRUE(test::all_close(ops::binary(op, ba, bb), broadcast_ref(ref.f, ba, bb, {64, 48, 64}), rtol, 1e-12));
    // f32.
    Tensor yf = ops::binary(op, a.to(DType::f32), b.to(DType::f32));
    EXPECT_EQ(yf.dtype(), ref.compare ? DType::b8 : DType::f32);
    if (!ref.compare) {
      EXPECT_TRUE(test::all_close(yf, broadcast_ref(ref.f, a.to(DType::f32), b.to(DType::f32), {2, 4, 3}),
                                  ref.b_is_output ? 1e-4 : 2e-6, 1e-5));
    }
  }
}

// ---- the differentiable front ----

TEST(Elementwise, PublicUnaryFunctionsAndMethods) {
  Tensor x = domain_input({3, 4}, false, 21);
  Tensor p = domain_input({3, 4}, true, 22);
  auto xv = vals(x), pv = vals(p);
  auto check = [](const Tensor& got, const std::vector<double>& in, double (*f)(double)) {
    EXPECT_TRUE(test::all_close(got, {3, 4}, map_each(f, in), 1e-13, 1e-15));
  };
  check(ember::neg(x), xv, [](double v) { return -v; });
  check(-x, xv, [](double v) { return -v; });
  check(ember::exp(x), xv, [](double v) { return std::exp(v); });
  check(x.exp(), xv, [](double v) { return std::exp(v); });
  check(ember::log(p), pv, [](double v) { return std::log(v); });
  check(p.sqrt(), pv, [](double v) { return std::sqrt(v); });
  check(p.rsqrt(), pv, [](double v) { return 1 / std::sqrt(v); });
  check(ember::reciprocal(x), xv, [](double v) { return 1 / v; });
  check(x.abs(), xv, [](double v) { return std::fabs(v); });
  check(ember::sign(x), xv, [](double v) { return double((v > 0) - (v < 0)); });
  check(x.tanh(), xv, [](double v) { return std::tanh(v); });
  check(x.sigmoid(), xv, sigmoid_ref);
  check(x.relu(), xv, [](double v) { return std::max(v, 0.0); });
  check(x.gelu(), xv, gelu_ref);
  check(ember::gelu(x, true), xv, gelu_tanh_ref);
  check(x.silu(), xv, silu_ref);
  check(x.clamp(-1, 1), xv, [](double v) { return std::clamp(v, -1.0, 1.0); });
  check(x.clamp_min(0.5), xv, [](double v) { return std::max(v, 0.5); });
  check(x.clamp_max(0.5), xv, [](double v) { return std::min(v, 0.5); });
  check(ember::clamp(x, std::nullopt, -0.25), xv, [](double v) { return std::min(v, -0.25); });
  check(ember::clamp(x, 0.25, std::nullopt), xv, [](double v) { return std::max(v, 0.25); });
  EXPECT_THROW(ember::clamp(x, std::nullopt, std::nullopt), ValueError);
  check(p.pow(2.5), pv, [](double v) { return std::pow(v, 2.5); });
  check(x.pow(2), xv, [](double v) { return v * v; });
  check(x.pow(3), xv, [](double v) { return v * v * v; });
  check(p.pow(-0.5), pv, [](double v) { return 1 / std::sqrt(v); });
  check(ember::pow(p, 0.5), pv, [](double v) { return std::sqrt(v); });
  // Special values.
  Tensor sp = tensor<double>({0.0, -0.0, INFINITY, -INFINITY, NAN}, {5});
  auto e = vals(sp.exp());
  EXPECT_EQ(e[0], 1);
  EXPECT_EQ(e[2], INFINITY);
  EXPECT_EQ(e[3], 0);
  EXPECT_TRUE(std::isnan(e[4]));
  auto l = vals(tensor<double>({0.0, -1.0}, {2}).log());
  EXPECT_EQ(l[0], -INFINITY);
  EXPECT_TRUE(std::isnan(l[1]));
  auto r = vals(sp.relu());
  EXPECT_EQ(r[2], INFINITY);
  EXPECT_EQ(r[3], 0);
  EXPECT_EQ(vals(sp.sigmoid())[2], 1.0);
  EXPECT_EQ(vals(sp.sigmoid())[3], 0.0);
  EXPECT_EQ(vals(sp.tanh())[3], -1.0);
  EXPECT_EQ(vals(tensor<double>({-1000.0, 1000.0}, {2}).sigmoid()), (std::vector<double>{0.0, 1.0}));
  EXPECT_TRUE(std::isnan(vals(sp.clamp(-1, 1))[4])) << "clamp propagates NaN";
}

TEST(Elementwise, IntegerAndBoolDTypes) {
  Tensor i = tensor<int64_t>({-3, 0, 5}, {3});
  EXPECT_EQ(i.neg().dtype(), DType::i64);
  EXPECT_EQ(i.neg().to_vector<int64_t>(), (std::vector<int64_t>{3, 0, -5}));
  EXPECT_EQ(i.abs().to_vector<int64_t>(), (std::vector<int64_t>{3, 0, 5}));
  EXPECT_EQ(i.relu().to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 5}));
  EXPECT_EQ(i.clamp(-1, 2).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 2}));
  EXPECT_EQ(ember::sign(i).to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(i.exp().dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(i.exp(), {std::exp(-3.0), 1, std::exp(5.0)}, 1e-6));
  EXPECT_EQ(i.sigmoid().dtype(), DType::f32);
  // Exact 64-bit integer arithmetic (no detour through floating point).
  const int64_t big = (int64_t(1) << 53) + 1;
  Tensor b = full({2}, big, DType::i64);
  EXPECT_EQ((b + b).to_vector<int64_t>()[0], 2 * big);
  EXPECT_EQ((b - 1).to_vector<int64_t>()[0], big - 1);
  EXPECT_EQ((b * 3).to_vector<int64_t>()[0], 3 * big);
  EXPECT_EQ(ember::maximum(b, full({2}, big - 1, DType::i64)).to_vector<int64_t>()[0], big);
  EXPECT_EQ(b.eq(full({2}, big - 1, DType::i64)).to_vector<int64_t>()[0], 0);
  EXPECT_EQ((tensor<int32_t>({7}, {1}) * 6).to_vector<int32_t>()[0], 42);
  EXPECT_EQ((tensor<uint8_t>({200}, {1}) + tensor<uint8_t>({100}, {1})).to_vector<int64_t>()[0], 44);  // wraps like uint8
  // Bool arithmetic: add is "or", mul is "and"; unary math on bool is an error.
  Tensor t = tensor<double>({1, 0, 1, 0}, {4}).gt(0.5);
  Tensor u = tensor<double>({1, 1, 0, 0}, {4}).gt(0.5);
  EXPECT_EQ((t + u).dtype(), DType::b8);
  EXPECT_EQ(vals(t + u), (std::vector<double>{1, 1, 1, 0}));
  EXPECT_EQ(vals(t * u), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_THROW(t.neg(), DTypeError);
}

TEST(Elementwise, BinaryFrontScalarsAndAlpha) {
  Tensor a = domain_input({2, 1, 3}, false, 31);
  Tensor b = domain_input({4, 1}, false, 32);
  auto ref = [&](double (*f)(double, double)) { return broadcast_ref(f, a, b, {2, 4, 3}); };
  EXPECT_TRUE(test::all_close(a + b, ref([](double x, double y) { return x + y; }), 1e-14));
  EXPECT_TRUE(test::all_close(a - b, ref([](double x, double y) { return x - y; }), 1e-14));
  EXPECT_TRUE(test::all_close(a * b, ref([](double x, double y) { return x * y; }), 1e-14));
  EXPECT_TRUE(test::all_close(a / b, ref([](double x, double y) { return x / y; }), 1e-14));
  EXPECT_TRUE(test::all_close(ember::add(a, b, 2.5), ref([](double x, double y) { return x + 2.5 * y; }), 1e-14));
  EXPECT_TRUE(test::all_close(a.sub(b, -3), ref([](double x, double y) { return x + 3 * y; }), 1e-14));
  EXPECT_TRUE(test::all_close(ember::maximum(a, b), ref([](double x, double y) { return std::max(x, y); })));
  EXPECT_TRUE(test::all_close(a.minimum(b), ref([](double x, double y) { return std::min(x, y); })));
  Tensor pa = a.abs();
  EXPECT_TRUE(test::all_close(ember::pow(pa, b), broadcast_ref([](double x, double y) { return std::pow(x, y); }, pa, b, {2, 4, 3}), 1e-13));
  // Scalars on either side.
  auto each = [&](double (*f)(double)) { return map_each(f, a); };
  EXPECT_TRUE(test::all_close(a + 2, each([](double x) { return x + 2; }), 1e-15));
  EXPECT_TRUE(test::all_close(2 + a, each([](double x) { return x + 2; }), 1e-15));
  EXPECT_TRUE(test::all_close(a - 0.5, each([](double x) { return x - 0.5; }), 1e-15));
  EXPECT_TRUE(test::all_close(0.5 - a, each([](double x) { return 0.5 - x; }), 1e-15));
  EXPECT_TRUE(test::all_close(a * 3, each([](double x) { return 3 * x; }), 1e-15));
  EXPECT_TRUE(test::all_close(3 * a, each([](double x) { return 3 * x; }), 1e-15));
  EXPECT_TRUE(test::all_close(a / 4, each([](double x) { return x / 4; }), 1e-15));
  EXPECT_TRUE(test::all_close(1.5 / a, each([](double x) { return 1.5 / x; }), 1e-14));
  // Division by zero follows IEEE in floating point.
  auto z = vals(tensor<double>({1, -1, 0}, {3}) / 0.0);
  EXPECT_EQ(z[0], INFINITY);
  EXPECT_EQ(z[1], -INFINITY);
  EXPECT_TRUE(std::isnan(z[2]));
  // maximum/minimum propagate NaN from either side.
  Tensor n = tensor<double>({NAN, 1, 2}, {3}), m = tensor<double>({0, NAN, 1}, {3});
  auto mx = vals(ember::maximum(n, m)), mn = vals(ember::minimum(m, n));
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 2);
  EXPECT_TRUE(std::isnan(mn[0]) && std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 1);
  // Mixed dtypes promote before computing: i64 + f32 -> f32, i32 * f64 0-dim -> f64.
  Tensor mixed = tensor<int64_t>({1, 2}, {2}) + tensor<float>({0.5f, 0.25f}, {2});
  EXPECT_EQ(mixed.dtype(), DType::f32);
  EXPECT_EQ(vals(mixed), (std::vector<double>{1.5, 2.25}));
  Tensor h = tensor<double>({1.0, 2.0}, {2}, DType::f16) * full({}, 1.0 / 3.0, DType::f64);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(vals(h)[0], double(float(Half(float(Half(1.0f)) * float(1.0 / 3.0)))));
  // Broadcasting mismatch names both shapes.
  try {
    (void)(zeros({2, 3}) + zeros({4}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[add]", 0), 0u) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  }
}

TEST(Elementwise, ComparisonsGiveBool) {
  Tensor a = tensor<double>({1, 2, 3, 4}, {2, 2});
  Tensor b = tensor<double>({2, 2}, {2});
#define check(t, ...)                                   \
  do {                                                  \
    EXPECT_EQ((t).dtype(), DType::b8);                  \
    EXPECT_EQ(vals(t), (std::vector<double>__VA_ARGS__)); \
  } while (0)
  check(a.eq(b), {0, 1, 0, 0});
  check(a.ne(b), {1, 0, 1, 1});
  check(a.lt(b), {1, 0, 0, 0});
  check(a.le(b), {1, 1, 0, 0});
  check(a.gt(b), {0, 0, 1, 1});
  check(a.ge(b), {0, 1, 1, 1});
  check(ember::lt(a, b), {1, 0, 0, 0});
  check(a.gt(2.5), {0, 0, 1, 1});
  check(a.eq(3), {0, 0, 1, 0});
  check(a.t().le(2), {1, 0, 1, 0});
  // Integer tensor against a fractional scalar compares in floating point (2 < 2.5).
  check(tensor<int64_t>({2, 3}, {2}).lt(2.5), {1, 0});
  check(tensor<int64_t>({2, 3}, {2}).eq(tensor<double>({2.0, 3.5}, {2})), {1, 0});
  check(tensor<double>({NAN, 1}, {2}).eq(tensor<double>({NAN, 1}, {2})), {0, 1});
  check(tensor<double>({NAN}, {1}).ne(tensor<double>({NAN}, {1})), {1});
  EXPECT_EQ(a.gt(b).sizes(), Shape({2, 2}));
#undef check
  // Broadcasting applies to comparisons.
  EXPECT_EQ(zeros({3, 1}).lt(zeros({1, 4})).sizes(), Shape({3, 4}));
}

TEST(Elementwise, Where) {
  Tensor cond = tensor<double>({1, 0, 1}, {3}).gt(0.5);
  Tensor a = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = tensor<double>({-1, -2}, {2, 1});
  Tensor w = ember::where(cond, a, b);
  EXPECT_EQ(w.sizes(), Shape({2, 3}));
  EXPECT_EQ(vals(w), (std::vector<double>{1, -1, 3, 4, -2, 6}));
  EXPECT_EQ(vals(ember::where(cond, a, 0.5)), (std::vector<double>{1, 0.5, 3, 4, 0.5, 6}));
  EXPECT_EQ(vals(ember::where(cond, 9, a)), (std::vector<double>{9, 2, 9, 9, 5, 9}));
  // dtype promotion: i64 and f32 -> f32.
  Tensor wi = ember::where(cond, tensor<int64_t>({1, 2, 3}, {3}), tensor<float>({0.5f}, {1}));
  EXPECT_EQ(wi.dtype(), DType::f32);
  EXPECT_EQ(vals(wi), (std::vector<double>{1, 0.5, 3}));
  // Non-contiguous operands and a broadcast condition.
  Tensor at = a.t();  // [3, 2]
  Tensor c2 = tensor<double>({1, 0}, {2}).gt(0.5);
  EXPECT_EQ(vals(ember::where(c2, at, zeros({3, 2}, DType::f64))), (std::vector<double>{1, 0, 2, 0, 3, 0}));
  EXPECT_THROW(ember::where(tensor<double>({1, 0, 1}, {3}), a, b), DTypeError);
  EXPECT_THROW(ember::where(cond, a, zeros({4, 1}, DType::f64)), ShapeError);
}

TEST(Elementwise, MaskedFill) {
  Tensor x = tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = tensor<double>({0, 1, 0}, {3}).gt(0.5);
  Tensor y = x.masked_fill(mask, -9);
  EXPECT_EQ(y.dtype(), DType::f64);
  EXPECT_EQ(vals(y), (std::vector<double>{1, -9, 3, 4, -9, 6}));
  EXPECT_EQ(vals(x), (std::vector<double>{1, 2, 3, 4, 5, 6}));  // out of place
  EXPECT_EQ(vals(ember::masked_fill(x, x.gt(3.5), -INFINITY)),
            (std::vector<double>{1, 2, 3, -INFINITY, -INFINITY, -INFINITY}));
  // The dtype of the input is kept; large integers stay exact.
  const int64_t big = (int64_t(1) << 40) + 1;
  Tensor i = tensor<int64_t>({big, 2, big}, {3});
  Tensor im = i.masked_fill(tensor<double>({0, 1, 0}, {3}).gt(0.5), 7.0);
  EXPECT_EQ(im.dtype(), DType::i64);
  EXPECT_EQ(im.to_vector<int64_t>(), (std::vector<int64_t>{big, 7, big}));
  Tensor ii = i.clone();
  ii.masked_fill_(tensor<double>({1, 0, 0}, {3}).gt(0.5), 2.5);
  EXPECT_EQ(ii.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, big}));
  EXPECT_EQ(tensor<float>({1, 2}, {2}).masked_fill(tensor<double>({1, 0}, {2}).gt(0.5), 0.5).dtype(), DType::f32);
  // The mask must broadcast to the input's shape (not the other way round).
  EXPECT_THROW(tensor<double>({1, 2, 3}, {3}).masked_fill(zeros({2, 3}).gt(0), 1), ShapeError);
  EXPECT_THROW(x.masked_fill(tensor<double>({0, 1, 0}, {3}), 1), DTypeError);
}

// ---- in place ----

TEST(InPlace, BinaryVariantsWriteIntoSelf) {
  Tensor base = domain_input({2, 3}, false, 41);
  Tensor o = domain_input({3}, false, 42);
  auto bv = vals(base), ov = vals(o);
  auto expect = [&](const std::function<void(Tensor&)>& op, double (*f)(double, double)) {
    Tensor x = base.clone();
    void* ptr = x.data_ptr();
    uint32_t version = x.version();
    op(x);
    EXPECT_EQ(x.data_ptr(), ptr) << "in-place ops keep the storage";
    EXPECT_GT(x.version(), version) << "in-place ops bump the version";
    std::vector<double> r;
    for (size_t i = 0; i < bv.size(); ++i) r.push_back(f(bv[i], ov[i % 3]));
    EXPECT_TRUE(test::all_close(x, base.sizes(), r, 1e-14));
  };
  expect([&](Tensor& x) { x.add_(o); }, [](double a, double b) { return a + b; });
  expect([&](Tensor& x) { x.add_(o, 2); }, [](double a, double b) { return a + 2 * b; });
  expect([&](Tensor& x) { x.sub_(o); }, [](double a, double b) { return a - b; });
  expect([&](Tensor& x) { x.sub_(o, 0.5); }, [](double a, double b) { return a - 0.5 * b; });
  expect([&](Tensor& x) { x.mul_(o); }, [](double a, double b) { return a * b; });
  expect([&](Tensor& x) { x.div_(o); }, [](double a, double b) { return a / b; });
  expect([&](Tensor& x) { x += o; }, [](double a, double b) { return a + b; });
  expect([&](Tensor& x) { x -= o; }, [](double a, double b) { return a - b; });
  expect([&](Tensor& x) { x *= o; }, [](double a, double b) { return a * b; });
  expect([&](Tensor& x) { x /= o; }, [](double a, double b) { return a / b; });
  expect([&](Tensor& x) { x.add_(1.5); }, [](double a, double) { return a + 1.5; });
  expect([&](Tensor& x) { x.sub_(2); }, [](double a, double) { return a - 2; });
  expect([&](Tensor& x) { x.mul_(-3); }, [](double a, double) { return -3 * a; });
  expect([&](Tensor& x) { x.div_(4); }, [](double a, double) { return a / 4; });
  expect([&](Tensor& x) { x += 1; }, [](double a, double) { return a + 1; });
  expect([&](Tensor& x) { x *= 0.5; }, [](double a, double) { return a * 0.5; });
  expect([&](Tensor& x) { x.abs_().pow_(1.5); }, [](double a, double) { return std::pow(std::fabs(a), 1.5); });
  expect([&](Tensor& x) { x.copy_(o); }, [](double, double b) { return b; });
  expect([&](Tensor& x) { x.fill_(0.25); }, [](double, double) { return 0.25; });
  expect([&](Tensor& x) { x.zero_(); }, [](double, double) { return 0.0; });
}

TEST(InPlace, UnaryVariantsWriteIntoSelf) {
  Tensor base = domain_input({4, 5}, true, 43);
  auto expect = [&](const std::function<void(Tensor&)>& op, const std::function<double(double)>& f) {
    Tensor x = base.clone();
    void* ptr = x.data_ptr();
    op(x);
    EXPECT_EQ(x.data_ptr(), ptr);
    EXPECT_TRUE(test::all_close(x, map_each(f, base), 1e-13, 1e-15));
    // Through a non-contiguous view, the base sees the result in the right places.
    Tensor y = base.clone();
    Tensor v = y.t();
    op(v);
    EXPECT_TRUE(test::all_close(y, map_each(f, base), 1e-13, 1e-15));
  };
  expect([](Tensor& x) { x.neg_(); }, [](double v) { return -v; });
  expect([](Tensor& x) { x.exp_(); }, [](double v) { return std::exp(v); });
  expect([](Tensor& x) { x.log_(); }, [](double v) { return std::log(v); });
  expect([](Tensor& x) { x.sqrt_(); }, [](double v) { return std::sqrt(v); });
  expect([](Tensor& x) { x.rsqrt_(); }, [](double v) { return 1 / std::sqrt(v); });
  expect([](Tensor& x) { x.neg_().abs_(); }, [](double v) { return v; });
  expect([](Tensor& x) { x.tanh_(); }, [](double v) { return std::tanh(v); });
  expect([](Tensor& x) { x.sigmoid_(); }, sigmoid_ref);
  expect([](Tensor& x) { x.sub_(1.5).relu_(); }, [](double v) { return std::max(v - 1.5, 0.0); });
  expect([](Tensor& x) { x.silu_(); }, silu_ref);
  expect([](Tensor& x) { x.clamp_(0.5, 1.5); }, [](double v) { return std::clamp(v, 0.5, 1.5); });
  expect([](Tensor& x) { x.pow_(2); }, [](double v) { return v * v; });
  expect([](Tensor& x) { x.masked_fill_(x.gt(1.0), -1); }, [](double v) { return v > 1.0 ? -1.0 : v; });
}

TEST(InPlace, BroadcastingAndDTypeRules) {
  // The other operand broadcasts to self; self cannot grow.
  Tensor x = zeros({2, 3}, DType::f64);
  x.add_(tensor<double>({1, 2, 3}, {3}));
  EXPECT_EQ(vals(x), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  Tensor small = zeros({3}, DType::f64);
  EXPECT_THROW(small.add_(zeros({2, 3}, DType::f64)), ShapeError);
  // A result that needs a higher category cannot be written into an integer tensor...
  Tensor i = tensor<int64_t>({1, 2}, {2});
  EXPECT_THROW(i.add_(tensor<float>({0.5f, 0.5f}, {2})), DTypeError);
  EXPECT_THROW(i.mul_(0.5), DTypeError);
  EXPECT_THROW(i.div_(2), DTypeError);
  EXPECT_THROW(i.exp_(), DTypeError);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 2})) << "a failed op leaves self untouched";
  // ...but a float tensor takes integer operands, and an f16 tensor takes f64 ones.
  Tensor f = tensor<float>({1, 2}, {2});
  f.add_(tensor<int64_t>({10, 20}, {2}));
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(vals(f), (std::vector<double>{11, 22}));
  Tensor h = ones({2}, DType::f16);
  h.mul_(tensor<double>({0.1, 3.0}, {2}));
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_EQ(vals(h)[0], double(float(Half(0.1f))));
  EXPECT_EQ(vals(h)[1], 3.0);
  i.add_(3);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{4, 5}));
  // Self-aliasing: x.add_(x) and x.mul_(x.t()) read before they write.
  Tensor s = tensor<double>({1, 2, 3, 4}, {2, 2});
  s.add_(s);
  EXPECT_EQ(vals(s), (std::vector<double>{2, 4, 6, 8}));
  s.mul_(s.t());
  EXPECT_EQ(vals(s), (std::vector<double>{4, 24, 24, 64}));
}

TEST(InPlace, LeafRequiringGradCannotBeModifiedUnderGradMode) {
  Tensor w = ones({3}, DType::f64).requires_grad_();
  Tensor o = ones({3}, DType::f64);
  const std::vector<std::pair<const char*, std::function<void()>>> ops = {
      {"add_", [&] { w.add_(o); }},
      {"sub_", [&] { w.sub_(o); }},
      {"mul_", [&] { w.mul_(o); }},
      {"div_", [&] { w.div_(o); }},
      {"add_", [&] { w.add_(1); }},
      {"mul_", [&] { w.mul_(2); }},
      {"pow_", [&] { w.pow_(2); }},
      {"exp_", [&] { w.exp_(); }},
      {"neg_", [&] { w.neg_(); }},
      {"relu_", [&] { w.relu_(); }},
      {"clamp_", [&] { w.clamp_(0, 1); }},
      {"masked_fill_", [&] { w.masked_fill_(o.gt(0), 0); }},
      {"copy_", [&] { w.copy_(o); }},
      {"fill_", [&] { w.fill_(0); }},
      {"zero_", [&] { w.zero_(); }},
  };
  for (const auto& [name, op] : ops) {
    try {
      op();
      ADD_FAILURE() << name << " on a leaf requiring grad did not throw";
    } catch (const AutogradError& e) {
      std::string msg = e.what();
      // zero_ is fill_(0) and may report itself as either.
      const bool named = msg.rfind(std::string("[") + name + "]", 0) == 0 ||
                         (std::string(name) == "zero_" && msg.rfind("[fill_]", 0) == 0);
      EXPECT_TRUE(named) << name << ": " << msg;
      EXPECT_NE(msg.find("leaf"), std::string::npos) << msg;
    }
  }
  EXPECT_EQ(vals(w), std::vector<double>(3, 1.0)) << "nothing was written";
  // Under NoGradGuard (as an optimizer step does) it is allowed.
  {
    NoGradGuard no_grad;
    w.mul_(2).add_(o);
    w.exp_();
  }
  EXPECT_TRUE(test::all_close(w, std::vector<double>(3, std::exp(3.0)), 1e-14));
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

// ---- every device: CUDA against the CPU (skips without a CUDA device) ----

class ElementwiseDevice : public ::testing::TestWithParam<Device> {};

TEST_P(ElementwiseDevice, RegistryOpsMatchTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  auto urefs = unary_refs();
  for (UnaryOp op : kAllUnary) {
    SCOPED_TRACE(ops::op_name(op));
    const UnaryRef& ref = urefs.at(op);
    Tensor x = domain_input({37, 29}, ref.positive, 200 + uint64_t(op)).to(DType::f32);
    for (const Tensor& in : {x, x.t(), x.slice(1, 0, 29, 3)}) {
      Tensor y = ops::unary(op, in.to(dev), ref.params);
      EXPECT_EQ(y.device(), dev);
      EXPECT_TRUE(test::all_close(y.cpu(), ops::unary(op, in, ref.params), 2e-6, 1e-6));
    }
    for (DType lp : {DType::f16, DType::bf16}) {
      Tensor xl = x.to(lp);
      EXPECT_TRUE(test::all_close(ops::unary(op, xl.to(dev), ref.params).cpu(), ops::unary(op, xl, ref.params),
                                  lp == DType::f16 ? 1e-3 : 8e-3, 1e-3))
          << dtype_name(lp);
    }
  }
  auto brefs = binary_refs();
  for (BinaryOp op : kAllBinary) {
    SCOPED_TRACE(ops::op_name(op));
    const BinaryRef& ref = brefs.at(op);
    Tensor a = domain_input({2, 1, 33}, ref.positive_a, 300).to(DType::f32);
    Tensor b = binary_b_input(ref, domain_input({17, 1}, false, 301)).to(DType::f32);
    Tensor y = ops::binary(op, a.to(dev), b.to(dev));
    EXPECT_EQ(y.device(), dev);
    EXPECT_EQ(y.dtype(), ops::binary(op, a, b).dtype());
    EXPECT_TRUE(test::all_close(y.cpu(), ops::binary(op, a, b), 2e-6, 1e-6));
    Tensor at = domain_input({33, 17}, ref.positive_a, 302).to(DType::f32).t();
    Tensor bt = binary_b_input(ref, domain_input({17, 33}, false, 303)).to(DType::f32);
    EXPECT_TRUE(test::all_close(ops::binary(op, at.to(dev), bt.to(dev)).cpu(), ops::binary(op, at, bt), 2e-6, 1e-6));
    // A CPU 0-dim tensor may join a CUDA op, as in PyTorch.
    Tensor s = binary_b_input(ref, full({}, 0.75, DType::f32));
    EXPECT_TRUE(test::all_close(ops::binary(op, a.to(dev), s).cpu(), ops::binary(op, a, s), 2e-6, 1e-6));
  }
}

TEST_P(ElementwiseDevice, WhereMaskedFillInPlaceAndCopies) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor x = domain_input({6, 5}, false, 400).to(DType::f32);
  Tensor y = domain_input({5}, false, 401).to(DType::f32);
  Tensor cond = x.gt(0);
  EXPECT_TRUE(test::all_close(ember::where(cond.to(dev), x.to(dev), y.to(dev)).cpu(), ember::where(cond, x, y)));
  EXPECT_TRUE(test::all_close(x.to(dev).masked_fill(cond.to(dev), -1).cpu(), x.masked_fill(cond, -1)));
  Tensor d = x.clone().to(dev);  // to() of a tensor already there returns it: keep x intact
  d.add_(y.to(dev), 2).mul_(0.5).relu_();
  Tensor c = x.clone();
  c.add_(y, 2).mul_(0.5).relu_();
  EXPECT_TRUE(test::all_close(d.cpu(), c, 1e-6));
  // Casts and copies between devices, including non-contiguous sources and destinations.
  Tensor h = x.t().to(dev, DType::f16);
  EXPECT_EQ(h.dtype(), DType::f16);
  EXPECT_TRUE(test::all_close(h.cpu(), x.t().to(DType::f16)));
  Tensor dst = zeros({5, 6}, dev).t();
  dst.copy_(x);
  EXPECT_TRUE(test::all_close(dst.cpu(), x));
  EXPECT_TRUE(test::all_close(full({3}, 2.5, TensorOptions(DType::bf16).device(dev)).cpu(), {2.5, 2.5, 2.5}));
}

TEST_P(ElementwiseDevice, RandomStreamsAreTheSameOnEveryDevice) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Generator g1(2024), g2(2024);
  EXPECT_TRUE(test::all_close(rand({1001}, dev, &g1).cpu(), rand({1001}, Device::cpu(), &g2), 0, 0));
  EXPECT_TRUE(test::all_close(randn({1001}, dev, &g1).cpu(), randn({1001}, Device::cpu(), &g2), 1e-6, 1e-6));
  EXPECT_TRUE(test::all_close(randint(-5, 50, {999}, TensorOptions(DType::i64).device(dev), &g1).cpu(),
                              randint(-5, 50, {999}, DType::i64, &g2), 0, 0));
}

// f64 uniforms just below 1 stay what they are on CUDA too (its [low, high) clamp once went
// through float, turning every draw above 1 - 2^-25 into the largest double below 1): the
// draws of 2^26 f64 values where that happens, compared with the CPU's bit for bit.
TEST_P(ElementwiseDevice, F64UniformsJustBelowOneMatchTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  const int64_t n = int64_t(1) << 26;
  Generator gc(77), gd(77);
  const std::vector<double> cpu = rand({n}, DType::f64, &gc).to_vector<double>();
  const std::vector<double> gpu = rand({n}, TensorOptions(DType::f64).device(dev), &gd).cpu().to_vector<double>();
  int64_t near_one = 0;
  for (int64_t i = 0; i < n; ++i)
    if (cpu[size_t(i)] > 1.0 - std::ldexp(1.0, -25)) {
      ++near_one;
      EXPECT_EQ(gpu[size_t(i)], cpu[size_t(i)]) << "element " << i;
    }
  std::printf("%lld f64 draws above 1 - 2^-25 among 2^26\n", static_cast<long long>(near_one));
  EXPECT_EQ(gpu, cpu);
}

// f64, the integer dtypes and bool on the device, op by op against the CPU: exact wherever the
// CPU is exact (integer and bool arithmetic, comparisons, IEEE add/sub/mul/div), f64 math to a
// few ulps.
TEST_P(ElementwiseDevice, F64IntegerAndBoolDTypesMatchTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  auto urefs = unary_refs();
  for (UnaryOp op : kAllUnary) {
    SCOPED_TRACE(ops::op_name(op));
    const UnaryRef& ref = urefs.at(op);
    Tensor x = domain_input({19, 23}, ref.positive, 500 + uint64_t(op));
    Tensor y = ops::unary(op, x.to(dev), ref.params);
    EXPECT_EQ(y.dtype(), DType::f64);
    EXPECT_TRUE(test::all_close(y.cpu(), ops::unary(op, x, ref.params), 1e-13, 1e-15));
  }
  auto brefs = binary_refs();
  for (BinaryOp op : kAllBinary) {
    SCOPED_TRACE(ops::op_name(op));
    const BinaryRef& ref = brefs.at(op);
    Tensor a = domain_input({3, 1, 29}, ref.positive_a, 600);
    Tensor b = binary_b_input(ref, domain_input({7, 1}, false, 601));
    EXPECT_TRUE(test::all_close(ops::binary(op, a.to(dev), b.to(dev)).cpu(), ops::binary(op, a, b), 1e-13, 1e-15));
  }
  // Integers: every dtype, the arithmetic that is exact on the CPU is exact here.
  const int64_t big = (int64_t(1) << 53) + 1;  // beyond f64's integers: no detour through floats
  for (DType dt : {DType::i64, DType::i32, DType::u8}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = randint(dt == DType::u8 ? 0 : -100, 200, {5, 37}).to(dt);
    Tensor b = randint(dt == DType::u8 ? 0 : -100, 200, {37}).to(dt);
    auto same = [&](const std::function<Tensor(const Tensor&, const Tensor&)>& fn) {
      Tensor expect = fn(a, b), got = fn(a.to(dev), b.to(dev));
      EXPECT_EQ(got.device(), dev);
      EXPECT_EQ(got.dtype(), expect.dtype());
      return test::all_close(got.cpu(), expect, 0, 0);
    };
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return x + y; }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return x - y; }));  // u8 wraps
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return x * y; }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return ember::maximum(x, y); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return ember::minimum(x, y); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return x.lt(y); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor& y) { return x.eq(y); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return x.abs(); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return x.relu(); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return x.clamp(3, 150); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return ember::sign(x); }));
    EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return x * 3 + 1; }));
    if (dt != DType::u8) {
      EXPECT_TRUE(same([](const Tensor& x, const Tensor&) { return x.neg(); }));
    }
    // Unary math on integers computes in f32, as on the CPU.
    Tensor e = a.to(dev).exp();
    EXPECT_EQ(e.dtype(), DType::f32);
    EXPECT_TRUE(test::all_close(e.cpu(), a.exp(), 2e-6, 0));
  }
  Tensor bi = full({3}, big, TensorOptions(DType::i64).device(dev));
  EXPECT_EQ((bi + bi).cpu().to_vector<int64_t>()[0], 2 * big);
  EXPECT_EQ((bi * 3).cpu().to_vector<int64_t>()[0], 3 * big);
  EXPECT_EQ((bi - 1).cpu().to_vector<int64_t>()[0], big - 1);
  // Bool: add is "or", mul is "and"; unary math is an error, as on the CPU.
  Tensor t = tensor<double>({1, 0, 1, 0}, {4}).gt(0.5), u = tensor<double>({1, 1, 0, 0}, {4}).gt(0.5);
  EXPECT_EQ((t.to(dev) + u.to(dev)).cpu().to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1, 1, 0}));
  EXPECT_EQ((t.to(dev) * u.to(dev)).cpu().to_vector<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 0}));
  EXPECT_EQ((t.to(dev) + u.to(dev)).dtype(), DType::b8);
  EXPECT_THROW(t.to(dev).neg(), DTypeError);
}

// Binary ops between dtypes promote as on the CPU (PyTorch's rules), 16-bit included, and give
// the CPU's bits: IEEE add/sub/mul/div are correctly rounded in f32 on both, then rounded once.
TEST_P(ElementwiseDevice, MixedDTypeBinaryOpsPromoteAsOnTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor h = randn({4, 33}).to(DType::f16), bf = randn({4, 33}).to(DType::bf16), f = randn({33}),
         d = randn({4, 1}, DType::f64), i = randint(-9, 9, {4, 33}), b = randn({4, 33}).gt(0);
  Tensor s64 = full({}, 1.0 / 3.0, DType::f64);  // a 0-d tensor does not promote a floating dtype
  struct Case {
    const char* name;
    Tensor a, b;
  };
  for (const Case& c : {Case{"f16+bf16", h, bf}, Case{"f16+f32", h, f}, Case{"bf16+f64", bf, d}, Case{"i64+f16", i, h},
                        Case{"bool+bf16", b, bf}, Case{"f16+0d f64", h, s64}, Case{"bf16+0d f64", bf, s64},
                        Case{"i64+0d f64", i, s64}}) {
    SCOPED_TRACE(c.name);
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div, BinaryOp::maximum, BinaryOp::lt}) {
      SCOPED_TRACE(ops::op_name(op));
      Tensor expect = ops::binary(op, c.a, c.b);
      Tensor got = ops::binary(op, c.a.to(dev), c.b.dim() == 0 ? c.b : c.b.to(dev));
      EXPECT_EQ(got.dtype(), expect.dtype());
      EXPECT_TRUE(test::all_close(got.cpu(), expect, 0, 0));
    }
  }
  // In place: the result keeps self's dtype.
  Tensor hc = h.clone();
  hc.add_(f, 0.5);
  Tensor hd = h.clone().to(dev);  // clone first: to() of a tensor already there returns it
  hd.add_(f.to(dev), 0.5);
  EXPECT_EQ(hd.dtype(), DType::f16);
  EXPECT_TRUE(test::all_close(hd.cpu(), hc, 0, 0));
}

// Operands on two devices: only a 0-d CPU tensor may join a CUDA op (as in PyTorch); anything
// else is a DeviceError naming the op and both devices, in place and out of place.
TEST_P(ElementwiseDevice, MixedDeviceOperandsAreRefusedExceptCpuScalars) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor g = randn({3, 4}).to(dev), c = randn({3, 4}), c1 = randn({4});
  for (const Tensor& cpu : {c, c1}) {
    const std::string msg = test::message_of<DeviceError>([&] { (void)(g + cpu); });
    EXPECT_EQ(msg.rfind("[add]", 0), 0u) << msg;
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cpu"), std::string::npos) << msg;
    EXPECT_THROW((void)(cpu * g), DeviceError);
    EXPECT_THROW(g.add_(cpu), DeviceError);
    EXPECT_THROW(ember::where(g.gt(0), g, cpu), DeviceError);
  }
  EXPECT_TRUE(test::all_close((g * full({}, 2.0)).cpu(), g.cpu() * 2, 0, 0));
}

// Autograd across devices: a CPU leaf moved to CUDA, computed on, and reduced there gets its
// gradient back on the CPU, equal to the analytic one; and a CUDA leaf through a CPU detour.
TEST_P(ElementwiseDevice, AutogradAcrossDevicesReturnsGradientsToTheLeafsDevice) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor x = randn({5, 3}, DType::f64).requires_grad_();
  Tensor y = (x.to(dev) * 2.0).exp().sum();
  EXPECT_EQ(y.device(), dev);
  y.backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().device().is_cpu());
  EXPECT_TRUE(test::all_close(x.grad(), (x.detach() * 2.0).exp() * 2.0, 1e-13, 0));
  Tensor w = randn({4}, DType::f64).to(dev).requires_grad_();
  Tensor z = (w.cpu() * w.cpu()).to(dev).sum();
  z.backward();
  EXPECT_EQ(w.grad().device(), dev);
  EXPECT_TRUE(test::all_close(w.grad().cpu(), w.detach().cpu() * 2.0, 1e-15, 0));
}

// Tensors with many dims that cannot be merged (a reversed permutation): the CPU takes any
// number; CUDA takes 25 (PyTorch's limit) and names the limit beyond.
TEST_P(ElementwiseDevice, ManyNonMergeableDimsMatchTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Shape sizes(12, 2), order;
  for (int64_t d = 11; d >= 0; --d) order.push_back(d);
  Tensor base = randn(sizes), y = randn(sizes);
  Tensor x = base.permute(order), xd = base.to(dev).permute(order);  // the same strides on the device
  ASSERT_EQ(xd.strides(), x.strides());
  EXPECT_TRUE(test::all_close((xd + y.to(dev)).cpu(), x + y, 0, 0));
  EXPECT_TRUE(test::all_close(xd.contiguous().cpu(), x.contiguous(), 0, 0));
  EXPECT_TRUE(test::all_close(xd.exp().cpu(), x.exp(), 2e-6, 0));
  EXPECT_TRUE(test::all_close(xd.softmax(3).cpu(), x.softmax(3), 2e-6, 1e-7));
  EXPECT_TRUE(test::all_close(xd.sum({2, 5}).cpu(), x.sum({2, 5}), 1e-5, 1e-5));
  Shape big(26, 2), rev;
  for (int64_t d = 25; d >= 0; --d) rev.push_back(d);
  Tensor z = zeros(big, dev).permute(rev);
  const std::string msg = test::message_of<ShapeError>([&] { (void)(z + 1); });
  EXPECT_NE(msg.find("26 dims that cannot be merged, more than the 25"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Cuda, ElementwiseDevice, ::testing::ValuesIn(test::cuda_devices()),
                         test::device_label);

// An expanded tensor (stride 0, size > 1) has several elements in one location: writing it
// elementwise loses all but one write on the CPU and races on CUDA, so the in-place ops and
// copy_ refuse it as PyTorch does. fill_ writes one value everywhere and stays allowed.
TEST(InPlace, ExpandedOutputsAreRefusedExceptByFill) {
  for (Device dev : test::test_devices()) {
    if (dev.is_cuda() && !cuda::is_available()) continue;
    SCOPED_TRACE(dev.str());
    Tensor base = zeros({3}, dev);
    Tensor e = base.expand({2, 3});
    NoGradGuard no_grad;
    const std::string msg = test::message_of<ValueError>([&] { e.add_(ones({2, 3}, dev)); });
    EXPECT_EQ(msg.rfind("[add]", 0), 0u) << msg;
    EXPECT_NE(msg.find("clone() it first"), std::string::npos) << msg;
    EXPECT_THROW(e.mul_(2), ValueError);
    EXPECT_THROW(e.exp_(), ValueError);
    EXPECT_THROW(e.clamp_(0, 1), ValueError);
    EXPECT_THROW(e.copy_(ones({2, 3}, dev)), ValueError);
    EXPECT_THROW(e.masked_fill_(ones({2, 3}, dev).gt(0), 1.0), ValueError);
    EXPECT_EQ(base.cpu().to_vector<double>(), std::vector<double>(3, 0.0)) << "nothing was written";
    e.fill_(2.5);
    EXPECT_EQ(base.cpu().to_vector<double>(), std::vector<double>(3, 2.5));
    // A stride-0 dim of size 1 is an ordinary tensor.
    Tensor one = base.expand({1, 3});
    EXPECT_NO_THROW(one.add_(1));
    EXPECT_EQ(base.cpu().to_vector<double>(), std::vector<double>(3, 3.5));
  }
}

// The gradient accumulator never adds in place into an expanded .grad: a gradient kept as an
// expand()ed view under create_graph, then accumulated into without grad mode, sums every
// contribution.
TEST(InPlace, GradientAccumulationIntoAnExpandedGradSumsEverything) {
  Tensor x = randn({2, 3}, DType::f64).requires_grad_();
  x.sum().backward({}, /*retain_graph=*/false, /*create_graph=*/true);  // .grad = ones expanded
  (x * tensor<double>({1, 2, 3, 4, 5, 6}, {2, 3})).sum().backward();
  EXPECT_TRUE(test::all_close(x.grad(), Shape{2, 3}, {2, 3, 4, 5, 6, 7}, 0, 0));
}

// Floating values to integer dtypes drop the fraction and wrap, through int64 (PyTorch's rule
// for uint8), on every device: CUDA's own conversion would saturate (-1.0 -> 0 in u8).
TEST(Elementwise, FloatToIntegerCastsTruncateThroughInt64OnEveryDevice) {
  const std::vector<double> v = {-1.0, 300.7, -0.5, 255.9, 65536.0 + 7, -129.0, 1e30, NAN};
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  for (Device dev : test::test_devices()) {
    if (test::missing_device(dev)) continue;  // the CPU half still counts
    SCOPED_TRACE(dev.str());
    for (DType from : {DType::f64, DType::f32, DType::bf16}) {
      SCOPED_TRACE(dtype_name(from));
      Tensor x = tensor<double>(v, {8}).to(dev, from);
      // The int64 value of each element first (what the source dtype holds, truncated).
      std::vector<int64_t> i64;
      for (double d : x.cpu().to_vector<double>())
        i64.push_back(d > -9.2233720368547758e18 && d < 9.2233720368547758e18 ? int64_t(d) : kMin);
      std::vector<int64_t> u8, i32;
      for (int64_t w : i64) {
        u8.push_back(int64_t(uint8_t(w)));
        i32.push_back(int64_t(int32_t(w)));
      }
      EXPECT_EQ(x.to(DType::u8).cpu().to_vector<int64_t>(), u8);
      EXPECT_EQ(x.to(DType::i32).cpu().to_vector<int64_t>(), i32);
      EXPECT_EQ(x.to(DType::i64).cpu().to_vector<int64_t>(), i64);
    }
  }
  // The values the rule gives, spelled out for f64 -> u8.
  EXPECT_EQ(tensor<double>(v, {8}).to(DType::u8).to_vector<int64_t>(),
            (std::vector<int64_t>{255, 44, 0, 255, 7, 127, 0, 0}));
}
