// The fused normalization kernels (ops/cpu/norm.cpp, ops/cuda/norm.cu) against f64 host
// loops of the textbook formulas: batch norm (training with the running update, eval),
// group norm and RMS norm, forward and backward, in every floating dtype, on shapes that take
// each CPU path (planes gathered or read in place, one thread or many). The CUDA bodies
// compare with the CPU and skip without a GPU.
#include <cmath>
#include <utility>
#include <vector>

#include "ember/ops/norm.h"
#include "support/test_support.h"

using namespace ember;
using test::all_close;

namespace {

std::vector<double> vals(const Tensor& t) {
  Tensor c = t.to(Device::cpu(), DType::f64).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}
Tensor f64(const std::vector<double>& v, const Shape& s) { return tensor<double>(v, s); }

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-11, 1e-12};
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    default: return {4e-2, 4e-2};  // bf16
  }
}

struct Geo {
  int64_t N, C, HW;
};
Geo geo(const Shape& s) {
  Geo g{s[0], s[1], 1};
  for (size_t d = 2; d < s.size(); ++d) g.HW *= s[d];
  return g;
}

// ---- batch norm reference ----
struct BnRef {
  std::vector<double> y, mean, invstd, rm, rv, dx, dw, db;
};
BnRef bn_ref(const std::vector<double>& x, const std::vector<double>& g, const Geo& s,
             const std::vector<double>& w, const std::vector<double>& b, std::vector<double> rm,
             std::vector<double> rv, bool training, double momentum, double eps) {
  BnRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  const double M = double(s.N * s.HW);
  auto at = [&](int64_t n, int64_t c, int64_t i) { return size_t((n * s.C + c) * s.HW + i); };
  for (int64_t c = 0; c < s.C; ++c) {
    double mu = 0, var = 0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.HW; ++i) mu += x[at(n, c, i)];
    mu /= M;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.HW; ++i) var += (x[at(n, c, i)] - mu) * (x[at(n, c, i)] - mu);
    var /= M;
    if (training) {
      rm[size_t(c)] = (1 - momentum) * rm[size_t(c)] + momentum * mu;
      rv[size_t(c)] = (1 - momentum) * rv[size_t(c)] + momentum * var * M / (M - 1);
    } else {
      mu = rm[size_t(c)];
      var = rv[size_t(c)];
    }
    const double is = 1 / std::sqrt(var + eps);
    r.mean.push_back(mu);
    r.invstd.push_back(is);
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.HW; ++i) {
        const size_t k = at(n, c, i);
        const double xhat = (x[k] - mu) * is;
        r.y[k] = xhat * w[size_t(c)] + b[size_t(c)];
        sg += g[k];
        sgx += g[k] * xhat;
      }
    r.dw.push_back(sgx);
    r.db.push_back(sg);
    for (int64_t n = 0; n < s.N; ++n)
      for (int64_t i = 0; i < s.HW; ++i) {
        const size_t k = at(n, c, i);
        const double xhat = (x[k] - mu) * is;
        r.dx[k] = training ? w[size_t(c)] * is * (g[k] - sg / M - xhat * sgx / M)
                           : w[size_t(c)] * is * g[k];
      }
  }
  r.rm = rm;
  r.rv = rv;
  return r;
}

// ---- group norm reference ----
struct GnRef {
  std::vector<double> y, dx, dw, db;
};
GnRef gn_ref(const std::vector<double>& x, const std::vector<double>& g, const Geo& s, int64_t G,
             const std::vector<double>& w, const std::vector<double>& b, double eps) {
  GnRef r{std::vector<double>(x.size()), std::vector<double>(x.size()),
          std::vector<double>(size_t(s.C)), std::vector<double>(size_t(s.C))};
  const int64_t Cg = s.C / G, L = Cg * s.HW;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t gr = 0; gr < G; ++gr) {
      const size_t base = size_t((n * G + gr) * L);
      double mu = 0, var = 0;
      for (int64_t k = 0; k < L; ++k) mu += x[base + k];
      mu /= double(L);
      for (int64_t k = 0; k < L; ++k) var += (x[base + k] - mu) * (x[base + k] - mu);
      const double rs = 1 / std::sqrt(var / double(L) + eps);
      double a = 0, bb = 0;
      for (int64_t k = 0; k < L; ++k) {
        const int64_t c = gr * Cg + k / s.HW;
        const double xhat = (x[base + k] - mu) * rs;
        r.y[base + k] = xhat * w[size_t(c)] + b[size_t(c)];
        a += g[base + k] * w[size_t(c)];
        bb += g[base + k] * w[size_t(c)] * xhat;
        r.dw[size_t(c)] += g[base + k] * xhat;
        r.db[size_t(c)] += g[base + k];
      }
      for (int64_t k = 0; k < L; ++k) {
        const int64_t c = gr * Cg + k / s.HW;
        const double xhat = (x[base + k] - mu) * rs;
        r.dx[base + k] = rs * (g[base + k] * w[size_t(c)] - a / double(L) - xhat * bb / double(L));
      }
    }
  return r;
}

// ---- RMS norm reference ----
GnRef rms_ref(const std::vector<double>& x, const std::vector<double>& g, int64_t cols,
              const std::vector<double>& w, double eps) {
  GnRef r{std::vector<double>(x.size()), std::vector<double>(x.size()),
          std::vector<double>(size_t(cols)), {}};
  const int64_t rows = int64_t(x.size()) / cols;
  for (int64_t i = 0; i < rows; ++i) {
    const size_t base = size_t(i * cols);
    double ms = 0;
    for (int64_t k = 0; k < cols; ++k) ms += x[base + k] * x[base + k];
    const double rs = 1 / std::sqrt(ms / double(cols) + eps);
    double s = 0;
    for (int64_t k = 0; k < cols; ++k) {
      r.y[base + k] = x[base + k] * rs * w[size_t(k)];
      s += g[base + k] * w[size_t(k)] * x[base + k] * rs;
      r.dw[size_t(k)] += g[base + k] * x[base + k] * rs;
    }
    for (int64_t k = 0; k < cols; ++k)
      r.dx[base + k] = rs * (g[base + k] * w[size_t(k)] - x[base + k] * rs * s / double(cols));
  }
  return r;
}

const DType kTypes[] = {DType::f64, DType::f32, DType::f16, DType::bf16};

// HW = 1 ([N, C]: one and several channel blocks), a short plane (gathered), planes read in place, and one large enough for
// several threads.
const Shape kBnShapes[] = {{6, 3}, {300, 130}, {5, 3, 7}, {3, 4, 6, 5}, {16, 6, 24, 24}};

}  // namespace

TEST(NormOps, BatchNormTrainingMatchesReference) {
  manual_seed(11);
  for (const Shape& shape : kBnShapes) {
    const Geo s = geo(shape);
    // An offset mean: the two-pass variance must not cancel.
    Tensor x64 = add(randn(shape, DType::f64), full({}, 3.0, DType::f64));
    Tensor g64 = randn(shape, DType::f64);
    Tensor w64 = randn({s.C}, DType::f64), b64 = randn({s.C}, DType::f64);
    Tensor rm64 = randn({s.C}, DType::f64), rv64 = add(rand({s.C}, DType::f64), full({}, 0.5, DType::f64));
    for (DType dt : kTypes) {
      SCOPED_TRACE(str(shape, " ", dtype_name(dt)));
      const Tol tol = tol_for(dt);
      Tensor x = x64.to(dt), g = g64.to(dt);
      // 16-bit x takes f32 parameters and statistics (autocast's case); the others their own.
      const DType pdt = (dt == DType::f16 || dt == DType::bf16) ? DType::f32 : dt;
      // Fresh buffers (to() of the same dtype would alias rm64), updated in place below.
      Tensor w = w64.to(pdt), b = b64.to(pdt), rm = rm64.to(pdt).clone(), rv = rv64.to(pdt).clone();
      const BnRef r = bn_ref(vals(x), vals(g), s, vals(w), vals(b), vals(rm), vals(rv), true, 0.3,
                             1e-5);
      const uint32_t v0 = rm.version();
      ops::BatchNormForward f = ops::batch_norm_forward(x, w, b, rm, rv, true, 0.3, 1e-5);
      EXPECT_EQ(f.y.dtype(), dt);
      EXPECT_TRUE(all_close(f.y, f64(r.y, shape), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(f.mean, f64(r.mean, {s.C}), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(f.invstd, f64(r.invstd, {s.C}), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(rm, f64(r.rm, {s.C}), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(rv, f64(r.rv, {s.C}), tol.rtol, tol.atol));
      EXPECT_GT(rm.version(), v0);
      ops::NormBackward bw =
          ops::batch_norm_backward(g, x, w, f.mean, f.invstd, true, {true, true, true});
      EXPECT_TRUE(all_close(bw.dx, f64(r.dx, shape), tol.rtol, 4 * tol.atol));
      EXPECT_TRUE(all_close(bw.dweight, f64(r.dw, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
      EXPECT_TRUE(all_close(bw.dbias, f64(r.db, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
    }
  }
}

TEST(NormOps, BatchNormEvalUsesRunningStats) {
  manual_seed(12);
  for (const Shape& shape : kBnShapes) {
    const Geo s = geo(shape);
    Tensor x64 = randn(shape, DType::f64), g64 = randn(shape, DType::f64);
    Tensor w64 = randn({s.C}, DType::f64), b64 = randn({s.C}, DType::f64);
    Tensor rm64 = randn({s.C}, DType::f64), rv64 = add(rand({s.C}, DType::f64), full({}, 0.5, DType::f64));
    for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
      SCOPED_TRACE(str(shape, " ", dtype_name(dt)));
      const Tol tol = tol_for(dt);
      Tensor x = x64.to(dt), g = g64.to(dt);
      const DType pdt = dt == DType::bf16 ? DType::f32 : dt;
      Tensor w = w64.to(pdt), b = b64.to(pdt), rm = rm64.to(pdt).clone(), rv = rv64.to(pdt).clone();
      ops::BatchNormForward f = ops::batch_norm_forward(x, w, b, rm, rv, false, 0.1, 1e-3);
      const BnRef r = bn_ref(vals(x), vals(g), s, vals(w), vals(b), vals(rm), vals(rv), false, 0.1, 1e-3);
      EXPECT_TRUE(all_close(f.y, f64(r.y, shape), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(rm, rm64.to(pdt), 0, 0));  // untouched in eval mode
      ops::NormBackward bw =
          ops::batch_norm_backward(g, x, w, f.mean, f.invstd, false, {true, true, true});
      EXPECT_TRUE(all_close(bw.dx, f64(r.dx, shape), tol.rtol, tol.atol));
      EXPECT_TRUE(all_close(bw.dweight, f64(r.dw, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
      EXPECT_TRUE(all_close(bw.dbias, f64(r.db, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
    }
  }
}

TEST(NormOps, BatchNormRunningStatsOfAnotherDtypeAndLayout) {
  // f32 input, f64 running statistics viewed with stride 2: updated through a copy.
  manual_seed(13);
  Tensor x = randn({7, 3, 5});
  Tensor rm_base = zeros({6}, DType::f64), rv_base = ones({6}, DType::f64);
  Tensor rm = rm_base.slice(0, 0, 6, 2), rv = rv_base.slice(0, 0, 6, 2);
  const uint32_t v0 = rm.version();
  ops::batch_norm_forward(x, Tensor(), Tensor(), rm, rv, true, 0.5, 1e-5);
  const BnRef r = bn_ref(vals(x), vals(x), geo(x.sizes()), {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {1, 1, 1},
                         true, 0.5, 1e-5);
  EXPECT_TRUE(all_close(rm, f64(r.rm, {3}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(rv, f64(r.rv, {3}), 1e-6, 1e-7));
  EXPECT_EQ(rm_base.to(DType::f64).data_ptr<double>()[1], 0.0);  // the gaps are untouched
  EXPECT_GT(rm.version(), v0);
}

TEST(NormOps, BatchNormErrors) {
  Tensor x = randn({1, 3});
  EXPECT_NE(test::message_of<ValueError>([&] {
              ops::batch_norm_forward(x, Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5);
            }).find("[batch_norm] expected more than 1 value per channel"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] {
              ops::batch_norm_forward(randn({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false,
                                      0.1, 1e-5);
            }).find("[batch_norm] running_mean and running_var are required"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] {
              ops::batch_norm_forward(randn({4, 3}), ones({4}), Tensor(), Tensor(), Tensor(), true,
                                      0.1, 1e-5);
            }).find("[batch_norm] weight of shape [4] must have shape [3]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] {
              ops::group_norm_forward(randn({2, 6, 3}), 4, Tensor(), Tensor(), 1e-5);
            }).find("[group_norm] expected the number of channels 6 to be divisible by num_groups 4"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] {
              ops::rms_norm_forward(randn({2, 6}), {5}, Tensor(), 1e-5);
            }).find("[rms_norm] normalized_shape [5] does not match"),
            std::string::npos);
}

TEST(NormOps, GroupNormMatchesReference) {
  manual_seed(14);
  struct Case {
    Shape shape;
    int64_t G;
  };
  for (const Case& cs : {Case{{2, 6, 5}, 3}, Case{{3, 8, 4, 4}, 2}, Case{{4, 4}, 2},
                         Case{{8, 32, 16, 16}, 8}}) {
    const Geo s = geo(cs.shape);
    Tensor x64 = add(randn(cs.shape, DType::f64), full({}, -2.0, DType::f64));
    Tensor g64 = randn(cs.shape, DType::f64);
    Tensor w64 = randn({s.C}, DType::f64), b64 = randn({s.C}, DType::f64);
    for (DType dt : kTypes) {
      SCOPED_TRACE(str(cs.shape, " G ", cs.G, " ", dtype_name(dt)));
      const Tol tol = tol_for(dt);
      Tensor x = x64.to(dt), g = g64.to(dt), w = w64.to(dt), b = b64.to(dt);
      ops::GroupNormForward f = ops::group_norm_forward(x, cs.G, w, b, 1e-5);
      const GnRef r = gn_ref(vals(x), vals(g), s, cs.G, vals(w), vals(b), 1e-5);
      EXPECT_TRUE(all_close(f.y, f64(r.y, cs.shape), tol.rtol, tol.atol));
      ops::NormBackward bw =
          ops::group_norm_backward(g, x, cs.G, w, f.mean, f.rstd, {true, true, true});
      EXPECT_TRUE(all_close(bw.dx, f64(r.dx, cs.shape), tol.rtol, 4 * tol.atol));
      EXPECT_TRUE(all_close(bw.dweight, f64(r.dw, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
      EXPECT_TRUE(all_close(bw.dbias, f64(r.db, {s.C}), tol.rtol, tol.atol * double(s.N * s.HW)));
    }
  }
}

// Data far from zero (mean 1000, unit spread) in f32: the statistics keep the mean's last
// digits (sums shifted by a data value; the backward's sums centered on the mean), so y and the
// parameter gradients match the f64 computation of the same f32 inputs to f32 accuracy at
// the output's scale. Unshifted f32 sums put the mean ~8 ulps (5e-4) off and dweight 0.2% off.
TEST(NormOps, StatisticsOfDataFarFromZeroKeepTheirDigits) {
  manual_seed(18);
  const Shape shape{2, 4, 48, 48};
  Tensor x = add(randn(shape), full({}, 1000.0)), g = randn(shape);
  Tensor w = randn({4}), b = randn({4});
  const auto wide = [](const Tensor& t) { return t.to(DType::f64); };
  {
    SCOPED_TRACE("group_norm");
    auto f = ops::group_norm_forward(x, 2, w, b, 1e-5);
    auto r = ops::group_norm_forward(wide(x), 2, wide(w), wide(b), 1e-5);
    EXPECT_TRUE(all_close(f.y, r.y.to(DType::f32), 0, 2e-4));
    EXPECT_TRUE(all_close(f.mean, r.mean.to(DType::f32), 1e-7, 0));
    auto bw = ops::group_norm_backward(g, x, 2, w, f.mean, f.rstd, {true, true, true});
    auto rb = ops::group_norm_backward(wide(g), wide(x), 2, wide(w), r.mean, r.rstd, {true, true, true});
    EXPECT_TRUE(all_close(bw.dx, rb.dx.to(DType::f32), 1e-4, 1e-5));
    EXPECT_TRUE(all_close(bw.dweight, rb.dweight.to(DType::f32), 1e-4, 1e-3));
    EXPECT_TRUE(all_close(bw.dbias, rb.dbias.to(DType::f32), 1e-5, 1e-3));
  }
  {
    SCOPED_TRACE("batch_norm");
    Tensor rm = zeros({4}), rv = ones({4}), rm64 = zeros({4}, DType::f64), rv64 = ones({4}, DType::f64);
    auto f = ops::batch_norm_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
    auto r = ops::batch_norm_forward(wide(x), wide(w), wide(b), rm64, rv64, true, 0.1, 1e-5);
    EXPECT_TRUE(all_close(f.y, r.y.to(DType::f32), 0, 2e-4));
    EXPECT_TRUE(all_close(f.mean, r.mean.to(DType::f32), 1e-7, 0));
  }
}

TEST(NormOps, RmsNormMatchesReference) {
  manual_seed(15);
  struct Case {
    Shape shape, ns;
  };
  for (const Case& cs : {Case{{3, 7}, {7}}, Case{{2, 3, 4}, {3, 4}}, Case{{64, 768}, {768}}}) {
    Tensor x64 = add(randn(cs.shape, DType::f64), full({}, 0.5, DType::f64));
    Tensor g64 = randn(cs.shape, DType::f64), w64 = randn(cs.ns, DType::f64);
    for (DType dt : kTypes) {
      SCOPED_TRACE(str(cs.shape, " ", dtype_name(dt)));
      const Tol tol = tol_for(dt);
      Tensor x = x64.to(dt), g = g64.to(dt), w = w64.to(dt);
      ops::RmsNormForward f = ops::rms_norm_forward(x, cs.ns, w, 1e-6);
      const GnRef r = rms_ref(vals(x), vals(g), cs.ns.numel(), vals(w), 1e-6);
      EXPECT_TRUE(all_close(f.y, f64(r.y, cs.shape), tol.rtol, tol.atol));
      ops::NormBackward bw = ops::rms_norm_backward(g, x, cs.ns, w, f.rstd, {true, true});
      EXPECT_TRUE(all_close(bw.dx, f64(r.dx, cs.shape), tol.rtol, 4 * tol.atol));
      EXPECT_TRUE(all_close(bw.dweight, f64(r.dw, cs.ns), tol.rtol, tol.atol * double(x.numel())));
      // Without weight: the weight-1 result.
      ops::RmsNormForward f1 = ops::rms_norm_forward(x, cs.ns, Tensor(), 1e-6);
      const GnRef r1 = rms_ref(vals(x), vals(g), cs.ns.numel(),
                               std::vector<double>(size_t(cs.ns.numel()), 1.0), 1e-6);
      EXPECT_TRUE(all_close(f1.y, f64(r1.y, cs.shape), tol.rtol, tol.atol));
    }
  }
}

// ---- CUDA against the CPU ----

TEST(NormOpsCuda, MatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(16);
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rtol = test::cuda_rtol(dt);
    const DType pdt = (dt == DType::f16 || dt == DType::bf16) ? DType::f32 : dt;
    // {3, 70000}: an [N, C] input with more channels than grid.y holds (the column kernel
    // puts 32 channels in a block).
    for (const Shape& shape :
         {Shape{6, 3}, Shape{1000, 70}, Shape{3, 70000}, Shape{5, 3, 7}, Shape{32, 16, 28, 28}}) {
      SCOPED_TRACE(str(shape));
      const int64_t C = shape[1];
      Tensor x = add(randn(shape), full({}, 2.0)).to(dt), g = randn(shape).to(dt);
      Tensor w = randn({C}).to(pdt), b = randn({C}).to(pdt);
      Tensor rm = randn({C}).to(pdt), rv = rand({C}).to(pdt);
      Tensor crm = rm.clone(), crv = rv.clone(), grm = rm.to(dev), grv = rv.to(dev);
      for (bool training : {true, false}) {
        auto cf = ops::batch_norm_forward(x, w, b, crm, crv, training, 0.1, 1e-5);
        auto gf = ops::batch_norm_forward(x.to(dev), w.to(dev), b.to(dev), grm, grv, training, 0.1, 1e-5);
        EXPECT_TRUE(test::close_to_cpu(gf.y, cf.y, rtol));
        EXPECT_TRUE(test::close_to_cpu(grm, crm, rtol));
        EXPECT_TRUE(test::close_to_cpu(grv, crv, rtol));
        auto cb = ops::batch_norm_backward(g, x, w, cf.mean, cf.invstd, training, {true, true, true});
        auto gb = ops::batch_norm_backward(g.to(dev), x.to(dev), w.to(dev), gf.mean, gf.invstd,
                                           training, {true, true, true});
        EXPECT_TRUE(test::close_to_cpu(gb.dx, cb.dx, 4 * rtol));
        EXPECT_TRUE(test::close_to_cpu(gb.dweight, cb.dweight, 4 * rtol));
        EXPECT_TRUE(test::close_to_cpu(gb.dbias, cb.dbias, 4 * rtol));
      }
      if (shape.size() >= 3) {
        const int64_t G = C == 3 ? 3 : 4;
        Tensor gw = w.to(dt), gbias = b.to(dt);
        auto cf = ops::group_norm_forward(x, G, gw, gbias, 1e-5);
        auto gf = ops::group_norm_forward(x.to(dev), G, gw.to(dev), gbias.to(dev), 1e-5);
        EXPECT_TRUE(test::close_to_cpu(gf.y, cf.y, rtol));
        auto cb = ops::group_norm_backward(g, x, G, gw, cf.mean, cf.rstd, {true, true, true});
        auto gb = ops::group_norm_backward(g.to(dev), x.to(dev), G, gw.to(dev), gf.mean, gf.rstd,
                                           {true, true, true});
        EXPECT_TRUE(test::close_to_cpu(gb.dx, cb.dx, 4 * rtol));
        EXPECT_TRUE(test::close_to_cpu(gb.dweight, cb.dweight, 4 * rtol));
        EXPECT_TRUE(test::close_to_cpu(gb.dbias, cb.dbias, 4 * rtol));
      }
    }
    // 1000 x 64: dweight summed over several row chunks (rms_norm_param_kernel's grid.y).
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{33, 7}, {33, 768}, {33, 8192}, {1000, 64}}) {
      SCOPED_TRACE(str("rms ", rows, " x ", cols));
      Tensor x = randn({rows, cols}).to(dt), g = randn({rows, cols}).to(dt), w = randn({cols}).to(dt);
      auto cf = ops::rms_norm_forward(x, {cols}, w, 1e-6);
      auto gf = ops::rms_norm_forward(x.to(dev), {cols}, w.to(dev), 1e-6);
      EXPECT_TRUE(test::close_to_cpu(gf.y, cf.y, rtol));
      auto cb = ops::rms_norm_backward(g, x, {cols}, w, cf.rstd, {true, true});
      auto gb = ops::rms_norm_backward(g.to(dev), x.to(dev), {cols}, w.to(dev), gf.rstd, {true, true});
      EXPECT_TRUE(test::close_to_cpu(gb.dx, cb.dx, 4 * rtol));
      EXPECT_TRUE(test::close_to_cpu(gb.dweight, cb.dweight, 4 * rtol));
    }
  }
}

// Rows too few to fill the GPU (N * G small, long rows): the forward splits each row into
// slices (batch norm's shifted partial sums, combined per row in slice order) and the
// backward each (n, c) plane. [1, 4, 96, 96] with 2 groups: 5 slices per row forward, 3 per
// plane backward; the mean of 1000 against a unit spread checks that the one-pass variance is
// shifted (unshifted f32 sums would lose it; the accumulators are f64 for f32, and a shift
// keeps them exact for 16-bit too). [3, 6, 5, 5] keeps one block per row, for comparison.
TEST(NormOpsCuda, GroupNormSplitsFewLongRows) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(17);
  struct Case {
    Shape shape;
    int64_t G;
    double offset;
  };
  for (const Case& cs : {Case{{1, 4, 96, 96}, 2, 1000.0}, Case{{1, 4, 96, 96}, 2, 0.5}, Case{{3, 6, 5, 5}, 3, 2.0}}) {
    for (DType dt : {DType::f32, DType::bf16}) {
      if (dt == DType::bf16 && cs.offset > 100) continue;  // bf16 cannot hold 1000 + a unit spread
      SCOPED_TRACE(str(cs.shape, " G ", cs.G, " offset ", cs.offset, " ", dtype_name(dt)));
      const double rtol = test::cuda_rtol(dt);
      const int64_t C = cs.shape[1];
      Tensor x = add(randn(cs.shape), full({}, cs.offset)).to(dt), g = randn(cs.shape).to(dt);
      Tensor w = randn({C}).to(dt), b = randn({C}).to(dt);
      auto cf = ops::group_norm_forward(x, cs.G, w, b, 1e-5);
      auto gf = ops::group_norm_forward(x.to(dev), cs.G, w.to(dev), b.to(dev), 1e-5);
      // y = x * scale + shift rounds x * scale at the data's magnitude on both devices: an
      // absolute error of a few units of the last place of |x| * rstd * |w|, whatever the
      // statistics (rstd is about 1 here).
      const double eps = dt == DType::f32 ? 1.2e-7 : 7.9e-3;
      const double y_floor = 4 * eps * (cs.offset + 4) * w.abs().max().item<double>();
      EXPECT_TRUE(test::all_close(gf.y.cpu(), cf.y, rtol, std::max(y_floor, rtol * cf.y.abs().max().item<double>())));
      EXPECT_TRUE(test::close_to_cpu(gf.mean, cf.mean, rtol));
      EXPECT_TRUE(test::close_to_cpu(gf.rstd, cf.rstd, rtol));
      auto cb = ops::group_norm_backward(g, x, cs.G, w, cf.mean, cf.rstd, {true, true, true});
      auto gb = ops::group_norm_backward(g.to(dev), x.to(dev), cs.G, w.to(dev), gf.mean, gf.rstd, {true, true, true});
      EXPECT_TRUE(test::close_to_cpu(gb.dx, cb.dx, 4 * rtol));
      EXPECT_TRUE(test::close_to_cpu(gb.dweight, cb.dweight, 4 * rtol));
      EXPECT_TRUE(test::close_to_cpu(gb.dbias, cb.dbias, 4 * rtol));
    }
  }
}
