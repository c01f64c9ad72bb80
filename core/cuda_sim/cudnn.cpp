// The cuDNN of the CUDA simulation (issue 39): the cuDNN C API functions ember calls (ops/cuda/
// conv.cu; cudnnGetVersion for tools/ember-info), implemented on the host by a reference
// convolution, so that ember's conv2d runs unchanged in CI. Linked instead of libcudnn in a
// simulation build, beside the simulated runtime (runtime.cpp), never beside the real one.
//
// What it checks is ember's *use* of cuDNN, not cuDNN: that the descriptors ember sets are
// consistent and name a configuration the library supports, that layouts, data and compute
// types, groups, pad/stride/dilation and the convolution mode mean what ember thinks, that
// alpha/beta blend as documented (beta = 0 never reads the output, which may hold NaN), that
// every algorithm's workspace is asked for, allocated at that size and alive while the work
// runs, and that the work goes to the handle's stream (so graph capture records it).
// cuDNN's own numerics (its algorithms' summation orders, Winograd/FFT error) need the card.
//
// Invariants:
// - Descriptors hold what their Set function was given; a descriptor never set, an unknown
//   enumerant, a non-positive size, a negative padding or a non-positive stride/dilation is
//   CUDNN_STATUS_BAD_PARAM. Every call that takes the four descriptors of a convolution checks
//   them together first (geometry()): same data type everywhere, C divisible by groups and the
//   filter's C equal to C / groups, K divisible by groups, y's N and C equal to x's N and the
//   filter's K, y's H and W equal to floor((in + 2p - d(k-1) - 1) / s) + 1 >= 1: else BAD_PARAM.
// - Supported configurations, as cuDNN's tables name them: FLOAT_CONFIG (f32 data, f32
//   compute), DOUBLE_CONFIG (f64, f64), PSEUDO_HALF_CONFIG (f16 data, f32 compute) and
//   PSEUDO_BFLOAT16_CONFIG (bf16, f32); NCHW or NHWC tensors in any mix, an NCHW filter, or an
//   NHWC filter with NHWC tensors. Anything else (TRUE_HALF_CONFIG, integer or FP8 data, the
//   VECT_C layouts, f32 data with TENSOR_OP_MATH_ALLOW_CONVERSION) is not modelled and says
//   CUDNN_STATUS_NOT_SUPPORTED rather than computing something else.
// - Numerics: the sum of each output element is one accumulator of the compute type (f32, or
//   f64 for f64 data) over its terms in a fixed order (forward: input channel, kernel row,
//   kernel column; backward data: output channel, row, column; backward filter: image, output
//   row, output column), so every algorithm gives the same bits and a run is deterministic.
//   f32 data under any math type but CUDNN_FMA_MATH may run on TF32 tensor cores on an H100
//   (CUDNN_DEFAULT_MATH permits it since cuDNN 8): both operands are rounded to TF32 (10
//   mantissa bits, to nearest, ties away, as cvt.rna.tf32.f32) before the products; FMA_MATH
//   is exact f32. f16/bf16 products are exact in f32; the result is alpha * sum (+ beta * y
//   when beta != 0) in the compute type, rounded once to the data type.
// - Algorithms: the v7 queries (and the Find*Ex calls, which run them: find()) rank two
//   algorithms per pass as supported, one needing a workspace first (so ember's default
//   path allocates one) and one needing none (its
//   fallback under a workspace limit); the others are listed as NOT_SUPPORTED, as cuDNN lists
//   the ones that do not apply. A workspace algorithm really uses its workspace (the packed
//   filter, or the filter-gradient accumulators, live there), writing all of its bytes: a run
//   with less than the queried size or a null workspace is BAD_PARAM, and ASan sees a
//   workspace that is gone by the time the work runs.
// - Work is submitted to the handle's stream through simt.h's submit: it runs now, or is
//   recorded when that stream captures a graph (descriptors, alpha and beta are read at the
//   call, as cuDNN reads them; the buffers when the work runs).
// - Misuse the card would not report but that makes its result undefined is refused here
//   (BAD_PARAM), so it shows: an output that overlaps an input or the workspace, a pointer
//   not aligned to its element size.
// - cudnnCreate allocates a little device memory (the handle's device-side state), as the
//   real one does, so creating a handle during a graph capture fails as on the GPU.
#include <cuda_runtime_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <type_traits>
#include <vector>

#include "ember/cuda_sim/simt.h"

struct cudnnContext {
  int device = 0;
  cudaStream_t stream = nullptr;  // the legacy default stream until cudnnSetStream
  void* device_state = nullptr;
};
struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int n = 0, c = 0, h = 0, w = 0;
};
struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, h = 0, w = 0;
};
struct cudnnConvolutionStruct {
  bool set = false;  // by cudnnSetConvolution2dDescriptor; group count and math type have defaults
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

namespace ember::cuda::sim {
namespace {

constexpr cudnnStatus_t kOk = CUDNN_STATUS_SUCCESS, kBad = CUDNN_STATUS_BAD_PARAM,
                        kUnsupported = CUDNN_STATUS_NOT_SUPPORTED;

bool valid_type(cudnnDataType_t t) { return int(t) >= int(CUDNN_DATA_FLOAT) && int(t) <= int(CUDNN_DATA_COMPLEX_FP64); }
bool valid_format(cudnnTensorFormat_t f) {
  return int(f) >= int(CUDNN_TENSOR_NCHW) && int(f) <= int(CUDNN_TENSOR_NCHW_VECT_C);
}

// Sizes of a tensor or filter descriptor: positive, and at most 2^31 - 1 elements (cuDNN's
// limit, NOT_SUPPORTED beyond it).
cudnnStatus_t check_dims(int a, int b, int c, int d) {
  if (a <= 0 || b <= 0 || c <= 0 || d <= 0) return kBad;
  if (int64_t(a) * b * c * d > int64_t(INT32_MAX)) return kUnsupported;
  return kOk;
}

// Element strides of a packed 4-d operand in its format: [n, c, h, w] for tensors, [k, c, r,
// s] for filters (NHWC is KRSC there).
struct Strides {
  int64_t n, c, h, w;
};
Strides packed(cudnnTensorFormat_t f, int64_t c, int64_t h, int64_t w) {
  if (f == CUDNN_TENSOR_NHWC) return {h * w * c, 1, w * c, c};
  return {c * h * w, h * w, w, 1};
}

enum class Data : uint8_t { f32, f64, f16, bf16 };

// One convolution as the four descriptors describe it, checked.
struct Geometry {
  Data data = Data::f32;
  bool tf32 = false;                 // round both operands of each product to TF32
  int64_t N, C, H, W, K, R, S;       // x [N, C, H, W], w [K, C/G, R, S]
  int64_t Ho, Wo, G, Cg, Kg;         // y [N, K, Ho, Wo]; channels per group in and out
  int64_t ph, pw, sh, sw, dh, dw;
  bool flip;                         // CUDNN_CONVOLUTION: the filter is applied flipped
  Strides x, y, w;

  size_t element_size() const { return data == Data::f64 ? 8 : data == Data::f32 ? 4 : 2; }
  size_t accumulator_size() const { return data == Data::f64 ? 8 : 4; }
  int64_t x_elements() const { return N * C * H * W; }
  int64_t y_elements() const { return N * K * Ho * Wo; }
  int64_t w_elements() const { return K * Cg * R * S; }
};

cudnnStatus_t geometry(const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                       const cudnnTensorStruct* y, Geometry& g) {
  if (!x || !w || !conv || !y) return kBad;
  if (!x->set || !w->set || !conv->set || !y->set) return kBad;
  if (x->type != w->type || x->type != y->type) return kBad;
  g.N = x->n, g.C = x->c, g.H = x->h, g.W = x->w;
  g.K = w->k, g.R = w->h, g.S = w->w;
  g.G = conv->groups;
  if (g.C % g.G != 0 || g.K % g.G != 0 || w->c != g.C / g.G) return kBad;
  g.Cg = g.C / g.G, g.Kg = g.K / g.G;
  g.ph = conv->pad_h, g.pw = conv->pad_w, g.sh = conv->stride_h, g.sw = conv->stride_w;
  g.dh = conv->dilation_h, g.dw = conv->dilation_w;
  // The dilated filter must fit in the padded input: at least one output row and column.
  const int64_t span_h = g.dh * (g.R - 1) + 1, span_w = g.dw * (g.S - 1) + 1;
  if (span_h > g.H + 2 * g.ph || span_w > g.W + 2 * g.pw) return kBad;
  g.Ho = (g.H + 2 * g.ph - span_h) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - span_w) / g.sw + 1;
  if (y->n != g.N || y->c != g.K || y->h != g.Ho || y->w != g.Wo) return kBad;
  g.flip = conv->mode == CUDNN_CONVOLUTION;

  // The configurations of cuDNN's tables that are modelled here.
  switch (x->type) {
    case CUDNN_DATA_FLOAT:
      if (conv->compute != CUDNN_DATA_FLOAT) return kUnsupported;
      g.data = Data::f32;
      break;
    case CUDNN_DATA_DOUBLE:
      if (conv->compute != CUDNN_DATA_DOUBLE) return kUnsupported;
      g.data = Data::f64;
      break;
    case CUDNN_DATA_HALF:  // PSEUDO_HALF_CONFIG; TRUE_HALF_CONFIG (half compute) is not modelled
      if (conv->compute != CUDNN_DATA_FLOAT) return kUnsupported;
      g.data = Data::f16;
      break;
    case CUDNN_DATA_BFLOAT16:
      if (conv->compute != CUDNN_DATA_FLOAT) return kUnsupported;
      g.data = Data::bf16;
      break;
    default: return kUnsupported;
  }
  for (cudnnTensorFormat_t f : {x->format, y->format, w->format})
    if (f == CUDNN_TENSOR_NCHW_VECT_C) return kUnsupported;
  if (w->format == CUDNN_TENSOR_NHWC && (x->format != CUDNN_TENSOR_NHWC || y->format != CUDNN_TENSOR_NHWC))
    return kUnsupported;
  // f32 down-converted to f16 for tensor cores: a rounding not modelled.
  if (g.data == Data::f32 && conv->math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return kUnsupported;
  g.tf32 = g.data == Data::f32 && conv->math != CUDNN_FMA_MATH;
  g.x = packed(x->format, g.C, g.H, g.W);
  g.y = packed(y->format, g.K, g.Ho, g.Wo);
  g.w = packed(w->format, g.Cg, g.R, g.S);
  return kOk;
}

// ---- algorithms

enum class Pass : uint8_t { forward, backward_data, backward_filter };

struct Algo {
  int id;
  bool workspace;  // uses one (its size: workspace_bytes)
  cudnnDeterminism_t determinism;
};
// Per pass, in the heuristics' order: the workspace algorithm first.
constexpr Algo kForward[] = {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, true, CUDNN_DETERMINISTIC},
                             {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, false, CUDNN_DETERMINISTIC}};
constexpr Algo kBackwardData[] = {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true, CUDNN_DETERMINISTIC},
                                  {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false, CUDNN_NON_DETERMINISTIC}};
constexpr Algo kBackwardFilter[] = {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true, CUDNN_DETERMINISTIC},
                                    {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false, CUDNN_NON_DETERMINISTIC}};

struct AlgoList {
  const Algo* begin_;
  const Algo* end_;
  int count;  // the enum's *_ALGO_COUNT
  const Algo* begin() const { return begin_; }
  const Algo* end() const { return end_; }
};
AlgoList algorithms(Pass p) {
  switch (p) {
    case Pass::forward: return {std::begin(kForward), std::end(kForward), CUDNN_CONVOLUTION_FWD_ALGO_COUNT};
    case Pass::backward_data:
      return {std::begin(kBackwardData), std::end(kBackwardData), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT};
    default:
      return {std::begin(kBackwardFilter), std::end(kBackwardFilter), CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};
  }
}

// The algorithm `id` of pass `p`: BAD_PARAM for an id outside the enum, NOT_SUPPORTED for one
// not offered.
cudnnStatus_t find_algo(Pass p, int id, const Algo*& out) {
  const AlgoList list = algorithms(p);
  if (id < 0 || id >= list.count) return kBad;
  for (const Algo& a : list)
    if (a.id == id) return (out = &a, kOk);
  return kUnsupported;
}

// A workspace algorithm keeps the packed filter (forward, backward data) or the filter
// gradient's accumulators (backward filter) in its workspace: [K, C/G, R, S] accumulators.
size_t workspace_bytes(const Geometry& g, const Algo& a) {
  return a.workspace ? size_t(g.w_elements()) * g.accumulator_size() : 0;
}

// ---- the reference convolution

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
acc_t<T> widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  else return v;
}
template <class T>
T narrow(acc_t<T> v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else return v;
}

// f32 to TF32 as cvt.rna.tf32.f32: 10 explicit mantissa bits, to nearest, ties away from 0.
float tf32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) return v;  // inf, NaN
  b = (b + 0x1000u) & ~0x1fffu;
  std::memcpy(&v, &b, 4);
  return v;
}

// An operand as dense [d0, d1, d2, d3] accumulators, TF32-rounded when the math says so.
template <class T>
std::vector<acc_t<T>> dense(const T* p, int64_t d0, int64_t d1, int64_t d2, int64_t d3, Strides s, bool round) {
  std::vector<acc_t<T>> out(size_t(d0 * d1 * d2 * d3));
  size_t i = 0;
  for (int64_t a = 0; a < d0; ++a)
    for (int64_t b = 0; b < d1; ++b)
      for (int64_t c = 0; c < d2; ++c)
        for (int64_t d = 0; d < d3; ++d) {
          acc_t<T> v = widen(p[a * s.n + b * s.c + c * s.h + d * s.w]);
          if constexpr (std::is_same_v<acc_t<T>, float>)
            if (round) v = tf32(v);
          out[i++] = v;
        }
  return out;
}

// The filter as dense [K, C/G, R, S] accumulators indexed by tap: tap (r, s) meets the input at
// (o * stride - pad + r * dilation); CUDNN_CONVOLUTION applies the filter flipped there.
template <class T>
void pack_filter(const Geometry& g, const T* w, acc_t<T>* out) {
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.Cg; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t fr = g.flip ? g.R - 1 - r : r, fs = g.flip ? g.S - 1 - s : s;
          acc_t<T> v = widen(w[k * g.w.n + c * g.w.c + fr * g.w.h + fs * g.w.w]);
          if constexpr (std::is_same_v<acc_t<T>, float>)
            if (g.tf32) v = tf32(v);
          out[((k * g.Cg + c) * g.R + r) * g.S + s] = v;
        }
}

// The outputs o in [lo, hi) whose input o * stride + off lies in [0, in), o < outs.
struct Range {
  int64_t lo, hi;
};
Range valid(int64_t off, int64_t stride, int64_t in, int64_t outs) {
  const int64_t lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  const int64_t hi = off > in - 1 ? 0 : std::min(outs, (in - 1 - off) / stride + 1);
  return {lo, std::max(lo, hi)};
}

// out = alpha * sum (+ beta * out when beta != 0: beta = 0 never reads the output).
template <class T>
void store(T* out, int64_t i, acc_t<T> sum, acc_t<T> alpha, acc_t<T> beta) {
  acc_t<T> v = alpha * sum;
  if (beta != 0) v += beta * widen(out[i]);
  out[i] = narrow<T>(v);
}

template <class T>
void forward(const Geometry& g, acc_t<T> alpha, acc_t<T> beta, const T* x, const T* w, T* y, void* workspace) {
  using A = acc_t<T>;
  const std::vector<A> X = dense(x, g.N, g.C, g.H, g.W, g.x, g.tf32);
  std::vector<A> local;
  A* F = workspace ? static_cast<A*>(workspace) : (local.resize(size_t(g.w_elements())), local.data());
  pack_filter(g, w, F);
  std::vector<A> acc(size_t(g.Wo));  // one accumulator per output element of a row
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      const int64_t group = k / g.Kg;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        std::fill(acc.begin(), acc.end(), A(0));
        for (int64_t c = 0; c < g.Cg; ++c)
          for (int64_t r = 0; r < g.R; ++r) {
            const int64_t ih = oh * g.sh - g.ph + r * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            const A* row = &X[size_t(((n * g.C + group * g.Cg + c) * g.H + ih) * g.W)];
            for (int64_t s = 0; s < g.S; ++s) {
              const A f = F[((k * g.Cg + c) * g.R + r) * g.S + s];
              const int64_t off = s * g.dw - g.pw;
              const Range ow = valid(off, g.sw, g.W, g.Wo);
              for (int64_t o = ow.lo; o < ow.hi; ++o) acc[size_t(o)] += row[o * g.sw + off] * f;
            }
          }
        for (int64_t o = 0; o < g.Wo; ++o)
          store(y, n * g.y.n + k * g.y.c + oh * g.y.h + o * g.y.w, acc[size_t(o)], alpha, beta);
      }
    }
}

template <class T>
void backward_data(const Geometry& g, acc_t<T> alpha, acc_t<T> beta, const T* w, const T* dy, T* dx,
                   void* workspace) {
  using A = acc_t<T>;
  const std::vector<A> DY = dense(dy, g.N, g.K, g.Ho, g.Wo, g.y, g.tf32);
  std::vector<A> local;
  A* F = workspace ? static_cast<A*>(workspace) : (local.resize(size_t(g.w_elements())), local.data());
  pack_filter(g, w, F);
  std::vector<A> acc(size_t(g.W));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t ci = 0; ci < g.C; ++ci) {
      const int64_t group = ci / g.Cg, c = ci % g.Cg;
      for (int64_t ih = 0; ih < g.H; ++ih) {
        std::fill(acc.begin(), acc.end(), A(0));
        // For a fixed (k, r, s) each input element receives at most one term: the terms of
        // each element arrive in (k, r, s) order.
        for (int64_t kk = 0; kk < g.Kg; ++kk) {
          const int64_t k = group * g.Kg + kk;
          for (int64_t r = 0; r < g.R; ++r) {
            const int64_t t = ih + g.ph - r * g.dh;
            if (t < 0 || t % g.sh != 0 || t / g.sh >= g.Ho) continue;
            const A* row = &DY[size_t(((n * g.K + k) * g.Ho + t / g.sh) * g.Wo)];
            for (int64_t s = 0; s < g.S; ++s) {
              const A f = F[((k * g.Cg + c) * g.R + r) * g.S + s];
              const int64_t off = s * g.dw - g.pw;
              const Range ow = valid(off, g.sw, g.W, g.Wo);
              for (int64_t o = ow.lo; o < ow.hi; ++o) acc[size_t(o * g.sw + off)] += row[o] * f;
            }
          }
        }
        for (int64_t iw = 0; iw < g.W; ++iw)
          store(dx, n * g.x.n + ci * g.x.c + ih * g.x.h + iw * g.x.w, acc[size_t(iw)], alpha, beta);
      }
    }
}

template <class T>
void backward_filter(const Geometry& g, acc_t<T> alpha, acc_t<T> beta, const T* x, const T* dy, T* dw,
                     void* workspace) {
  using A = acc_t<T>;
  const std::vector<A> X = dense(x, g.N, g.C, g.H, g.W, g.x, g.tf32);
  const std::vector<A> DY = dense(dy, g.N, g.K, g.Ho, g.Wo, g.y, g.tf32);
  std::vector<A> local;
  A* acc = workspace ? static_cast<A*>(workspace) : (local.resize(size_t(g.w_elements())), local.data());
  for (int64_t k = 0; k < g.K; ++k) {
    const int64_t group = k / g.Kg;
    for (int64_t c = 0; c < g.Cg; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s) {
          A sum = 0;
          const int64_t off = s * g.dw - g.pw;
          const Range ow = valid(off, g.sw, g.W, g.Wo);
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t oh = 0; oh < g.Ho; ++oh) {
              const int64_t ih = oh * g.sh - g.ph + r * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              const A* xrow = &X[size_t(((n * g.C + group * g.Cg + c) * g.H + ih) * g.W)];
              const A* dyrow = &DY[size_t(((n * g.K + k) * g.Ho + oh) * g.Wo)];
              for (int64_t o = ow.lo; o < ow.hi; ++o) sum += dyrow[o] * xrow[o * g.sw + off];
            }
          acc[((k * g.Cg + c) * g.R + r) * g.S + s] = sum;
        }
  }
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.Cg; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t fr = g.flip ? g.R - 1 - r : r, fs = g.flip ? g.S - 1 - s : s;
          store(dw, k * g.w.n + c * g.w.c + fr * g.w.h + fs * g.w.w, acc[((k * g.Cg + c) * g.R + r) * g.S + s],
                alpha, beta);
        }
}

// ---- one call: checks, then the work on the handle's stream

struct Buffer {
  const void* p;
  size_t bytes;
};
bool overlap(Buffer a, Buffer b) {
  const auto* pa = static_cast<const char*>(a.p);
  const auto* pb = static_cast<const char*>(b.p);
  return a.bytes && b.bytes && pa < pb + b.bytes && pb < pa + a.bytes;
}

// `in0`, `in1`: the pass's inputs (forward x, w; backward data w, dy; backward filter x, dy).
cudnnStatus_t run(Pass pass, cudnnHandle_t handle, const void* alpha, const void* beta, const Geometry& g,
                  int algo_id, void* workspace, size_t workspace_size, const void* in0, const void* in1, void* out) {
  if (!handle || !alpha || !beta || !in0 || !in1 || !out) return kBad;
  const Algo* algo = nullptr;
  if (cudnnStatus_t st = find_algo(pass, algo_id, algo); st != kOk) return st;
  const size_t need = workspace_bytes(g, *algo);
  if (need > 0 && (!workspace || workspace_size < need)) return kBad;
  const size_t es = g.element_size();
  for (const void* p : {in0, in1, const_cast<const void*>(out)})
    if (reinterpret_cast<uintptr_t>(p) % es != 0) return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
  if (need > 0 && reinterpret_cast<uintptr_t>(workspace) % 16 != 0) return CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
  const size_t xb = size_t(g.x_elements()) * es, yb = size_t(g.y_elements()) * es, wb = size_t(g.w_elements()) * es;
  const Buffer b0{in0, pass == Pass::backward_data ? wb : xb};
  const Buffer b1{in1, pass == Pass::forward ? wb : yb};
  const Buffer bo{out, pass == Pass::forward ? yb : pass == Pass::backward_data ? xb : wb};
  const Buffer bw{workspace, need};
  if (overlap(bo, b0) || overlap(bo, b1) || overlap(bw, b0) || overlap(bw, b1) || overlap(bw, bo)) return kBad;
  // The handle's stream must still exist (a destroyed one would fail the kernel launch).
  unsigned flags = 0;
  if (cudaStreamGetFlags(handle->stream, &flags) != cudaSuccess) return CUDNN_STATUS_EXECUTION_FAILED;

  // alpha and beta are host scalars read now: double for f64 data, float otherwise.
  const bool f64 = g.data == Data::f64;
  const double a = f64 ? *static_cast<const double*>(alpha) : double(*static_cast<const float*>(alpha));
  const double b = f64 ? *static_cast<const double*>(beta) : double(*static_cast<const float*>(beta));
  void* ws = need > 0 ? workspace : nullptr;
  detail::submit(handle->stream, [pass, g, a, b, in0, in1, out, ws] {
    auto go = [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const auto* p0 = static_cast<const T*>(in0);
      const auto* p1 = static_cast<const T*>(in1);
      if (pass == Pass::forward) forward<T>(g, A(a), A(b), p0, p1, static_cast<T*>(out), ws);
      else if (pass == Pass::backward_data) backward_data<T>(g, A(a), A(b), p0, p1, static_cast<T*>(out), ws);
      else backward_filter<T>(g, A(a), A(b), p0, p1, static_cast<T*>(out), ws);
    };
    switch (g.data) {
      case Data::f32: go(float{}); break;
      case Data::f64: go(double{}); break;
      case Data::f16: go(__half{}); break;
      case Data::bf16: go(__nv_bfloat16{}); break;
    }
  });
  return kOk;
}

// The v7 heuristics: the offered algorithms (status SUCCESS, or the configuration's
// NOT_SUPPORTED when it is not modelled), then the rest of the enum as NOT_SUPPORTED.
template <class Perf, class AlgoEnum>
cudnnStatus_t query(Pass pass, cudnnHandle_t handle, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                    const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int requested, int* returned,
                    Perf* perf) {
  if (!handle || !returned || !perf || requested < 1) return kBad;
  Geometry g;
  const cudnnStatus_t config = geometry(x, w, conv, y, g);
  if (config != kOk && config != kUnsupported) return config;
  const AlgoList list = algorithms(pass);
  int n = 0;
  float time = 0.01f;  // the ranking, fastest first
  for (const Algo& a : list) {
    if (n == requested) break;
    Perf p{};
    p.algo = AlgoEnum(a.id);
    p.status = config;
    p.time = config == kOk ? (time *= 2) : -1.0f;
    p.memory = config == kOk ? workspace_bytes(g, a) : 0;
    p.determinism = a.determinism;
    p.mathType = conv->math;
    perf[n++] = p;
  }
  for (int id = 0; id < list.count && n < requested; ++id) {
    if (std::any_of(list.begin(), list.end(), [id](const Algo& a) { return a.id == id; })) continue;
    Perf p{};
    p.algo = AlgoEnum(id);
    p.status = kUnsupported;
    p.time = -1.0f;
    p.memory = 0;
    p.determinism = CUDNN_NON_DETERMINISTIC;
    p.mathType = conv->math;
    perf[n++] = p;
  }
  *returned = n;
  return kOk;
}

// cudnnFind*AlgorithmEx: times every offered algorithm whose workspace fits `workspace_size`
// by running it on the caller's buffers (alpha 1, beta 0), and ranks them by time; the ones
// that do not fit say CUDNN_STATUS_ALLOC_FAILED. The real call blocks until its trials are
// done (it synchronizes), which a stream capturing a graph refuses: EXECUTION_FAILED here.
// What a trial leaves in the output is unspecified, so it is left all ones (NaN in every
// floating type): a caller that skips its own run afterwards reads NaN. The simulated times
// rank the algorithms in the reverse of the heuristics' order (the one needing no workspace
// first), so a caller that follows the measured ranking runs another algorithm than its
// heuristic path would.
template <class Perf, class AlgoEnum>
cudnnStatus_t find(Pass pass, cudnnHandle_t handle, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                   const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int requested, int* returned,
                   Perf* perf, void* workspace, size_t workspace_size, const void* in0, const void* in1, void* out) {
  if (!handle || !returned || !perf || requested < 1 || !in0 || !in1 || !out) return kBad;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(handle->stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone)
    return CUDNN_STATUS_EXECUTION_FAILED;
  Geometry g;
  if (cudnnStatus_t st = geometry(x, w, conv, y, g); st != kOk) return st;
  int n = 0;
  if (cudnnStatus_t st = query<Perf, AlgoEnum>(pass, handle, x, w, conv, y, requested, &n, perf); st != kOk) return st;
  const float one_f = 1.0f, zero_f = 0.0f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = g.data == Data::f64;
  float time = 1.0f;  // reverse order: each later offered algorithm is faster
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != kOk) continue;
    if (perf[i].memory > workspace_size) {
      perf[i].status = CUDNN_STATUS_ALLOC_FAILED;
      perf[i].time = -1.0f;
      continue;
    }
    if (cudnnStatus_t st = run(pass, handle, f64 ? static_cast<const void*>(&one_d) : &one_f,
                               f64 ? static_cast<const void*>(&zero_d) : &zero_f, g, int(perf[i].algo), workspace,
                               workspace_size, in0, in1, out);
        st != kOk)
      return st;
    perf[i].time = (time /= 2);
  }
  const size_t out_elements = size_t(pass == Pass::forward         ? g.y_elements()
                                     : pass == Pass::backward_data ? g.x_elements()
                                                                   : g.w_elements());
  std::memset(out, 0xff, out_elements * g.element_size());
  // Fastest first, then the ones that did not run, as cuDNN returns them.
  std::stable_sort(perf, perf + n, [](const Perf& a, const Perf& b) {
    const bool ra = a.status == kOk, rb = b.status == kOk;
    return ra != rb ? ra : ra && a.time < b.time;
  });
  *returned = n;
  return kOk;
}

cudnnStatus_t workspace_size(Pass pass, cudnnHandle_t handle, const cudnnTensorStruct* x,
                             const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                             const cudnnTensorStruct* y, int algo_id, size_t* bytes) {
  if (!handle || !bytes) return kBad;
  Geometry g;
  if (cudnnStatus_t st = geometry(x, w, conv, y, g); st != kOk) return st;
  const Algo* algo = nullptr;
  if (cudnnStatus_t st = find_algo(pass, algo_id, algo); st != kOk) return st;
  *bytes = workspace_bytes(g, *algo);
  return kOk;
}

}  // namespace
}  // namespace ember::cuda::sim

using namespace ember::cuda::sim;

extern "C" {

// ---- library, handles, errors

size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER: return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    default: return "CUDNN_STATUS_UNKNOWN (simulated cuDNN)";
  }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (!handle) return kBad;
  auto* h = new cudnnContext;
  cudaGetDevice(&h->device);
  // The handle's device-side state: a device allocation, refused during a capture as cuDNN's is.
  if (cudaMalloc(&h->device_state, 256) != cudaSuccess) {
    delete h;
    return CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  }
  *handle = h;
  return kOk;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (!handle) return kBad;
  cudaFree(handle->device_state);
  delete handle;
  return kOk;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  if (!handle) return kBad;
  unsigned flags = 0;
  if (cudaStreamGetFlags(stream, &flags) != cudaSuccess) return kBad;  // not a live stream
  handle->stream = stream;
  return kOk;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream) {
  if (!handle || !stream) return kBad;
  *stream = handle->stream;
  return kOk;
}

// ---- descriptors

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) {
  if (!d) return kBad;
  *d = new cudnnTensorStruct;
  return kOk;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) {
  delete d;
  return kOk;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  if (!d || !valid_format(format) || !valid_type(type)) return kBad;
  if (cudnnStatus_t st = check_dims(n, c, h, w); st != kOk) return st;
  *d = cudnnTensorStruct{true, type, format, n, c, h, w};
  return kOk;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) {
  if (!d) return kBad;
  *d = new cudnnFilterStruct;
  return kOk;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) {
  delete d;
  return kOk;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
  if (!d || !valid_format(format) || !valid_type(type)) return kBad;
  if (cudnnStatus_t st = check_dims(k, c, h, w); st != kOk) return st;
  *d = cudnnFilterStruct{true, type, format, k, c, h, w};
  return kOk;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  if (!d) return kBad;
  *d = new cudnnConvolutionStruct;
  return kOk;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  delete d;
  return kOk;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (!d || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 || dilation_w <= 0) return kBad;
  if ((mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION) || !valid_type(compute)) return kBad;
  d->set = true;
  d->pad_h = pad_h, d->pad_w = pad_w, d->stride_h = u, d->stride_w = v;
  d->dilation_h = dilation_h, d->dilation_w = dilation_w;
  d->mode = mode;
  d->compute = compute;
  return kOk;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (!d || groups < 1) return kBad;
  d->groups = groups;
  return kOk;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  if (!d || int(math) < int(CUDNN_DEFAULT_MATH) || int(math) > int(CUDNN_FMA_MATH)) return kBad;
  d->math = math;
  return kOk;
}

// ---- algorithm queries and workspace sizes

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                     const cudnnFilterDescriptor_t w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
  return query<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(Pass::forward, handle, x, w, conv, y,
                                                                         requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                          const cudnnTensorDescriptor_t dy,
                                                          const cudnnConvolutionDescriptor_t conv,
                                                          const cudnnTensorDescriptor_t dx, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
  return query<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Pass::backward_data, handle, dx, w, conv, dy, requested, returned, perf);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                            const cudnnTensorDescriptor_t dy,
                                                            const cudnnConvolutionDescriptor_t conv,
                                                            const cudnnFilterDescriptor_t dw, const int requested,
                                                            int* returned,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
  return query<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Pass::backward_filter, handle, x, dw, conv, dy, requested, returned, perf);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                      const cudnnFilterDescriptor_t w,
                                                      const cudnnConvolutionDescriptor_t conv,
                                                      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
  return workspace_size(Pass::forward, handle, x, w, conv, y, int(algo), bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t w,
                                                           const cudnnTensorDescriptor_t dy,
                                                           const cudnnConvolutionDescriptor_t conv,
                                                           const cudnnTensorDescriptor_t dx,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
  return workspace_size(Pass::backward_data, handle, dx, w, conv, dy, int(algo), bytes);
}
cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t x,
                                                             const cudnnTensorDescriptor_t dy,
                                                             const cudnnConvolutionDescriptor_t conv,
                                                             const cudnnFilterDescriptor_t dw,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
  return workspace_size(Pass::backward_filter, handle, x, dw, conv, dy, int(algo), bytes);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xd,
                                                     const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                                     const cudnnConvolutionDescriptor_t conv,
                                                     const cudnnTensorDescriptor_t yd, void* y, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf,
                                                     void* workspace, size_t workspace_size) {
  return find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Pass::forward, handle, xd, wd, conv, yd, requested, returned, perf, workspace, workspace_size, x, w, y);
}
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wd, const void* w, const cudnnTensorDescriptor_t dyd,
    const void* dy, const cudnnConvolutionDescriptor_t conv, const cudnnTensorDescriptor_t dxd, void* dx,
    const int requested, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf, void* workspace,
    size_t workspace_size) {
  return find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Pass::backward_data, handle, dxd, wd, conv, dyd, requested, returned, perf, workspace, workspace_size, w, dy,
      dx);
}
cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xd, const void* x, const cudnnTensorDescriptor_t dyd,
    const void* dy, const cudnnConvolutionDescriptor_t conv, const cudnnFilterDescriptor_t dwd, void* dw,
    const int requested, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf, void* workspace,
    size_t workspace_size) {
  return find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Pass::backward_filter, handle, xd, dwd, conv, dyd, requested, returned, perf, workspace, workspace_size, x, dy,
      dw);
}

// ---- the convolutions: y = alpha * op(inputs) + beta * y

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* x, const cudnnFilterDescriptor_t wd, const void* w,
                                      const cudnnConvolutionDescriptor_t conv, cudnnConvolutionFwdAlgo_t algo,
                                      void* workspace, size_t workspace_size, const void* beta,
                                      const cudnnTensorDescriptor_t yd, void* y) {
  if (!handle) return kBad;
  Geometry g;
  if (cudnnStatus_t st = geometry(xd, wd, conv, yd, g); st != kOk) return st;
  return run(Pass::forward, handle, alpha, beta, g, int(algo), workspace, workspace_size, x, w, y);
}
cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* w, const cudnnTensorDescriptor_t dyd, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* workspace, size_t workspace_size, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dx) {
  if (!handle) return kBad;
  Geometry g;
  if (cudnnStatus_t st = geometry(dxd, wd, conv, dyd, g); st != kOk) return st;
  return run(Pass::backward_data, handle, alpha, beta, g, int(algo), workspace, workspace_size, w, dy, dx);
}
cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xd, const void* x,
                                             const cudnnTensorDescriptor_t dyd, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_size, const void* beta,
                                             const cudnnFilterDescriptor_t dwd, void* dw) {
  if (!handle) return kBad;
  Geometry g;
  if (cudnnStatus_t st = geometry(xd, dwd, conv, dyd, g); st != kOk) return st;
  return run(Pass::backward_filter, handle, alpha, beta, g, int(algo), workspace, workspace_size, x, dy, dw);
}

}  // extern "C"
