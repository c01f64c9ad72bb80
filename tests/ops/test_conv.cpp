// conv2d and max_pool2d (forward and the ops-level backward kernels) against direct loops
// written here in f64: no im2col, no GEMM, every output element summed from its definition.
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ember/deterministic.h"
#include "ember/ops/conv.h"
#include "ember/ops/matmul_config.h"
#include "support/test_support.h"

using namespace ember;

namespace {

struct ConvCase {
  int64_t N, C, H, W, O, kh, kw;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool bias;
};

std::string label(const ConvCase& c) {
  return str("x[", c.N, ",", c.C, ",", c.H, ",", c.W, "] w[", c.O, ",", c.C / c.groups, ",", c.kh, ",", c.kw,
             "] s", c.stride[0], c.stride[1], " p", c.padding[0], c.padding[1], " d", c.dilation[0],
             c.dilation[1], " g", c.groups, c.bias ? " bias" : "");
}

const std::vector<ConvCase> kConvCases = {
    {2, 3, 7, 6, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},
    {2, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false},
    {1, 2, 9, 8, 3, 3, 2, {2, 3}, {1, 2}, {1, 1}, 1, true},    // asymmetric everything
    {2, 2, 9, 9, 2, 3, 3, {1, 1}, {2, 2}, {2, 2}, 1, true},    // dilation
    {2, 4, 6, 6, 6, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, true},    // groups
    {1, 6, 5, 5, 6, 3, 3, {2, 2}, {1, 1}, {1, 1}, 6, false},   // depthwise
    {3, 4, 5, 5, 8, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true},    // 1x1 (no unfolding)
    {3, 4, 5, 5, 8, 1, 1, {2, 2}, {0, 0}, {1, 1}, 2, false},   // 1x1 strided, grouped
    {5, 3, 12, 10, 8, 5, 5, {2, 1}, {2, 2}, {1, 2}, 1, true},  // many samples: parallel path
    {1, 1, 3, 3, 1, 5, 5, {1, 1}, {1, 1}, {1, 1}, 1, false},   // kernel == padded input
    {1, 16, 20, 20, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},  // one large sample (Winograd)
    // Winograd F(2x2, 3x3): 3x3, stride 1, >= 16 channels in and out per group, padding <= 2.
    {3, 16, 9, 7, 16, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},   // odd output: partial tiles
    {2, 16, 6, 5, 32, 3, 3, {1, 1}, {1, 2}, {1, 1}, 1, false},  // padding 1 and 2
    {2, 16, 3, 3, 16, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},   // one output pixel
    {2, 32, 7, 6, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 2, true},   // groups
    {5, 16, 22, 22, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true}, // work units span samples
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Direct convolution; also gives the adjoint loops (dx, dw) for a given dy.
struct DirectConv {
  ConvCase c;
  int64_t Ho, Wo, Cg, Og;
  explicit DirectConv(const ConvCase& cc)
      : c(cc), Ho(out_size(cc.H, cc.kh, cc.stride[0], cc.padding[0], cc.dilation[0])),
        Wo(out_size(cc.W, cc.kw, cc.stride[1], cc.padding[1], cc.dilation[1])), Cg(cc.C / cc.groups),
        Og(cc.O / cc.groups) {}
  // Calls f(x_index, w_index, y_index) for every multiply-add of the convolution.
  template <class F>
  void each(F f) const {
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t o = 0; o < c.O; ++o) {
        const int64_t g = o / Og;
        for (int64_t oh = 0; oh < Ho; ++oh)
          for (int64_t ow = 0; ow < Wo; ++ow)
            for (int64_t ci = 0; ci < Cg; ++ci)
              for (int64_t i = 0; i < c.kh; ++i)
                for (int64_t j = 0; j < c.kw; ++j) {
                  const int64_t ih = oh * c.stride[0] - c.padding[0] + i * c.dilation[0];
                  const int64_t iw = ow * c.stride[1] - c.padding[1] + j * c.dilation[1];
                  if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                  const int64_t xi = ((n * c.C + g * Cg + ci) * c.H + ih) * c.W + iw;
                  const int64_t wi = ((o * Cg + ci) * c.kh + i) * c.kw + j;
                  const int64_t yi = ((n * c.O + o) * Ho + oh) * Wo + ow;
                  f(xi, wi, yi);
                }
      }
  }
  Shape y_shape() const { return {c.N, c.O, Ho, Wo}; }
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) const {
    auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
    std::vector<double> y(size_t(y_shape().numel()), 0.0);
    each([&](int64_t xi, int64_t wi, int64_t yi) { y[size_t(yi)] += xv[size_t(xi)] * wv[size_t(wi)]; });
    if (b.defined()) {
      auto bv = b.to_vector<double>();
      for (size_t i = 0; i < y.size(); ++i) y[i] += bv[(i / size_t(Ho * Wo)) % size_t(c.O)];
    }
    return tensor<double>(y, y_shape());
  }
  Tensor grad_input(const Tensor& dy, const Tensor& w) const {
    auto gv = dy.to_vector<double>(), wv = w.to_vector<double>();
    std::vector<double> dx(size_t(c.N * c.C * c.H * c.W), 0.0);
    each([&](int64_t xi, int64_t wi, int64_t yi) { dx[size_t(xi)] += gv[size_t(yi)] * wv[size_t(wi)]; });
    return tensor<double>(dx, {c.N, c.C, c.H, c.W});
  }
  Tensor grad_weight(const Tensor& dy, const Tensor& x) const {
    auto gv = dy.to_vector<double>(), xv = x.to_vector<double>();
    std::vector<double> dw(size_t(c.O * Cg * c.kh * c.kw), 0.0);
    each([&](int64_t xi, int64_t wi, int64_t yi) { dw[size_t(wi)] += gv[size_t(yi)] * xv[size_t(xi)]; });
    return tensor<double>(dw, {c.O, Cg, c.kh, c.kw});
  }
};

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-11, 1e-11};
    case DType::f32: return {1e-4, 1e-4};
    case DType::f16: return {3e-3, 3e-3};
    default: return {1.5e-2, 1.5e-2};
  }
}

ops::Conv2dParams params(const ConvCase& c) { return {c.stride, c.padding, c.dilation, c.groups}; }

}  // namespace

// Every CPU algorithm (Note [CPU convolution algorithms]): each forced in turn (where a shape
// is not its kind it falls back to im2col), then the measured choice; in f64 (not oneDNN's:
// it is f32 only, so forcing it in f64 repeats the others) and in f32 on NCHW and on
// channels_last activations (Note [Memory format]). f16 and bf16 compute in f32 by the same
// algorithms (converted once around the call), so they run on the measured choice only.
const std::vector<std::string> kCpuConvAlgorithms = {"im2col", "winograd", "onednn", "auto"};

struct ConvVariant {
  std::string algorithm;
  DType dtype;
  MemoryFormat format;
  std::string label() const {
    return algorithm + " " + dtype_name(dtype) + (format == MemoryFormat::channels_last ? " channels_last" : "");
  }
};
std::vector<ConvVariant> conv_variants(std::initializer_list<DType> half_dtypes) {
  std::vector<ConvVariant> v;
  for (const std::string& a : kCpuConvAlgorithms) {
    if (a != "onednn") v.push_back({a, DType::f64, MemoryFormat::contiguous});
    for (MemoryFormat f : {MemoryFormat::contiguous, MemoryFormat::channels_last}) v.push_back({a, DType::f32, f});
  }
  for (DType dt : half_dtypes) v.push_back({"auto", dt, MemoryFormat::contiguous});
  v.push_back({"auto", DType::bf16, MemoryFormat::channels_last});
  return v;
}

// Runs body(case, x, w, tolerance) for every variant and case, x and w drawn in f64 and
// converted (x to the variant's layout), under the variant's algorithm.
template <class Body>
void for_each_conv_variant(std::initializer_list<DType> half_dtypes, Body body) {
  for (const ConvVariant& v : conv_variants(half_dtypes)) {
    for (const ConvCase& c : kConvCases) {
      SCOPED_TRACE(label(c) + " " + v.label());
      test::CpuConvAlgorithm setting(v.algorithm);
      Tensor x = randn({c.N, c.C, c.H, c.W}, DType::f64).to(v.dtype).contiguous(v.format);
      Tensor w = randn({c.O, c.C / c.groups, c.kh, c.kw}, DType::f64).to(v.dtype);
      body(c, v, x, w, tol_for(v.dtype));
    }
  }
}

TEST(Conv2d, ForwardMatchesDirectLoop) {
  for_each_conv_variant({DType::f16, DType::bf16}, [](const ConvCase& c, const ConvVariant& v, const Tensor& x,
                                                      const Tensor& w, Tol t) {
    DirectConv ref(c);
    Tensor b = c.bias ? randn({c.O}, DType::f64).to(v.dtype) : Tensor();
    Tensor y = conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups);
    ASSERT_EQ(y.sizes(), ref.y_shape());
    EXPECT_EQ(y.dtype(), v.dtype);
    EXPECT_TRUE(y.is_contiguous(x.suggest_memory_format()));
    EXPECT_TRUE(test::all_close(y, ref.forward(x, w, b), t.rtol, t.atol));
  });
}

TEST(Conv2d, BackwardKernelsMatchDirectLoops) {
  for_each_conv_variant({DType::bf16}, [](const ConvCase& c, const ConvVariant& v, const Tensor& x,
                                          const Tensor& w, Tol t) {
    DirectConv ref(c);
    Tensor dy = randn(ref.y_shape(), DType::f64).to(v.dtype).contiguous(x.suggest_memory_format());
    Tensor gx = ops::conv2d_backward_input(dy, w, x.sizes(), params(c));
    EXPECT_TRUE(gx.is_contiguous(x.suggest_memory_format()));
    EXPECT_TRUE(test::all_close(gx, ref.grad_input(dy, w), t.rtol, t.atol));
    EXPECT_TRUE(test::all_close(ops::conv2d_backward_weight(dy, x, w.sizes(), params(c)), ref.grad_weight(dy, x),
                                t.rtol, 4 * t.atol));
    // db = dy summed over N, H, W.
    std::vector<double> gv = dy.to_vector<double>(), db(size_t(c.O), 0.0);
    for (size_t i = 0; i < gv.size(); ++i) db[(i / size_t(ref.Ho * ref.Wo)) % size_t(c.O)] += gv[i];
    EXPECT_TRUE(test::all_close(ops::conv2d_backward_bias(dy), db, t.rtol, 4 * t.atol));
  });
}

TEST(Conv2d, NonContiguousInputsAndUnbatched) {
  ConvCase c{2, 3, 6, 5, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true};
  DirectConv ref(c);
  Tensor x = randn({2, 6, 5, 3}, DType::f64).permute({0, 3, 1, 2});  // NHWC memory
  Tensor w = randn({4, 3, 3, 3}, DType::f64).transpose(2, 3);
  Tensor b = randn({8}, DType::f64).slice(0, 0, 8, 2);
  ASSERT_FALSE(x.is_contiguous());
  EXPECT_TRUE(test::all_close(conv2d(x, w, b, c.stride, c.padding), ref.forward(x, w, b), 1e-11, 1e-11));
  // [C, H, W] input: as a batch of one, without the batch dim.
  Tensor x1 = randn({3, 6, 5}, DType::f64);
  Tensor y1 = conv2d(x1, w, b, c.stride, c.padding);
  EXPECT_EQ(y1.sizes(), Shape({4, 6, 5}));
  EXPECT_TRUE(test::all_close(y1, conv2d(x1.unsqueeze(0), w, b, c.stride, c.padding).squeeze(0), 0, 0));
}

namespace {
// Sets ops::set_conv_winograd for a scope and puts the previous value back.
}  // namespace

// The Winograd path (Note [Winograd convolution]) runs exactly where its rule says: on an
// eligible shape every pass's f32 result differs from im2col's in the last bits (and agrees
// to ~1e-6 of the output's scale); on the others the setting changes nothing, bit for bit.
// (The values of both paths are checked against the direct loops above.)
TEST(Conv2d, WinogradRunsOnEligibleShapesOnly) {
  struct Case {
    ConvCase c;
    bool eligible;
  };
  const std::vector<Case> cases = {
      {{2, 16, 10, 9, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false}, true},
      {{2, 32, 6, 6, 32, 3, 3, {1, 1}, {2, 0}, {1, 1}, 2, false}, true},
      {{2, 8, 10, 9, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false}, false},   // 8 input channels
      {{2, 16, 10, 9, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false}, false},   // 8 output channels
      {{2, 32, 10, 9, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 4, false}, false},  // 8 per group
      {{2, 16, 10, 9, 16, 3, 3, {2, 2}, {1, 1}, {1, 1}, 1, false}, false},  // stride 2
      {{2, 16, 10, 9, 16, 3, 3, {1, 1}, {1, 1}, {2, 2}, 1, false}, false},  // dilation 2
      {{2, 16, 10, 9, 16, 3, 3, {1, 1}, {3, 1}, {1, 1}, 1, false}, false},  // padding 3
      {{2, 16, 10, 9, 16, 5, 5, {1, 1}, {1, 1}, {1, 1}, 1, false}, false},  // 5x5
  };
  for (const Case& k : cases) {
    const ConvCase& c = k.c;
    SCOPED_TRACE(label(c));
    Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.groups, c.kh, c.kw});
    Tensor dy = randn(DirectConv(c).y_shape());
    const ops::Conv2dParams p = params(c);
    auto passes = [&](bool winograd) {
      test::CpuConvAlgorithm setting(winograd ? "winograd" : "im2col");
      return std::vector<Tensor>{ops::conv2d(x, w, Tensor(), p), ops::conv2d_backward_input(dy, w, x.sizes(), p),
                                 ops::conv2d_backward_weight(dy, x, w.sizes(), p)};
    };
    const std::vector<Tensor> on = passes(true), off = passes(false);
    for (size_t i = 0; i < on.size(); ++i) {
      SCOPED_TRACE(str("pass ", i));
      if (k.eligible) {
        EXPECT_NE(on[i].to_vector<float>(), off[i].to_vector<float>());
        double scale = 0;
        for (double v : off[i].to_vector<double>()) scale = std::max(scale, std::abs(v));
        EXPECT_TRUE(test::all_close(on[i], off[i], 0, 1e-5 * scale));
      } else {
        EXPECT_EQ(on[i].to_vector<float>(), off[i].to_vector<float>());
      }
    }
  }
}

// Called from threads of a caller's OpenMP team (larger than omp_get_max_threads()), the
// Winograd passes run single-threaded on each and agree with a call from outside.
TEST(Conv2d, WinogradInsideACallersParallelRegion) {
  const ConvCase c{4, 16, 12, 12, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, false};
  Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C, 3, 3}), dy = randn({c.N, c.O, c.H, c.W});
  const ops::Conv2dParams p = params(c);
  const Tensor y = ops::conv2d(x, w, Tensor(), p), gw = ops::conv2d_backward_weight(dy, x, w.sizes(), p);
  const int team = omp_get_max_threads() + 4;
  const size_t members = static_cast<size_t>(team);
  std::vector<Tensor> ys(members), gws(members);
#pragma omp parallel num_threads(team)
  {
    const size_t t = size_t(omp_get_thread_num());
    ys[t] = ops::conv2d(x, w, Tensor(), p);
    gws[t] = ops::conv2d_backward_weight(dy, x, w.sizes(), p);
  }
  for (int t = 0; t < team; ++t) {
    SCOPED_TRACE(str("thread ", t));
    ASSERT_TRUE(ys[size_t(t)].defined() && gws[size_t(t)].defined());
    EXPECT_TRUE(test::all_close(ys[size_t(t)], y, 1e-5, 1e-5));
    EXPECT_TRUE(test::all_close(gws[size_t(t)], gw, 1e-5, 1e-4));
  }
}

// oneDNN (where this build has it) computes the passes of the reference cases above that it
// has optimized kernels for, strided, padded, dilated, grouped and odd-sized among them, and
// agrees with the f64 direct loops; the kernels' names say which ran.
TEST(Conv2d, OneDnnRunsWhereItHasAKernel) {
  if (ops::onednn_version().empty()) GTEST_SKIP() << "this build has no oneDNN (libdnnl-dev)";
  test::CpuConvAlgorithm setting("onednn");
  int ran = 0;
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(label(c));
    DirectConv ref(c);
    const Shape xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C / c.groups, c.kh, c.kw};
    Tensor x = randn(xs, DType::f64), w = randn(ws, DType::f64), dy = randn(ref.y_shape(), DType::f64);
    Tensor b = c.bias ? randn({c.O}, DType::f64) : Tensor();
    const Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32), dy32 = dy.to(DType::f32);
    const Tensor b32 = c.bias ? b.to(DType::f32) : Tensor();
    const std::string fwd = ops::cpu_conv_algorithm(ops::ConvPass::forward, xs, ws, params(c), DType::f32, c.bias);
    const std::string gin = ops::cpu_conv_algorithm(ops::ConvPass::backward_input, xs, ws, params(c));
    const std::string gw = ops::cpu_conv_algorithm(ops::ConvPass::backward_weight, xs, ws, params(c));
    for (const std::string& name : {fwd, gin, gw}) {
      EXPECT_TRUE(name == "im2col" || name.rfind("onednn:", 0) == 0) << name;
      ran += name.rfind("onednn:", 0) == 0;
    }
    EXPECT_TRUE(test::all_close(ops::conv2d(x32, w32, b32, params(c)), ref.forward(x, w, b), 1e-4, 1e-4)) << fwd;
    EXPECT_TRUE(test::all_close(ops::conv2d_backward_input(dy32, w32, xs, params(c)), ref.grad_input(dy, w), 1e-4,
                                1e-4))
        << gin;
    EXPECT_TRUE(test::all_close(ops::conv2d_backward_weight(dy32, x32, ws, params(c)), ref.grad_weight(dy, x), 1e-4,
                                4e-4))
        << gw;
    // f64 stays with ember's own kernels: oneDNN's CPU convolutions are f32; bf16 computes in f32.
    EXPECT_EQ(ops::cpu_conv_algorithm(ops::ConvPass::forward, xs, ws, params(c), DType::f64), "im2col");
    EXPECT_EQ(ops::cpu_conv_algorithm(ops::ConvPass::backward_input, xs, ws, params(c), DType::bf16), gin);
  }
  // Most of the 48 passes have a kernel (the reference loops oneDNN keeps for the rest are
  // never chosen).
  EXPECT_GE(ran, 30);
}

// The measured choice: the first call of a geometry times the allowed algorithms and returns
// the winner's own result (bit for bit what that algorithm computes when forced), later calls
// run the cached winner; set_deterministic skips the measurement for the fixed order (oneDNN,
// then Winograd), whose calls repeat bit for bit.
TEST(Conv2d, AutotuneReturnsTheWinnersResultAndDeterministicTakesTheFixedOrder) {
  const ConvCase c{6, 16, 11, 10, 16, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true};  // Winograd-eligible too
  const Shape xs{c.N, c.C, c.H, c.W}, ws{c.O, c.C, 3, 3};
  const ops::Conv2dParams p = params(c);
  const Tensor x = randn(xs), w = randn(ws), b = randn({c.O}), dy = randn(DirectConv(c).y_shape());
  auto run = [&](ops::ConvPass pass) {
    switch (pass) {
      case ops::ConvPass::forward: return ops::conv2d(x, w, b, p);
      case ops::ConvPass::backward_input: return ops::conv2d_backward_input(dy, w, xs, p);
      case ops::ConvPass::backward_weight: break;
    }
    return ops::conv2d_backward_weight(dy, x, ws, p);
  };
  const bool onednn = !ops::onednn_version().empty();
  for (ops::ConvPass pass : {ops::ConvPass::forward, ops::ConvPass::backward_input, ops::ConvPass::backward_weight}) {
    SCOPED_TRACE(str("pass ", int(pass)));
    const bool bias = pass == ops::ConvPass::forward;
    std::string chosen;
    Tensor first, second;
    {
      test::CpuConvAlgorithm setting("auto");
      first = run(pass);
      chosen = ops::cpu_conv_algorithm(pass, xs, ws, p, DType::f32, bias);
      second = run(pass);
      EXPECT_EQ(ops::cpu_conv_algorithm(pass, xs, ws, p, DType::f32, bias), chosen);
    }
    EXPECT_EQ(first.to_vector<float>(), second.to_vector<float>()) << chosen;
    const std::string forced = chosen.substr(0, chosen.find(':'));
    ASSERT_TRUE(forced == "im2col" || forced == "winograd" || (onednn && forced == "onednn")) << chosen;
    {
      test::CpuConvAlgorithm setting(forced);
      EXPECT_EQ(run(pass).to_vector<float>(), first.to_vector<float>()) << chosen;
    }
    // Deterministic: no measurement, the fixed order's first.
    test::CpuConvAlgorithm setting("auto");
    const bool prev = is_deterministic();
    set_deterministic(true);
    const std::string fixed = ops::cpu_conv_algorithm(pass, xs, ws, p, DType::f32, bias);
    EXPECT_EQ(fixed.substr(0, fixed.find(':')), onednn ? "onednn" : "winograd");
    const Tensor a = run(pass), a2 = run(pass);
    set_deterministic(prev);
    EXPECT_EQ(a.to_vector<float>(), a2.to_vector<float>()) << fixed;
  }
}

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }
}  // namespace

TEST(Conv2d, ArgumentErrors) {
  Tensor x = zeros({2, 3, 8, 8});
  std::string m = error_of([&] { conv2d(x, zeros({4, 2, 3, 3})); });
  EXPECT_TRUE(starts_with(m, "[conv2d] input of shape [2, 3, 8, 8] has 3 channels, but weight of shape "
                             "[4, 2, 3, 3] with groups=1 expects 2"))
      << m;
  m = error_of([&] { conv2d(x, zeros({4, 3, 9, 9})); });
  EXPECT_TRUE(starts_with(m, "[conv2d] kernel size 9x9")) << m;
  EXPECT_NE(m.find("bigger than the padded input 8x8"), std::string::npos) << m;
  m = error_of([&] { conv2d(x, zeros({4, 3, 5, 5}), Tensor(), {1, 1}, {0, 0}, {2, 2}); });
  EXPECT_NE(m.find("(dilated: 9x9) is bigger than the padded input 8x8"), std::string::npos) << m;
  m = error_of([&] { conv2d(zeros({2, 4, 8, 8}), zeros({3, 2, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 2); });
  EXPECT_TRUE(starts_with(m, "[conv2d] weight of shape [3, 2, 3, 3] has 3 output channels, which groups=2"))
      << m;
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}), zeros({5})), ShapeError);
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3})), ShapeError);
  EXPECT_THROW(conv2d(zeros({8, 8}), zeros({4, 3, 3, 3})), ShapeError);
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {0, 1}), ValueError);
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {1, 1}, {-1, 0}), ValueError);
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {0, 1}), ValueError);
  EXPECT_THROW(conv2d(x, zeros({4, 3, 3, 3}), Tensor(), {1, 1}, {0, 0}, {1, 1}, 0), ValueError);
  m = error_of([&] { conv2d(x, zeros({4, 3, 3, 3}, DType::f64)); });
  EXPECT_TRUE(starts_with(m, "[conv2d] input dtype f32 and weight dtype f64 differ")) << m;
  EXPECT_THROW(conv2d(zeros({2, 3, 8, 8}, DType::i64), zeros({4, 3, 3, 3}, DType::i64)), DTypeError);
}

// ---- max_pool2d ----

namespace {
struct PoolCase {
  int64_t N, C, H, W;
  std::array<int64_t, 2> kernel, stride, padding;
};

// Values and indices by the definition (padding is -inf; scanning row by row, the first NaN
// wins, else the first maximum).
std::pair<std::vector<double>, std::vector<int64_t>> direct_pool(const Tensor& x, const PoolCase& p, int64_t Ho,
                                                                 int64_t Wo) {
  auto xv = x.to_vector<double>();
  std::vector<double> y;
  std::vector<int64_t> idx;
  for (int64_t nc = 0; nc < p.N * p.C; ++nc)
    for (int64_t oh = 0; oh < Ho; ++oh)
      for (int64_t ow = 0; ow < Wo; ++ow) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t bi = -1;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            const int64_t ih = oh * p.stride[0] - p.padding[0] + i, iw = ow * p.stride[1] - p.padding[1] + j;
            if (ih < 0 || ih >= p.H || iw < 0 || iw >= p.W) continue;
            const double v = xv[size_t(nc * p.H * p.W + ih * p.W + iw)];
            if (bi >= 0 && std::isnan(best)) continue;
            if (bi < 0 || v > best || std::isnan(v)) {
              best = v;
              bi = ih * p.W + iw;
            }
          }
        y.push_back(best);
        idx.push_back(bi);
      }
  return {y, idx};
}

const std::vector<PoolCase> kPoolCases = {
    {2, 3, 8, 8, {2, 2}, {2, 2}, {0, 0}},
    {3, 5, 9, 11, {2, 2}, {2, 2}, {0, 0}},  // 2x2 fast path, odd sizes (last row/column unused)
    {4, 32, 26, 26, {2, 2}, {2, 2}, {0, 0}},  // 2x2 fast path, in parallel
    {1, 2, 7, 9, {3, 3}, {2, 2}, {1, 1}},
    {2, 2, 7, 6, {3, 2}, {1, 2}, {1, 0}},  // overlapping windows
    {1, 1, 5, 5, {5, 5}, {1, 1}, {2, 2}},
    {4, 8, 33, 31, {3, 3}, {2, 2}, {1, 1}},  // large enough to run in parallel
};
}  // namespace

TEST(MaxPool2d, ForwardMatchesDirectLoop) {
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (const PoolCase& p : kPoolCases) {
      SCOPED_TRACE(str("x[", p.N, ",", p.C, ",", p.H, ",", p.W, "] k", p.kernel[0], p.kernel[1], " s",
                       p.stride[0], p.stride[1], " p", p.padding[0], p.padding[1], " ", dt));
      Tensor x = randn({p.N, p.C, p.H, p.W}, DType::f64).to(dt);
      auto [y, idx] = ops::max_pool2d(x, {p.kernel, p.stride, p.padding});
      const int64_t Ho = out_size(p.H, p.kernel[0], p.stride[0], p.padding[0], 1);
      const int64_t Wo = out_size(p.W, p.kernel[1], p.stride[1], p.padding[1], 1);
      ASSERT_EQ(y.sizes(), Shape({p.N, p.C, Ho, Wo}));
      auto [ry, ridx] = direct_pool(x, p, Ho, Wo);
      EXPECT_TRUE(test::all_close(y, {p.N, p.C, Ho, Wo}, ry, 0, 0));  // a max is exact
      EXPECT_EQ(idx.dtype(), DType::i64);
      EXPECT_EQ(idx.to_vector<int64_t>(), ridx);
      EXPECT_TRUE(test::all_close(max_pool2d(x, p.kernel, p.stride, p.padding), {p.N, p.C, Ho, Wo}, ry, 0, 0));
    }
  }
}

// Ties and NaNs decide the index: small integers (many ties) with NaNs sprinkled in, so some
// windows hold two NaNs or a NaN after a maximum. Every case above, fast path and generic.
TEST(MaxPool2d, TiesAndNansMatchDirectLoop) {
  for (const PoolCase& p : kPoolCases) {
    SCOPED_TRACE(str("x[", p.N, ",", p.C, ",", p.H, ",", p.W, "] k", p.kernel[0], p.kernel[1]));
    std::vector<double> v = randn({p.N, p.C, p.H, p.W}, DType::f64).to_vector<double>();
    for (double& e : v) e = std::round(1.5 * e);
    for (size_t i = 0; i < v.size(); i += 7) v[i] = NAN;
    for (size_t i = 3; i < v.size(); i += 11) v[i] = NAN;
    for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
      Tensor x = tensor<double>(v, {p.N, p.C, p.H, p.W}).to(dt);
      auto [y, idx] = ops::max_pool2d(x, {p.kernel, p.stride, p.padding});
      auto [ry, ridx] = direct_pool(x, p, y.size(2), y.size(3));
      EXPECT_EQ(idx.to_vector<int64_t>(), ridx) << str(dt);
      auto yv = y.to_vector<double>();
      for (size_t k = 0; k < yv.size(); ++k)
        ASSERT_TRUE(yv[k] == ry[k] || (std::isnan(yv[k]) && std::isnan(ry[k]))) << k << " " << str(dt);
    }
  }
}

TEST(MaxPool2d, BackwardScattersToArgmax) {
  for (const PoolCase& p : kPoolCases) {
    Tensor x = randn({p.N, p.C, p.H, p.W}, DType::f64);
    auto [y, idx] = ops::max_pool2d(x, {p.kernel, p.stride, p.padding});
    Tensor g = randn(y.sizes(), DType::f64);
    std::vector<double> ref(size_t(x.numel()), 0.0), gv = g.to_vector<double>();
    std::vector<int64_t> iv = idx.to_vector<int64_t>();
    const size_t per_out = size_t(y.size(2) * y.size(3)), per_in = size_t(p.H * p.W);
    for (size_t k = 0; k < gv.size(); ++k) ref[(k / per_out) * per_in + size_t(iv[k])] += gv[k];
    EXPECT_TRUE(test::all_close(ops::max_pool2d_backward(g, idx, x.sizes()), {p.N, p.C, p.H, p.W}, ref, 1e-12, 1e-12));
    // The gather is its adjoint: <scatter(g), h> == <g, gather(h)>.
    Tensor h = randn(x.sizes(), DType::f64);
    auto dot = [](const Tensor& a, const Tensor& b) {
      auto av = a.to_vector<double>(), bv = b.to_vector<double>();
      double s = 0;
      for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
      return s;
    };
    EXPECT_NEAR(dot(ops::max_pool2d_backward(g, idx, x.sizes()), h), dot(g, ops::max_pool2d_gather(h, idx)), 1e-9);
  }
}

TEST(MaxPool2d, NanPropagatesAndDefaultStride) {
  Tensor x = tensor<float>({1, 2, 3, 4, 5, NAN, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  Tensor y = max_pool2d(x, {2, 2});  // stride {0, 0} = kernel
  EXPECT_EQ(y.sizes(), Shape({1, 1, 2, 2}));
  auto v = y.to_vector<double>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 8);
  EXPECT_EQ(v[2], 14);
  EXPECT_EQ(v[3], 16);
  // Unbatched [C, H, W].
  EXPECT_EQ(max_pool2d(randn({3, 6, 6}), {3, 3}).sizes(), Shape({3, 2, 2}));
}

TEST(MaxPool2d, ArgumentErrors) {
  Tensor x = zeros({1, 1, 4, 4});
  std::string m = error_of([&] { max_pool2d(x, {2, 2}, {2, 2}, {2, 2}); });
  EXPECT_TRUE(starts_with(m, "[max_pool2d] padding [2, 2] must be non-negative and at most half of kernel_size [2, 2]"))
      << m;
  m = error_of([&] { max_pool2d(x, {5, 5}); });
  EXPECT_TRUE(starts_with(m, "[max_pool2d] kernel_size [5, 5] is bigger than the padded input 4x4")) << m;
  EXPECT_THROW(max_pool2d(x, {0, 2}), ValueError);
  EXPECT_THROW(max_pool2d(x, {2, 2}, {1, 0}), ValueError);
  EXPECT_THROW(max_pool2d(zeros({4, 4}), {2, 2}), ShapeError);
  EXPECT_THROW(max_pool2d(zeros({1, 1, 4, 4}, DType::i64), {2, 2}), DTypeError);
}

// ---- devices ----

class ConvDevice : public ::testing::TestWithParam<Device> {};

TEST_P(ConvDevice, MatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);  // plain f32 on cuDNN: the CPU's tolerance
  for (const ConvCase& c : kConvCases) {
    SCOPED_TRACE(label(c));
    Tensor x = randn({c.N, c.C, c.H, c.W}), w = randn({c.O, c.C / c.groups, c.kh, c.kw});
    Tensor b = c.bias ? randn({c.O}) : Tensor();
    Tensor y = conv2d(x.to(dev), w.to(dev), c.bias ? b.to(dev) : b, c.stride, c.padding, c.dilation, c.groups);
    EXPECT_EQ(y.device(), dev);
    EXPECT_TRUE(test::all_close(y.cpu(), conv2d(x, w, b, c.stride, c.padding, c.dilation, c.groups), 1e-3, 1e-3));
  }
}

namespace {
// |got - expect| <= k * (|expect| + max |expect|): a tolerance relative to the output's scale,
// since a convolution's error grows with the magnitude of its sums, not of each element.
::testing::AssertionResult close_at_scale(const Tensor& got, const Tensor& expect, double k) {
  double scale = 0;
  for (double v : expect.to_vector<double>()) scale = std::max(scale, std::abs(v));
  return test::all_close(got.cpu(), expect, k, k * scale);
}

// Scale-relative tolerance per (dtype, TF32): f64 and exact f32 differ from the CPU only in
// summation order; TF32 rounds inputs to 10 mantissa bits (~1e-3 per product); f16 and bf16
// results are rounded once from f32 sums (1 ulp: 2^-10 and 2^-7 relative).
double conv_tol(DType dt, bool tf32) {
  switch (dt) {
    case DType::f64: return 1e-10;
    case DType::f32: return tf32 ? 5e-3 : 2e-5;
    case DType::f16: return 3e-3;
    default: return 2e-2;
  }
}
}  // namespace

// Forward, backward input, backward weight and backward bias on cuDNN against the CPU, in
// every dtype, on the same (dtype-rounded) inputs; f32 with and without TF32.
TEST_P(ConvDevice, EveryPassAndDTypeMatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  struct Mode {
    DType dt;
    bool tf32;
  };
  for (Mode m : {Mode{DType::f32, false}, Mode{DType::f32, true}, Mode{DType::f64, false}, Mode{DType::f16, false},
                 Mode{DType::bf16, false}}) {
    cuda::AllowTF32Guard tf32(m.tf32);
    const double k = conv_tol(m.dt, m.tf32);
    for (const ConvCase& c : kConvCases) {
      SCOPED_TRACE(label(c) + " " + dtype_name(m.dt) + (m.tf32 ? " tf32" : ""));
      DirectConv ref(c);
      Tensor x = randn({c.N, c.C, c.H, c.W}).to(m.dt), w = randn({c.O, c.C / c.groups, c.kh, c.kw}).to(m.dt);
      Tensor b = c.bias ? randn({c.O}).to(m.dt) : Tensor();
      Tensor dy = randn(ref.y_shape()).to(m.dt);
      const ops::Conv2dParams p = params(c);
      Tensor y = ops::conv2d(x.to(dev), w.to(dev), c.bias ? b.to(dev) : b, p);
      EXPECT_EQ(y.dtype(), m.dt);
      EXPECT_TRUE(close_at_scale(y, ops::conv2d(x, w, b, p), k)) << "forward";
      EXPECT_TRUE(close_at_scale(ops::conv2d_backward_input(dy.to(dev), w.to(dev), x.sizes(), p),
                                 ops::conv2d_backward_input(dy, w, x.sizes(), p), k))
          << "backward input";
      EXPECT_TRUE(close_at_scale(ops::conv2d_backward_weight(dy.to(dev), x.to(dev), w.sizes(), p),
                                 ops::conv2d_backward_weight(dy, x, w.sizes(), p), k))
          << "backward weight";
      EXPECT_TRUE(close_at_scale(ops::conv2d_backward_bias(dy.to(dev)), ops::conv2d_backward_bias(dy),
                                 conv_tol(m.dt, false)))
          << "backward bias";
    }
  }
}

TEST_P(ConvDevice, BackwardIsDeterministicAndLargeShapesWork) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  // A layer of a small CNN: under set_deterministic(true) two runs of every pass are
  // bit-identical (deterministic cuDNN algorithms, no atomics in the bias reduction).
  struct Deterministic {
    bool prev = is_deterministic();
    Deterministic() { set_deterministic(true); }
    ~Deterministic() { set_deterministic(prev); }
  } deterministic;
  const ops::Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  Tensor x = randn({32, 16, 28, 28}).to(dev), w = randn({32, 16, 3, 3}).to(dev), dy = randn({32, 32, 28, 28}).to(dev);
  for (int pass = 0; pass < 3; ++pass) {
    auto run = [&] {
      if (pass == 0) return ops::conv2d_backward_input(dy, w, x.sizes(), p);
      if (pass == 1) return ops::conv2d_backward_weight(dy, x, w.sizes(), p);
      return ops::conv2d_backward_bias(dy);
    };
    EXPECT_EQ(run().cpu().to_vector<float>(), run().cpu().to_vector<float>()) << "pass " << pass;
  }
  // Non-contiguous device inputs (the front makes them contiguous) agree with the CPU.
  cuda::AllowTF32Guard exact_f32(false);
  Tensor xc = randn({2, 6, 5, 3}), wc = randn({4, 3, 3, 3});
  EXPECT_TRUE(close_at_scale(conv2d(xc.to(dev).permute({0, 3, 1, 2}), wc.to(dev).transpose(2, 3), Tensor(), {1, 1}, {1, 1}),
                             conv2d(xc.permute({0, 3, 1, 2}), wc.transpose(2, 3), Tensor(), {1, 1}, {1, 1}), 2e-5));
}

// max_pool2d is exact on every device: same maxima, same indices (first maximum, NaN wins),
// and a backward that adds in the CPU's order (bit-identical, deterministic).
TEST_P(ConvDevice, MaxPoolMatchesCpuExactly) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const PoolCase& c : kPoolCases) {
      SCOPED_TRACE(str("x[", c.N, ",", c.C, ",", c.H, ",", c.W, "] k", c.kernel[0], c.kernel[1], " s",
                       c.stride[0], c.stride[1], " p", c.padding[0], c.padding[1], " ", dt));
      const ops::Pool2dParams p{c.kernel, c.stride, c.padding};
      // Few distinct values: many ties inside windows; a few NaNs.
      Tensor x = randint(-3, 4, {c.N, c.C, c.H, c.W}).to(dt);
      if (c.H * c.W > 20) x.view({-1}).narrow(0, 7, 1).fill_(NAN);
      auto [y, idx] = ops::max_pool2d(x, p);
      auto [yd, idxd] = ops::max_pool2d(x.to(dev), p);
      EXPECT_TRUE(test::all_close(yd.cpu(), y, 0, 0));
      EXPECT_EQ(idxd.cpu().to_vector<int64_t>(), idx.to_vector<int64_t>());
      Tensor g = randn(y.sizes()).to(dt);
      Tensor gx = ops::max_pool2d_backward(g, idx, x.sizes());
      Tensor gxd = ops::max_pool2d_backward(g.to(dev), idxd, x.sizes());
      EXPECT_TRUE(test::all_close(gxd.cpu(), gx, 0, 0));
      EXPECT_EQ(gxd.cpu().to_vector<double>(), ops::max_pool2d_backward(g.to(dev), idxd, x.sizes()).cpu().to_vector<double>());
      Tensor h = randn(x.sizes()).to(dt);
      EXPECT_TRUE(test::all_close(ops::max_pool2d_gather(h.to(dev), idxd).cpu(), ops::max_pool2d_gather(h, idx), 0, 0));
    }
  }
  // Many planes with overlapping windows (kernel 3, stride 1): long chains of repeated indices.
  Tensor x = randn({8, 64, 17, 19});
  const ops::Pool2dParams p{{3, 3}, {1, 1}, {1, 1}};
  auto [y, idx] = ops::max_pool2d(x, p);
  Tensor g = randn(y.sizes());
  EXPECT_TRUE(test::all_close(ops::max_pool2d_backward(g.to(dev), idx.to(dev), x.sizes()).cpu(),
                              ops::max_pool2d_backward(g, idx, x.sizes()), 0, 0));
}

// A workspace limit the fastest algorithms exceed: cuDNN's next candidates run instead (a
// limit of 0 leaves the implicit-GEMM kind), with the same results; without determinism the
// first-ranked algorithm may be nondeterministic, and still agrees with the CPU.
TEST_P(ConvDevice, WorkspaceLimitFallsBackToLeanerAlgorithms) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  struct RestoreLimit {
    int64_t prev = ops::cudnn_workspace_limit();
    ~RestoreLimit() { ops::set_cudnn_workspace_limit(prev); }
  } restore;
  const ops::Conv2dParams p{{1, 1}, {1, 1}, {1, 1}, 1};
  Tensor x = randn({8, 16, 20, 20}), w = randn({32, 16, 3, 3}), dy = randn({8, 32, 20, 20});
  Tensor xd = x.to(dev), wd = w.to(dev), dyd = dy.to(dev);
  for (int64_t limit : {int64_t(-1), int64_t(0), int64_t(1) << 20}) {
    SCOPED_TRACE(limit);
    ops::set_cudnn_workspace_limit(limit);
    cuda::synchronize();
    cuda::reset_peak_memory_stats(0);
    const int64_t base = cuda::memory_allocated(0);
    Tensor y = ops::conv2d(xd, wd, Tensor(), p);
    Tensor gx = ops::conv2d_backward_input(dyd, wd, x.sizes(), p);
    Tensor gw = ops::conv2d_backward_weight(dyd, xd, w.sizes(), p);
    // With a limit of 0 nothing but the three outputs (and 1-byte workspaces, rounded to the
    // allocator's 512-byte blocks) was ever allocated.
    const int64_t outputs = (y.numel() + gx.numel() + gw.numel()) * 4;
    if (limit == 0) {
      EXPECT_LE(cuda::max_memory_allocated(0) - base, outputs + 3 * 512);
    }
    EXPECT_TRUE(close_at_scale(y, ops::conv2d(x, w, Tensor(), p), 2e-5));
    EXPECT_TRUE(close_at_scale(gx, ops::conv2d_backward_input(dy, w, x.sizes(), p), 2e-5));
    EXPECT_TRUE(close_at_scale(gw, ops::conv2d_backward_weight(dy, x, w.sizes(), p), 2e-5));
  }
}

// ops::set_cudnn_benchmark(true): the first call of a geometry times cuDNN's algorithms on its
// own buffers and later calls run the fastest, from the cache; both agree with the CPU (the
// simulation's cuDNN leaves NaN in the output after its trials, so a result that skipped the
// real run would show). A geometry first seen inside a graph capture is not measured (that
// synchronizes, which a capture refuses: the simulation fails such a Find) and still captures
// and replays with the heuristics' choice.
TEST_P(ConvDevice, BenchmarkModeMatchesCpuAndCapturesUnmeasuredGeometries) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  struct RestoreBenchmark {
    bool prev = ops::cudnn_benchmark();
    ~RestoreBenchmark() { ops::set_cudnn_benchmark(prev); }
  } restore;
  ops::set_cudnn_benchmark(true);
  // Geometries no other test uses, so that their cache entries are made here.
  const ops::Conv2dParams p{{2, 1}, {1, 2}, {1, 1}, 1};
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor x = randn({3, 6, 13, 11}).to(dt), w = randn({10, 6, 3, 3}).to(dt);
    Tensor y_cpu = ops::conv2d(x, w, Tensor(), p);
    Tensor dy = randn(y_cpu.sizes()).to(dt);
    Tensor gx_cpu = ops::conv2d_backward_input(dy, w, x.sizes(), p);
    Tensor gw_cpu = ops::conv2d_backward_weight(dy, x, w.sizes(), p);
    Tensor xd = x.to(dev), wd = w.to(dev), dyd = dy.to(dev);
    const double k = conv_tol(dt, false);
    for (int call = 0; call < 2; ++call) {  // measured, then from the cache
      SCOPED_TRACE(str(dt, call == 0 ? " measured" : " cached"));
      EXPECT_TRUE(close_at_scale(ops::conv2d(xd, wd, Tensor(), p), y_cpu, k));
      EXPECT_TRUE(close_at_scale(ops::conv2d_backward_input(dyd, wd, x.sizes(), p), gx_cpu, k));
      EXPECT_TRUE(close_at_scale(ops::conv2d_backward_weight(dyd, xd, w.sizes(), p), gw_cpu, k));
    }
  }
  const ops::Conv2dParams q{{1, 2}, {2, 1}, {1, 1}, 2};
  Tensor x = randn({2, 4, 9, 10}), w = randn({6, 2, 3, 3});
  Tensor y_cpu = ops::conv2d(x, w, Tensor(), q);
  Tensor dy = randn(y_cpu.sizes());
  Tensor xd = x.to(dev), wd = w.to(dev), dyd = dy.to(dev);
  Tensor y, gx, gw;
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph);
    y = ops::conv2d(xd, wd, Tensor(), q);
    gx = ops::conv2d_backward_input(dyd, wd, x.sizes(), q);
    gw = ops::conv2d_backward_weight(dyd, xd, w.sizes(), q);
  }
  graph.replay();
  EXPECT_TRUE(close_at_scale(y, y_cpu, 2e-5));
  EXPECT_TRUE(close_at_scale(gx, ops::conv2d_backward_input(dy, w, x.sizes(), q), 2e-5));
  EXPECT_TRUE(close_at_scale(gw, ops::conv2d_backward_weight(dy, x, w.sizes(), q), 2e-5));
}

INSTANTIATE_TEST_SUITE_P(Cuda, ConvDevice, ::testing::ValuesIn(test::cuda_devices()), test::device_label);
