// Forward values of the fused nn ops (softmax, log_softmax, cross_entropy, layer_norm), each
// against (a) the composite of ember ops it replaces, computed in f64 (needs the reduce
// family), (b) a plain host loop in double, and (c) hand-computed numbers for a tiny case.
// Every dtype, softmax over each dim of 3-D tensors, non-contiguous inputs, extreme values
// and bad inputs. One body per device: CUDA cases skip without a device or without CUDA
// kernels for this family in the build.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <cstring>

#include <ember/ops/index.h>
#include <ember/ops/nn.h>

#include "support/test_support.h"

using namespace ember;

namespace {

const DType kFloatTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

struct Tol {
  double rtol, atol;
};
// Against a reference computed in double from the same (rounded) inputs: what is left is
// the compute type's error plus one rounding of the output.
Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-11, 1e-12};
    case DType::f32: return {2e-5, 2e-6};
    case DType::f16: return {2e-3, 2e-4};
    default: return {1.6e-2, 2e-3};  // bf16
  }
}

// Softmax along `dim` of row-major values with the given shape, in double.
std::vector<double> host_softmax(const std::vector<double>& v, Shape shape, int64_t dim, bool log) {
  if (shape.empty()) shape = Shape{1};
  const int64_t nd = int64_t(shape.size());
  const int64_t d = dim < 0 ? dim + nd : dim;
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= shape[i];
  for (int64_t i = d + 1; i < nd; ++i) inner *= shape[i];
  const int64_t K = shape[d];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * K + k) * inner + i); };
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < K; ++k) m = std::max(m, v[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::exp(v[at(k)] - m);
      for (int64_t k = 0; k < K; ++k)
        out[at(k)] = log ? v[at(k)] - m - std::log(s) : std::exp(v[at(k)] - m) / s;
    }
  return out;
}

struct CeRef {
  std::vector<double> rows;  // per-row loss, 0 for ignored rows
  double sum = 0, mean = 0;
};
// PyTorch's definition, row by row: loss = (1-eps) * -log p_t + eps * mean_c(-log p_c).
CeRef host_cross_entropy(const std::vector<double>& x, int64_t n, int64_t c,
                         const std::vector<int64_t>& t, int64_t ignore, double eps) {
  CeRef r;
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[size_t(i)] == ignore) {
      r.rows.push_back(0);
      continue;
    }
    ++kept;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < c; ++k) m = std::max(m, x[size_t(i * c + k)]);
    double s = 0;
    for (int64_t k = 0; k < c; ++k) s += std::exp(x[size_t(i * c + k)] - m);
    const double lse = m + std::log(s);
    double smooth = 0;
    for (int64_t k = 0; k < c; ++k) smooth += lse - x[size_t(i * c + k)];
    const double l = (1 - eps) * (lse - x[size_t(i * c + t[size_t(i)])]) + eps * smooth / double(c);
    r.rows.push_back(l);
    r.sum += l;
  }
  r.mean = r.sum / double(kept);
  return r;
}

// Layer norm of row-major [rows, cols] values; w and b empty when absent.
std::vector<double> host_layer_norm(const std::vector<double>& x, int64_t cols,
                                    const std::vector<double>& w, const std::vector<double>& b,
                                    double eps) {
  std::vector<double> y(x.size());
  const int64_t rows = int64_t(x.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t k = 0; k < cols; ++k) mu += x[size_t(r * cols + k)];
    mu /= double(cols);
    for (int64_t k = 0; k < cols; ++k) var += std::pow(x[size_t(r * cols + k)] - mu, 2);
    var /= double(cols);
    for (int64_t k = 0; k < cols; ++k) {
      double v = (x[size_t(r * cols + k)] - mu) / std::sqrt(var + eps);
      if (!w.empty()) v *= w[size_t(k)];
      if (!b.empty()) v += b[size_t(k)];
      y[size_t(r * cols + k)] = v;
    }
  }
  return y;
}

// A tensor rounded to `dtype` (what the op sees) and the same values in f64 (what the
// reference sees).
struct Rounded {
  Tensor x, ref;
};
Rounded rounded(const Tensor& f64, DType dtype, Device dev) {
  Tensor x = f64.to(dev, dtype);
  return {x, x.to(Device::cpu(), DType::f64)};
}

class NnOps : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { EMBER_SKIP_IF_NO_DEVICE(dev()); }
  Device dev() const { return GetParam(); }
};

// Composite references built from ember ops in f64 (they need the reduce family).
Tensor composite_softmax(const Tensor& x, int64_t dim, bool log) {
  Tensor shifted = x - amax(x, {dim}, true);
  Tensor lse = log ? shifted.exp().sum({dim}, true).log() : Tensor();
  return log ? shifted - lse : shifted.exp() / shifted.exp().sum({dim}, true);
}

}  // namespace

// ---------------------------------------------------------------- softmax / log_softmax

TEST_P(NnOps, SoftmaxHandComputed) {
  Tensor x = tensor<double>({1, 2, 3}, {3}).to(dev());
  EXPECT_TRUE(test::all_close(softmax(x, 0),
                              {0.09003057317038046, 0.24472847105479767, 0.6652409557748219},
                              1e-14, 1e-15));
  EXPECT_TRUE(test::all_close(log_softmax(x, -1),
                              {-2.40760596444438, -1.4076059644443801, -0.40760596444438013},
                              1e-14, 1e-15));
  // Over dim 0 of a [3, 2] tensor: each column is its own row.
  Tensor x2 = tensor<float>({1, 0, 2, 0, 3, 0}, {3, 2}).to(dev());
  EXPECT_TRUE(test::all_close(x2.softmax(0), {3, 2}, {0.09003057317038046, 1.0 / 3, 0.24472847105479767,
                                              1.0 / 3, 0.6652409557748219, 1.0 / 3}));
}

TEST_P(NnOps, SoftmaxEveryDimOf3DMatchesHostLoop) {
  for (DType dt : kFloatTypes) {
    // A small shape (one thread) and a large one (several threads; tile path over non-last dims).
    for (Shape shape : {Shape{3, 4, 5}, Shape{8, 300, 41}}) {
      // The CUDA simulation runs the large shape's kernels once per dim, in f32 and bf16: the
      // negative dims and the other dtypes take the same kernels (the small shape has them all).
      const bool sim_short = dev().is_cuda() && cuda::is_simulated() && shape[1] == 300;
      if (sim_short && dt != DType::f32 && dt != DType::bf16) continue;
      auto [x, ref] = rounded(randn(shape, DType::f64).mul(3.0), dt, dev());
      for (int64_t dim : {0, 1, 2, -1, -2, -3}) {
        if (sim_short && dim < 0) continue;
        for (bool log : {false, true}) {
          SCOPED_TRACE(str(dtype_name(dt), " shape ", shape, " dim ", dim, log ? " log" : ""));
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          ASSERT_EQ(y.dtype(), dt);
          ASSERT_EQ(y.sizes(), shape);
          Tol t = tol_for(dt);
          EXPECT_TRUE(test::all_close(y, shape, host_softmax(ref.to_vector<double>(), shape, dim, log),
                                      t.rtol, t.atol));
        }
      }
    }
  }
}

TEST_P(NnOps, SoftmaxMatchesCompositeInF64) {
  for (DType dt : kFloatTypes) {
    auto [x, ref] = rounded(randn({4, 6, 7}, DType::f64).mul(2.0), dt, dev());
    for (int64_t dim : {0, 1, -1}) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(str(dtype_name(dt), " dim ", dim, log ? " log" : ""));
        Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        Tol t = tol_for(dt);
        EXPECT_TRUE(test::all_close(y.to(Device::cpu(), DType::f64), composite_softmax(ref, dim, log),
                                    t.rtol, t.atol));
      }
    }
  }
}

TEST_P(NnOps, SoftmaxNonContiguousInputs) {
  // Views taken after the cast and the move, so the op sees the view's strides.
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> views = {
      {"transpose", [](const Tensor& b) { return b.transpose(0, 2); }},  // [8, 5, 6], dim 0 has stride 1
      {"permute", [](const Tensor& b) { return b.permute({1, 2, 0}); }},  // [5, 8, 6]
      {"step slice", [](const Tensor& b) { return b.slice(2, 1, 8, 3); }},  // [6, 5, 3], strided rows
      {"narrow", [](const Tensor& b) { return b.narrow(1, 1, 3); }},  // [6, 3, 8], gaps between rows
      {"expand", [](const Tensor& b) { return b.select(0, 0).select(0, 0).expand({4, 8}); }},  // stride 0
  };
  Tensor base = randn({6, 5, 8}, DType::f64);
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    Tensor b = base.to(dev(), dt);
    for (auto& [name, view] : views) {
      Tensor x = view(b);
      ASSERT_FALSE(x.is_contiguous()) << name;
      Tensor ref = x.to(Device::cpu(), DType::f64).contiguous();
      for (int64_t dim = 0; dim < x.dim(); ++dim) {
        for (bool log : {false, true}) {
          SCOPED_TRACE(str(name, " ", dtype_name(dt), " dim ", dim, log ? " log" : ""));
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          Tol t = tol_for(dt);
          EXPECT_TRUE(test::all_close(y, x.sizes(), host_softmax(ref.to_vector<double>(), x.sizes(), dim, log),
                                      t.rtol, t.atol));
        }
      }
    }
  }
}

TEST_P(NnOps, SoftmaxExtremeLogitsStayFinite) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = tensor<double>({1e4, -1e4, 0, 1e4}, {1, 4}).to(dev(), dt);
    Tensor ref = x.to(Device::cpu(), DType::f64);
    Tensor p = softmax(x, 1), lp = log_softmax(x, 1);
    for (double v : p.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
    for (double v : lp.to_vector<double>()) EXPECT_TRUE(std::isfinite(v));
    Tol t = tol_for(dt);
    EXPECT_TRUE(test::all_close(p, {1, 4}, {0.5, 0, 0, 0.5}, t.rtol, t.atol));
    EXPECT_TRUE(test::all_close(lp, {1, 4}, host_softmax(ref.to_vector<double>(), {1, 4}, 1, true), t.rtol, t.atol));
    // Over the other dim (tile path) too.
    Tensor xt = tensor<double>({1e4, -1e4, 1e4, -1e4, 1e4, 0}, {3, 2}).to(dev(), dt);
    EXPECT_TRUE(test::all_close(softmax(xt, 0), {3, 2}, {1.0 / 3, 0, 1.0 / 3, 0, 1.0 / 3, 1}, t.rtol, t.atol));
  }
}

TEST_P(NnOps, SoftmaxEdgeShapes) {
  // A 0-dim tensor is one row of one element; an empty tensor gives an empty result.
  Tensor s = scalar_tensor(3.5, TensorOptions(DType::f32).device(dev()));
  EXPECT_TRUE(test::all_close(softmax(s, 0), {1.0}));
  EXPECT_TRUE(test::all_close(log_softmax(s, -1), {0.0}));
  EXPECT_EQ(softmax(s, 0).dim(), 0);
  Tensor e = zeros({0, 3}, dev());
  EXPECT_EQ(softmax(e, 1).sizes(), Shape({0, 3}));
  // One class: softmax is 1 and log_softmax 0.
  Tensor one = randn({5, 1}, dev());
  EXPECT_TRUE(test::all_close(softmax(one, 1), {5, 1}, std::vector<double>(5, 1.0)));
  EXPECT_TRUE(test::all_close(log_softmax(one, 1), {5, 1}, std::vector<double>(5, 0.0)));
  // A row of -inf is NaN, as in PyTorch; other rows are unaffected.
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = tensor<double>({-inf, -inf, 0, 0}, {2, 2}).to(dev());
  std::vector<double> y = softmax(x, 1).to_vector<double>();
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
  EXPECT_DOUBLE_EQ(y[2], 0.5);
  // A -inf logit in a finite row has probability 0.
  EXPECT_TRUE(test::all_close(softmax(tensor<double>({-inf, 0}, {2}).to(dev()), 0), {0, 1}));
}

TEST_P(NnOps, SoftmaxBadInputs) {
  Tensor x = randn({2, 3}, dev());
  EXPECT_THROW(softmax(x, 2), IndexError);
  EXPECT_THROW(log_softmax(x, -3), IndexError);
  Tensor i = ones({2, 3}, TensorOptions(DType::i64).device(dev()));
  try {
    softmax(i, 1);
    FAIL() << "an integer softmax must throw";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("[softmax]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("i64"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------- cross_entropy

TEST_P(NnOps, CrossEntropyHandComputed) {
  Tensor x = tensor<double>({1, 2, 3, 1, 1, 1}, {2, 3}).to(dev());
  Tensor t = tensor<int64_t>({2, 0}, {2}).to(dev());
  const double l0 = 0.40760596444438013, l1 = 1.0986122886681098;
  EXPECT_TRUE(test::all_close(cross_entropy(x, t), {(l0 + l1) / 2}, 1e-14, 0));
  EXPECT_TRUE(test::all_close(cross_entropy(x, t, {.reduction = Reduction::sum}), {l0 + l1}, 1e-14, 0));
  Tensor none = cross_entropy(x, t, {.reduction = Reduction::none});
  EXPECT_EQ(none.sizes(), Shape({2}));
  EXPECT_TRUE(test::all_close(none, {l0, l1}, 1e-14, 0));
  // Smoothing 0.1: row 0 = 0.9 * 0.4076... + 0.1 * (lse - mean(x)); row 1 is uniform.
  EXPECT_TRUE(test::all_close(cross_entropy(x, t, {.reduction = Reduction::none, .label_smoothing = 0.1}),
                              {0.5076059644443801, 1.0986122886681098}, 1e-14, 0));
  EXPECT_TRUE(test::all_close(cross_entropy(x, t, {.label_smoothing = 0.1}), {0.8031091265562449}, 1e-14, 0));
  // An ignored row drops out of the mean's denominator.
  Tensor ti = tensor<int64_t>({2, -100}, {2}).to(dev());
  EXPECT_TRUE(test::all_close(cross_entropy(x, ti), {l0}, 1e-14, 0));
  EXPECT_TRUE(test::all_close(cross_entropy(x, ti, {.reduction = Reduction::none}), {l0, 0}, 1e-14, 0));
  // A custom ignore_index that is a valid class.
  Tensor tc = tensor<int64_t>({2, 0}, {2}).to(dev());
  EXPECT_TRUE(test::all_close(cross_entropy(x, tc, {.ignore_index = 0}), {l0}, 1e-14, 0));
}

TEST_P(NnOps, CrossEntropyMatchesHostLoop) {
  for (DType dt : kFloatTypes) {
    for (auto [n, c] : {std::pair<int64_t, int64_t>{7, 5}, {300, 211}}) {
      auto [x, ref] = rounded(randn({n, c}, DType::f64).mul(2.0), dt, dev());
      Tensor t = randint(0, c, {n});
      std::vector<int64_t> tv = t.to_vector<int64_t>();
      tv[1] = -100;
      tv[3] = -100;
      t = tensor<int64_t>(tv, {n});
      for (double eps : {0.0, 0.2}) {
        SCOPED_TRACE(str(dtype_name(dt), " [", n, ", ", c, "] eps ", eps));
        CeRef r = host_cross_entropy(ref.to_vector<double>(), n, c, tv, -100, eps);
        Tol tl = tol_for(dt);
        Tensor td = t.to(dev());
        Tensor none = cross_entropy(x, td, {.reduction = Reduction::none, .label_smoothing = eps});
        EXPECT_EQ(none.dtype(), dt);
        EXPECT_TRUE(test::all_close(none, r.rows, tl.rtol, tl.atol));
        EXPECT_TRUE(test::all_close(cross_entropy(x, td, {.reduction = Reduction::sum, .label_smoothing = eps}),
                                    {r.sum}, tl.rtol, tl.atol));
        EXPECT_TRUE(test::all_close(cross_entropy(x, td, {.label_smoothing = eps}), {r.mean}, tl.rtol, tl.atol));
      }
    }
  }
}

// The composite it replaces, from ember ops in f64: log_softmax as x - amax - log(sum(exp)),
// then a manual loop that picks -log p[i, t_i], mixes in the smoothing term and skips
// ignored rows.
TEST_P(NnOps, CrossEntropyMatchesCompositeInF64) {
  const int64_t n = 9, c = 6;
  for (DType dt : kFloatTypes) {
    auto [x, ref] = rounded(randn({n, c}, DType::f64).mul(3.0), dt, dev());
    std::vector<int64_t> tv = randint(0, c, {n}).to_vector<int64_t>();
    tv[4] = 3;  // ignore_index below
    for (int64_t& v : tv)
      if (v == 3 && &v != &tv[4]) v = 2;
    Tensor t = tensor<int64_t>(tv, {n}).to(dev());
    Tensor shifted = ref - amax(ref, {1}, true);
    std::vector<double> logp = (shifted - shifted.exp().sum({1}, true).log()).to_vector<double>();
    const double eps = 0.15;
    double total = 0;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (tv[size_t(i)] == 3) continue;
      double smooth = 0;
      for (int64_t k = 0; k < c; ++k) smooth -= logp[size_t(i * c + k)];
      total += (1 - eps) * -logp[size_t(i * c + tv[size_t(i)])] + eps * smooth / double(c);
      ++kept;
    }
    SCOPED_TRACE(dtype_name(dt));
    Tol tl = tol_for(dt);
    EXPECT_TRUE(test::all_close(cross_entropy(x, t, {.ignore_index = 3, .label_smoothing = eps}),
                                {total / double(kept)}, tl.rtol, tl.atol));
  }
}

TEST_P(NnOps, CrossEntropyLayoutsAndTargetTypes) {
  Tensor base = randn({6, 4}, DType::f64);
  Tensor x = base.t().contiguous().t().to(dev());  // [6, 4] with column-major strides
  ASSERT_TRUE(!x.is_contiguous() || dev().is_cuda());
  std::vector<int64_t> tv{0, 3, 1, 2, 2, 0};
  CeRef r = host_cross_entropy(base.to_vector<double>(), 6, 4, tv, -100, 0.05);
  for (DType tdt : {DType::i64, DType::i32, DType::u8}) {
    SCOPED_TRACE(dtype_name(tdt));
    Tensor t = tensor<int64_t>(tv, {6}).to(dev(), tdt);
    EXPECT_TRUE(test::all_close(cross_entropy(x, t, {.label_smoothing = 0.05}), {r.mean}, 1e-12, 1e-14));
  }
  // A strided target (every other element of a longer tensor).
  Tensor t2 = tensor<int64_t>({0, 9, 3, 9, 1, 9, 2, 9, 2, 9, 0, 9}, {12}).to(dev()).slice(0, 0, 12, 2);
  EXPECT_TRUE(test::all_close(cross_entropy(x, t2, {.label_smoothing = 0.05}), {r.mean}, 1e-12, 1e-14));
  // One sample: [C] logits with a 0-dim target; reduction none gives a 0-dim loss.
  Tensor row = base.select(0, 1).to(dev());
  Tensor t0 = scalar_tensor(3, TensorOptions(DType::i64).device(dev()));
  CeRef r1 = host_cross_entropy(base.select(0, 1).to_vector<double>(), 1, 4, {3}, -100, 0.0);
  Tensor l = cross_entropy(row, t0, {.reduction = Reduction::none});
  EXPECT_EQ(l.dim(), 0);
  EXPECT_TRUE(test::all_close(l, {r1.rows[0]}, 1e-12, 1e-14));
  EXPECT_TRUE(test::all_close(cross_entropy(row, t0), {r1.mean}, 1e-12, 1e-14));
}

TEST_P(NnOps, CrossEntropyExtremeLogitsStayFinite) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = tensor<double>({1e4, -1e4, 0, -1e4, 1e4, 1e4}, {2, 3}).to(dev(), dt);
    Tensor t = tensor<int64_t>({1, 0}, {2}).to(dev());
    Tensor l = cross_entropy(x, t, {.reduction = Reduction::none});
    std::vector<double> lv = l.to_vector<double>();
    ASSERT_TRUE(std::isfinite(lv[0]) && std::isfinite(lv[1]));
    CeRef r = host_cross_entropy(x.to(Device::cpu(), DType::f64).to_vector<double>(), 2, 3, {1, 0}, -100, 0.0);
    Tol tl = tol_for(dt);
    EXPECT_TRUE(test::all_close(l, r.rows, tl.rtol, tl.atol));
    EXPECT_TRUE(std::isfinite(cross_entropy(x, t, {.label_smoothing = 0.3}).item<double>()));
  }
}

TEST_P(NnOps, CrossEntropyDegenerateBatches) {
  Tensor x = randn({3, 4}, dev());
  Tensor all_ignored = full({3}, -100, TensorOptions(DType::i64).device(dev()));
  EXPECT_TRUE(std::isnan(cross_entropy(x, all_ignored).item<double>()));  // 0 / 0, as PyTorch
  EXPECT_EQ(cross_entropy(x, all_ignored, {.reduction = Reduction::sum}).item<double>(), 0.0);
  Tensor empty = zeros({0, 4}, dev());
  Tensor no_t = zeros({0}, TensorOptions(DType::i64).device(dev()));
  EXPECT_TRUE(std::isnan(cross_entropy(empty, no_t).item<double>()));
  EXPECT_EQ(cross_entropy(empty, no_t, {.reduction = Reduction::sum}).item<double>(), 0.0);
  EXPECT_EQ(cross_entropy(empty, no_t, {.reduction = Reduction::none}).sizes(), Shape({0}));
}

TEST_P(NnOps, CrossEntropyBadInputs) {
  Tensor x = randn({2, 3}, dev());
  auto expect_message = [](auto&& fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "expected an exception mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[cross_entropy]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  // A bad target is raised by the op on the CPU, at the next synchronization (item()) on CUDA.
  Tensor big = tensor<int64_t>({0, 7}, {2}).to(dev());
  EXPECT_THROW(cross_entropy(x, big).item<double>(), IndexError);
  expect_message([&] { cross_entropy(x, big).item<double>(); }, "target 7");
  Tensor neg = tensor<int64_t>({-1, 0}, {2}).to(dev());
  EXPECT_THROW(cross_entropy(x, neg).item<double>(), IndexError);
  expect_message([&] { cross_entropy(x, neg).item<double>(); }, "target -1");
  EXPECT_NO_THROW(cross_entropy(x, neg, {.ignore_index = -1}));
  Tensor ft = tensor<float>({0, 1}, {2}).to(dev());
  EXPECT_THROW(cross_entropy(x, ft), DTypeError);
  expect_message([&] { cross_entropy(x, ft); }, "f32");
  EXPECT_THROW(cross_entropy(x, ft.gt(scalar_tensor(0.5, dev()))), DTypeError);  // bool
  Tensor t3 = tensor<int64_t>({0, 1, 2}, {3}).to(dev());
  EXPECT_THROW(cross_entropy(x, t3), ShapeError);
  expect_message([&] { cross_entropy(x, t3); }, "[2, 3]");
  EXPECT_THROW(cross_entropy(randn({2, 3, 4}, dev()), tensor<int64_t>({0, 1}, {2}).to(dev())), ShapeError);
  EXPECT_THROW(cross_entropy(x, tensor<int64_t>({0, 1}, {1, 2}).to(dev())), ShapeError);
  EXPECT_THROW(cross_entropy(ones({2, 3}, TensorOptions(DType::i64).device(dev())),
                             tensor<int64_t>({0, 1}, {2}).to(dev())),
               DTypeError);
  EXPECT_THROW(cross_entropy(x, tensor<int64_t>({0, 1}, {2}).to(dev()), {.label_smoothing = 1.5}), ValueError);
}

// ---------------------------------------------------------------- layer_norm

TEST_P(NnOps, LayerNormHandComputed) {
  Tensor x = tensor<double>({1, 2, 3, 4}, {1, 4}).to(dev());
  EXPECT_TRUE(test::all_close(layer_norm(x, {4}), {1, 4},
                              {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269},
                              1e-13, 1e-14));
  Tensor w = tensor<double>({0.5, 1, 2, -1}, {4}).to(dev());
  Tensor b = tensor<double>({0, 1, -1, 0.5}, {4}).to(dev());
  EXPECT_TRUE(test::all_close(layer_norm(x, {4}, w, b), {1, 4},
                              {-0.6708177099844634, 0.552788193343691, -0.105576386687382, -0.8416354199689269},
                              1e-13, 1e-14));
}

TEST_P(NnOps, LayerNormMatchesHostLoop) {
  for (DType dt : kFloatTypes) {
    for (auto [shape, ns] : {std::pair<Shape, Shape>{{3, 5}, {5}},
                             {{2, 3, 4, 5}, {4, 5}},
                             {{64, 768}, {768}},
                             {{7}, {7}}}) {
      for (int affine = 0; affine < 4; ++affine) {  // bit 0: weight, bit 1: bias
        SCOPED_TRACE(str(dtype_name(dt), " x ", shape, " normalized ", ns, " affine ", affine));
        auto [x, xr] = rounded(randn(shape, DType::f64).mul(2.0).add(0.5), dt, dev());
        auto [w, wr] = rounded(randn(ns, DType::f64), dt, dev());
        auto [b, br] = rounded(randn(ns, DType::f64), dt, dev());
        Tensor wu = affine & 1 ? w : Tensor(), bu = affine & 2 ? b : Tensor();
        Tensor y = layer_norm(x, ns, wu, bu, 1e-5);
        ASSERT_EQ(y.dtype(), dt);
        ASSERT_EQ(y.sizes(), shape);
        std::vector<double> ref = host_layer_norm(
            xr.to_vector<double>(), ns.numel(), affine & 1 ? wr.to_vector<double>() : std::vector<double>{},
            affine & 2 ? br.to_vector<double>() : std::vector<double>{}, 1e-5);
        Tol t = tol_for(dt);
        // y ~ N(0, |w|^2): an absolute floor scaled to that size.
        EXPECT_TRUE(test::all_close(y, shape, ref, t.rtol, t.atol * 20));
      }
    }
  }
}

TEST_P(NnOps, LayerNormMatchesCompositeInF64) {
  for (DType dt : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dt));
    auto [x, xr] = rounded(randn({4, 3, 8}, DType::f64).mul(3.0), dt, dev());
    auto [w, wr] = rounded(randn({3, 8}, DType::f64), dt, dev());
    auto [b, br] = rounded(randn({3, 8}, DType::f64), dt, dev());
    const double eps = 1e-3;
    Tensor centered = xr - xr.mean({1, 2}, true);
    Tensor ref = centered / (xr.var({1, 2}, 0, true) + eps).sqrt() * wr + br;
    Tol t = tol_for(dt);
    EXPECT_TRUE(test::all_close(layer_norm(x, {3, 8}, w, b, eps).to(Device::cpu(), DType::f64), ref,
                                t.rtol, t.atol * 20));
  }
}

TEST_P(NnOps, LayerNormNonContiguousAndLargeOffsets) {
  Tensor base = randn({6, 10}, DType::f64);
  Tensor x = base.t().to(dev());  // [10, 6], not contiguous
  EXPECT_TRUE(test::all_close(layer_norm(x, {6}), {10, 6},
                              host_layer_norm(base.t().contiguous().to_vector<double>(), 6, {}, {}, 1e-5),
                              1e-12, 1e-12));
  // A mean of 1e4 with unit spread: the variance is taken around the mean, so f32 keeps it.
  Tensor big = tensor<float>({10000, 10001, 10002, 10003}, {1, 4}).to(dev());
  EXPECT_TRUE(test::all_close(layer_norm(big, {4}), {1, 4},
                              {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269},
                              1e-5, 1e-5));
  // A constant row normalizes to 0 (rstd = 1/sqrt(eps)) and stays finite.
  Tensor c = full({2, 5}, 7.0, dev());
  EXPECT_TRUE(test::all_close(layer_norm(c, {5}), {2, 5}, std::vector<double>(10, 0.0)));
}

TEST_P(NnOps, LayerNormBadInputs) {
  Tensor x = randn({2, 3, 4}, dev());
  auto expect_message = [](auto&& fn, const std::string& part) {
    try {
      fn();
      ADD_FAILURE() << "expected an exception mentioning " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[layer_norm]"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  EXPECT_THROW(layer_norm(x, {3}), ShapeError);
  expect_message([&] { layer_norm(x, {3}); }, "[2, 3, 4]");
  EXPECT_THROW(layer_norm(x, {2, 3, 4, 5}), ShapeError);
  EXPECT_THROW(layer_norm(x, {}), ShapeError);
  EXPECT_NO_THROW(layer_norm(x, {2, 3, 4}));
  EXPECT_THROW(layer_norm(x, {4}, ones({3}, dev())), ShapeError);
  expect_message([&] { layer_norm(x, {4}, ones({3}, dev())); }, "weight");
  EXPECT_THROW(layer_norm(x, {4}, Tensor(), ones({4, 1}, dev())), ShapeError);
  EXPECT_THROW(layer_norm(x, {4}, ones({4}, TensorOptions(DType::f64).device(dev()))), DTypeError);
  EXPECT_THROW(layer_norm(ones({2, 4}, TensorOptions(DType::i32).device(dev())), {4}), DTypeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, NnOps, ::testing::ValuesIn(test::test_devices()), test::device_label);

// ---------------------------------------------------------------- CUDA against the CPU path
//
// The fused kernels on both devices from the same (rounded) inputs, through the ops fronts
// (forward, statistics and backward). Tolerances, relative, with an absolute floor of the
// same size times the largest |expected| value: f64 1e-12; f32 1e-5 (same compute type,
// different summation order); f16 2e-3 and bf16 1.6e-2 (both compute in f32 and round once:
// about one unit of the last place).

namespace {

using test::close_to_cpu;
using test::cuda_rtol;

bool bits_equal(const Tensor& a, const Tensor& b) {
  auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  return va.size() == vb.size() && std::memcmp(va.data(), vb.data(), va.size() * sizeof(double)) == 0;
}

const Device kGpu = Device::cuda(0);

}  // namespace

TEST(NnCuda, SoftmaxForwardAndBackwardMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  // 1, 31, 1025: around the warp and block widths; 3 x 20000: rows longer than a block and
  // than the shared-memory cache; 8 x 300 x 41 over dim 0: the thread-per-row kernel.
  // The CUDA simulation runs the one shape whose dim 0 takes the thread-per-row kernels
  // (interleaved rows: nothing else runs their backward), over dim 0, contiguous, in f32 and
  // bf16; the other shapes' kernels run in the NnOps cases there.
  const bool sim = cuda::is_simulated();
  const std::vector<Shape> shapes =
      sim ? std::vector<Shape>{Shape{8, 300, 41}}
          : std::vector<Shape>{Shape{1}, Shape{31}, Shape{1025}, Shape{33, 31}, Shape{4, 1025},
                               Shape{3, 20000}, Shape{8, 300, 41}, Shape{64, 64, 3}};
  for (const Shape& shape : shapes) {
    Tensor base = randn(shape, DType::f64).mul(3.0);
    Tensor gbase = randn(shape, DType::f64);
    // Views are taken after the cast and the move, so the kernels see their strides.
    const int64_t last = int64_t(shape.size()) - 1;
    std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> views = {
        {"contiguous", [](const Tensor& t) { return t; }}};
    if (last >= 1 && !sim) views.push_back({"transposed", [last](const Tensor& t) { return t.transpose(0, last); }});
    if (shape[0] > 2 && !sim)
      views.push_back({"step-sliced", [](const Tensor& t) { return t.slice(0, 0, t.sizes()[0], 2); }});
    for (DType dt : kFloatTypes) {
      if (sim && dt != DType::f32 && dt != DType::bf16) continue;
      for (auto& [name, view] : views) {
        Tensor cx = view(base.to(dt)), gx = view(base.to(kGpu, dt));
        Tensor cg = view(gbase.to(dt)), gg = view(gbase.to(kGpu, dt));
        for (int64_t dim = 0; dim < (sim ? 1 : cx.dim()); ++dim)
          for (bool log : {false, true}) {
            SCOPED_TRACE(str(dtype_name(dt), " ", name, " ", cx.sizes(), " dim ", dim, log ? " log" : ""));
            Tensor cy = log ? ops::log_softmax(cx, dim) : ops::softmax(cx, dim);
            Tensor gy = log ? ops::log_softmax(gx, dim) : ops::softmax(gx, dim);
            EXPECT_TRUE(close_to_cpu(gy, cy, cuda_rtol(dt)));
            // Backward from the same y (the CPU's, moved over).
            Tensor cdx = log ? ops::log_softmax_backward(cg, cy, dim) : ops::softmax_backward(cg, cy, dim);
            Tensor gdx = log ? ops::log_softmax_backward(gg, cy.to(kGpu), dim)
                             : ops::softmax_backward(gg, cy.to(kGpu), dim);
            EXPECT_TRUE(close_to_cpu(gdx, cdx, cuda_rtol(dt)));
          }
      }
    }
  }
}

TEST(NnCuda, CrossEntropyForwardAndBackwardMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  struct Size {
    int64_t n, c;
  };
  for (Size sz : {Size{1, 1}, Size{31, 31}, Size{7, 1025}, Size{4, 50257}, Size{300, 211},
                  Size{2000, 10}}) {
    Tensor base = randn({sz.n, sz.c}, DType::f64).mul(2.0);
    std::vector<int64_t> tv = randint(0, sz.c, {sz.n}).to_vector<int64_t>();
    for (size_t i = 1; i < tv.size(); i += 5) tv[i] = -100;  // ignored rows
    Tensor target = tensor<int64_t>(tv, {sz.n});
    for (DType dt : kFloatTypes) {
      // Contiguous logits and a column-major view of the same values.
      for (bool transposed : {false, true}) {
        Tensor cx = transposed ? base.t().contiguous().to(dt).t() : base.to(dt);
        Tensor gx = transposed ? base.t().contiguous().to(kGpu, dt).t() : cx.to(kGpu);
        for (DType tdt : {DType::i64, DType::i32}) {
          Tensor ct = target.to(tdt), gt = ct.to(kGpu);
          for (double eps : {0.0, 0.1})
            for (ops::LossReduction red : {ops::LossReduction::none, ops::LossReduction::mean,
                                           ops::LossReduction::sum}) {
              SCOPED_TRACE(str(dtype_name(dt), transposed ? " transposed" : "", " [", sz.n, ", ",
                               sz.c, "] target ", dtype_name(tdt), " eps ", eps, " reduction ",
                               int(red)));
              ops::CrossEntropyParams p{.ignore_index = -100, .label_smoothing = eps, .reduction = red};
              auto cf = ops::cross_entropy_forward(cx, ct, p);
              auto gf = ops::cross_entropy_forward(gx, gt, p);
              const double rtol = cuda_rtol(dt);
              EXPECT_TRUE(close_to_cpu(gf.loss, cf.loss, rtol));
              EXPECT_TRUE(close_to_cpu(gf.row_max, cf.row_max, 0));  // exact
              EXPECT_TRUE(close_to_cpu(gf.log_sum, cf.log_sum, dt == DType::f64 ? 1e-12 : 1e-5));
              // Backward from the CPU's statistics, so both devices see the same inputs.
              Tensor grad = red == ops::LossReduction::none
                                ? randn({sz.n}, DType::f64).to(dt)
                                : scalar_tensor(1.7, dt);
              Tensor cd = ops::cross_entropy_backward(grad, cx, ct, cf.row_max, cf.log_sum, p);
              Tensor gd = ops::cross_entropy_backward(grad.to(kGpu), gx, gt, cf.row_max.to(kGpu),
                                                      cf.log_sum.to(kGpu), p);
              EXPECT_TRUE(close_to_cpu(gd, cd, rtol));
            }
        }
      }
    }
  }
}

TEST(NnCuda, LayerNormForwardAndBackwardMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  struct Size {
    int64_t rows, cols;
  };
  // 5000 x 8: many row chunks for dweight/dbias; 3 x 20000: rows longer than a block and
  // than the shared-memory cache.
  for (Size sz : {Size{1, 1}, Size{1, 31}, Size{33, 31}, Size{7, 1025}, Size{300, 768},
                  Size{3, 20000}, Size{5000, 8}}) {
    Tensor xb = randn({sz.rows, sz.cols}, DType::f64).mul(2.0).add(0.5);
    Tensor wb = randn({sz.cols}, DType::f64), bb = randn({sz.cols}, DType::f64);
    Tensor gb = randn({sz.rows, sz.cols}, DType::f64);
    for (DType dt : kFloatTypes) {
      Tensor cx = xb.to(dt), gx = cx.to(kGpu), cg = gb.to(dt);
      for (int affine = 0; affine < 3; ++affine) {  // none, weight, weight and bias
        SCOPED_TRACE(str(dtype_name(dt), " [", sz.rows, ", ", sz.cols, "] affine ", affine));
        Tensor cw = affine >= 1 ? wb.to(dt) : Tensor(), cb = affine >= 2 ? bb.to(dt) : Tensor();
        Tensor gw = cw.defined() ? cw.to(kGpu) : Tensor(), gbias = cb.defined() ? cb.to(kGpu) : Tensor();
        auto cf = ops::layer_norm_forward(cx, {sz.cols}, cw, cb, 1e-5);
        auto gf = ops::layer_norm_forward(gx, {sz.cols}, gw, gbias, 1e-5);
        const double rtol = cuda_rtol(dt);
        EXPECT_TRUE(close_to_cpu(gf.y, cf.y, rtol));
        EXPECT_TRUE(close_to_cpu(gf.mean, cf.mean, dt == DType::f64 ? 1e-12 : 1e-6));
        EXPECT_TRUE(close_to_cpu(gf.rstd, cf.rstd, dt == DType::f64 ? 1e-12 : 1e-5));
        // Backward from the CPU's statistics.
        auto cbw = ops::layer_norm_backward(cg, cx, {sz.cols}, cw, cf.mean, cf.rstd, {true, true, true});
        auto gbw = ops::layer_norm_backward(cg.to(kGpu), gx, {sz.cols}, gw, cf.mean.to(kGpu),
                                            cf.rstd.to(kGpu), {true, true, true});
        EXPECT_TRUE(close_to_cpu(gbw.dx, cbw.dx, rtol));
        ASSERT_EQ(gbw.dweight.defined(), cw.defined());
        if (cw.defined()) {
          EXPECT_TRUE(close_to_cpu(gbw.dweight, cbw.dweight, rtol));
        }
        EXPECT_TRUE(close_to_cpu(gbw.dbias, cbw.dbias, rtol));
        // Parameter gradients alone (no dx).
        auto gpart = ops::layer_norm_backward(cg.to(kGpu), gx, {sz.cols}, gw, cf.mean.to(kGpu),
                                              cf.rstd.to(kGpu), {false, true, true});
        EXPECT_FALSE(gpart.dx.defined());
        EXPECT_TRUE(close_to_cpu(gpart.dbias, cbw.dbias, rtol));
      }
    }
  }
}

// No float atomics: the same inputs give bit-identical results on every run.
TEST(NnCuda, RunsAreBitIdentical) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor x = randn({64, 5000}, TensorOptions(DType::f32).device(kGpu));
  Tensor x3 = randn({16, 300, 41}, TensorOptions(DType::f32).device(kGpu));
  Tensor logits = randn({512, 1000}, TensorOptions(DType::f32).device(kGpu));
  Tensor target = randint(0, 1000, {512}).to(kGpu);
  Tensor ln_x = randn({4096, 768}, TensorOptions(DType::f32).device(kGpu));
  Tensor ln_g = randn({4096, 768}, TensorOptions(DType::f32).device(kGpu));
  Tensor w = randn({768}, TensorOptions(DType::f32).device(kGpu));
  auto run = [&] {
    ops::CrossEntropyParams p{.label_smoothing = 0.1};
    auto ce = ops::cross_entropy_forward(logits, target, p);
    Tensor dce = ops::cross_entropy_backward(scalar_tensor(1.0, TensorOptions(DType::f32).device(kGpu)),
                                             logits, target, ce.row_max, ce.log_sum, p);
    auto ln = ops::layer_norm_forward(ln_x, {768}, w, Tensor(), 1e-5);
    auto lb = ops::layer_norm_backward(ln_g, ln_x, {768}, w, ln.mean, ln.rstd, {true, true, true});
    return TensorList{ops::softmax(x, 1), ops::log_softmax(x3, 0), ce.loss, dce, ln.y, ln.rstd,
                      lb.dx, lb.dweight, lb.dbias};
  };
  TensorList a = run(), b = run();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bits_equal(a[i], b[i])) << "result " << i;
}

// The backward fronts check the auxiliary tensors their kernels read (the forward's row
// statistics, the targets, the indices): shape, dtype and layout here, devices below.
TEST(NnOpsErrors, BackwardFrontsCheckTheForwardsStatistics) {
  Tensor logits = randn({4, 5}), target = tensor<int64_t>({0, 4, 2, 1});
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, {});
  Tensor g = ones({});
  EXPECT_NO_THROW(ops::cross_entropy_backward(g, logits, target, f.row_max, f.log_sum, {}));
  auto ce = [&](const Tensor& t, const Tensor& rm, const Tensor& ls) {
    return test::message_of<Error>([&] { ops::cross_entropy_backward(g, logits, t, rm, ls, {}); });
  };
  EXPECT_NE(ce(target, f.row_max.narrow(0, 0, 3), f.log_sum).find("row statistics must be contiguous f32 [4]"),
            std::string::npos);
  EXPECT_NE(ce(target, f.row_max, f.log_sum.to(DType::f64)).find("got f64"), std::string::npos);
  EXPECT_NE(ce(target.narrow(0, 0, 2), f.row_max, f.log_sum).find("does not match logits"), std::string::npos);
  EXPECT_NE(ce(target.to(DType::f32), f.row_max, f.log_sum).find("integer class targets"), std::string::npos);
  EXPECT_NE(ce(target, Tensor(), f.log_sum).find("[cross_entropy_backward]"), std::string::npos);

  Tensor x = randn({3, 4, 6}), w = randn({6});
  ops::LayerNormForward ln = ops::layer_norm_forward(x, {6}, w, Tensor(), 1e-5);
  Tensor dy = randn({3, 4, 6});
  EXPECT_NO_THROW(ops::layer_norm_backward(dy, x, {6}, w, ln.mean, ln.rstd, {true, true, true}));
  auto lnb = [&](const Tensor& wt, const Tensor& m, const Tensor& r) {
    return test::message_of<Error>([&] { ops::layer_norm_backward(dy, x, {6}, wt, m, r, {true, true, true}); });
  };
  EXPECT_NE(lnb(w, ln.mean.narrow(0, 0, 11), ln.rstd).find("mean and rstd must be contiguous f32 [12]"),
            std::string::npos);
  EXPECT_NE(lnb(w, ln.mean, ln.rstd.to(DType::f64)).find("got f64"), std::string::npos);
  EXPECT_NE(lnb(randn({5}), ln.mean, ln.rstd).find("weight of shape [5]"), std::string::npos);
  EXPECT_NE(lnb(w.to(DType::f64), ln.mean, ln.rstd).find("weight has dtype f64"), std::string::npos);
  // A normalized shape that is not the input's trailing dims (its rows*cols could still match
  // the statistics): refused, where the kernel would have walked past dx with cols = 8.
  Tensor m12 = zeros({12}), r12 = ones({12});
  const std::string suffix = test::message_of<ShapeError>(
      [&] { ops::layer_norm_backward(dy, x, {8}, randn({8}), m12, r12, {true, true, true}); });
  EXPECT_NE(suffix.find("does not match the trailing dims"), std::string::npos) << suffix;
}

TEST(NnOpsCuda, BackwardFrontsRefuseAuxiliaryTensorsOnAnotherDevice) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  Tensor logits = randn({4, 5}).to(dev), target = tensor<int64_t>({0, 4, 2, 1}).to(dev);
  ops::CrossEntropyForward f = ops::cross_entropy_forward(logits, target, {});
  Tensor g = ones({}, dev);
  auto device_error = [](auto&& fn) { return test::message_of<DeviceError>(fn); };
  EXPECT_NE(device_error([&] { ops::cross_entropy_backward(g, logits, target.cpu(), f.row_max, f.log_sum, {}); })
                .find("[cross_entropy_backward] expected all tensors on the same device"),
            std::string::npos);
  EXPECT_NE(device_error([&] { ops::cross_entropy_backward(g, logits, target, f.row_max.cpu(), f.log_sum, {}); })
                .find("cpu"),
            std::string::npos);
  Tensor x = randn({3, 6}).to(dev), w = randn({6}).to(dev);
  ops::LayerNormForward ln = ops::layer_norm_forward(x, {6}, w, Tensor(), 1e-5);
  Tensor dy = randn({3, 6}).to(dev);
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE(which);
    EXPECT_THROW(ops::layer_norm_backward(dy, x, {6}, which == 0 ? w.cpu() : w, which == 1 ? ln.mean.cpu() : ln.mean,
                                          which == 2 ? ln.rstd.cpu() : ln.rstd, {true, true, true}),
                 DeviceError);
  }
  EXPECT_THROW(ops::embedding_backward(randn({3, 8}).to(dev), tensor<int64_t>({0, 1, 2}), 4), DeviceError);
}

// layer_norm over an empty normalized shape ([4, 0]): forward statistics as on the CPU, and a
// backward that writes nothing (it launched an empty grid, an invalid configuration, before).
TEST(NnOpsCuda, LayerNormOverEmptyRowsMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  Tensor x = randn({4, 0}), w = randn({0}), b = randn({0});
  ops::LayerNormForward c = ops::layer_norm_forward(x, {0}, w, b, 1e-5);
  ops::LayerNormForward g = ops::layer_norm_forward(x.to(dev), {0}, w.to(dev), b.to(dev), 1e-5);
  EXPECT_TRUE(test::all_close(g.mean.cpu(), c.mean, 0, 0));
  EXPECT_TRUE(test::all_close(g.rstd.cpu(), c.rstd, 0, 0));
  ops::LayerNormBackward gb = ops::layer_norm_backward(randn({4, 0}).to(dev), x.to(dev), {0}, w.to(dev), g.mean,
                                                       g.rstd, {true, true, true});
  EXPECT_EQ(gb.dx.sizes(), (Shape{4, 0}));
  EXPECT_EQ(gb.dweight.sizes(), (Shape{0}));
  EXPECT_EQ(gb.dbias.sizes(), (Shape{0}));
  EXPECT_NO_THROW(cuda::synchronize());
}
