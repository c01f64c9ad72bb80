// Reduce family forward values: every op against an independent f64 reference that groups
// the elements of each output by brute-force index arithmetic, over all dim subsets, keepdim,
// negative dims, non-contiguous layouts (permuted, sliced, expanded), every dtype, long rows
// and columns (the chunked/parallel paths), accuracy of huge sums, determinism across thread
// counts, PyTorch's dtype rules and error messages.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "support/test_support.h"
#include "ember/threads.h"

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr float fNaN = std::numeric_limits<float>::quiet_NaN();

// The elements of x grouped by output element (each group in row-major order of the reduced
// dims), for reducing over `dims` (empty = all).
struct Groups {
  Shape shape;  // output shape
  std::vector<std::vector<double>> vals;
};

Groups group(const Tensor& x, Shape dims, bool keepdim) {
  const int64_t nd = x.dim();
  std::vector<bool> red(size_t(nd), dims.empty());
  for (int64_t d : dims) red[size_t(d < 0 ? d + nd : d)] = true;
  Groups g;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[size_t(d)]) g.shape.push_back(x.sizes()[d]);
    else if (keepdim) g.shape.push_back(1);
  int64_t nout = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (!red[size_t(d)]) nout *= x.sizes()[d];
  g.vals.resize(size_t(nout));
  const std::vector<double> v = x.to_vector<double>();
  std::vector<int64_t> idx(size_t(nd), 0);
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < nd; ++d)
      if (!red[size_t(d)]) o = o * x.sizes()[d] + idx[size_t(d)];
    g.vals[size_t(o)].push_back(v[i]);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < x.sizes()[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  return g;
}

using RefFn = std::function<double(const std::vector<double>&)>;

double ref_sum(const std::vector<double>& v) {
  long double s = 0;
  for (double a : v) s += a;
  return double(s);
}
double ref_mean(const std::vector<double>& v) { return ref_sum(v) / double(v.size()); }
double ref_max(const std::vector<double>& v) {
  double m = -kInf;
  for (double a : v) {
    if (std::isnan(a)) return a;
    m = std::max(m, a);
  }
  return m;
}
double ref_min(const std::vector<double>& v) {
  double m = kInf;
  for (double a : v) {
    if (std::isnan(a)) return a;
    m = std::min(m, a);
  }
  return m;
}
RefFn ref_var(int64_t correction, bool take_sqrt) {
  return [=](const std::vector<double>& v) {
    const double m = ref_mean(v);
    long double s = 0;
    for (double a : v) s += (long double)(a - m) * (a - m);
    double r = double(s) / std::max(0.0, double(int64_t(v.size()) - correction));
    return take_sqrt ? std::sqrt(r) : r;
  };
}
RefFn ref_norm(double p) {
  return [=](const std::vector<double>& v) {
    if (std::isinf(p)) {
      double m = p > 0 ? 0 : kInf;
      for (double a : v) m = p > 0 ? std::max(m, std::fabs(a)) : std::min(m, std::fabs(a));
      return m;
    }
    long double s = 0;
    for (double a : v) s += p == 0 ? (a != 0) : std::pow((long double)std::fabs(a), (long double)p);
    return p == 0 ? double(s) : double(std::pow(s, 1.0L / p));
  };
}
double ref_argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size() && !std::isnan(v[best]); ++i)
    if (v[i] > v[best] || std::isnan(v[i])) best = i;
  return double(best);
}
double ref_argmin(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size() && !std::isnan(v[best]); ++i)
    if (v[i] < v[best] || std::isnan(v[i])) best = i;
  return double(best);
}

// Shaped as the output group() derives from the input's shape, dims and keepdim.
Tensor ref_apply(const Groups& g, const RefFn& f) {
  std::vector<double> out;
  for (auto& v : g.vals) out.push_back(f(v));
  return tensor(out, g.shape);
}

// A reduction under test: name, ember call, reference.
struct Case {
  const char* name;
  std::function<Tensor(const Tensor&, const Shape&, bool)> op;
  RefFn ref;
  bool floating_only;
};

std::vector<Case> all_cases() {
  using T = const Tensor&;
  using S = const Shape&;
  return {
      {"sum", [](T x, S d, bool k) { return sum(x, d, k); }, ref_sum, false},
      {"mean", [](T x, S d, bool k) { return mean(x, d, k); }, ref_mean, true},
      {"amax", [](T x, S d, bool k) { return amax(x, d, k); }, ref_max, false},
      {"amin", [](T x, S d, bool k) { return amin(x, d, k); }, ref_min, false},
      {"var", [](T x, S d, bool k) { return var(x, d, 1, k); }, ref_var(1, false), true},
      {"var0", [](T x, S d, bool k) { return var(x, d, 0, k); }, ref_var(0, false), true},
      {"std", [](T x, S d, bool k) { return ember::std(x, d, 1, k); }, ref_var(1, true), true},
      {"norm2", [](T x, S d, bool k) { return norm(x, 2, d, k); }, ref_norm(2), true},
      {"norm1", [](T x, S d, bool k) { return norm(x, 1, d, k); }, ref_norm(1), true},
      {"norm_inf", [](T x, S d, bool k) { return norm(x, kInf, d, k); }, ref_norm(kInf), true},
      {"norm_neginf", [](T x, S d, bool k) { return norm(x, -kInf, d, k); }, ref_norm(-kInf), true},
      {"norm0", [](T x, S d, bool k) { return norm(x, 0, d, k); }, ref_norm(0), true},
      {"norm3", [](T x, S d, bool k) { return norm(x, 3, d, k); }, ref_norm(3), true},
      {"norm_half", [](T x, S d, bool k) { return norm(x, 0.5, d, k); }, ref_norm(0.5), true},
  };
}

// Checks `c` on x over dims against the reference; `what` names the layout in failures.
void check_case(const Case& c, const Tensor& x, const Shape& dims, bool keepdim, double rtol,
                double atol, const std::string& what, const Groups* groups = nullptr) {
  SCOPED_TRACE(std::string(c.name) + " on " + what + " dims " + str(dims) +
               (keepdim ? " keepdim" : ""));
  Tensor y = c.op(x, dims, keepdim);
  Groups g = groups ? *groups : group(x.to(Device::cpu(), DType::f64), dims, keepdim);
  ASSERT_EQ(y.sizes(), g.shape);
  EXPECT_TRUE(test::all_close(y, ref_apply(g, c.ref), rtol, atol));
}

std::vector<Shape> dim_subsets(int64_t nd) {
  std::vector<Shape> out{{}};
  for (int64_t m = 1; m < (int64_t(1) << nd); ++m) {
    Shape s;
    for (int64_t d = 0; d < nd; ++d)
      if (m & (int64_t(1) << d)) s.push_back(d);
    out.push_back(s);
  }
  return out;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0;
}

class Reduce : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { EMBER_SKIP_IF_NO_DEVICE(GetParam()); }
  Device dev() const { return GetParam(); }
  Tensor on_dev(const Tensor& t) const { return t.to(dev()); }
};

}  // namespace

TEST_P(Reduce, HandComputedValues) {
  Tensor x = on_dev(tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(test::all_close(x.sum(), {21}));
  EXPECT_EQ(x.sum().dim(), 0);
  EXPECT_TRUE(test::all_close(x.sum({0}), {5, 7, 9}));
  EXPECT_TRUE(test::all_close(x.sum({1}), {6, 15}));
  EXPECT_TRUE(test::all_close(x.sum({-1}), {6, 15}));
  EXPECT_TRUE(test::all_close(x.sum({-2, 1}), {21}));
  Tensor k = x.sum({1}, true);
  EXPECT_EQ(k.sizes(), Shape({2, 1}));
  EXPECT_TRUE(test::all_close(k, {2, 1}, {6, 15}));
  EXPECT_EQ(x.sum({}, true).sizes(), Shape({1, 1}));
  EXPECT_TRUE(test::all_close(x.mean({0}), {2.5, 3.5, 4.5}));
  EXPECT_TRUE(test::all_close(x.max(), {6}));
  EXPECT_TRUE(test::all_close(x.min(), {1}));
  EXPECT_TRUE(test::all_close(amax(x, {0}), {4, 5, 6}));
  // Values all on one side of 0: a max or min that starts from 0 instead of its identity
  // (-inf, +inf) reads 0 here (a seeded bug of scripts/sim_mutants.py).
  EXPECT_TRUE(test::all_close(amax(x.neg(), {1}), {-1, -4}));
  EXPECT_TRUE(test::all_close(x.neg().max(), {-1}));
  EXPECT_TRUE(test::all_close(amin(x, {0}), {1, 2, 3}));
  EXPECT_TRUE(test::all_close(x.var({1}), {1, 1}));
  EXPECT_TRUE(test::all_close(x.var({1}, 0), {2.0 / 3, 2.0 / 3}));
  EXPECT_TRUE(test::all_close(x.std({0}), {std::sqrt(4.5), std::sqrt(4.5), std::sqrt(4.5)}));
  EXPECT_TRUE(test::all_close(x.norm(), {std::sqrt(91.0)}));
  EXPECT_TRUE(test::all_close(x.norm(1, {1}), {6, 15}));
  EXPECT_TRUE(test::all_close(x.norm(kInf, {0}), {4, 5, 6}));
  auto [v, i] = x.max(1);
  EXPECT_TRUE(test::all_close(v, {3, 6}));
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(x.argmax().item<int64_t>(), 5);
  EXPECT_EQ(x.argmin(0).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
}

// Every op, every dim subset, keepdim both ways, on contiguous and non-contiguous layouts:
// these exercise the rows, columns and copy paths of the front (Note [reduce geometry]).
TEST_P(Reduce, MatchesReferenceOnAllLayouts) {
  Tensor base = randn({6, 5, 8}, DType::f64);
  std::vector<std::pair<std::string, Tensor>> layouts = {
      {"contiguous", base},
      {"permuted", base.permute({2, 0, 1})},
      {"transposed", base.transpose(0, 1)},
      {"sliced", base.slice(2, 1, 8, 2)},
      {"narrowed", base.narrow(1, 1, 3)},
      {"expanded", base.select(1, 2).unsqueeze(1).expand({6, 4, 8})},
      {"selected2d", base.select(2, 3)},
  };
  for (auto& [name, host] : layouts) {
    Tensor x = on_dev(host);
    // Negative spellings of the same dims must agree.
    for (const Case& c : all_cases())
      for (const Shape& dims : dim_subsets(x.dim()))
        for (bool keepdim : {false, true}) check_case(c, x, dims, keepdim, 1e-12, 1e-12, name);
    Tensor a = sum(x, {-1, 0}), b = sum(x, {0, x.dim() - 1});
    EXPECT_TRUE(bit_equal(a, b)) << name;
  }
}

TEST_P(Reduce, ArgReductionsMatchReference) {
  Tensor base = randn({5, 7, 6}, DType::f32);
  for (Tensor host : {base, base.permute({1, 2, 0}), base.slice(1, 0, 7, 3)}) {
    Tensor x = on_dev(host);
    for (int64_t d = -3; d < 3; ++d)
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE("dim " + std::to_string(d));
        Groups g = group(x.to(Device::cpu(), DType::f64), {d}, keepdim);
        auto mx = max(x, d, keepdim);
        auto mn = min(x, d, keepdim);
        ASSERT_EQ(mx.values.sizes(), g.shape);
        ASSERT_EQ(mn.indices.sizes(), g.shape);
        EXPECT_TRUE(test::all_close(mx.values, ref_apply(g, ref_max), 0, 0));
        EXPECT_TRUE(test::all_close(mx.indices, ref_apply(g, ref_argmax), 0, 0));
        EXPECT_TRUE(test::all_close(mn.values, ref_apply(g, ref_min), 0, 0));
        EXPECT_TRUE(test::all_close(mn.indices, ref_apply(g, ref_argmin), 0, 0));
        EXPECT_TRUE(test::all_close(argmax(x, d, keepdim), ref_apply(g, ref_argmax), 0, 0));
        EXPECT_TRUE(test::all_close(argmin(x, d, keepdim), ref_apply(g, ref_argmin), 0, 0));
      }
    // No dim: an index into the flattened (row-major) tensor, even for a non-contiguous view.
    Groups all = group(x.to(Device::cpu(), DType::f64), {}, false);
    EXPECT_EQ(double(argmax(x).item<int64_t>()), ref_argmax(all.vals[0]));
    EXPECT_EQ(double(argmin(x).item<int64_t>()), ref_argmin(all.vals[0]));
    EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), Shape({1, 1, 1}));
  }
}

TEST_P(Reduce, TiesPickTheFirstIndexAndNaNPropagates) {
  Tensor x = on_dev(tensor<float>({1, 3, 3, 0, 2, 2, 2, 2}, {2, 4}));
  EXPECT_EQ(argmax(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmin(x, 1).to_vector<int64_t>(), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(max(x, 0).indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0, 1}));
  // A tie across a chunk boundary of a long row still reports the first occurrence.
  Tensor big = zeros({100000});
  big.narrow(0, 70000, 1).fill_(5);
  big.narrow(0, 90000, 1).fill_(5);
  EXPECT_EQ(argmax(on_dev(big)).item<int64_t>(), 70000);
  Tensor bigcol = zeros({50000, 3});
  bigcol.narrow(0, 30000, 1).fill_(5);
  bigcol.narrow(0, 45000, 1).fill_(5);
  EXPECT_EQ(argmax(on_dev(bigcol), 0).to_vector<int64_t>(), (std::vector<int64_t>{30000, 30000, 30000}));

  Tensor n = on_dev(tensor<float>({1, fNaN, 3, fNaN, 0, 5}, {2, 3}));
  EXPECT_TRUE(test::all_close(amax(n, {1}), {kNaN, kNaN}));
  EXPECT_TRUE(test::all_close(amin(n, {0}), {kNaN, kNaN, 3}));
  EXPECT_EQ(argmax(n, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmin(n, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(std::isnan(n.sum().item<double>()));
}

// Long rows and columns go through the chunked and parallel paths of the CPU driver.
TEST_P(Reduce, LongRowsAndColumns) {
  struct Big {
    Shape shape;
    Shape dims;
  };
  // Rows longer than a chunk (16384), columns taller than a super-block (4096), all above
  // the parallel grain (32768 elements).
  for (const Big& b : {Big{{3, 40000}, {1}}, Big{{20000, 3}, {0}}, Big{{40001}, {}},
                       Big{{2, 9000, 5}, {1}}, Big{{150, 300}, {0}}, Big{{200, 300}, {1}},
                       Big{{40, 1000}, {}}, Big{{50, 2500}, {0}}, Big{{3, 4200, 20}, {1}}}) {
    Tensor x = on_dev(randn(b.shape, DType::f64));
    Groups g = group(x.to(Device::cpu()), b.dims, false);
    for (const Case& c : all_cases()) check_case(c, x, b.dims, false, 1e-11, 1e-11, "big " + str(b.shape), &g);
    EXPECT_TRUE(test::all_close(argmax(x, b.dims.empty() ? std::nullopt : std::optional<int64_t>(b.dims[0])),
                                ref_apply(g, ref_argmax), 0, 0));
  }
}

// Columns wider than one work item (1024) and taller than one super-block, in both orders.
TEST_P(Reduce, WideTallColumns) {
  Tensor host = randn({4200, 1030}, DType::f64);
  for (Tensor h : {host, host.t()}) {
    Tensor x = on_dev(h);
    const int64_t d = h.sizes()[0] == 4200 ? 0 : 1;
    Groups g = group(h, {d}, false);
    for (const Case& c : all_cases()) {
      const std::string name = c.name;
      if (name == "sum" || name == "var" || name == "amax" || name == "norm2")
        check_case(c, x, {d}, false, 1e-11, 1e-11, "wide " + str(h.sizes()), &g);
    }
    EXPECT_TRUE(test::all_close(argmax(x, d), ref_apply(g, ref_argmax), 0, 0));
  }
}

TEST_P(Reduce, AllDTypes) {
  Tensor base = randn({7, 9}, DType::f64).mul(4.0);
  struct Tol {
    DType dtype;
    double rtol;
  };
  for (Tol t : {Tol{DType::f64, 1e-12}, Tol{DType::f32, 1e-5}, Tol{DType::f16, 2e-3},
                Tol{DType::bf16, 1.6e-2}}) {
    // The reference sees the same rounded inputs; the tolerance covers the output rounding.
    Tensor x = on_dev(base.to(t.dtype));
    for (const Case& c : all_cases())
      for (const Shape& dims : dim_subsets(2)) {
        Tensor y = c.op(x, dims, false);
        EXPECT_EQ(y.dtype(), t.dtype) << c.name;
        check_case(c, x, dims, false, t.rtol, t.rtol, dtype_name(t.dtype));
      }
  }
  // Integer and bool inputs: sum is i64 and exact, amax/amin keep the dtype.
  Tensor ints = randint(-50, 50, {6, 5});
  for (DType dt : {DType::i64, DType::i32, DType::u8, DType::b8}) {
    Tensor src = dt == DType::u8 ? ints.abs() : ints;
    Tensor x = on_dev(dt == DType::b8 ? src.gt(0) : src.to(dt));
    for (const Shape& dims : dim_subsets(2)) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " dims " + str(dims));
      Groups g = group(x.to(Device::cpu(), DType::f64), dims, false);
      Tensor s = sum(x, dims);
      EXPECT_EQ(s.dtype(), DType::i64);
      EXPECT_TRUE(test::all_close(s, ref_apply(g, ref_sum), 0, 0));
      Tensor mx = amax(x, dims), mn = amin(x, dims);
      EXPECT_EQ(mx.dtype(), dt);
      EXPECT_TRUE(test::all_close(mx, ref_apply(g, ref_max), 0, 0));
      EXPECT_TRUE(test::all_close(mn, ref_apply(g, ref_min), 0, 0));
      if (dims.size() == 1) {
        EXPECT_TRUE(test::all_close(argmax(x, dims[0]), ref_apply(g, ref_argmax), 0, 0));
        EXPECT_TRUE(test::all_close(max(x, dims[0]).values, ref_apply(g, ref_max), 0, 0));
      }
    }
  }
}

// The CPU driver widens f16 with its own branch-free conversion: check it on every value.
TEST_P(Reduce, EveryF16ValueWidensExactly) {
  std::vector<float> all;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = Half::to_float(uint16_t(b));
    if (std::isfinite(f)) all.push_back(f);
  }
  const int64_t n = int64_t(all.size());
  Tensor h = on_dev(tensor(all, {n, 1}).to(DType::f16));
  EXPECT_TRUE(test::all_close(h.sum({1}), h.view({n}), 0, 0));  // one element per output
  EXPECT_TRUE(test::all_close(amax(h, {1}), h.view({n}), 0, 0));
  Tensor h16 = h.view({n / 16, 16});
  EXPECT_TRUE(test::all_close(amax(h16, {1}), amax(h16.to(DType::f32), {1}), 0, 0));
  EXPECT_TRUE(test::all_close(h16.sum({1}), h16.to(DType::f32).sum({1}).to(DType::f16), 0, 0));
  Tensor special = on_dev(tensor<float>({INFINITY, -INFINITY, NAN}, {3, 1}).to(DType::f16));
  EXPECT_TRUE(test::all_close(special.sum({1}), {kInf, -kInf, kNaN}, 0, 0));
  EXPECT_TRUE(test::all_close(amin(special, {1}), {kInf, -kInf, kNaN}, 0, 0));
  EXPECT_TRUE(test::all_close(on_dev(tensor<float>({INFINITY, -60000}).to(DType::f16)).sum(), {kInf}, 0, 0));
}

TEST_P(Reduce, IntegerSumIsI64AndDoesNotOverflow) {
  Tensor x = on_dev(full({3, 1000}, 2000000000, DType::i32));
  Tensor s = x.sum({1});
  EXPECT_EQ(s.dtype(), DType::i64);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>(3, int64_t(2000000000) * 1000)));
  Tensor b = on_dev(tensor<float>({1, 0, 2, 0, 0, 3}, {6}).ne(0.0f));
  EXPECT_EQ(b.sum().dtype(), DType::i64);
  EXPECT_EQ(b.sum().item<int64_t>(), 3);
}

TEST_P(Reduce, LargeSumsAreAccurate) {
  const int64_t n = 1000000;
  // f32: naive f32 accumulation of 1e6 x 0.1f is off by about 1%.
  Tensor x = on_dev(full({n}, 0.1, DType::f32));
  const double exact = double(n) * double(0.1f);
  EXPECT_NEAR(x.sum().item<double>(), exact, exact * 1e-7);
  EXPECT_NEAR(x.mean().item<double>(), double(0.1f), 1e-8);
  EXPECT_NEAR(x.view({1000, 1000}).sum({0}).sum().item<double>(), exact, exact * 1e-6);
  EXPECT_NEAR(x.view({n / 2, 2}).sum({0}).to_vector<double>()[0], exact / 2, exact * 1e-7);
  // f16 mean: an f16 accumulator would stall at 2048.
  Tensor h = on_dev(full({n}, 0.5, DType::f16));
  EXPECT_EQ(h.mean().item<double>(), 0.5);
  EXPECT_EQ(h.view({n / 4, 4}).mean({0}).to_vector<double>(), std::vector<double>(4, 0.5));
  Tensor bf = on_dev(ones({n}, DType::bf16));
  EXPECT_EQ(bf.sum().item<double>(), double(float(BFloat16(1e6f))));
  // f64: pairwise summation against a compensated (Kahan) reference.
  Tensor r = randn({n}, DType::f64).add(1.0);
  auto v = r.to_vector<double>();
  double s = 0, comp = 0;
  for (double a : v) {
    double y = a - comp, t = s + y;
    comp = (t - s) - y;
    s = t;
  }
  EXPECT_NEAR(on_dev(r).sum().item<double>(), s, std::fabs(s) * 1e-14);
  EXPECT_NEAR(on_dev(r).view({n / 8, 8}).sum({0}).sum().item<double>(), s, std::fabs(s) * 1e-13);
  // var of data with a large offset: two-pass accuracy (a one-pass E[x^2]-E[x]^2 loses it all).
  Tensor off = on_dev(randn({n}, DType::f32).add(1e4));
  Groups g = group(off.to(Device::cpu(), DType::f64), {}, false);
  EXPECT_NEAR(off.var().item<double>(), ref_var(1, false)(g.vals[0]), 1e-5);
}

TEST_P(Reduce, DeterministicAcrossThreadCounts) {
  if (dev().is_cuda()) GTEST_SKIP() << "OpenMP thread counts are a CPU matter";
  // f64 results show any change in summation order; f32 ones would mostly round it away.
  Tensor rows = randn({3, 100000}, DType::f64);
  Tensor cols = randn({100000, 3}, DType::f64);
  Tensor mid = randn({64, 1000, 16}, DType::f64);
  Tensor rows32 = rows.to(DType::f32);
  auto run = [&] {
    return TensorList{rows.sum({1}),   rows.sum(),       cols.sum({0}),     cols.sum(),
                      rows.var({1}),   cols.std({0}),    rows.norm(2, {1}), cols.norm(3, {0}),
                      cols.mean({0}),  mid.sum({1}),     mid.sum({0, 1}),   mid.var({0, 2}),
                      mid.sum(),       argmax(rows, 1),  max(cols, 0).values,
                      rows32.sum({1}), rows32.var({1}),  rows.to(DType::bf16).sum({1})};
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  TensorList one = run();
  omp_set_num_threads(2);
  TensorList two = run();
  omp_set_num_threads(3);
  TensorList three = run();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_TRUE(bit_equal(one[i], two[i])) << "result " << i;
    EXPECT_TRUE(bit_equal(one[i], three[i])) << "result " << i;
  }
}

TEST_P(Reduce, EmptyAndScalarInputs) {
  Tensor e = on_dev(zeros({3, 0}));
  EXPECT_TRUE(test::all_close(e.sum({1}), {0, 0, 0}));
  EXPECT_EQ(e.sum({0}).sizes(), Shape({0}));
  EXPECT_TRUE(test::all_close(e.mean({1}), {kNaN, kNaN, kNaN}));
  EXPECT_TRUE(test::all_close(e.norm(2, {1}), {0, 0, 0}));
  EXPECT_EQ(amax(e, {0}).sizes(), Shape({0}));  // nothing reduced over an empty dim
  Tensor s = on_dev(scalar_tensor(2.5, DType::f32));
  EXPECT_TRUE(test::all_close(s.sum(), {2.5}));
  EXPECT_TRUE(test::all_close(s.sum({0}), {2.5}));
  EXPECT_EQ(s.sum({0}).dim(), 0);
  EXPECT_TRUE(test::all_close(s.max(), {2.5}));
  EXPECT_EQ(max(s, 0).indices.item<int64_t>(), 0);
  EXPECT_EQ(argmax(s).item<int64_t>(), 0);
  EXPECT_TRUE(test::all_close(on_dev(ones({1})).var(), {kNaN}));  // n - correction == 0
}

// Error messages start with the op's name, and the error type says what was wrong.
template <class E, class F>
void expect_error(F f, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[" + op + "]", 0), 0u) << e.what();
  }
}

TEST_P(Reduce, BadInputsThrow) {
  Tensor x = on_dev(randn({2, 3}));
  Tensor i = on_dev(randint(0, 5, {2, 3}));
  expect_error<IndexError>([&] { x.sum({2}); }, "sum");
  expect_error<IndexError>([&] { x.sum({-3}); }, "sum");
  expect_error<ValueError>([&] { x.sum({1, -1}); }, "sum");
  expect_error<IndexError>([&] { max(x, 5); }, "max");
  expect_error<IndexError>([&] { argmin(x, -3); }, "argmin");
  expect_error<DTypeError>([&] { i.mean(); }, "mean");
  expect_error<DTypeError>([&] { i.var(); }, "var");
  expect_error<DTypeError>([&] { i.std(); }, "std");
  expect_error<DTypeError>([&] { i.norm(); }, "norm");
  Tensor e = on_dev(zeros({0, 3}));
  expect_error<IndexError>([&] { e.max(); }, "amax");
  expect_error<IndexError>([&] { amin(e, {0}); }, "amin");
  expect_error<IndexError>([&] { max(e, 0); }, "max");
  expect_error<IndexError>([&] { argmax(e); }, "argmax");
  expect_error<IndexError>([&] { e.norm(kInf); }, "norm");
  // Every one of these is an ember::Error.
  EXPECT_THROW(i.mean(), Error);
}

INSTANTIATE_TEST_SUITE_P(Devices, Reduce, ::testing::ValuesIn(test::test_devices()),
                         test::device_label);

// ---------------------------------------------------------------- CUDA against the CPU path
//
// The same reductions on both devices from the same (rounded) inputs. Tolerances, relative,
// with an absolute floor of the same size times max(1, largest |expected| value) (so sums
// that cancel to near zero are judged on the scale of their terms, and the variance of equal
// values, 0 on one device and 1e-32 on the other, passes):
//   f64 1e-12, f32 2e-6 (both devices accumulate f32 in f64; only the order differs),
//   f16 2e-3 and bf16 1.6e-2 (CUDA accumulates 16-bit inputs in f32, the CPU in f64: at most
//   about one unit of the output's last place apart). Integer results and every value or
//   index of amax/amin/max/min/argmax/argmin must be equal (they are exact).

namespace {

double cuda_rtol(DType dt) {
  switch (dt) {
    case DType::f64: return 1e-12;
    case DType::f32: return 2e-6;
    case DType::f16: return 2e-3;
    case DType::bf16: return 1.6e-2;
    default: return 0;
  }
}

double max_abs_finite(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>())
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m;
}

::testing::AssertionResult close_to_cpu(const Tensor& cuda_result, const Tensor& cpu_result,
                                        double rtol) {
  if (!cuda_result.device().is_cuda())
    return ::testing::AssertionFailure() << "the CUDA result lives on " << cuda_result.device().str();
  if (cuda_result.dtype() != cpu_result.dtype())
    return ::testing::AssertionFailure() << "dtype " << dtype_name(cuda_result.dtype()) << " vs "
                                         << dtype_name(cpu_result.dtype());
  if (cuda_result.sizes() != cpu_result.sizes())
    return ::testing::AssertionFailure() << "shape " << str(cuda_result.sizes()) << " vs "
                                         << str(cpu_result.sizes());
  return test::all_close(cuda_result.to(Device::cpu()), cpu_result, rtol,
                         rtol * std::max(1.0, max_abs_finite(cpu_result)));
}

// Fresh random layouts of odd sizes: contiguous, transposed, strided slices, expanded.
std::vector<std::pair<std::string, Tensor>> cuda_layouts(const Shape& shape) {
  Tensor base = randn(shape, DType::f64).mul(3.0).add(0.25);
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(4);  // (also keeps GCC 12's -Warray-bounds false positive on push_back away)
  out.emplace_back("contiguous " + str(shape), base);
  if (base.dim() >= 2) {
    out.push_back({"transposed " + str(shape), base.transpose(0, base.dim() - 1)});
    if (shape[0] > 2) out.push_back({"step-sliced " + str(shape), base.slice(0, 0, shape[0], 2)});
    out.push_back({"expanded " + str(shape),
                   base.select(0, 0).unsqueeze(0).expand(base.sizes())});
  }
  return out;
}

}  // namespace

TEST(ReduceCuda, EveryOpAndDTypeMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  // 1, 31, 1025: odd sizes around the warp and block widths; 3 x 1025 / 1025 x 3: rows and
  // narrow columns; 7 x 31 x 5: every rows/columns/copy layout of the front.
  for (const Shape& shape : {Shape{1}, Shape{31}, Shape{1025}, Shape{3, 1025}, Shape{1025, 3},
                             Shape{7, 31, 5}}) {
    for (auto& [name, host] : cuda_layouts(shape)) {
      for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
        Tensor cpu_x = host.to(dt);
        Tensor gpu_x = cpu_x.to(gpu);
        for (const Case& c : all_cases())
          for (const Shape& dims : dim_subsets(host.dim())) {
            SCOPED_TRACE(str(c.name, " ", dtype_name(dt), " ", name, " dims ", dims));
            EXPECT_TRUE(close_to_cpu(c.op(gpu_x, dims, false), c.op(cpu_x, dims, false), cuda_rtol(dt)));
          }
      }
    }
  }
}

// Rows longer than a block and split into segments (two-pass), tall columns split likewise,
// and a middle dim reduced between kept dims.
TEST(ReduceCuda, LongRowsAndTallColumnsMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  struct Big {
    Shape shape;
    Shape dims;
  };
  for (const Big& b : {Big{{2, 70001}, {1}}, Big{{70001, 3}, {0}}, Big{{300001}, {}},
                       Big{{5, 3000, 7}, {1}}, Big{{1030, 1025}, {0}}, Big{{1025, 1030}, {1}},
                       Big{{40, 2049}, {}}}) {
    Tensor host = randn(b.shape, DType::f64).add(0.5);
    for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      Tensor cpu_x = host.to(dt), gpu_x = cpu_x.to(gpu);
      for (const Case& c : all_cases()) {
        SCOPED_TRACE(str(c.name, " ", dtype_name(dt), " ", b.shape, " dims ", b.dims));
        EXPECT_TRUE(close_to_cpu(c.op(gpu_x, b.dims, false), c.op(cpu_x, b.dims, false), cuda_rtol(dt)));
      }
      if (b.dims.size() == 1) {
        auto g = max(gpu_x, b.dims[0]), h = max(cpu_x, b.dims[0]);
        EXPECT_TRUE(close_to_cpu(g.values, h.values, 0));
        EXPECT_TRUE(close_to_cpu(g.indices, h.indices, 0));
      }
      EXPECT_EQ(argmin(gpu_x).item<int64_t>(), argmin(cpu_x).item<int64_t>());
    }
  }
}

// Integer and bool sums (exact, i64), extrema and arg reductions on every dtype, exact;
// 16-bit rounding makes ties common, so the first-index rule is exercised.
TEST(ReduceCuda, IntegerAndArgReductionsAreExact) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Shape& shape : {Shape{31}, Shape{3, 1025}, Shape{1025, 3}, Shape{7, 31, 5}}) {
    Tensor ints = randint(-50, 50, shape);
    Tensor reals = randn(shape, DType::f64).mul(2.0);
    for (DType dt : {DType::i64, DType::i32, DType::u8, DType::b8, DType::f64, DType::f32,
                     DType::f16, DType::bf16}) {
      Tensor cpu_x = dt == DType::b8    ? ints.gt(0)
                     : dt == DType::u8  ? ints.abs().to(dt)
                     : is_floating(dt)  ? reals.to(dt)
                                        : ints.to(dt);
      for (Tensor cx : {cpu_x, cpu_x.transpose(0, cpu_x.dim() - 1)}) {
        Tensor gx = cx.to(gpu);
        for (const Shape& dims : dim_subsets(cx.dim())) {
          SCOPED_TRACE(str(dtype_name(dt), " ", cx.sizes(), " dims ", dims));
          if (!is_floating(dt)) {
            EXPECT_TRUE(close_to_cpu(sum(gx, dims), sum(cx, dims), 0));
          }
          EXPECT_TRUE(close_to_cpu(amax(gx, dims), amax(cx, dims), 0));
          EXPECT_TRUE(close_to_cpu(amin(gx, dims, true), amin(cx, dims, true), 0));
        }
        for (int64_t d = 0; d < cx.dim(); ++d) {
          SCOPED_TRACE(str(dtype_name(dt), " ", cx.sizes(), " dim ", d));
          auto g = max(gx, d), h = max(cx, d);
          EXPECT_TRUE(close_to_cpu(g.values, h.values, 0));
          EXPECT_TRUE(close_to_cpu(g.indices, h.indices, 0));
          auto gm = min(gx, d, true), hm = min(cx, d, true);
          EXPECT_TRUE(close_to_cpu(gm.values, hm.values, 0));
          EXPECT_TRUE(close_to_cpu(gm.indices, hm.indices, 0));
          EXPECT_TRUE(close_to_cpu(argmax(gx, d), argmax(cx, d), 0));
        }
        EXPECT_EQ(argmax(gx).item<int64_t>(), argmax(cx).item<int64_t>());
        EXPECT_EQ(argmin(gx).item<int64_t>(), argmin(cx).item<int64_t>());
      }
    }
  }
}

// NaN anywhere makes amax/amin/max/min and the inf-norms NaN; the arg reductions report
// the first NaN; sums propagate it. Checked on short rows, long (segmented) rows and columns.
TEST(ReduceCuda, NaNSemanticsMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  for (const Shape& shape : {Shape{6, 31}, Shape{3, 40000}, Shape{40000, 3}}) {
    std::vector<double> v = randn(shape, DType::f64).to_vector<double>();
    const size_t n = v.size();
    for (size_t i : {size_t(5), n / 3, n / 3 + 7, n - 2}) v[i] = std::numeric_limits<double>::quiet_NaN();
    Tensor host = tensor<double>(v, shape);
    for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
      Tensor cx = host.to(dt), gx = cx.to(gpu);
      for (int64_t d : {0, 1}) {
        SCOPED_TRACE(str(dtype_name(dt), " ", shape, " dim ", d));
        EXPECT_TRUE(close_to_cpu(amax(gx, {d}), amax(cx, {d}), 0));
        EXPECT_TRUE(close_to_cpu(amin(gx, {d}), amin(cx, {d}), 0));
        EXPECT_TRUE(close_to_cpu(norm(gx, kInf, {d}), norm(cx, kInf, {d}), 0));
        EXPECT_TRUE(close_to_cpu(argmax(gx, d), argmax(cx, d), 0));
        EXPECT_TRUE(close_to_cpu(min(gx, d).indices, min(cx, d).indices, 0));
        EXPECT_TRUE(close_to_cpu(sum(gx, {d}), sum(cx, {d}), cuda_rtol(dt)));
      }
      EXPECT_EQ(argmax(gx).item<int64_t>(), argmax(cx).item<int64_t>());
    }
  }
}

// No atomics: the same inputs give bit-identical results on every run (f64 and f32 results
// would show any change of summation order).
TEST(ReduceCuda, RunsAreBitIdentical) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  Tensor rows = randn({3, 200000}, TensorOptions(DType::f64).device(gpu));
  Tensor cols = randn({200000, 3}, TensorOptions(DType::f64).device(gpu));
  Tensor mid = randn({16, 5000, 9}, TensorOptions(DType::f32).device(gpu));
  Tensor flat = randn({1000003}, TensorOptions(DType::f32).device(gpu));
  auto run = [&] {
    return TensorList{rows.sum({1}),        rows.sum(),         cols.sum({0}),
                      cols.var({0}),        rows.std({1}),      rows.norm(3, {1}),
                      mid.sum({1}),         mid.var({0, 2}),    mid.mean(),
                      flat.sum(),           flat.var(),         flat.to(DType::bf16).sum(),
                      argmax(rows, 1),      max(cols, 0).values, argmin(flat)};
  };
  TensorList a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bit_equal(a[i], b[i])) << "result " << i;
}

// ember::set_num_threads is the bound OpenMP's regions (ember's kernels, Eigen's GEMMs) take on
// the calling thread, as torch.set_num_threads.
TEST(Threads, SetNumThreadsBoundsTheCallersParallelRegions) {
  const int saved = get_num_threads();
  for (int n : {1, 2, 3}) {
    set_num_threads(n);
    EXPECT_EQ(get_num_threads(), n);
    int team = 0;
#pragma omp parallel
    {
#pragma omp single
      team = omp_get_num_threads();
    }
    EXPECT_EQ(team, n);
  }
  set_num_threads(saved);
  EXPECT_EQ(test::message_of<ValueError>([] { set_num_threads(0); }),
            "[set_num_threads] the number of threads must be at least 1, got 0");
  EXPECT_EQ(get_num_threads(), saved);
}
