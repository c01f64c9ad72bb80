// avg_pool2d, adaptive_avg_pool2d, adaptive_max_pool2d, interpolate and pad (forward and the
// ops-level backward kernels) against f64 loops written here from PyTorch's definitions;
// conv_transpose2d and conv1d against direct loops; gradcheck (f64) of every differentiable
// op; and CUDA bodies compared with the CPU. A backward is checked as the transpose of the
// forward: dx[i] = <gy, F(e_i)> for each unit input e_i (F's linear part, from the naive
// forward), so it needs no second implementation of the backward.
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ember/ops/conv.h"
#include "ember/ops/matmul_config.h"
#include "ember/ops/pool.h"
#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {

using Vec = std::vector<double>;
using NaiveFn = std::function<Vec(const Vec&)>;

Vec values(const Tensor& t) { return t.to(Device::cpu(), DType::f64).contiguous().to_vector<double>(); }

// A non-contiguous tensor with the values of x (its last two dims stored transposed).
Tensor strided(const Tensor& x) { return x.transpose(-1, -2).contiguous().transpose(-1, -2); }

// dx of a linear F at gy: dx[i] = <gy, F(e_i)>.
Vec transpose_apply(const NaiveFn& f, int64_t n_in, const Vec& gy) {
  Vec dx(size_t(n_in), 0.0), e(size_t(n_in), 0.0);
  for (int64_t i = 0; i < n_in; ++i) {
    e[size_t(i)] = 1;
    const Vec y = f(e);
    e[size_t(i)] = 0;
    double s = 0;
    for (size_t j = 0; j < y.size(); ++j) s += gy[j] * y[j];
    dx[size_t(i)] = s;
  }
  return dx;
}

// ---- naive references (PyTorch's formulas, spelled out independently of ops/kernels) ----

int64_t naive_pool_out(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  const double v = double(in + 2 * p - k) / double(s);
  int64_t o = int64_t(ceil_mode ? std::ceil(v) : std::floor(v)) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;
  return o;
}

Vec naive_avg_pool(const Vec& x, const Shape& s, const ops::AvgPool2dParams& p) {
  const int64_t P = s[0] * s[1], H = s[2], W = s[3];
  const int64_t Ho = naive_pool_out(H, p.kernel[0], p.stride[0], p.padding[0], p.ceil_mode);
  const int64_t Wo = naive_pool_out(W, p.kernel[1], p.stride[1], p.padding[1], p.ceil_mode);
  Vec y;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
        const int64_t h1 = std::min(h0 + p.kernel[0], H + p.padding[0]), w1 = std::min(w0 + p.kernel[1], W + p.padding[1]);
        double sum = 0;
        int64_t n = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w)
            if (h >= 0 && h < H && w >= 0 && w < W) {
              sum += x[size_t((pl * H + h) * W + w)];
              ++n;
            }
        const int64_t div = p.divisor_override ? p.divisor_override : p.count_include_pad ? (h1 - h0) * (w1 - w0) : n;
        y.push_back(n == 0 ? 0.0 : sum / double(div));
      }
  return y;
}

int64_t bin_start(int64_t i, int64_t in, int64_t out) { return int64_t(std::floor(double(i) * in / out)); }
int64_t bin_end(int64_t i, int64_t in, int64_t out) { return int64_t(std::ceil(double(i + 1) * in / out)); }

// Average (or max, with first-max indices) over adaptive bins.
Vec naive_adaptive(const Vec& x, const Shape& s, int64_t Ho, int64_t Wo, bool max, Vec* indices = nullptr) {
  const int64_t P = s[0] * s[1], H = s[2], W = s[3];
  Vec y;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        int64_t n = 0, best = -1;
        for (int64_t h = bin_start(oh, H, Ho); h < bin_end(oh, H, Ho); ++h)
          for (int64_t w = bin_start(ow, W, Wo); w < bin_end(ow, W, Wo); ++w) {
            const double v = x[size_t((pl * H + h) * W + w)];
            if (max && (best < 0 || v > acc)) {
              acc = v;
              best = h * W + w;
            }
            if (!max) acc += v;
            ++n;
          }
        y.push_back(max ? acc : acc / double(n));
        if (indices) indices->push_back(double(best));
      }
  return y;
}

struct Interp {
  std::string mode;
  int64_t Ho, Wo;
  bool align;
  double sh, sw;  // user scale factors (0: none)
};

Vec naive_interp(const Vec& x, const Shape& s, const Interp& c) {
  const int64_t P = s[0] * s[1], H = s[2], W = s[3];
  auto scale = [&](int64_t in, int64_t out, double user) -> double {
    if (c.align) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
    return user > 0 ? 1.0 / user : double(in) / double(out);
  };
  auto nearest = [&](int64_t o, int64_t in, int64_t out, double user) -> int64_t {
    const float sc = user > 0 ? float(1.0 / user) : float(in) / float(out);
    return std::min<int64_t>(int64_t(std::floor(float(o) * sc)), in - 1);
  };
  auto taps = [&](int64_t o, int64_t in, int64_t out, double user, int64_t& i0, int64_t& i1, double& l1) {
    const double sc = scale(in, out, user);
    double r = c.align ? sc * double(o) : std::max(sc * (double(o) + 0.5) - 0.5, 0.0);
    i0 = std::min<int64_t>(int64_t(std::floor(r)), in - 1);
    i1 = std::min<int64_t>(i0 + 1, in - 1);
    l1 = std::clamp(r - double(i0), 0.0, 1.0);
  };
  Vec y;
  for (int64_t pl = 0; pl < P; ++pl)
    for (int64_t oh = 0; oh < c.Ho; ++oh)
      for (int64_t ow = 0; ow < c.Wo; ++ow) {
        const double* xp = x.data() + pl * H * W;
        if (c.mode == "nearest") {
          y.push_back(xp[nearest(oh, H, c.Ho, c.sh) * W + nearest(ow, W, c.Wo, c.sw)]);
          continue;
        }
        int64_t h0, h1, w0, w1;
        double lh, lw;
        taps(oh, H, c.Ho, c.sh, h0, h1, lh);
        taps(ow, W, c.Wo, c.sw, w0, w1, lw);
        y.push_back((1 - lh) * ((1 - lw) * xp[h0 * W + w0] + lw * xp[h0 * W + w1]) +
                    lh * ((1 - lw) * xp[h1 * W + w0] + lw * xp[h1 * W + w1]));
      }
  return y;
}

// pad of the trailing dims of x (shape s) by pads (PyTorch order), mode, value.
Vec naive_pad(const Vec& x, const Shape& s, const std::vector<int64_t>& pads, const std::string& mode, double value,
              Shape* out_shape = nullptr) {
  const size_t k = pads.size() / 2, d = s.size();
  Shape os = s;
  for (size_t j = 0; j < k; ++j) os[d - 1 - j] = s[d - 1 - j] + pads[2 * j] + pads[2 * j + 1];
  if (out_shape) *out_shape = os;
  Vec y(size_t(os.numel()));
  std::vector<int64_t> idx(d, 0);
  for (int64_t o = 0; o < os.numel(); ++o) {
    int64_t rem = o;
    for (size_t a = d; a-- > 0;) {
      idx[a] = rem % os[a];
      rem /= os[a];
    }
    bool inside = true;
    int64_t src = 0;
    for (size_t a = 0; a < d; ++a) {
      int64_t i = idx[a];
      const size_t j = d - 1 - a;  // pad pair of dim a, if padded
      if (j < k) {
        i -= pads[2 * j];
        const int64_t n = s[a];
        if (mode == "reflect") {
          while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
        } else if (mode == "replicate") {
          i = std::clamp<int64_t>(i, 0, n - 1);
        } else if (i < 0 || i >= n) {
          inside = false;
        }
      }
      src = src * s[a] + i;
    }
    y[size_t(o)] = inside ? x[size_t(src)] : value;
  }
  return y;
}

Tensor make(const Vec& v, const Shape& s) { return tensor(v, s); }

// ---- avg_pool2d ----

struct AvgCase {
  Shape x;
  ops::AvgPool2dParams p;
};

const std::vector<AvgCase> kAvgCases = {
    {{2, 3, 7, 6}, {{3, 3}, {2, 2}, {1, 1}, false, true, 0}},
    {{2, 3, 7, 6}, {{3, 3}, {2, 2}, {1, 1}, true, false, 0}},
    {{1, 2, 8, 5}, {{3, 3}, {2, 2}, {1, 1}, true, true, 0}},
    {{1, 2, 6, 6}, {{4, 4}, {3, 3}, {2, 2}, true, false, 0}},   // ceil_mode with a window that starts in the padding
    {{2, 2, 7, 9}, {{2, 3}, {2, 1}, {1, 0}, false, true, 5}},  // divisor_override
    {{1, 3, 5, 5}, {{5, 5}, {1, 1}, {0, 0}, false, true, 0}},   // whole plane
    {{1, 1, 9, 4}, {{3, 1}, {1, 1}, {1, 0}, false, false, 0}},  // overlapping windows
};

TEST(PoolOps, AvgPool2dForwardAndBackwardMatchNaive) {
  Generator gen(3);
  for (const AvgCase& c : kAvgCases) {
    SCOPED_TRACE(str("x ", c.x, " k", c.p.kernel[0], c.p.kernel[1], " s", c.p.stride[0], c.p.stride[1], " p",
                     c.p.padding[0], c.p.padding[1], " ceil ", c.p.ceil_mode, " cip ", c.p.count_include_pad, " div ",
                     c.p.divisor_override));
    Tensor x = randn(c.x, DType::f64, &gen);
    const Vec xv = values(x);
    const Vec yref = naive_avg_pool(xv, c.x, c.p);
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor y = ops::avg_pool2d(strided(x.to(dt)), c.p);
      EXPECT_TRUE(test::all_close(y, make(yref, y.sizes()), dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
      Tensor gy = randn(y.sizes(), DType::f64, &gen);
      const Vec dxref = transpose_apply([&](const Vec& v) { return naive_avg_pool(v, c.x, c.p); }, c.x.numel(), values(gy));
      Tensor dx = ops::avg_pool2d_backward(gy.to(dt), c.x, c.p);
      EXPECT_TRUE(test::all_close(dx, make(dxref, c.x), dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
    }
  }
}

TEST(PoolOps, AvgPool2dOutputSizes) {
  // PyTorch: 7 -> (7 + 2 - 3) / 2 + 1 = 4 either way; 8 -> 4 floor, 5 ceil minus the window
  // that would start in the padding = 4; 6 with k4 s3 p2 ceil -> 3.
  EXPECT_EQ(ops::pool_output_size(7, 3, 2, 1, false), 4);
  EXPECT_EQ(ops::pool_output_size(8, 3, 2, 1, false), 4);
  EXPECT_EQ(ops::pool_output_size(8, 3, 2, 1, true), 5);
  EXPECT_EQ(ops::pool_output_size(6, 4, 3, 2, true), 3);
  EXPECT_EQ(ops::pool_output_size(5, 2, 2, 0, true), 3);
  EXPECT_EQ(ops::pool_output_size(5, 2, 2, 0, false), 2);
}

// ---- adaptive pools ----

const std::vector<std::array<int64_t, 2>> kAdaptiveOut = {{1, 1}, {3, 2}, {4, 7}, {7, 5}, {2, 1}, {5, 3}};

TEST(PoolOps, AdaptiveAvgPool2dForwardAndBackwardMatchNaive) {
  Generator gen(4);
  const Shape xs{2, 3, 7, 5};
  Tensor x = randn(xs, DType::f64, &gen);
  const Vec xv = values(x);
  for (auto out : kAdaptiveOut) {
    SCOPED_TRACE(str("out ", out[0], "x", out[1]));
    const Vec yref = naive_adaptive(xv, xs, out[0], out[1], false);
    const Shape ys{2, 3, out[0], out[1]};
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor y = ops::adaptive_avg_pool2d(strided(x.to(dt)), out);
      EXPECT_TRUE(test::all_close(y, make(yref, ys), dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
      Tensor gy = randn(ys, DType::f64, &gen);
      const Vec dxref =
          transpose_apply([&](const Vec& v) { return naive_adaptive(v, xs, out[0], out[1], false); }, xs.numel(), values(gy));
      EXPECT_TRUE(test::all_close(ops::adaptive_avg_pool2d_backward(gy.to(dt), xs), make(dxref, xs),
                                  dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
    }
  }
}

TEST(PoolOps, GlobalAvgPoolLargePlanesMultithreaded) {
  // [4, 64, 12, 12]: past the parallel threshold; the 1x1 fast path against a plain mean.
  Generator gen(5);
  Tensor x = randn({4, 64, 12, 12}, DType::f32, &gen);
  Tensor y = ops::adaptive_avg_pool2d(x, {1, 1});
  EXPECT_TRUE(test::all_close(y, x.to(DType::f64).mean({2, 3}, true), 1e-5, 1e-6));
  Tensor gy = randn({4, 64, 1, 1}, DType::f32, &gen);
  Tensor dx = ops::adaptive_avg_pool2d_backward(gy, x.sizes());
  EXPECT_TRUE(test::all_close(dx, (gy.to(DType::f64) / 144.0).expand(x.sizes()), 1e-6, 1e-7));
}

TEST(PoolOps, AdaptiveMaxPool2dMatchesNaive) {
  Generator gen(6);
  const Shape xs{2, 3, 7, 5};
  Tensor x = randn(xs, DType::f64, &gen);
  const Vec xv = values(x);
  for (auto out : kAdaptiveOut) {
    SCOPED_TRACE(str("out ", out[0], "x", out[1]));
    Vec iref;
    const Vec yref = naive_adaptive(xv, xs, out[0], out[1], true, &iref);
    const Shape ys{2, 3, out[0], out[1]};
    auto [y, idx] = ops::adaptive_max_pool2d(strided(x), out);
    EXPECT_TRUE(test::all_close(y, make(yref, ys), 0, 0));
    EXPECT_TRUE(test::all_close(idx, make(iref, ys), 0, 0));
    // The gradient lands on the argmax: max_pool2d's scatter.
    Tensor gy = randn(ys, DType::f64, &gen);
    Vec dxref(size_t(xs.numel()), 0.0);
    const Vec gv = values(gy);
    for (int64_t j = 0; j < ys.numel(); ++j) dxref[size_t(j / (out[0] * out[1]) * 35 + int64_t(iref[size_t(j)]))] += gv[size_t(j)];
    EXPECT_TRUE(test::all_close(ops::max_pool2d_backward(gy, idx, xs), make(dxref, xs), 1e-12, 1e-12));
  }
}

TEST(PoolOps, AdaptiveMaxPool2dNaNWinsAndTiesKeepFirst) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor x = tensor(Vec{1, 3, 3, 0, nan, 2, 5, 5, 5}, {1, 1, 3, 3}, DType::f64);
  auto [y, idx] = ops::adaptive_max_pool2d(x, {2, 2});
  // Bins rows {0,1},{1,2} x cols {0,1},{1,2}.
  EXPECT_TRUE(std::isnan(y.to_vector<double>()[0]));
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{4, 4, 4, 4}));
  Tensor x2 = tensor(Vec{1, 3, 3, 0, 1, 2, 5, 5, 5}, {1, 1, 3, 3}, DType::f64);
  auto [y2, idx2] = ops::adaptive_max_pool2d(x2, {2, 2});
  EXPECT_EQ(idx2.to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 6, 7}));
  EXPECT_EQ(y2.to_vector<double>(), (Vec{3, 3, 5, 5}));
}

// ---- interpolate ----

const std::vector<Interp> kInterpCases = {
    {"nearest", 7, 9, false, 0, 0},     {"nearest", 10, 8, false, 2, 2},   {"nearest", 7, 9, false, 1.5, 2.3},
    {"nearest", 3, 2, false, 0, 0},     {"bilinear", 7, 9, false, 0, 0},   {"bilinear", 7, 9, true, 0, 0},
    {"bilinear", 10, 8, false, 2, 2},   {"bilinear", 10, 8, true, 2, 2},   {"bilinear", 3, 6, false, 0.6, 1.7},
    {"bilinear", 1, 1, true, 0, 0},     {"bilinear", 5, 4, false, 0, 0},   {"bilinear", 2, 3, false, 0, 0},
};

TEST(PoolOps, InterpolateForwardAndBackwardMatchNaive) {
  Generator gen(7);
  const Shape xs{2, 3, 5, 4};
  Tensor x = randn(xs, DType::f64, &gen);
  const Vec xv = values(x);
  for (const Interp& c : kInterpCases) {
    SCOPED_TRACE(str(c.mode, " ", c.Ho, "x", c.Wo, " align ", c.align, " scale ", c.sh, ",", c.sw));
    const ops::Upsample2dParams p{c.mode == "nearest" ? ops::InterpolateMode::nearest : ops::InterpolateMode::bilinear,
                                  c.align, {c.sh, c.sw}};
    const Shape ys{2, 3, c.Ho, c.Wo};
    const Vec yref = naive_interp(xv, xs, c);
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor y = ops::upsample2d(strided(x.to(dt)), {c.Ho, c.Wo}, p);
      EXPECT_TRUE(test::all_close(y, make(yref, ys), dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
      Tensor gy = randn(ys, DType::f64, &gen);
      const Vec dxref = transpose_apply([&](const Vec& v) { return naive_interp(v, xs, c); }, xs.numel(), values(gy));
      EXPECT_TRUE(test::all_close(ops::upsample2d_backward(gy.to(dt), xs, p), make(dxref, xs),
                                  dt == DType::f64 ? 1e-12 : 1e-5, 1e-5));
    }
  }
}

TEST(PoolOps, InterpolateOptionsFollowPyTorch) {
  Tensor x = randn({1, 2, 5, 4}, DType::f64);
  // scale_factor given: out = floor(in * s) and the given scale in the source index.
  Tensor a = interpolate(x, {.scale_factor = {{1.5, 2.3}}, .mode = "nearest"});
  EXPECT_EQ(a.sizes(), (Shape{1, 2, 7, 9}));
  EXPECT_TRUE(test::all_close(a, make(naive_interp(values(x), x.sizes(), {"nearest", 7, 9, false, 1.5, 2.3}), a.sizes()), 0, 0));
  // recompute_scale_factor: the scale is out / in again.
  Tensor b = interpolate(x, {.scale_factor = {1.7, 1.7}, .mode = "bilinear", .recompute_scale_factor = true});
  EXPECT_TRUE(test::all_close(b, make(naive_interp(values(x), x.sizes(), {"bilinear", 8, 6, false, 0, 0}), b.sizes()),
                              1e-12, 1e-12));
  EXPECT_NE(test::message_of<ValueError>([&] { interpolate(x, {.size = {3, 3}, .align_corners = true}); })
                .find("[interpolate] align_corners option can only be set"),
            std::string::npos);
  EXPECT_EQ(test::message_of<ValueError>([&] { interpolate(x, {.mode = "bilinear"}); }).rfind("[interpolate]", 0), 0u);
  EXPECT_EQ(test::message_of<ValueError>([&] { interpolate(x, {.size = {3, 3}, .mode = "bicubic"}); }).rfind("[interpolate]", 0),
            0u);
}

// ---- pad ----

struct PadCase {
  Shape x;
  std::vector<int64_t> pads;
  std::string mode;
  double value;
};

const std::vector<PadCase> kPadCases = {
    {{2, 3, 5, 4}, {1, 2, 0, 3}, "constant", 0.5},
    {{2, 3, 5, 4}, {-1, 2, 1, -2}, "constant", 0},
    {{2, 3, 5, 4}, {2, 1, 3, 2}, "reflect", 0},
    {{2, 3, 5, 4}, {2, 3, 1, 4}, "replicate", 0},
    {{2, 3, 5}, {3, 2}, "reflect", 0},
    {{3, 5}, {4, 4}, "reflect", 0},
    {{2, 6}, {0, 3}, "replicate", 0},
    {{1, 2, 3, 4, 5}, {1, 2, 2, 1, 1, 0}, "replicate", 0},
    {{1, 2, 3, 4, 5}, {1, 2, 2, 1, 2, 1}, "reflect", 0},
    {{2, 3, 4, 5}, {1, 0, 0, 2, 1, 1}, "constant", -1.5},
    {{2, 1, 3}, {2, 0}, "replicate", 0},
    {{2, 3, 4}, {-2, -2}, "constant", 0},  // everything cropped away but a middle
    {{2, 3}, {5, -4}, "constant", 2},      // no input column survives
};

TEST(PoolOps, PadForwardAndBackwardMatchNaive) {
  Generator gen(8);
  for (const PadCase& c : kPadCases) {
    SCOPED_TRACE(str(c.mode, " x ", c.x, " pads ", Shape(c.pads)));
    Tensor x = randn(c.x, DType::f64, &gen);
    Shape ys;
    const Vec yref = naive_pad(values(x), c.x, c.pads, c.mode, c.value, &ys);
    const ops::PadMode m = c.mode == "constant" ? ops::PadMode::constant
                           : c.mode == "reflect" ? ops::PadMode::reflect
                                                 : ops::PadMode::replicate;
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor y = ops::pad(strided(x.to(dt)), c.pads, m, c.value);
      EXPECT_TRUE(test::all_close(y, make(yref, ys).to(dt), 0, 0));  // a copy: exact
      Tensor gy = randn(ys, DType::f64, &gen);
      const Vec dxref = transpose_apply([&](const Vec& v) { return naive_pad(v, c.x, c.pads, c.mode, 0.0); },
                                        c.x.numel(), values(gy));
      EXPECT_TRUE(test::all_close(ops::pad_backward(gy.to(dt), c.x, c.pads, m), make(dxref, c.x),
                                  dt == DType::f64 ? 1e-12 : 1e-5, 1e-6));
    }
  }
}

TEST(PoolOps, PadIntegerConstantAndErrors) {
  Tensor x = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = pad(x, {1, 1}, "constant", 7);
  EXPECT_EQ(y.dtype(), DType::i64);
  EXPECT_EQ(y.to_vector<int64_t>(), (std::vector<int64_t>{7, 1, 2, 3, 7, 7, 4, 5, 6, 7}));
  Tensor f = randn({2, 3, 4}, DType::f64);
  EXPECT_EQ(test::message_of<ValueError>([&] { pad(f, {4, 0}, "reflect"); }).rfind("[pad] reflect padding", 0), 0u);
  EXPECT_EQ(test::message_of<ValueError>([&] { pad(f, {1, 0}, "circular"); }).rfind("[pad] mode", 0), 0u);
  EXPECT_EQ(test::message_of<ShapeError>([&] { pad(f, {1, 1, 1, 1, 1, 1}, "reflect"); }).rfind("[pad]", 0), 0u);
  EXPECT_EQ(test::message_of<ShapeError>([&] { pad(f, {-3, -2}); }).rfind("[pad] input size 4", 0), 0u);
  EXPECT_EQ(test::message_of<ValueError>([&] { pad(f, {1, 2, 3}); }).rfind("[pad] pad must have", 0), 0u);
}

TEST(PoolOps, ErrorsNameTheOp) {
  Tensor x = randn({1, 2, 5, 5}, DType::f64);
  EXPECT_EQ(test::message_of<ValueError>([&] { avg_pool2d(x, {3, 3}, {1, 1}, {2, 2}); }).rfind("[avg_pool2d] padding", 0),
            0u);
  EXPECT_EQ(test::message_of<ShapeError>([&] { avg_pool2d(x, {7, 7}); }).rfind("[avg_pool2d] input of shape", 0), 0u);
  EXPECT_EQ(test::message_of<ShapeError>([&] { adaptive_avg_pool2d(randn({5, 5}), 2); }).rfind("[adaptive_avg_pool2d]", 0),
            0u);
  EXPECT_EQ(test::message_of<Error>([&] { adaptive_max_pool2d(Tensor(), 2); }).rfind("[adaptive_max_pool2d]", 0), 0u);
  EXPECT_EQ(test::message_of<DTypeError>([&] { adaptive_avg_pool2d(x.to(DType::i64), 1); }).rfind("[adaptive_avg_pool2d]", 0),
            0u);
}

// ---- conv_transpose2d and conv1d against direct loops ----

// y[n, g*Cog + co, ih*s - p + ki*d, ...] += x[n, ci, ih, iw] * w[ci, co, ki, kj].
Vec naive_conv_transpose(const Vec& x, const Shape& xs, const Vec& w, const Shape& ws, const Vec& b,
                         std::array<int64_t, 2> s, std::array<int64_t, 2> p, std::array<int64_t, 2> op, int64_t groups,
                         std::array<int64_t, 2> d, Shape& ys) {
  const int64_t N = xs[0], Ci = xs[1], H = xs[2], W = xs[3], Cog = ws[1], kh = ws[2], kw = ws[3];
  const int64_t Co = Cog * groups, Cig = Ci / groups;
  const int64_t Ho = (H - 1) * s[0] - 2 * p[0] + d[0] * (kh - 1) + op[0] + 1;
  const int64_t Wo = (W - 1) * s[1] - 2 * p[1] + d[1] * (kw - 1) + op[1] + 1;
  ys = {N, Co, Ho, Wo};
  Vec y(size_t(ys.numel()), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t co = 0; co < Co; ++co)
      for (int64_t i = 0; i < Ho * Wo; ++i) y[size_t((n * Co + co) * Ho * Wo + i)] = b.empty() ? 0.0 : b[size_t(co)];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t ci = 0; ci < Ci; ++ci)
      for (int64_t ih = 0; ih < H; ++ih)
        for (int64_t iw = 0; iw < W; ++iw)
          for (int64_t c = 0; c < Cog; ++c)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t oh = ih * s[0] - p[0] + ki * d[0], ow = iw * s[1] - p[1] + kj * d[1];
                if (oh < 0 || oh >= Ho || ow < 0 || ow >= Wo) continue;
                const int64_t co = (ci / Cig) * Cog + c;
                y[size_t(((n * Co + co) * Ho + oh) * Wo + ow)] +=
                    x[size_t(((n * Ci + ci) * H + ih) * W + iw)] * w[size_t(((ci * Cog + c) * kh + ki) * kw + kj)];
              }
  return y;
}

struct ConvTCase {
  Shape x, w;
  std::array<int64_t, 2> stride, padding, output_padding;
  int64_t groups;
  std::array<int64_t, 2> dilation;
  bool bias;
};

const std::vector<ConvTCase> kConvTCases = {
    {{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {0, 0}, 1, {1, 1}, true},
    {{2, 4, 4, 5}, {4, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 2, {1, 1}, true},   // stride 2 + output_padding + groups
    {{1, 3, 4, 5}, {3, 2, 3, 2}, {1, 2}, {2, 1}, {1, 0}, 1, {2, 2}, false},  // output_padding >= stride (< dilation)
    {{1, 4, 3, 3}, {4, 1, 2, 2}, {2, 2}, {0, 0}, {0, 0}, 4, {1, 1}, true},   // depthwise, no overlap
    {{2, 2, 5, 4}, {2, 3, 1, 1}, {3, 2}, {0, 0}, {2, 1}, 1, {1, 1}, false},  // 1x1 with gaps
};

TEST(PoolOps, ConvTranspose2dMatchesNaiveAndGradcheck) {
  Generator gen(9);
  for (const ConvTCase& c : kConvTCases) {
    SCOPED_TRACE(str("x ", c.x, " w ", c.w, " s", c.stride[0], c.stride[1], " p", c.padding[0], c.padding[1], " op",
                     c.output_padding[0], c.output_padding[1], " g", c.groups, " d", c.dilation[0], c.dilation[1]));
    Tensor x = randn(c.x, DType::f64, &gen), w = randn(c.w, DType::f64, &gen);
    Tensor b = c.bias ? randn({c.w[1] * c.groups}, DType::f64, &gen) : Tensor();
    Shape ys;
    const Vec yref = naive_conv_transpose(values(x), c.x, values(w), c.w, c.bias ? values(b) : Vec{}, c.stride, c.padding,
                                          c.output_padding, c.groups, c.dilation, ys);
    Tensor y = conv_transpose2d(strided(x), w, b, c.stride, c.padding, c.output_padding, c.groups, c.dilation);
    EXPECT_TRUE(test::all_close(y, make(yref, ys), 1e-12, 1e-12));
    Tensor f32 = conv_transpose2d(x.to(DType::f32), w.to(DType::f32), c.bias ? b.to(DType::f32) : b, c.stride,
                                  c.padding, c.output_padding, c.groups, c.dilation);
    EXPECT_TRUE(test::all_close(f32, make(yref, ys), 1e-4, 1e-5));
    TensorList in{x.requires_grad_(), w.requires_grad_()};
    if (c.bias) in.push_back(b.requires_grad_());
    EXPECT_TRUE(gradcheck([&](const TensorList& t) {
      return conv_transpose2d(t[0], t[1], c.bias ? t[2] : Tensor(), c.stride, c.padding, c.output_padding, c.groups,
                              c.dilation);
    }, in));
  }
}

TEST(PoolOps, ConvTranspose2dIsTheAdjointOfConv2d) {
  // <conv2d(a, w), b> == <a, conv_transpose2d(b, w)> for conv2d's geometry.
  Generator gen(10);
  Tensor a = randn({2, 4, 9, 8}, DType::f64, &gen), w = randn({6, 2, 3, 3}, DType::f64, &gen);
  Tensor ya = conv2d(a, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2);
  Tensor bt = randn(ya.sizes(), DType::f64, &gen);
  Tensor xb = conv_transpose2d(bt, w, Tensor(), {2, 2}, {1, 1}, {0, 1}, 2);
  ASSERT_EQ(xb.sizes(), a.sizes());
  EXPECT_NEAR((ya * bt).sum().item<double>(), (a * xb).sum().item<double>(), 1e-10);
}

TEST(PoolOps, Conv1dMatchesNaiveAndGradcheck) {
  Generator gen(11);
  const int64_t N = 2, C = 4, L = 11, O = 6, K = 3, groups = 2, s = 2, p = 2, d = 2;
  Tensor x = randn({N, C, L}, DType::f64, &gen), w = randn({O, C / groups, K}, DType::f64, &gen);
  Tensor b = randn({O}, DType::f64, &gen);
  const int64_t Lo = (L + 2 * p - d * (K - 1) - 1) / s + 1;
  const Vec xv = values(x), wv = values(w), bv = values(b);
  Vec yref;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t l = 0; l < Lo; ++l) {
        double acc = bv[size_t(o)];
        for (int64_t c = 0; c < C / groups; ++c)
          for (int64_t k = 0; k < K; ++k) {
            const int64_t il = l * s - p + k * d, ci = (o / (O / groups)) * (C / groups) + c;
            if (il >= 0 && il < L) acc += xv[size_t((n * C + ci) * L + il)] * wv[size_t((o * (C / groups) + c) * K + k)];
          }
        yref.push_back(acc);
      }
  EXPECT_TRUE(test::all_close(conv1d(strided(x), w, b, s, p, d, groups), make(yref, {N, O, Lo}), 1e-12, 1e-12));
  // Unbatched [C, L].
  EXPECT_TRUE(test::all_close(conv1d(x.select(0, 1), w, b, s, p, d, groups),
                              conv1d(x, w, b, s, p, d, groups).select(0, 1), 1e-12, 1e-12));
  EXPECT_TRUE(gradcheck([&](const TensorList& t) { return conv1d(t[0], t[1], t[2], s, p, d, groups); },
                        {x.requires_grad_(), w.requires_grad_(), b.requires_grad_()}));
  EXPECT_EQ(test::message_of<ShapeError>([&] { conv1d(randn({2, 4, 5, 5}), w); }).rfind("[conv1d]", 0), 0u);
  EXPECT_EQ(test::message_of<DTypeError>([&] { conv_transpose2d(randn({1, 4, 3, 3}), randn({4, 2, 3, 3}, DType::f64)); })
                .rfind("[conv_transpose2d] input dtype", 0),
            0u);
  EXPECT_EQ(test::message_of<ValueError>([&] {
              conv_transpose2d(randn({1, 4, 3, 3}), randn({4, 2, 3, 3}), Tensor(), {2, 2}, {0, 0}, {2, 0});
            }).rfind("[conv_transpose2d] output padding", 0),
            0u);
}

// ---- gradcheck (f64) of the differentiable pool / resample / pad ops ----

TEST(PoolGrad, GradcheckEveryOp) {
  Generator gen(12);
  Tensor x = randn({2, 2, 5, 6}, DType::f64, &gen).requires_grad_();
  using Fn = std::function<Tensor(const TensorList&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"avg_pool2d", [](const TensorList& t) { return avg_pool2d(t[0], {3, 3}, {2, 2}, {1, 1}, true, false); }},
      {"avg_pool2d divisor", [](const TensorList& t) { return avg_pool2d(t[0], {2, 3}, {1, 2}, {1, 1}, false, true, 4); }},
      {"avg_pool2d 3-D", [](const TensorList& t) { return avg_pool2d(t[0].select(0, 1), {2, 2}); }},
      {"adaptive_avg_pool2d", [](const TensorList& t) { return adaptive_avg_pool2d(t[0], {3, 4}); }},
      {"adaptive_avg_pool2d 1", [](const TensorList& t) { return adaptive_avg_pool2d(t[0], 1); }},
      {"adaptive_max_pool2d", [](const TensorList& t) { return adaptive_max_pool2d(t[0], {2, 4}); }},
      {"nearest", [](const TensorList& t) { return interpolate(t[0], {.size = {7, 4}}); }},
      {"bilinear", [](const TensorList& t) { return interpolate(t[0], {.size = {8, 9}, .mode = "bilinear"}); }},
      {"bilinear align", [](const TensorList& t) {
         return interpolate(t[0], {.scale_factor = {0.7, 1.5}, .mode = "bilinear", .align_corners = true});
       }},
      {"pad constant", [](const TensorList& t) { return pad(t[0], {1, -2, 2, 0}, "constant", 3.0); }},
      {"pad reflect", [](const TensorList& t) { return pad(t[0], {2, 3, 4, 1}, "reflect"); }},
      {"pad replicate", [](const TensorList& t) { return pad(t[0], {3, 0, 1, 2}, "replicate"); }},
  };
  for (const auto& [name, fn] : ops) {
    SCOPED_TRACE(name);
    // Through a transposed view of the input, and a transposed output (so the incoming
    // gradient is strided too).
    EXPECT_TRUE(gradcheck([&](const TensorList& t) {
      return fn({t[0].transpose(2, 3).contiguous().transpose(2, 3)}).transpose(-1, -2);
    }, {x}));
    // Double backward: v -> grad(f(x), x, v), differentiated w.r.t. v (each VJP here is
    // recorded with its own VJP, so the gradient of a gradient is available).
    Tensor v = randn(fn({x.detach()}).sizes(), DType::f64, &gen).requires_grad_();
    EXPECT_TRUE(gradcheck([&](const TensorList& in) {
      const bool outer = GradMode::is_enabled();
      AutoGradMode on(true);
      Tensor xi = x.detach().requires_grad_();
      return autograd::grad({fn({xi})}, {xi}, {in[0]}, /*retain_graph=*/true, /*create_graph=*/outer)[0];
    }, {v}));
  }
}

// ---- CUDA against the CPU ----

class PoolCuda : public ::testing::TestWithParam<Device> {};

TEST_P(PoolCuda, EveryOpMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = GetParam();
  Generator gen(13);
  struct Op {
    std::string name;
    Shape x;
    std::function<Tensor(const Tensor&)> fwd;
  };
  const std::vector<Op> cases = {
      {"avg_pool2d 3x3/2", {4, 16, 15, 14}, [](const Tensor& t) { return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}); }},
      {"avg_pool2d ceil nopad", {2, 3, 8, 7}, [](const Tensor& t) { return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, true, false); }},
      {"avg_pool2d divisor", {2, 3, 8, 7}, [](const Tensor& t) { return avg_pool2d(t, {2, 3}, {2, 1}, {1, 0}, false, true, 5); }},
      {"global pool", {128, 64, 7, 7}, [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
      {"global pool big planes", {2, 3, 33, 35}, [](const Tensor& t) { return adaptive_avg_pool2d(t, 1); }},
      {"adaptive avg 3x5", {2, 4, 7, 11}, [](const Tensor& t) { return adaptive_avg_pool2d(t, {3, 5}); }},
      {"adaptive avg up", {2, 4, 3, 4}, [](const Tensor& t) { return adaptive_avg_pool2d(t, {7, 6}); }},
      {"adaptive max", {2, 4, 7, 11}, [](const Tensor& t) { return adaptive_max_pool2d(t, {3, 5}); }},
      {"nearest", {2, 3, 5, 4}, [](const Tensor& t) { return interpolate(t, {.size = {7, 9}}); }},
      {"nearest x2", {2, 3, 5, 4}, [](const Tensor& t) { return interpolate(t, {.scale_factor = {2, 2}}); }},
      {"nearest scale", {2, 3, 5, 4}, [](const Tensor& t) { return interpolate(t, {.scale_factor = {1.5, 2.3}}); }},
      {"bilinear x2", {2, 8, 14, 14}, [](const Tensor& t) { return interpolate(t, {.scale_factor = {2, 2}, .mode = "bilinear"}); }},
      {"bilinear align", {2, 3, 5, 4}, [](const Tensor& t) {
         return interpolate(t, {.size = {7, 9}, .mode = "bilinear", .align_corners = true});
       }},
      {"bilinear down", {2, 3, 9, 8}, [](const Tensor& t) {
         return interpolate(t, {.scale_factor = {0.6, 0.45}, .mode = "bilinear"});
       }},
      {"pad constant", {2, 3, 5, 4}, [](const Tensor& t) { return pad(t, {-1, 2, 1, 3}, "constant", 0.5); }},
      {"pad reflect", {2, 3, 5, 4}, [](const Tensor& t) { return pad(t, {2, 1, 3, 2}, "reflect"); }},
      {"pad replicate 3d", {1, 2, 3, 4, 5}, [](const Tensor& t) { return pad(t, {1, 2, 2, 1, 1, 3}, "replicate"); }},
      {"conv_transpose2d", {2, 4, 5, 6}, [](const Tensor& t) {
         Generator g(1);
         Tensor w = randn({4, 3, 3, 3}, DType::f64, &g).to(t.device(), t.dtype());
         return conv_transpose2d(t, w, Tensor(), {2, 2}, {1, 1}, {1, 1}, 2);
       }},
      {"conv1d", {2, 4, 11}, [](const Tensor& t) {
         Generator g(2);
         Tensor w = randn({6, 2, 3}, DType::f64, &g).to(t.device(), t.dtype());
         return conv1d(t, w, Tensor(), 2, 2, 2, 2);
       }},
  };
  cuda::AllowTF32Guard exact_f32(false);
  for (const Op& c : cases) {
    for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
      SCOPED_TRACE(str(c.name, " ", dt));
      Tensor x = randn(c.x, DType::f64, &gen).to(dt);
      Tensor xc = x.clone().requires_grad_(), xg = x.to(dev).requires_grad_();
      Tensor yc = c.fwd(xc), yg = c.fwd(xg);
      EXPECT_TRUE(test::close_to_cpu(yg, yc, test::cuda_rtol(dt)));
      Tensor gy = randn(yc.sizes(), DType::f64, &gen).to(dt);
      yc.backward(gy);
      yg.backward(gy.to(dev));
      EXPECT_TRUE(test::close_to_cpu(xg.grad(), xc.grad(), test::cuda_rtol(dt) * 4));
    }
  }
  auto [v, i] = adaptive_max_pool2d_with_indices(randn({2, 3, 7, 5}, DType::f64, &gen).to(dev), {3, 2});
  EXPECT_EQ(i.device(), dev);
}

INSTANTIATE_TEST_SUITE_P(Cuda, PoolCuda, ::testing::ValuesIn(test::cuda_devices()), test::device_label);

}  // namespace
