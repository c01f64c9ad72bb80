// The simulated cuDNN (core/cuda_sim/cudnn.cpp) through the cuDNN API itself, as ember's
// ops/cuda/conv.cu calls it, on the simulated runtime: every pass (forward, backward data,
// backward filter) against a naive f64 convolution written here (a scatter over every term,
// unlike the simulation's gathers) and against the adjoint identity <conv(x, w), g> =
// <x, dx(g)> = <w, dw(g)>; stride, padding, dilation, groups, odd sizes, both convolution
// modes, alpha/beta, NHWC, f16/bf16, TF32 under tensor-op math; the algorithm queries and the
// workspace rules; descriptors cuDNN rejects; and graph capture. Links no libcudnn.
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// ---- the reference

struct Case {
  int N, C, H, W, K, R, S, ph, pw, sh, sw, dh, dw, G;
  bool flip = false;  // CUDNN_CONVOLUTION (the filter applied flipped)
  int Ho() const { return (H + 2 * ph - dh * (R - 1) - 1) / sh + 1; }
  int Wo() const { return (W + 2 * pw - dw * (S - 1) - 1) / sw + 1; }
  int Cg() const { return C / G; }
  size_t x_size() const { return size_t(N) * C * H * W; }
  size_t y_size() const { return size_t(N) * K * Ho() * Wo(); }
  size_t w_size() const { return size_t(K) * Cg() * R * S; }
};

std::string label(const Case& c) {
  char b[200];
  std::snprintf(b, sizeof b, "x[%d,%d,%d,%d] w[%d,%d,%d,%d] pad %d,%d stride %d,%d dilation %d,%d groups %d%s", c.N,
                c.C, c.H, c.W, c.K, c.Cg(), c.R, c.S, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw, c.G,
                c.flip ? " convolution" : "");
  return b;
}

// Calls f(x index, w index, y index) for every term x * w of every output (NCHW, KCRS).
template <class F>
void each_term(const Case& c, F f) {
  const int Ho = c.Ho(), Wo = c.Wo(), Kg = c.K / c.G;
  for (int n = 0; n < c.N; ++n)
    for (int k = 0; k < c.K; ++k)
      for (int oh = 0; oh < Ho; ++oh)
        for (int ow = 0; ow < Wo; ++ow)
          for (int cg = 0; cg < c.Cg(); ++cg)
            for (int r = 0; r < c.R; ++r)
              for (int s = 0; s < c.S; ++s) {
                const int ih = oh * c.sh - c.ph + r * c.dh, iw = ow * c.sw - c.pw + s * c.dw;
                if (ih < 0 || ih >= c.H || iw < 0 || iw >= c.W) continue;
                const int ci = (k / Kg) * c.Cg() + cg;
                const int fr = c.flip ? c.R - 1 - r : r, fs = c.flip ? c.S - 1 - s : s;
                f(((size_t(n) * c.C + ci) * c.H + ih) * c.W + iw, ((size_t(k) * c.Cg() + cg) * c.R + fr) * c.S + fs,
                  ((size_t(n) * c.K + k) * Ho + oh) * Wo + ow);
              }
}

using Vec = std::vector<double>;

Vec ref_forward(const Case& c, const Vec& x, const Vec& w) {
  Vec y(c.y_size(), 0.0);
  each_term(c, [&](size_t xi, size_t wi, size_t yi) { y[yi] += x[xi] * w[wi]; });
  return y;
}
Vec ref_backward_data(const Case& c, const Vec& w, const Vec& g) {
  Vec dx(c.x_size(), 0.0);
  each_term(c, [&](size_t xi, size_t wi, size_t yi) { dx[xi] += g[yi] * w[wi]; });
  return dx;
}
Vec ref_backward_filter(const Case& c, const Vec& x, const Vec& g) {
  Vec dw(c.w_size(), 0.0);
  each_term(c, [&](size_t xi, size_t wi, size_t yi) { dw[wi] += g[yi] * x[xi]; });
  return dw;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

Vec random_vec(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Vec v(n);
  for (double& e : v) e = u(rng);
  return v;
}

// |got - want| <= tol * (|want| + max |want|), element by element.
::testing::AssertionResult close(const Vec& got, const Vec& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  int bad = 0;
  auto fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (std::abs(want[i]) + scale))) {
      if (bad++ < 5) fail << "[" << i << "] " << got[i] << " vs " << want[i] << "; ";
    }
  if (bad) return fail << bad << " of " << got.size() << " elements off (tol " << tol << ", scale " << scale << ")";
  return ::testing::AssertionSuccess();
}

// ---- data types and layouts

template <class T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(v));
  else return T(v);
}
template <class T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, __half>) return double(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return double(__bfloat162float(v));
  else return double(v);
}
template <class T>
Vec rounded(const Vec& v) {  // the values T holds
  Vec out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_double(from_double<T>(v[i]));
  return out;
}
template <class T>
constexpr cudnnDataType_t cudnn_type() {
  if constexpr (std::is_same_v<T, float>) return CUDNN_DATA_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return CUDNN_DATA_DOUBLE;
  else if constexpr (std::is_same_v<T, __half>) return CUDNN_DATA_HALF;
  else return CUDNN_DATA_BFLOAT16;
}

// [a, b, c, d] in NCHW order to the format's order (NHWC: [a, c, d, b]) and back.
Vec to_format(const Vec& v, int a, int b, int c, int d, cudnnTensorFormat_t f) {
  if (f == CUDNN_TENSOR_NCHW) return v;
  Vec out(v.size());
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j)
      for (int k = 0; k < c; ++k)
        for (int l = 0; l < d; ++l)
          out[((size_t(i) * c + k) * d + l) * b + j] = v[((size_t(i) * b + j) * c + k) * d + l];
  return out;
}
Vec from_format(const Vec& v, int a, int b, int c, int d, cudnnTensorFormat_t f) {
  if (f == CUDNN_TENSOR_NCHW) return v;
  Vec out(v.size());
  for (int i = 0; i < a; ++i)
    for (int j = 0; j < b; ++j)
      for (int k = 0; k < c; ++k)
        for (int l = 0; l < d; ++l)
          out[((size_t(i) * b + j) * c + k) * d + l] = v[((size_t(i) * c + k) * d + l) * b + j];
  return out;
}

// ---- device memory and descriptors

template <class T>
struct DeviceArray {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess);
  }
  DeviceArray(const Vec& v) : DeviceArray(v.size()) { upload(v); }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void upload(const Vec& v) {
    std::vector<T> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = from_double<T>(v[i]);
    EXPECT_EQ(cudaMemcpyAsync(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  }
  Vec download() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    Vec out(n);
    for (size_t i = 0; i < n; ++i) out[i] = to_double(h[i]);
    return out;
  }
};

struct Descs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descs() {
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

struct Layout {
  cudnnTensorFormat_t x = CUDNN_TENSOR_NCHW, y = CUDNN_TENSOR_NCHW, w = CUDNN_TENSOR_NCHW;
};

// As conv.cu sets them: the compute type f64 for f64 data, f32 otherwise.
void set_descs(Descs& d, const Case& c, cudnnDataType_t t, cudnnMathType_t math, Layout l = {}) {
  ASSERT_EQ(cudnnSetTensor4dDescriptor(d.x, l.x, t, c.N, c.C, c.H, c.W), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(d.y, l.y, t, c.N, c.K, c.Ho(), c.Wo()), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(d.w, t, l.w, c.K, c.Cg(), c.R, c.S), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(d.conv, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw,
                                            c.flip ? CUDNN_CONVOLUTION : CUDNN_CROSS_CORRELATION,
                                            t == CUDNN_DATA_DOUBLE ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolutionGroupCount(d.conv, c.G), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolutionMathType(d.conv, math), CUDNN_STATUS_SUCCESS);
}

enum class Pass { forward, backward_data, backward_filter };

struct Choice {
  int algo;
  size_t memory;
  cudnnDeterminism_t determinism;
};

// The supported algorithms of a pass, as ember's candidates() reads the v7 query.
std::vector<Choice> supported(cudnnHandle_t h, const Descs& d, Pass pass) {
  std::vector<Choice> out;
  int n = 0;
  auto take = [&](const auto* perf) {
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS)
        out.push_back({int(perf[i].algo), perf[i].memory, perf[i].determinism});
  };
  if (pass == Pass::forward) {
    cudnnConvolutionFwdAlgoPerf_t perf[16];
    EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 16, &n, perf), CUDNN_STATUS_SUCCESS);
    take(perf);
  } else if (pass == Pass::backward_data) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[16];
    EXPECT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 16, &n, perf),
              CUDNN_STATUS_SUCCESS);
    take(perf);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[16];
    EXPECT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, 16, &n, perf),
              CUDNN_STATUS_SUCCESS);
    take(perf);
  }
  return out;
}

cudnnStatus_t workspace_size(cudnnHandle_t h, const Descs& d, Pass pass, int algo, size_t* bytes) {
  switch (pass) {
    case Pass::forward:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, cudnnConvolutionFwdAlgo_t(algo), bytes);
    case Pass::backward_data:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, cudnnConvolutionBwdDataAlgo_t(algo),
                                                          bytes);
    default:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w,
                                                            cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
  }
}

// One pass: out = alpha * op(in0, in1) + beta * out, with its inputs given as (forward) x, w,
// (backward data) w, dy, (backward filter) x, dy in the descriptors' layouts.
template <class T>
cudnnStatus_t call(cudnnHandle_t h, const Descs& d, Pass pass, int algo, const void* in0, const void* in1, void* out,
                   void* ws, size_t ws_bytes, double alpha = 1, double beta = 0) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // the scaling type
  const S a = S(alpha), b = S(beta);
  switch (pass) {
    case Pass::forward:
      return cudnnConvolutionForward(h, &a, d.x, in0, d.w, in1, d.conv, cudnnConvolutionFwdAlgo_t(algo), ws, ws_bytes,
                                     &b, d.y, out);
    case Pass::backward_data:
      return cudnnConvolutionBackwardData(h, &a, d.w, in0, d.y, in1, d.conv, cudnnConvolutionBwdDataAlgo_t(algo), ws,
                                          ws_bytes, &b, d.x, out);
    default:
      return cudnnConvolutionBackwardFilter(h, &a, d.x, in0, d.y, in1, d.conv, cudnnConvolutionBwdFilterAlgo_t(algo),
                                            ws, ws_bytes, &b, d.w, out);
  }
}

// Runs a pass with `algo` and the workspace it asks for; `out_init` (when given) is the
// output's value before (for beta != 0); otherwise the output is fresh (NaN-poisoned) memory.
template <class T>
Vec run(cudnnHandle_t h, const Descs& d, Pass pass, int algo, const Vec& in0, const Vec& in1, size_t out_size,
        double alpha = 1, double beta = 0, const Vec* out_init = nullptr) {
  DeviceArray<T> a(in0), b(in1), out(out_size);
  if (out_init) out.upload(*out_init);
  size_t bytes = 0;
  EXPECT_EQ(workspace_size(h, d, pass, algo, &bytes), CUDNN_STATUS_SUCCESS);
  void* ws = nullptr;
  if (bytes) {
    EXPECT_EQ(cudaMalloc(&ws, bytes), cudaSuccess);
  }
  EXPECT_EQ(call<T>(h, d, pass, algo, a.p, b.p, out.p, ws, bytes, alpha, beta), CUDNN_STATUS_SUCCESS);
  Vec result = out.download();
  cudaFree(ws);
  return result;
}

const std::vector<Case> kCases = {
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},          // same-size 3x3
    {1, 4, 9, 11, 6, 3, 2, 0, 1, 2, 3, 1, 1, 2},         // strides, odd sizes, two groups
    {2, 6, 8, 7, 6, 3, 3, 2, 2, 1, 2, 2, 2, 3},          // dilation, three groups
    {3, 5, 5, 5, 5, 3, 3, 1, 1, 2, 2, 1, 1, 5},          // depthwise, stride 2
    {2, 8, 4, 4, 4, 1, 1, 0, 0, 1, 1, 1, 1, 1},          // 1x1
    {1, 2, 3, 3, 3, 5, 5, 2, 2, 1, 1, 1, 1, 1},          // filter as large as the padded input
    {2, 3, 10, 9, 2, 2, 2, 0, 0, 3, 4, 1, 1, 1},         // stride above the kernel: skipped inputs
    {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},    // CUDNN_CONVOLUTION: flipped
    {1, 4, 9, 11, 6, 3, 2, 0, 1, 2, 3, 2, 1, 2, true},   // flipped, strided, dilated, grouped
};

class SimCudnn : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cudnnDestroy(h), CUDNN_STATUS_SUCCESS); }
  cudnnHandle_t h = nullptr;
  std::mt19937 rng{7};
};

}  // namespace

TEST_F(SimCudnn, VersionAndErrorStrings) {
  EXPECT_EQ(cudnnGetVersion(), size_t(CUDNN_VERSION));
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_SUCCESS), "CUDNN_STATUS_SUCCESS");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
}

// Every pass, every offered algorithm, f64 and exact f32 (FMA math), against the naive
// reference; the algorithms of a pass agree bit for bit (one fixed summation order).
TEST_F(SimCudnn, EveryPassMatchesANaiveConvolution) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    const Vec x = random_vec(c.x_size(), rng), w = random_vec(c.w_size(), rng), g = random_vec(c.y_size(), rng);
    auto check = [&](auto tag, cudnnMathType_t math, double tol) {
      using T = decltype(tag);
      Descs d;
      set_descs(d, c, cudnn_type<T>(), math);
      const Vec xr = rounded<T>(x), wr = rounded<T>(w), gr = rounded<T>(g);
      const Vec y_want = ref_forward(c, xr, wr), dx_want = ref_backward_data(c, wr, gr),
                dw_want = ref_backward_filter(c, xr, gr);
      for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
        const std::vector<Choice> algos = supported(h, d, pass);
        ASSERT_GE(algos.size(), 2u);
        Vec first;
        for (const Choice& a : algos) {
          SCOPED_TRACE("pass " + std::to_string(int(pass)) + " algo " + std::to_string(a.algo) + " " +
                       std::to_string(sizeof(T)) + "-byte data");
          Vec got = pass == Pass::forward         ? run<T>(h, d, pass, a.algo, xr, wr, c.y_size())
                    : pass == Pass::backward_data ? run<T>(h, d, pass, a.algo, wr, gr, c.x_size())
                                                  : run<T>(h, d, pass, a.algo, xr, gr, c.w_size());
          const Vec& want = pass == Pass::forward ? y_want : pass == Pass::backward_data ? dx_want : dw_want;
          EXPECT_TRUE(close(got, want, tol));
          if (first.empty()) first = got;
          else EXPECT_EQ(got, first) << "algorithms differ";
        }
      }
    };
    check(double{}, CUDNN_DEFAULT_MATH, 1e-13);
    check(float{}, CUDNN_FMA_MATH, 1e-5);
  }
}

// The adjoint identity in f64: the backward passes are the transposes of the forward one.
TEST_F(SimCudnn, BackwardPassesAreTheAdjointsOfTheForward) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(label(c));
    Descs d;
    set_descs(d, c, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH);
    const Vec x = random_vec(c.x_size(), rng), w = random_vec(c.w_size(), rng), g = random_vec(c.y_size(), rng);
    const int fwd = supported(h, d, Pass::forward)[0].algo, bwd_data = supported(h, d, Pass::backward_data)[0].algo,
              bwd_filter = supported(h, d, Pass::backward_filter)[0].algo;
    const Vec y = run<double>(h, d, Pass::forward, fwd, x, w, c.y_size());
    const Vec dx = run<double>(h, d, Pass::backward_data, bwd_data, w, g, c.x_size());
    const Vec dw = run<double>(h, d, Pass::backward_filter, bwd_filter, x, g, c.w_size());
    const double yg = dot(y, g), xdx = dot(x, dx), wdw = dot(w, dw);
    const double tol = 1e-12 * (1 + std::abs(yg)) * double(c.y_size());
    EXPECT_NEAR(xdx, yg, tol);
    EXPECT_NEAR(wdw, yg, tol);
  }
}

// y = alpha * op + beta * y in every pass; beta = 0 never reads y (fresh memory is NaN).
TEST_F(SimCudnn, AlphaBetaBlend) {
  const Case c = kCases[1];
  Descs d;
  set_descs(d, c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  const Vec x = random_vec(c.x_size(), rng), w = random_vec(c.w_size(), rng), g = random_vec(c.y_size(), rng);
  const Vec y0 = random_vec(c.y_size(), rng), dx0 = random_vec(c.x_size(), rng), dw0 = random_vec(c.w_size(), rng);
  const Vec xr = rounded<float>(x), wr = rounded<float>(w), gr = rounded<float>(g);
  auto blend = [](const Vec& op, const Vec& old, double a, double b) {
    Vec out(op.size());
    for (size_t i = 0; i < op.size(); ++i) out[i] = a * op[i] + b * double(float(old[i]));
    return out;
  };
  for (const Choice& a : supported(h, d, Pass::forward)) {
    EXPECT_TRUE(close(run<float>(h, d, Pass::forward, a.algo, xr, wr, c.y_size(), 2.0, -0.5, &y0),
                      blend(ref_forward(c, xr, wr), y0, 2.0, -0.5), 1e-5));
    EXPECT_TRUE(close(run<float>(h, d, Pass::forward, a.algo, xr, wr, c.y_size(), 1.0, 1.0, &y0),
                      blend(ref_forward(c, xr, wr), y0, 1.0, 1.0), 1e-5));
    Vec fresh = run<float>(h, d, Pass::forward, a.algo, xr, wr, c.y_size(), 0.5, 0.0);  // y is NaN before
    EXPECT_TRUE(close(fresh, blend(ref_forward(c, xr, wr), y0, 0.5, 0.0), 1e-5)) << "beta = 0 read y";
  }
  for (const Choice& a : supported(h, d, Pass::backward_data)) {
    EXPECT_TRUE(close(run<float>(h, d, Pass::backward_data, a.algo, wr, gr, c.x_size(), -1.5, 0.25, &dx0),
                      blend(ref_backward_data(c, wr, gr), dx0, -1.5, 0.25), 1e-5));
    EXPECT_TRUE(close(run<float>(h, d, Pass::backward_data, a.algo, wr, gr, c.x_size(), 3.0, 0.0),
                      blend(ref_backward_data(c, wr, gr), dx0, 3.0, 0.0), 1e-5));
  }
  for (const Choice& a : supported(h, d, Pass::backward_filter)) {
    EXPECT_TRUE(close(run<float>(h, d, Pass::backward_filter, a.algo, xr, gr, c.w_size(), 0.75, 2.0, &dw0),
                      blend(ref_backward_filter(c, xr, gr), dw0, 0.75, 2.0), 1e-5));
    EXPECT_TRUE(close(run<float>(h, d, Pass::backward_filter, a.algo, xr, gr, c.w_size(), 1.0, 0.0),
                      blend(ref_backward_filter(c, xr, gr), dw0, 1.0, 0.0), 1e-5));
  }
  // f64 data takes double scalars.
  Descs dd;
  set_descs(dd, c, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH);
  EXPECT_TRUE(close(run<double>(h, dd, Pass::forward, supported(h, dd, Pass::forward)[0].algo, x, w, c.y_size(), 0.1,
                                -3.0, &y0),
                    [&] {
                      Vec y = ref_forward(c, x, w);
                      for (size_t i = 0; i < y.size(); ++i) y[i] = 0.1 * y[i] - 3.0 * y0[i];
                      return y;
                    }(),
                    1e-13));
}

// NHWC tensors (and the KRSC filter with them), also mixed with NCHW: the same results, bit
// for bit, as NCHW. An NHWC filter with NCHW tensors is not a supported combination.
TEST_F(SimCudnn, NhwcLayouts) {
  const Case c = kCases[2];
  const Vec x = rounded<float>(random_vec(c.x_size(), rng)), w = rounded<float>(random_vec(c.w_size(), rng)),
            g = rounded<float>(random_vec(c.y_size(), rng));
  Descs base;
  set_descs(base, c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  const Vec y = run<float>(h, base, Pass::forward, 1, x, w, c.y_size());
  const Vec dx = run<float>(h, base, Pass::backward_data, 1, w, g, c.x_size());
  const Vec dw = run<float>(h, base, Pass::backward_filter, 1, x, g, c.w_size());
  const cudnnTensorFormat_t nchw = CUDNN_TENSOR_NCHW, nhwc = CUDNN_TENSOR_NHWC;
  for (Layout l :
       {Layout{nhwc, nhwc, nhwc}, Layout{nhwc, nhwc, nchw}, Layout{nhwc, nchw, nchw}, Layout{nchw, nhwc, nchw}}) {
    SCOPED_TRACE(std::to_string(int(l.x)) + std::to_string(int(l.y)) + std::to_string(int(l.w)));
    Descs d;
    set_descs(d, c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH, l);
    const Vec xl = to_format(x, c.N, c.C, c.H, c.W, l.x), wl = to_format(w, c.K, c.Cg(), c.R, c.S, l.w),
              gl = to_format(g, c.N, c.K, c.Ho(), c.Wo(), l.y);
    for (int algo : {0, 1}) {
      EXPECT_EQ(from_format(run<float>(h, d, Pass::forward, algo, xl, wl, c.y_size()), c.N, c.K, c.Ho(), c.Wo(), l.y),
                y);
      EXPECT_EQ(from_format(run<float>(h, d, Pass::backward_data, algo, wl, gl, c.x_size()), c.N, c.C, c.H, c.W, l.x),
                dx);
      EXPECT_EQ(from_format(run<float>(h, d, Pass::backward_filter, algo, xl, gl, c.w_size()), c.K, c.Cg(), c.R, c.S,
                            l.w),
                dw);
    }
  }
  Descs d;
  ASSERT_EQ(cudnnSetTensor4dDescriptor(d.x, nchw, CUDNN_DATA_FLOAT, c.N, c.C, c.H, c.W), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetTensor4dDescriptor(d.y, nchw, CUDNN_DATA_FLOAT, c.N, c.K, c.Ho(), c.Wo()), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, nhwc, c.K, c.Cg(), c.R, c.S), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(d.conv, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolutionGroupCount(d.conv, c.G), CUDNN_STATUS_SUCCESS);
  size_t bytes = 0;
  EXPECT_EQ(workspace_size(h, d, Pass::forward, 0, &bytes), CUDNN_STATUS_NOT_SUPPORTED);
}

// f16 and bf16 data with f32 compute (ember's configuration): products exact, sums in f32, the
// result rounded once: within the data type's rounding of the f64 result on the same inputs.
TEST_F(SimCudnn, HalfAndBfloat16AccumulateInFloat) {
  auto check = [&](auto tag, double eps) {
    using T = decltype(tag);
    for (const Case& c : {kCases[0], kCases[2], kCases[3]}) {
      SCOPED_TRACE(label(c) + (std::is_same_v<T, __half> ? " f16" : " bf16"));
      Descs d;
      set_descs(d, c, cudnn_type<T>(), CUDNN_TENSOR_OP_MATH);
      const Vec x = rounded<T>(random_vec(c.x_size(), rng)), w = rounded<T>(random_vec(c.w_size(), rng)),
                g = rounded<T>(random_vec(c.y_size(), rng));
      for (int algo : {0, 1}) {
        // Each element within one rounding (eps |v|) and the f32 sums' error (small at scale).
        auto within = [&](const Vec& got, const Vec& want) {
          double scale = 0;
          for (double v : want) scale = std::max(scale, std::abs(v));
          for (size_t i = 0; i < got.size(); ++i)
            if (!(std::abs(got[i] - want[i]) <= eps * std::abs(want[i]) + 1e-5 * scale))
              return ::testing::AssertionFailure() << "[" << i << "] " << got[i] << " vs " << want[i];
          return ::testing::AssertionSuccess();
        };
        EXPECT_TRUE(within(run<T>(h, d, Pass::forward, algo, x, w, c.y_size()), ref_forward(c, x, w)));
        EXPECT_TRUE(within(run<T>(h, d, Pass::backward_data, algo, w, g, c.x_size()), ref_backward_data(c, w, g)));
        EXPECT_TRUE(within(run<T>(h, d, Pass::backward_filter, algo, x, g, c.w_size()), ref_backward_filter(c, x, g)));
      }
    }
  };
  check(__half{}, std::ldexp(1.0, -11));
  check(__nv_bfloat16{}, std::ldexp(1.0, -8));
}

// f32 data: CUDNN_FMA_MATH is exact f32; TENSOR_OP_MATH (and DEFAULT_MATH, which permits
// tensor cores since cuDNN 8) rounds both operands to TF32, to nearest with ties away.
TEST_F(SimCudnn, Tf32UnderTensorOpMathOnly) {
  const Case c{1, 1, 1, 4, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1};  // 1x1: y = x * w
  const double u = std::ldexp(1.0, -12), tie = std::ldexp(1.0, -11), ulp = std::ldexp(1.0, -10);
  const Vec x = {1 + u, 1 + tie, -(1 + tie), 1 + 3 * tie}, w = {1.0};
  for (cudnnMathType_t math : {CUDNN_FMA_MATH, CUDNN_TENSOR_OP_MATH, CUDNN_DEFAULT_MATH}) {
    SCOPED_TRACE(int(math));
    Descs d;
    set_descs(d, c, CUDNN_DATA_FLOAT, math);
    for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
      const Vec got = pass == Pass::forward         ? run<float>(h, d, pass, 0, x, w, 4)
                      : pass == Pass::backward_data ? run<float>(h, d, pass, 0, w, x, 4)
                                                    : run<float>(h, d, pass, 0, Vec{1, 0, 0, 0}, x, 1);
      if (pass == Pass::backward_filter) {
        EXPECT_EQ(got[0], math == CUDNN_FMA_MATH ? 1 + u : 1.0);
        continue;
      }
      if (math == CUDNN_FMA_MATH) EXPECT_EQ(got, x);
      else EXPECT_EQ(got, (Vec{1.0, 1 + ulp, -(1 + ulp), 1 + 2 * ulp}));
    }
  }
  // f32 down-converted to f16 is not modelled: refused, not computed some other way.
  Descs d;
  set_descs(d, c, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION);
  size_t bytes = 0;
  EXPECT_EQ(workspace_size(h, d, Pass::forward, 0, &bytes), CUDNN_STATUS_NOT_SUPPORTED);
}

// The v7 queries: every algorithm of the enum listed, two supported (the first needs a
// workspace, the second none), the rest NOT_SUPPORTED; the sizes agree with the
// WorkspaceSize functions, which refuse an unsupported or unknown algorithm.
TEST_F(SimCudnn, AlgorithmQueriesAndWorkspaceSizes) {
  const Case c = kCases[0];
  Descs d;
  set_descs(d, c, CUDNN_DATA_HALF, CUDNN_TENSOR_OP_MATH);
  cudnnConvolutionFwdAlgoPerf_t fwd[16];
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data[16];
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter[16];
  int n = 0;
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 16, &n, fwd), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(n, int(CUDNN_CONVOLUTION_FWD_ALGO_COUNT));
  ASSERT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, 16, &n, bwd_data),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(n, int(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT));
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, 16, &n, bwd_filter),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(n, int(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT));
  for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
    SCOPED_TRACE(int(pass));
    const std::vector<Choice> s = supported(h, d, pass);
    ASSERT_EQ(s.size(), 2u);
    EXPECT_GT(s[0].memory, 0u) << "the first-ranked algorithm needs a workspace";
    EXPECT_EQ(s[0].determinism, CUDNN_DETERMINISTIC);
    EXPECT_EQ(s[1].memory, 0u) << "a fallback needs none";
    for (const Choice& a : s) {
      size_t bytes = 1;
      EXPECT_EQ(workspace_size(h, d, pass, a.algo, &bytes), CUDNN_STATUS_SUCCESS);
      EXPECT_EQ(bytes, a.memory);
    }
    size_t bytes = 0;
    EXPECT_EQ(workspace_size(h, d, pass, 2, &bytes), CUDNN_STATUS_NOT_SUPPORTED);  // GEMM / FFT
    EXPECT_EQ(workspace_size(h, d, pass, 99, &bytes), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(workspace_size(h, d, pass, 0, nullptr), CUDNN_STATUS_BAD_PARAM);
  }
  for (int i = 2; i < int(CUDNN_CONVOLUTION_FWD_ALGO_COUNT); ++i) {
    EXPECT_EQ(fwd[i].status, CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(fwd[i].mathType, CUDNN_TENSOR_OP_MATH);
  }
  EXPECT_EQ(fwd[0].mathType, CUDNN_TENSOR_OP_MATH) << "the descriptor's math type";
  EXPECT_EQ(bwd_data[1].determinism, CUDNN_NON_DETERMINISTIC);
  // Fewer requested, fewer returned; none requested, or nowhere to put them: BAD_PARAM.
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 1, &n, fwd), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 0, &n, fwd), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 4, nullptr, fwd), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 4, &n, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(nullptr, d.x, d.w, d.conv, d.y, 4, &n, fwd), CUDNN_STATUS_BAD_PARAM);
  // A configuration that is not modelled (half compute): listed, every algorithm NOT_SUPPORTED.
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(d.conv, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_HALF),
            CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, 16, &n, fwd), CUDNN_STATUS_SUCCESS);
  for (int i = 0; i < n; ++i) EXPECT_EQ(fwd[i].status, CUDNN_STATUS_NOT_SUPPORTED);
}

// A workspace algorithm: a smaller or null workspace is refused before anything runs; the one
// given is written (all the bytes it asked for); an algorithm needing none ignores it.
TEST_F(SimCudnn, WorkspaceRules) {
  const Case c = kCases[1];
  Descs d;
  set_descs(d, c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  DeviceArray<float> x(random_vec(c.x_size(), rng)), w(random_vec(c.w_size(), rng)), g(random_vec(c.y_size(), rng));
  for (Pass pass : {Pass::forward, Pass::backward_data, Pass::backward_filter}) {
    SCOPED_TRACE(int(pass));
    const std::vector<Choice> algos = supported(h, d, pass);
    const Choice with = algos[0], without = algos[1];
    const void* in0 = pass == Pass::backward_data ? static_cast<const void*>(w.p) : x.p;
    const void* in1 = pass == Pass::forward ? static_cast<const void*>(w.p) : g.p;
    DeviceArray<float> out(pass == Pass::forward ? c.y_size() : pass == Pass::backward_data ? c.x_size() : c.w_size());
    void* ws = nullptr;
    ASSERT_EQ(cudaMalloc(&ws, with.memory), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(ws, 0xAB, with.memory, nullptr), cudaSuccess);
    EXPECT_EQ(call<float>(h, d, pass, with.algo, in0, in1, out.p, ws, with.memory - 1), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(call<float>(h, d, pass, with.algo, in0, in1, out.p, nullptr, with.memory), CUDNN_STATUS_BAD_PARAM);
    for (double v : out.download()) ASSERT_TRUE(std::isnan(v)) << "a refused call wrote its output";
    ASSERT_EQ(call<float>(h, d, pass, with.algo, in0, in1, out.p, ws, with.memory), CUDNN_STATUS_SUCCESS);
    std::vector<uint32_t> words(with.memory / 4);
    ASSERT_EQ(cudaMemcpyAsync(words.data(), ws, words.size() * 4, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
    for (uint32_t word : words) EXPECT_NE(word, 0xABABABABu) << "the workspace was not used throughout";
    const Vec expected = out.download();
    // An output overlapping the workspace is refused (the run would corrupt it).
    EXPECT_EQ(call<float>(h, d, pass, with.algo, in0, in1, ws, ws, with.memory), CUDNN_STATUS_BAD_PARAM);
    // No workspace for the algorithm that needs none; the same bits.
    ASSERT_EQ(call<float>(h, d, pass, without.algo, in0, in1, out.p, nullptr, 0), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(out.download(), expected);
    cudaFree(ws);
  }
}

// What cuDNN rejects: inconsistent descriptors and bad arguments (BAD_PARAM), configurations
// it does not support (NOT_SUPPORTED).
TEST_F(SimCudnn, BadDescriptorsAndArgumentsAreRejected) {
  const Case c = kCases[1];  // C 4, K 6, groups 2
  DeviceArray<float> x(c.x_size()), w(c.w_size()), y(c.y_size());
  const float one = 1, zero = 0;
  auto forward = [&](const Descs& d, int algo = 0) {
    return cudnnConvolutionForward(h, &one, d.x, x.p, d.w, w.p, d.conv, cudnnConvolutionFwdAlgo_t(algo), nullptr, 0,
                                   &zero, d.y, y.p);
  };
  auto fresh = [&](cudnnDataType_t t = CUDNN_DATA_FLOAT) {
    auto d = std::make_unique<Descs>();
    set_descs(*d, c, t, CUDNN_FMA_MATH);
    return d;
  };
  {
    auto d = fresh();
    ASSERT_EQ(forward(*d), CUDNN_STATUS_SUCCESS);
    // y's spatial size is not the output size.
    ASSERT_EQ(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, c.N, c.K, c.Ho() + 1, c.Wo()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
    size_t bytes = 0;
    EXPECT_EQ(workspace_size(h, *d, Pass::forward, 0, &bytes), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(workspace_size(h, *d, Pass::backward_data, 0, &bytes), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(workspace_size(h, *d, Pass::backward_filter, 0, &bytes), CUDNN_STATUS_BAD_PARAM);
    int n = 0;
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    EXPECT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, 8, &n, perf),
              CUDNN_STATUS_BAD_PARAM);
    // y's channels are not the filter's K.
    ASSERT_EQ(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, c.N, c.K + 1, c.Ho(), c.Wo()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
  }
  {
    auto d = fresh();  // the filter's C is C, not C / groups
    ASSERT_EQ(cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c.K, c.C, c.R, c.S),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
  }
  {
    auto d = fresh();  // groups dividing neither C nor K
    ASSERT_EQ(cudnnSetConvolutionGroupCount(d->conv, 3), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
    ASSERT_EQ(cudnnSetConvolutionGroupCount(d->conv, 4), CUDNN_STATUS_SUCCESS);  // divides C 4, not K 6
    ASSERT_EQ(cudnnSetFilter4dDescriptor(d->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, c.K, 1, c.R, c.S),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
  }
  {
    auto d = fresh();  // data types that differ
    ASSERT_EQ(cudnnSetTensor4dDescriptor(d->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_HALF, c.N, c.K, c.Ho(), c.Wo()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
  }
  {
    auto d = fresh();  // a dilated filter larger than the padded input
    ASSERT_EQ(cudnnSetConvolution2dDescriptor(d->conv, 0, 0, 1, 1, 10, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(*d), CUDNN_STATUS_BAD_PARAM);
  }
  {
    Descs unset;  // descriptors never set
    EXPECT_EQ(forward(unset), CUDNN_STATUS_BAD_PARAM);
  }
  {
    auto d = fresh();  // arguments
    EXPECT_EQ(cudnnConvolutionForward(nullptr, &one, d->x, x.p, d->w, w.p, d->conv,
                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d->y, y.p),
              CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(cudnnConvolutionForward(h, nullptr, d->x, x.p, d->w, w.p, d->conv,
                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d->y, y.p),
              CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(cudnnConvolutionForward(h, &one, d->x, nullptr, d->w, w.p, d->conv,
                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d->y, y.p),
              CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(cudnnConvolutionForward(h, &one, d->x, x.p, d->w, w.p, d->conv, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                                      nullptr, 0, &zero, d->y, nullptr),
              CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(forward(*d, 99), CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(forward(*d, CUDNN_CONVOLUTION_FWD_ALGO_FFT), CUDNN_STATUS_NOT_SUPPORTED);
    // In place (y over x) has no defined result: refused.
    DeviceArray<float> big(std::max(c.x_size(), c.y_size()));
    EXPECT_EQ(cudnnConvolutionForward(h, &one, d->x, big.p, d->w, w.p, d->conv,
                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d->y, big.p),
              CUDNN_STATUS_BAD_PARAM);
    EXPECT_EQ(cudnnConvolutionForward(h, &one, d->x, reinterpret_cast<char*>(x.p) + 2, d->w, w.p, d->conv,
                                      CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, d->y, y.p),
              CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  }
  // The Set functions' own checks.
  Descs d;
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 0, 1, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, -1, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d.x, cudnnTensorFormat_t(7), CUDNN_DATA_FLOAT, 1, 1, 1, 1),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, cudnnDataType_t(99), 1, 1, 1, 1),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 65536, 65536, 1, 1),
            CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cudnnSetFilter4dDescriptor(d.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 1, 1, 0, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(d.conv, -1, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 0, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 1, 1, 1, 0, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(d.conv, 0, 0, 1, 1, 1, 1, cudnnConvolutionMode_t(2), CUDNN_DATA_FLOAT),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionGroupCount(d.conv, 0), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionMathType(d.conv, cudnnMathType_t(9)), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnCreate(nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetStream(nullptr, nullptr), CUDNN_STATUS_BAD_PARAM);
  // Configurations cuDNN does not have, or the simulation does not model.
  for (auto [data, compute] :
       {std::pair{CUDNN_DATA_FLOAT, CUDNN_DATA_DOUBLE}, std::pair{CUDNN_DATA_DOUBLE, CUDNN_DATA_FLOAT},
        std::pair{CUDNN_DATA_HALF, CUDNN_DATA_HALF}, std::pair{CUDNN_DATA_INT8, CUDNN_DATA_INT32}}) {
    Descs e;
    set_descs(e, c, data, CUDNN_DEFAULT_MATH);
    ASSERT_EQ(
        cudnnSetConvolution2dDescriptor(e.conv, c.ph, c.pw, c.sh, c.sw, c.dh, c.dw, CUDNN_CROSS_CORRELATION, compute),
        CUDNN_STATUS_SUCCESS);
    size_t bytes = 0;
    EXPECT_EQ(workspace_size(h, e, Pass::forward, 0, &bytes), CUDNN_STATUS_NOT_SUPPORTED) << data << " " << compute;
  }
}

// The work goes to the handle's stream: on a capturing stream it is recorded (with the alpha
// and beta of the call) and runs only when the graph is launched. A handle created during a
// capture fails as on the GPU (its device allocation), and invalidates the capture.
TEST_F(SimCudnn, CaptureRecordsTheConvolution) {
  const Case c = kCases[0];
  Descs d;
  set_descs(d, c, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  const Vec x = rounded<float>(random_vec(c.x_size(), rng)), w = rounded<float>(random_vec(c.w_size(), rng));
  DeviceArray<float> xd(x), wd(w), y(c.y_size());
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudnnSetStream(h, s), CUDNN_STATUS_SUCCESS);
  const Choice algo = supported(h, d, Pass::forward)[0];
  void* ws = nullptr;
  ASSERT_EQ(cudaMalloc(&ws, algo.memory), cudaSuccess);

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  float alpha = 2.0f, beta = 0.0f;
  ASSERT_EQ(cudnnConvolutionForward(h, &alpha, d.x, xd.p, d.w, wd.p, d.conv, cudnnConvolutionFwdAlgo_t(algo.algo), ws,
                                    algo.memory, &beta, d.y, y.p),
            CUDNN_STATUS_SUCCESS);
  alpha = 100.0f;  // the capture holds the value of the call
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  for (double v : y.download()) ASSERT_TRUE(std::isnan(v)) << "the capture ran the convolution";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  Vec want = ref_forward(c, x, w);
  for (double& v : want) v *= 2;
  EXPECT_TRUE(close(y.download(), want, 1e-5));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  // A handle created during a capture.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudnnHandle_t late = nullptr;
  EXPECT_EQ(cudnnCreate(&late), CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();

  // Back on the default stream: the work runs when issued. A destroyed stream is refused.
  ASSERT_EQ(cudnnSetStream(h, nullptr), CUDNN_STATUS_SUCCESS);
  cudaFree(ws);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudnnSetStream(h, s), CUDNN_STATUS_BAD_PARAM);
  (void)cudaGetLastError();
}
