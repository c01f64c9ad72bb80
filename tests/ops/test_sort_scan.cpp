// Sort, topk, scans, flip/roll, logsumexp, any/all and the elementwise math of the sort/scan
// slice: every op against an independent reference (std::stable_sort with NaN as the largest
// value, f64 loops by index arithmetic, <cmath>), over dims, directions, ties, NaN, every dtype
// and non-contiguous layouts (permuted, sliced), empty and size-1 dims, k = 0 and k = n; the
// values PyTorch itself decides (tensor_ops_reference.txt from make_tensor_ops_fixtures.py);
// and CUDA bodies compared with the CPU (skipped without a GPU).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <sstream>

#include "support/attention_check.h"  // unit_roundoff
#include "support/test_support.h"

using namespace ember;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

// Element-for-element equality, NaN equal to NaN (and -0.0 to 0.0).
::testing::AssertionResult same(const Tensor& a, const std::vector<double>& e) {
  auto v = vals(a);
  if (v.size() != e.size())
    return ::testing::AssertionFailure() << "size " << v.size() << " vs " << e.size();
  for (size_t i = 0; i < v.size(); ++i) {
    const bool ok = (std::isnan(v[i]) && std::isnan(e[i])) || v[i] == e[i];
    if (!ok) return ::testing::AssertionFailure() << "at " << i << ": " << v[i] << " vs " << e[i];
  }
  return ::testing::AssertionSuccess();
}
::testing::AssertionResult same(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return ::testing::AssertionFailure() << str(a.sizes(), " vs ", b.sizes());
  if (a.dtype() != b.dtype()) return ::testing::AssertionFailure() << str(a.dtype(), " vs ", b.dtype());
  return same(a, vals(b));
}

// Row geometry of reducing/sorting along d: element (o, j, i) is at (o * n + j) * inner + i.
struct Rows {
  int64_t outer = 1, n = 1, inner = 1;
  Rows(const Shape& s, int64_t d) {
    for (int64_t i = 0; i < int64_t(s.size()); ++i) {
      if (i < d) outer *= s[size_t(i)];
      else if (i == d) n = s[size_t(i)];
      else inner *= s[size_t(i)];
    }
  }
  int64_t at(int64_t o, int64_t j, int64_t i) const { return (o * n + j) * inner + i; }
};

// The stable order with NaN largest (Note [sort order]); -0.0 == 0.0 ties.
bool ref_before(double a, double b, bool desc) {
  const bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) return desc ? (an && !bn) : (!an && bn);
  return desc ? a > b : a < b;
}

// Expected values and indices of sort (k = n) or topk along d, in the result's row-major order.
std::pair<std::vector<double>, std::vector<double>> ref_sort(const Tensor& x, int64_t d, bool desc,
                                                              int64_t k = -1) {
  auto v = vals(x);
  Rows r(x.sizes(), d);
  if (k < 0) k = r.n;
  std::vector<double> ov(size_t(r.outer * k * r.inner)), oi(ov.size());
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.inner; ++i) {
      std::vector<int64_t> idx(size_t(r.n));
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
        return ref_before(v[size_t(r.at(o, a, i))], v[size_t(r.at(o, b, i))], desc);
      });
      for (int64_t j = 0; j < k; ++j) {
        const size_t out = size_t((o * k + j) * r.inner + i);
        ov[out] = v[size_t(r.at(o, idx[size_t(j)], i))];
        oi[out] = double(idx[size_t(j)]);
      }
    }
  return {ov, oi};
}

// [4, 9, 5] inputs with many ties (and NaNs for floating dtypes) in three layouts.
std::vector<std::pair<std::string, Tensor>> tie_inputs(DType dt, Device dev = Device::cpu()) {
  Generator g(11);
  auto make = [&](const Shape& s) {
    Tensor t = randint(-2, 3, s, TensorOptions(DType::i64), &g).to(Device::cpu(), DType::f64);
    if (is_floating(dt)) {
      Tensor nan_at = rand(s, DType::f64, &g).lt(0.12);
      t = t.masked_fill(nan_at, kNaN);
      t = t.masked_fill(rand(s, DType::f64, &g).lt(0.05), -0.0);
    }
    if (dt == DType::u8 || dt == DType::b8) t = t.add(2);
    return t.to(dev, dt);
  };
  Tensor c = make({4, 9, 5});
  Tensor p = make({5, 9, 4}).permute({2, 1, 0});
  Tensor s = make({4, 18, 5}).slice(1, 0, 18, 2);
  return {{"contiguous", c}, {"permuted", p}, {"sliced", s}};
}

const std::vector<DType> kSortDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                        DType::i64, DType::i32, DType::u8,  DType::b8};

}  // namespace

// ---- sort, argsort, topk ----

TEST(Sort, MatchesStableReferenceEveryDtypeLayoutDimDirection) {
  for (DType dt : kSortDtypes)
    for (auto& [layout, x] : tie_inputs(dt))
      for (int64_t d : {0, 1, 2, -1})
        for (bool desc : {false, true}) {
          SCOPED_TRACE(str(dt, " ", layout, " dim ", d, desc ? " descending" : ""));
          auto [ev, ei] = ref_sort(x, d < 0 ? d + 3 : d, desc);
          ValuesIndices r = sort(x, d, desc);
          EXPECT_EQ(r.values.sizes(), x.sizes());
          EXPECT_EQ(r.values.dtype(), dt);
          EXPECT_EQ(r.indices.dtype(), DType::i64);
          EXPECT_TRUE(r.values.is_contiguous());
          EXPECT_TRUE(same(r.values, ev));
          EXPECT_TRUE(same(r.indices, ei));
          EXPECT_TRUE(same(argsort(x, d, desc, /*stable=*/true), r.indices));
          // Ember's sort is always stable, the stable flag changes nothing.
          EXPECT_TRUE(same(x.sort(d, desc, true).indices, ei));
        }
}

TEST(Sort, NanIsLargestAndNegativeZeroTiesWithZero) {
  Tensor x = tensor(std::vector<double>{2, kNaN, -0.0, 0.0, -kInf, kNaN, kInf, 0.0}, {8});
  ValuesIndices a = sort(x);
  EXPECT_TRUE(same(a.values, {-kInf, -0.0, 0.0, 0.0, 2, kInf, kNaN, kNaN}));
  EXPECT_TRUE(same(a.indices, {4, 2, 3, 7, 0, 6, 1, 5}));
  EXPECT_TRUE(std::signbit(vals(a.values)[1]));  // the element itself, not a rebuilt key
  ValuesIndices dsc = x.sort(0, true);
  EXPECT_TRUE(same(dsc.indices, {1, 5, 6, 0, 2, 3, 7, 4}));
}

TEST(Sort, EmptySizeOneAndZeroDim) {
  Tensor e = zeros({3, 0});
  EXPECT_EQ(sort(e, 1).values.sizes(), (Shape{3, 0}));
  EXPECT_EQ(sort(e, 0).indices.sizes(), (Shape{3, 0}));
  EXPECT_EQ(topk(e, 0, 1).values.sizes(), (Shape{3, 0}));
  EXPECT_EQ(topk(zeros({0, 4}), 2, 1).indices.sizes(), (Shape{0, 2}));
  Tensor one = tensor(std::vector<double>{3, 1, 2}, {1, 3, 1});
  EXPECT_TRUE(same(sort(one, 0).values, {3, 1, 2}));
  EXPECT_TRUE(same(sort(one, 2).indices, {0, 0, 0}));
  EXPECT_TRUE(same(sort(one, 1).indices, {1, 2, 0}));
  Tensor s = scalar_tensor(5.0);
  ValuesIndices r = sort(s);
  EXPECT_EQ(r.values.dim(), 0);
  EXPECT_EQ(r.values.item<double>(), 5.0);
  EXPECT_EQ(r.indices.item<int64_t>(), 0);
  EXPECT_EQ(topk(s, 1).values.item<double>(), 5.0);
  EXPECT_EQ(topk(s, 0).values.numel(), 0);
}

TEST(Sort, Errors) {
  Tensor x = zeros({2, 5});
  EXPECT_NE(test::message_of<IndexError>([&] { topk(x, 6); }).find("[topk] k = 6"), std::string::npos);
  EXPECT_NE(test::message_of<IndexError>([&] { topk(x, -1); }).find("[topk]"), std::string::npos);
  EXPECT_NE(test::message_of<IndexError>([&] { sort(x, 2); }).find("[sort]"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { sort(Tensor()); }).find("[sort]"), std::string::npos);
}

TEST(Topk, FirstKOfTheOrderForEveryK) {
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::i64, DType::u8})
    for (auto& [layout, x] : tie_inputs(dt))
      for (int64_t d : {0, 1, 2})
        for (bool largest : {true, false})
          for (int64_t k : {int64_t(0), int64_t(1), int64_t(3), x.sizes()[size_t(d)]}) {
            SCOPED_TRACE(str(dt, " ", layout, " dim ", d, " k ", k, largest ? " largest" : " smallest"));
            auto [ev, ei] = ref_sort(x, d, largest, k);
            ValuesIndices r = x.topk(k, d, largest);
            Shape es = x.sizes();
            es[size_t(d)] = k;
            EXPECT_EQ(r.values.sizes(), es);
            EXPECT_TRUE(same(r.values, ev));
            EXPECT_TRUE(same(r.indices, ei));
            EXPECT_TRUE(same(topk(x, k, d, largest, /*sorted=*/false).indices, ei));
          }
}

TEST(Topk, LongRowsEveryPath) {
  // Long rows, k from the streaming heap (k * 64 <= n) to nth_element and the full sort, with
  // distinct values and with heavy ties; 2% NaN, more NaNs than k in a row for the small k.
  Generator g(5);
  Tensor mask = rand({3, 3000}, DType::f32, &g).lt(0.02);
  Tensor distinct = randn({3, 3000}, DType::f32, &g).masked_fill(mask, kNaN);
  Tensor ties = randint(0, 10, {3, 3000}, TensorOptions(DType::i64), &g).to(Device::cpu(), DType::f32).masked_fill(mask, kNaN);
  for (auto& [what, x] : std::vector<std::pair<std::string, Tensor>>{{"distinct", distinct}, {"ties", ties}})
    for (int64_t k : {1, 40, 50, 3000})
      for (bool largest : {true, false}) {
        SCOPED_TRACE(str(what, " k ", k, largest ? " largest" : " smallest"));
        auto [ev, ei] = ref_sort(x, 1, largest, k);
        ValuesIndices r = topk(x, k, 1, largest);
        EXPECT_TRUE(same(r.values, ev));
        EXPECT_TRUE(same(r.indices, ei));
      }
}

// ---- scans ----

namespace {
std::vector<double> ref_scan(const Tensor& x, int64_t d, bool prod) {
  auto v = vals(x);
  Rows r(x.sizes(), d);
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < r.outer; ++o)
    for (int64_t i = 0; i < r.inner; ++i) {
      double acc = prod ? 1 : 0;
      for (int64_t j = 0; j < r.n; ++j) {
        acc = prod ? acc * v[size_t(r.at(o, j, i))] : acc + v[size_t(r.at(o, j, i))];
        out[size_t(r.at(o, j, i))] = acc;
      }
    }
  return out;
}

// The bound on |a - b| of two inclusive scans of x along d (x already rounded to its dtype)
// that accumulate with unit roundoffs u_a and u_b and round each element to x's dtype. Each is
// within (1.01 k u S_k) of the exact scan at position k (1-based), S_k the sum of |x_j| (cumsum:
// any summation order) or |prod x_j| (cumprod: every product of k factors), plus its own
// rounding to the output dtype (u_out of that value) and, where values reach the output's
// subnormals, its smallest step; products accumulated in f32 also lose k f32 subnormal steps.
// The CPU accumulates floating scans in double; the GPU 16-bit ones in f32 (ops/cuda/sort.cu).
// Per element, so the late, decayed elements of a long product are checked as tightly as the
// first ones (issue 40, item 5).
Tensor scan_bound(const Tensor& x, int64_t d, bool prod, double u_a, double u_b, const Tensor& a,
                  const Tensor& b) {
  const DType dt = x.dtype();
  const Tensor x64 = x.to(Device::cpu(), DType::f64);
  const Tensor s = prod ? cumprod(x64, d).abs() : cumsum(x64.abs(), d);
  Shape along(size_t(x.dim()), 1);
  along[size_t(d)] = x.size(d);
  const Tensor k = arange(1, x.size(d) + 1, 1, TensorOptions(DType::f64)).reshape(along);
  const double tiny_out = dt == DType::f16 ? std::ldexp(1.0, -24)
                          : dt == DType::bf16 ? std::ldexp(1.0, -133)
                          : dt == DType::f32 ? std::ldexp(1.0, -149)
                                             : std::numeric_limits<double>::denorm_min();
  const double tiny_f32 = std::ldexp(1.0, -149);
  Tensor bound = k.mul(1.01 * (u_a + u_b)).mul(s)
                     .add(a.to(Device::cpu(), DType::f64).abs().add(b.to(Device::cpu(), DType::f64).abs())
                              .mul(unit_roundoff(dt)))
                     .add(2 * tiny_out);
  if (prod) bound = bound.add(k.mul(2 * tiny_f32));
  return bound;
}

// The accumulator's unit roundoff of a floating scan on the CPU (double) and on the GPU.
double cpu_scan_roundoff(DType) { return std::ldexp(1.0, -53); }
double cuda_scan_roundoff(DType dt) {
  return dt == DType::f16 || dt == DType::bf16 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
}
}  // namespace

TEST(Scan, CumsumCumprodMatchReference) {
  Generator g(3);
  auto layouts = [&](DType dt) -> std::vector<std::pair<std::string, Tensor>> {
    auto make = [&](const Shape& s) {
      Tensor u = rand(s, DType::f64, &g).mul(1.0).add(0.5);  // [0.5, 1.5): products stay tame
      if (!is_floating(dt)) u = randint(-3, 4, s, TensorOptions(DType::i64), &g).to(Device::cpu(), DType::f64);
      if (dt == DType::b8) u = u.gt(0.0).to(Device::cpu(), DType::f64);
      return u.to(Device::cpu(), dt);
    };
    return {{"contiguous", make({4, 7, 5})},
            {"permuted", make({5, 7, 4}).permute({2, 1, 0})},
            {"sliced", make({4, 14, 5}).slice(1, 1, 14, 2)}};
  };
  for (DType dt : {DType::f32, DType::f64, DType::i64, DType::i32, DType::b8})
    for (auto& [layout, x] : layouts(dt))
      for (int64_t d : {0, 1, 2, -1})
        for (bool prod : {false, true}) {
          SCOPED_TRACE(str(dt, " ", layout, " dim ", d, prod ? " cumprod" : " cumsum"));
          Tensor y = prod ? x.cumprod(d) : x.cumsum(d);
          EXPECT_EQ(y.dtype(), is_floating(dt) ? dt : DType::i64);
          EXPECT_EQ(y.sizes(), x.sizes());
          EXPECT_TRUE(test::all_close(y, x.sizes(), ref_scan(x, d < 0 ? d + 3 : d, prod), 1e-6, 1e-6));
        }
}

// The per-element scan bound against the old floor from the largest value: a scan computed in
// another order (a blocked scan accumulating in f32, as the GPU's for 16-bit inputs) stays
// within it on every element, and an error of 1% at a late element of a decaying product, which
// rtol x max|value| never sees, is caught.
TEST(Scan, PerElementBoundChecksTheDecayedElements) {
  Generator g(5);
  const Tensor x = rand({1, 3000}, DType::f64, &g).add(0.5).to(Device::cpu(), DType::f32);
  const Tensor ref = cumprod(x, 1);  // accumulated in double, rounded to f32
  // Blocks of 256 scanned in f32, then multiplied by the carry of the blocks before: the
  // association a block scan uses.
  std::vector<float> xs = x.to_vector<float>(), blocked(xs.size());
  float carry = 1.0f;
  for (size_t b0 = 0; b0 < xs.size(); b0 += 256) {
    float local = 1.0f;
    for (size_t i = b0; i < std::min(xs.size(), b0 + 256); ++i) {
      local *= xs[i];
      blocked[i] = carry * local;
    }
    carry = blocked[std::min(xs.size(), b0 + 256) - 1];
  }
  Tensor other = tensor(blocked, {1, 3000});
  const double u32 = std::ldexp(1.0, -24);
  EXPECT_TRUE(test::within_bound(other, ref, scan_bound(x, 1, true, std::ldexp(1.0, -53), u32, other, ref)));
  const double late = ref.select(1, 1000).item<double>();
  ASSERT_GT(late, std::ldexp(1.0, -126));  // a normal f32 value,
  ASSERT_LT(late, 1e-12);                  // decayed 12 orders and more below the first ones
  other.select(1, 1000).fill_(late * 1.01);
  const Tensor bound = scan_bound(x, 1, true, std::ldexp(1.0, -53), u32, other, ref);
  EXPECT_FALSE(test::within_bound(other, ref, bound))
      << "bound at the changed element " << bound.select(1, 1000).item<double>() << ", value " << late;
  EXPECT_TRUE(test::all_close(other, ref, 1e-3, 1e-3 * ref.abs().max().item<double>()))
      << "the old check (rtol 1e-3 with a floor of rtol x max) would have missed it";
}

TEST(Scan, LongRowsEmptyAndZeroDim) {
  Tensor x = rand({3, 40000}, DType::f32);  // parallel and long: accumulated in double
  EXPECT_TRUE(test::all_close(cumsum(x, 1), x.sizes(), ref_scan(x, 1, false), 1e-6, 1e-6));
  EXPECT_EQ(cumsum(zeros({2, 0, 3}), 1).sizes(), (Shape{2, 0, 3}));
  EXPECT_EQ(cumprod(scalar_tensor(int64_t(4)), 0).item<int64_t>(), 4);
  EXPECT_EQ(cumsum(scalar_tensor(2.5), -1).item<double>(), 2.5);
}

// ---- flip, roll ----

TEST(FlipRoll, MatchIndexArithmetic) {
  Tensor base = arange(60, DType::f64).reshape({3, 4, 5});
  for (auto& [layout, x] : std::vector<std::pair<std::string, Tensor>>{
           {"contiguous", base}, {"permuted", arange(60, DType::f64).reshape({5, 4, 3}).permute({2, 1, 0})}}) {
    auto v = vals(x);
    auto at = [&](int64_t i, int64_t j, int64_t k) { return v[size_t((i * 4 + j) * 5 + k)]; };
    std::vector<double> f02, r12;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 5; ++k) {
          f02.push_back(at(2 - i, j, 4 - k));
          r12.push_back(at(i, ((j - 1) % 4 + 4) % 4, ((k + 7) % 5 + 5) % 5));  // shifts 1 and -7
        }
    SCOPED_TRACE(layout);
    EXPECT_TRUE(same(x.flip({0, -1}), f02));
    EXPECT_TRUE(same(roll(x, {1, -7}, {1, 2}), r12));
    EXPECT_TRUE(same(x.flip({}), v));
    std::vector<double> flat(v.size());
    for (size_t i = 0; i < v.size(); ++i) flat[(i + 3) % v.size()] = v[i];
    EXPECT_TRUE(same(x.roll({3}), flat));
    EXPECT_EQ(x.roll({3}).sizes(), x.sizes());
  }
  Tensor y = roll(base, {4}, {1});  // a full turn is a copy, never the input itself
  EXPECT_FALSE(y.is_same(base));
  EXPECT_TRUE(same(y, base));
  Tensor f = flip(base, {1});
  f.fill_(0);
  EXPECT_EQ(base.sum().item<double>(), 1770.0);  // flip copies
  EXPECT_NE(test::message_of<ValueError>([&] { flip(base, {0, -3}); }).find("[flip]"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { roll(base, {1, 2}, {0}); }).find("[roll]"), std::string::npos);
  EXPECT_EQ(flip(zeros({0, 3}), {0}).sizes(), (Shape{0, 3}));
}

// ---- logsumexp, any, all ----

TEST(Logsumexp, MatchesReferenceOverDims) {
  Generator g(8);
  Tensor x = randn({4, 3, 5}, DType::f64, &g).mul(30.0);  // exp alone would overflow in f32
  Tensor xf = x.to(Device::cpu(), DType::f32);
  auto v = vals(x);
  for (int64_t d : {0, 1, 2}) {
    Rows r(x.sizes(), d);
    std::vector<double> e;
    for (int64_t o = 0; o < r.outer; ++o)
      for (int64_t i = 0; i < r.inner; ++i) {
        double m = -kInf, s = 0;
        for (int64_t j = 0; j < r.n; ++j) m = std::max(m, v[size_t(r.at(o, j, i))]);
        for (int64_t j = 0; j < r.n; ++j) s += std::exp(v[size_t(r.at(o, j, i))] - m);
        e.push_back(m + std::log(s));
      }
    Shape ks = x.sizes();
    ks[size_t(d)] = 1;
    EXPECT_TRUE(test::all_close(logsumexp(x, {d}, true), ks, e, 1e-12, 1e-12));
    Shape rs = x.sizes();
    rs.erase(size_t(d));
    EXPECT_TRUE(test::all_close(xf.logsumexp({d}), rs, e, 1e-5, 1e-4)) << "dim " << d;
  }
  EXPECT_NEAR(logsumexp(x).item<double>(), logsumexp(x.reshape({60}), {0}).item<double>(), 1e-12);
  EXPECT_EQ(logsumexp(zeros({2, 0}), {1}).to_vector<double>(), (std::vector<double>{-kInf, -kInf}));
  EXPECT_EQ(logsumexp(arange(3), {0}).dtype(), DType::f32);  // integers promote, as torch
}

TEST(AnyAll, ReduceToBool) {
  Tensor x = tensor(std::vector<double>{0, 0, 1, kNaN, 0, 0, 2, 3, 0, 0, 0, 0}, {3, 4});
  EXPECT_TRUE(same(x.any({1}), {1, 1, 0}));
  EXPECT_TRUE(same(x.all({0}), {0, 0, 0, 0}));
  EXPECT_TRUE(same(x.t().contiguous().t().any({0}, true), {0, 0, 1, 1}));
  EXPECT_TRUE(same(tensor(std::vector<double>{0, kNaN, 0}, {3}).any(), {1}));  // NaN is true
  EXPECT_TRUE(same(tensor(std::vector<double>{1, kNaN}, {2}).all(), {1}));
  EXPECT_EQ(x.any({1}).dtype(), DType::b8);
  EXPECT_EQ(any(x).item<int64_t>(), 1);
  EXPECT_EQ(all(ones({2, 3}, DType::i32)).item<int64_t>(), 1);
  EXPECT_EQ(all(x.slice(1, 2, 3, 1).slice(0, 0, 2, 1)).item<int64_t>(), 1);
  EXPECT_TRUE(same(any(zeros({2, 0}), {1}), {0, 0}));
  EXPECT_TRUE(same(all(zeros({2, 0}), {1}), {1, 1}));
  EXPECT_EQ(all(zeros({2, 0}, DType::b8), {1}).dtype(), DType::b8);
}

// ---- elementwise math ----

TEST(ElementwiseMath, MatchCmath) {
  std::vector<double> xs = {-2.5, -1.5, -0.5, -0.49, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7, 1e6 + 0.5, kNaN, kInf, -kInf};
  Tensor x = tensor(xs, {int64_t(xs.size())});
  auto map = [&](double (*f)(double)) {
    std::vector<double> e;
    for (double v : xs) e.push_back(f(v));
    return e;
  };
  EXPECT_TRUE(same(x.floor(), map([](double v) { return std::floor(v); })));
  EXPECT_TRUE(same(x.ceil(), map([](double v) { return std::ceil(v); })));
  EXPECT_TRUE(same(x.trunc(), map([](double v) { return std::trunc(v); })));
  EXPECT_TRUE(same(x.round(), map([](double v) { return std::nearbyint(v); })));  // half to even
  EXPECT_TRUE(same(x.round(), {-2, -2, -0.0, -0.0, 0, 0, 2, 2, 4, -4, 1e6, kNaN, kInf, -kInf}));
  EXPECT_TRUE(same(x.square(), map([](double v) { return v * v; })));
  std::vector<double> sn;
  for (size_t i = 0; i < 11; ++i) sn.push_back(std::sin(xs[i]));
  EXPECT_TRUE(test::all_close(x.slice(0, 0, 11).sin(), sn, 1e-15, 1e-15));
  Tensor xf = x.slice(0, 0, 11).to(Device::cpu(), DType::f32);
  std::vector<double> c;
  for (size_t i = 0; i < 11; ++i) c.push_back(std::cos(float(xs[i])));
  EXPECT_TRUE(test::all_close(xf.cos(), c, 1e-6, 1e-6));
  EXPECT_TRUE(same(x.isnan(), {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_TRUE(same(x.isinf(), {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_TRUE(same(x.isfinite(), {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(x.isnan().dtype(), DType::b8);
}

TEST(ElementwiseMath, IntegerDtypesAndHalfPrecision) {
  Tensor i = tensor(std::vector<int64_t>{-3, 0, 7}, {3});
  for (Tensor y : {i.floor(), i.ceil(), i.round(), i.trunc()}) {
    EXPECT_EQ(y.dtype(), DType::i64);
    EXPECT_TRUE(same(y, {-3, 0, 7}));
  }
  EXPECT_TRUE(same(i.square(), {9, 0, 49}));
  EXPECT_EQ(i.square().dtype(), DType::i64);
  EXPECT_EQ(i.sin().dtype(), DType::f32);
  EXPECT_TRUE(same(i.isnan(), {0, 0, 0}));
  EXPECT_TRUE(same(i.isfinite(), {1, 1, 1}));
  EXPECT_TRUE(same(i.to(Device::cpu(), DType::i32).isinf(), {0, 0, 0}));
  Tensor h = tensor(std::vector<double>{0.5, 1.5, 2.5, -2.5, 65504}, {5}).to(Device::cpu(), DType::f16);
  EXPECT_TRUE(same(h.round(), {0, 2, 2, -2, 65504}));
  EXPECT_TRUE(same(h.square().isinf(), {0, 0, 0, 0, 1}));
}

TEST(ElementwiseMath, IscloseAllclose) {
  Tensor a = tensor(std::vector<double>{1, 2, 3}, {3});
  Tensor b = tensor(std::vector<double>{1 + 1e-9, 2.1, 3}, {3});
  EXPECT_TRUE(same(isclose(a, b), {1, 0, 1}));
  EXPECT_TRUE(same(a.isclose(b, 0.1), {1, 1, 1}));
  EXPECT_FALSE(allclose(a, b));
  EXPECT_TRUE(a.allclose(b, 0.05, 0));
  // Broadcasting and integers (compared in f32, as torch).
  EXPECT_TRUE(same(isclose(a.reshape({3, 1}), b.slice(0, 0, 1)), {1, 0, 0}));
  EXPECT_TRUE(same(isclose(tensor(std::vector<int64_t>{10, 11}, {2}), tensor(std::vector<int64_t>{10, 10}, {2}), 0.1),
                   {1, 1}));
  EXPECT_NE(test::message_of<DTypeError>([&] { isclose(a, a.to(Device::cpu(), DType::f32)); }).find("[isclose]"),
            std::string::npos);
}

// ---- PyTorch's own values ----

namespace {
// The fixture lines, parsed with strtod so that nan, inf and -inf read back.
struct TorchRef {
  std::map<std::string, std::pair<Shape, std::vector<double>>> arrays;
  TorchRef() {
    std::ifstream in(std::string(EMBER_TEST_DATA_DIR) + "/tensor_ops_reference.txt");
    EXPECT_TRUE(in.good()) << "tensor_ops_reference.txt is missing";
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string name, tok;
      ls >> name;
      Shape shape;
      while (ls >> tok && tok != ":") shape.push_back(std::stoll(tok));
      std::vector<double> v;
      while (ls >> tok) v.push_back(std::strtod(tok.c_str(), nullptr));
      arrays[name] = {shape, v};
    }
  }
  Tensor operator()(const std::string& name) const {
    auto it = arrays.find(name);
    EXPECT_TRUE(it != arrays.end()) << name;
    if (it == arrays.end()) return zeros({0});
    return tensor(it->second.second, it->second.first);
  }
};
const TorchRef& torch_ref() {
  static TorchRef r;
  return r;
}
}  // namespace

TEST(TorchReference, SortTopkTiesNan) {
  const TorchRef& t = torch_ref();
  Tensor x = t("sort.x");
  for (int desc : {0, 1}) {
    ValuesIndices r = sort(x, 1, desc);
    EXPECT_TRUE(same(r.values, t(str("sort.values.desc", desc))));
    EXPECT_TRUE(same(r.indices.to(Device::cpu(), DType::f64), t(str("sort.indices.desc", desc))));
    ValuesIndices rt = sort(x.t(), 0, desc);
    EXPECT_TRUE(same(rt.values, t(str("sort.t.values.desc", desc))));
    EXPECT_TRUE(same(rt.indices.to(Device::cpu(), DType::f64), t(str("sort.t.indices.desc", desc))));
  }
  for (int largest : {0, 1})
    EXPECT_TRUE(same(topk(x, 3, 1, largest).values, t(str("topk.values.largest", largest))));
}

TEST(TorchReference, CumprodGradientWithZeros) {
  const TorchRef& t = torch_ref();
  for (int d : {0, 1}) {
    Tensor x = t("cumprod.x").requires_grad_();
    Tensor y = cumprod(x, d);
    y.mul(t("cumprod.w")).sum().backward();
    EXPECT_TRUE(test::all_close(y, t(str("cumprod.y.dim", d)), 1e-14, 1e-14));
    EXPECT_TRUE(test::all_close(x.grad(), t(str("cumprod.grad.dim", d)), 1e-12, 1e-12)) << "dim " << d;
    Tensor x2 = t("cumprod.x").requires_grad_();
    Tensor z = cumsum(x2, d);
    z.mul(t("cumprod.w")).sum().backward();
    EXPECT_TRUE(test::all_close(z, t(str("cumsum.y.dim", d)), 1e-14, 1e-14));
    EXPECT_TRUE(test::all_close(x2.grad(), t(str("cumsum.grad.dim", d)), 1e-12, 1e-12));
  }
}

TEST(TorchReference, LogsumexpInfinities) {
  const TorchRef& t = torch_ref();
  Tensor x = t("logsumexp.x").requires_grad_();
  Tensor y = logsumexp(x, {1});
  EXPECT_TRUE(same(y.isnan(), zeros({4}, DType::b8)));
  EXPECT_TRUE(test::all_close(y.masked_fill(y.isinf(), 0.0), t("logsumexp.y.dim1").masked_fill(t("logsumexp.y.dim1").isinf(), 0.0), 1e-14, 1e-14));
  EXPECT_TRUE(same(y.isinf(), t("logsumexp.y.dim1").isinf()));
  EXPECT_TRUE(same(y.gt(0.0), t("logsumexp.y.dim1").gt(0.0)));
  y.sum().backward();
  Tensor g = t("logsumexp.grad.dim1");
  EXPECT_TRUE(same(x.grad().isnan(), g.isnan()));
  EXPECT_TRUE(test::all_close(x.grad().masked_fill(g.isnan(), 0.0), g.masked_fill(g.isnan(), 0.0), 1e-12, 1e-14));
  EXPECT_TRUE(test::all_close(logsumexp(t("logsumexp.x").slice(0, 1, 4), {0}, true), t("logsumexp.y.rows1.dim0"), 1e-14, 1e-14));
}

TEST(TorchReference, RoundHalfEvenDecimals) {
  const TorchRef& t = torch_ref();
  Tensor x = t("round.x");
  EXPECT_TRUE(same(x.round(), t("round.d0")));
  EXPECT_TRUE(same(x.round(1), t("round.d1")));
  EXPECT_TRUE(same(x.round(2), t("round.d2")));
  EXPECT_TRUE(same(x.round(-1), t("round.dm1")));
  EXPECT_TRUE(same(x.to(Device::cpu(), DType::f32).round(1), t("round.f32.d1").to(Device::cpu(), DType::f32)));
}

TEST(TorchReference, Isclose) {
  const TorchRef& t = torch_ref();
  Tensor a = t("isclose.a"), b = t("isclose.b");
  EXPECT_TRUE(same(isclose(a, b), vals(t("isclose.default"))));
  EXPECT_TRUE(same(isclose(a, b, 1e-5, 1e-8, true), vals(t("isclose.equal_nan"))));
  EXPECT_TRUE(same(isclose(a, b, 0.2, 0.0), vals(t("isclose.loose"))));
}

// ---- CUDA against the CPU ----

namespace {

// The CUDA cases run in two tests by dtype: the first takes one dtype of each key width (1, 2,
// 4 and 8 bytes) through every path, the second the other dtypes through fewer shapes. The
// kernels are templates on the key type, so the first alone reaches every kernel's code (what
// compute-sanitizer's racecheck needs, at ~50x the normal run time); the second proves each
// dtype's key mapping (in the CUDA simulation it took 164 s with every path, as long as the first).
const std::vector<DType> kKeyWidthDtypes = {DType::u8, DType::f16, DType::f32, DType::i64};
const std::vector<DType> kOtherSortDtypes = {DType::f64, DType::bf16, DType::i32, DType::b8};

// Bitonic rows (up to 4096), the radix paths beyond (fewer than 32 rows: one device-wide sort
// with the row in the key's high bits, or u64 keys of one row; more rows, or several rows of
// u64 keys: the segmented sort), a non-last dim, size-1 rows.
const std::vector<std::pair<Shape, int64_t>> kEveryPath = {
    {{7, 37}, 1}, {{3, 4096}, 1}, {{2, 5000}, 1}, {{1, 6000}, 1}, {{33, 4097}, 1}, {{64, 3}, 0},
    {{5, 1}, 1}, {{2, 9, 33}, 1}, {{4100, 3}, 0}};
// A dtype's key mapping (the other dtypes share their key width's kernels): one bitonic and one
// radix shape (rows in the key for 4-byte keys, the segmented sort for 8-byte ones), a non-last
// dim; the extreme values below for each.
const std::vector<std::pair<Shape, int64_t>> kKeyMapping = {{{7, 37}, 1}, {{2, 5000}, 1}, {{64, 3}, 0}};

void expect_sort_topk_match_cpu(const std::vector<DType>& dtypes, const std::vector<std::pair<Shape, int64_t>>& cases,
                                Generator& g) {
  for (DType dt : dtypes)
    for (auto& [shape, d] : cases) {
      Tensor src = randint(-50, 50, shape, TensorOptions(DType::i64), &g).to(Device::cpu(), DType::f64);
      if (is_floating(dt)) src = src.mul(0.37).masked_fill(rand(shape, DType::f64, &g).lt(0.05), kNaN);
      if (dt == DType::u8 || dt == DType::b8) src = src.abs();
      Tensor x = src.to(Device::cpu(), dt), xc = x.to(Device::cuda());
      for (bool desc : {false, true}) {
        SCOPED_TRACE(str(dt, " ", shape, " dim ", d, desc ? " descending" : ""));
        ValuesIndices c = sort(xc, d, desc), h = sort(x, d, desc);
        EXPECT_TRUE(same(c.values.cpu(), h.values));
        EXPECT_TRUE(same(c.indices.cpu(), h.indices));
        const int64_t n = shape[size_t(d)];
        // k up to n / 4 of a row longer than 4096 selects (radix select, no sort of the row).
        for (int64_t k : {int64_t(1), std::min<int64_t>(n, 7), std::max<int64_t>(1, n / 4), n}) {
          ValuesIndices tc = topk(xc, k, d, desc), th = topk(x, k, d, desc);
          EXPECT_TRUE(same(tc.values.cpu(), th.values)) << "k " << k;
          EXPECT_TRUE(same(tc.indices.cpu(), th.indices)) << "k " << k;
        }
      }
    }
  // The extreme keys of each dtype, many times over: INT32_MAX's key equals the bitonic
  // padding's ascending key and the smallest value's its descending key (only the index
  // tie-break keeps the padding last), -0.0 ties with 0.0, +-inf, NaN, INT64 extremes. A
  // non-power-of-two row (bitonic) and a long one (radix).
  const double f16max = 65504.0;
  for (DType dt : dtypes) {
    Tensor base;
    if (is_floating(dt)) base = tensor<double>({kNaN, -0.0, 0.0, kInf, -kInf, 1.5, -1.5, f16max, -f16max, 0.0}).to(dt);
    else if (dt == DType::i64) base = tensor<int64_t>({INT64_MAX, INT64_MIN, 0, -1, 1, INT64_MAX, INT64_MIN});
    else if (dt == DType::i32) base = tensor<int64_t>({INT32_MAX, INT32_MIN, 0, -1, 1, INT32_MAX}).to(dt);
    else if (dt == DType::u8) base = tensor<int64_t>({0, 255, 1, 254, 255, 0}).to(dt);
    else base = tensor<int64_t>({0, 1, 1, 0}).to(dt);
    for (int64_t n : {int64_t(37), int64_t(4500)}) {
      const Tensor pick = randint(0, base.numel(), {3 * n}, TensorOptions(DType::i64), &g);
      const Tensor x = base.index_select(0, pick).reshape({3, n}), xc = x.cuda();
      for (bool desc : {false, true}) {
        SCOPED_TRACE(str("extremes ", dt, " n ", n, desc ? " descending" : ""));
        ValuesIndices c = sort(xc, 1, desc), h = sort(x, 1, desc);
        EXPECT_TRUE(same(c.values.cpu(), h.values));
        EXPECT_TRUE(same(c.indices.cpu(), h.indices));
        for (int64_t k : {int64_t(5), n / 4}) {  // n 4500: the radix select, ties across its chunks
          ValuesIndices tc = topk(xc, k, 1, desc), th = topk(x, k, 1, desc);
          EXPECT_TRUE(same(tc.values.cpu(), th.values)) << "k " << k;
          EXPECT_TRUE(same(tc.indices.cpu(), th.indices)) << "k " << k;
        }
      }
    }
  }
}

void expect_scans_match_cpu(const std::vector<DType>& dtypes, Generator& g) {
  for (DType dt : dtypes)
    for (const Shape& shape : {Shape{3, 1000}, Shape{4, 7, 5}, Shape{2, 70000}, Shape{1, 1}})
      for (int64_t d = 0; d < int64_t(shape.size()); ++d)
        for (bool prod : {false, true}) {
          Tensor x = rand(shape, DType::f64, &g).add(0.5);
          if (!is_floating(dt)) x = randint(-2, 3, shape, TensorOptions(DType::i64), &g);
          x = x.to(Device::cpu(), dt);
          if (dt == DType::b8) x = x.ne(0.0);
          Tensor xt = x.dim() == 3 ? x.permute({2, 0, 1}).contiguous().permute({1, 2, 0}) : x;
          SCOPED_TRACE(str(dt, " ", shape, " dim ", d, prod ? " cumprod" : " cumsum"));
          Tensor h = prod ? cumprod(xt, d) : cumsum(xt, d);
          Tensor c = prod ? cumprod(xt.cuda(), d) : cumsum(xt.cuda(), d);
          if (is_floating(dt))
            EXPECT_TRUE(test::close_to_cpu_within(
                c, h, scan_bound(xt, d, prod, cpu_scan_roundoff(dt), cuda_scan_roundoff(dt), c, h)));
          else EXPECT_TRUE(same(c.cpu(), h));  // wrapping integer arithmetic is exact
        }
}

}  // namespace

TEST(SortScanCuda, SortTopkMatchCpuExactly) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(21);
  expect_sort_topk_match_cpu(kKeyWidthDtypes, kEveryPath, g);
}

TEST(SortScanCuda, SortTopkMatchCpuExactlyOtherDtypes) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(24);
  expect_sort_topk_match_cpu(kOtherSortDtypes, kKeyMapping, g);
}

TEST(SortScanCuda, ScansMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(22);
  expect_scans_match_cpu({DType::f16, DType::f32, DType::i64}, g);
}

TEST(SortScanCuda, ScansMatchCpuOtherDtypes) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(25);
  expect_scans_match_cpu({DType::f64, DType::bf16, DType::i32, DType::b8}, g);
}

// Top-k by radix select (k <= n / 4 of a row over 4096): heavy ties across the 4096-element
// chunks of its passes (7 distinct values), u32 and u64 keys, both directions, k from 1 to n / 4,
// against the CPU's sort-based top-k exactly (values and indices: ties in index order). Small
// enough for the simulation's second warp schedule (tests/cuda_sim/second_schedule.txt), which
// reverses the lanes and warps the compaction's ballots rank.
TEST(SortScanCuda, TopkSelectsTiesInIndexOrder) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(26);
  for (DType dt : {DType::f32, DType::i64}) {
    Tensor x = randint(-3, 4, {3, 9000}, TensorOptions(DType::i64), &g).to(Device::cpu(), dt);
    Tensor xc = x.cuda();
    for (bool largest : {true, false})
      for (int64_t k : {int64_t(1), int64_t(100), int64_t(1300), int64_t(2250)}) {
        SCOPED_TRACE(str(dt, " k ", k, largest ? " largest" : " smallest"));
        ValuesIndices c = topk(xc, k, 1, largest), h = topk(x, k, 1, largest);
        EXPECT_TRUE(same(c.values.cpu(), h.values));
        EXPECT_TRUE(same(c.indices.cpu(), h.indices));
      }
  }
}

TEST(SortScanCuda, CompositesMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator g(23);
  Tensor x = randn({4, 6, 5}, DType::f32, &g).mul(3.0).masked_fill(rand({4, 6, 5}, DType::f32, &g).lt(0.05), kNaN);
  Tensor xc = x.cuda();
  EXPECT_TRUE(same(flip(xc, {0, 2}).cpu(), flip(x, {0, 2})));
  EXPECT_TRUE(same(roll(xc, {2, -1}, {1, 2}).cpu(), roll(x, {2, -1}, {1, 2})));
  EXPECT_TRUE(same(xc.roll({7}).cpu(), x.roll({7})));
  EXPECT_TRUE(same(any(xc.gt(2.0), {1}).cpu(), any(x.gt(2.0), {1})));
  EXPECT_TRUE(same(all(xc.lt(5.0), {0, 2}, true).cpu(), all(x.lt(5.0), {0, 2}, true)));
  for (auto f : {+[](const Tensor& t) { return t.floor(); }, +[](const Tensor& t) { return t.ceil(); },
                 +[](const Tensor& t) { return t.round(); }, +[](const Tensor& t) { return t.round(2); },
                 +[](const Tensor& t) { return t.trunc(); }, +[](const Tensor& t) { return t.square(); },
                 +[](const Tensor& t) { return t.isnan(); }, +[](const Tensor& t) { return t.isfinite(); }})
    EXPECT_TRUE(same(f(xc).cpu(), f(x)));
  EXPECT_TRUE(test::close_to_cpu(xc.sin(), x.sin(), 1e-5));
  EXPECT_TRUE(test::close_to_cpu(xc.cos(), x.cos(), 1e-5));
  Tensor y = x.masked_fill(x.isnan(), -kInf);
  EXPECT_TRUE(test::close_to_cpu(logsumexp(y.cuda(), {2}), logsumexp(y, {2}), 1e-5));
  EXPECT_TRUE(same(isclose(xc, xc.add(1e-6), 1e-5, 1e-8, true).cpu(), isclose(x, x.add(1e-6), 1e-5, 1e-8, true)));
}
