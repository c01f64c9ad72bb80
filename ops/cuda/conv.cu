// CUDA conv2d through cuDNN's convolution API (forward, backward data, backward filter) and
// max_pool2d with kernels of our own (their index convention is the CPU's, and backward
// consumes those indices). The CPU twin is ops/cpu/conv.cpp.
//
// Invariants:
// - Buffers are dense NCHW (the front made them contiguous); the filter is [O, C/groups,
//   kH, kW]; groups, stride, padding and dilation map one to one onto the cuDNN descriptor.
// - One cuDNN handle per (thread, device), created on first use and set to the thread's
//   current stream before every call; every cuDNN status is checked (EMBER_CUDNN_CHECK).
// - Math: f32 computes in f32 on TF32 tensor cores when ember::cuda::allow_tf32() (the one
//   switch for matmul and conv, read at every call) and in plain FMA f32 otherwise; f16 and
//   bf16 compute with f32 accumulation on tensor cores; f64 in f64.
// - Algorithms come from cuDNN's heuristics (cudnnGet*_v7), or with ops::cudnn_benchmark()
//   from timing them on the call's buffers (cudnnFind*AlgorithmEx, never while the stream is
//   captured): the ranking is cached per geometry, and a call runs the first supported one
//   whose workspace is within ops::cudnn_workspace_limit() and can be allocated (a full card
//   falls back to a leaner algorithm). Under set_deterministic(true) only deterministic
//   algorithms are candidates (an error when there is none); otherwise the fastest-ranked
//   ones are, as in PyTorch.
//   Workspaces are ember allocations (u8 tensors on the device, through the caching
//   allocator), so they are stream-ordered like the rest.
// - max_pool2d backward uses no float atomics: it is deterministic and adds in the CPU's
//   order. (The bias gradient is not here: it is a sum reduction, ops/src/conv.cpp.)
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <vector>

#include "ember/cuda/launch.h"
#include "ember/deterministic.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "ember/ops/conv.h"
#include "ember/ops/matmul_config.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "loops.cuh"

#define EMBER_CUDNN_CHECK(expr)                                                                 \
  do {                                                                                          \
    cudnnStatus_t ember_status_ = (expr);                                                       \
    if (ember_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                     \
      throw ::ember::DeviceError(::ember::str("[cudnn] ", #expr, " failed: ",                   \
                                              cudnnGetErrorString(ember_status_), " at ",       \
                                              __FILE__, ":", __LINE__));                        \
  } while (0)

namespace ember::ops::cuda {

namespace {

unsigned blocks_for(int64_t n, int threads = kThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t(1) << 16));
}

// ---- cuDNN handles and descriptors ----

// The calling thread's handle for `device`, bound to its current stream.
cudnnHandle_t cudnn_handle(Device device) {
  struct Handles {
    std::vector<cudnnHandle_t> h;
    ~Handles() {
      for (cudnnHandle_t x : h)
        if (x) cudnnDestroy(x);  // at thread exit: nothing left to report a failure to
    }
  };
  thread_local Handles handles;
  const auto on = ember::cuda::detail::on_device(device);  // the device current for cudnnCreate
  cudaStream_t stream = on.stream;
  const size_t d = size_t(device.index);
  if (handles.h.size() <= d) handles.h.resize(d + 1, nullptr);
  if (!handles.h[d]) EMBER_CUDNN_CHECK(cudnnCreate(&handles.h[d]));
  EMBER_CUDNN_CHECK(cudnnSetStream(handles.h[d], stream));
  return handles.h[d];
}

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
};
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

cudnnDataType_t cudnn_dtype(DType t) {
  switch (t) {
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f32: return CUDNN_DATA_FLOAT;
    default: throw DTypeError(str("[conv2d] cuDNN has no ", t, " convolution"));
  }
}

int as_int(int64_t v) {
  EMBER_CHECK(v >= 0 && v <= INT_MAX, ShapeError, "[conv2d] size ", v, " exceeds cuDNN's int range");
  return int(v);
}

// Descriptors of one convolution: x [N, C, H, W], w [O, C/g, kh, kw], y [N, O, Ho, Wo].
struct ConvSetup {
  ember::cuda::detail::DeviceGuard device_guard;  // first: the device stays current for every call
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  cudnnHandle_t handle;
  DType dtype;
  bool f32_no_tf32;  // f32 data with TF32 disallowed: FMA math only
  std::vector<int64_t> key;

  ConvSetup(const Shape& xs, const Shape& ws, const Shape& ys, DType t, Device device, const Conv2dParams& p)
      : device_guard(device.index), handle(cudnn_handle(device)), dtype(t) {
    const cudnnDataType_t dt = cudnn_dtype(t);
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x.d, CUDNN_TENSOR_NCHW, dt, as_int(xs[0]), as_int(xs[1]),
                                                 as_int(xs[2]), as_int(xs[3])));
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y.d, CUDNN_TENSOR_NCHW, dt, as_int(ys[0]), as_int(ys[1]),
                                                 as_int(ys[2]), as_int(ys[3])));
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w.d, dt, CUDNN_TENSOR_NCHW, as_int(ws[0]), as_int(ws[1]),
                                                 as_int(ws[2]), as_int(ws[3])));
    // 16-bit data accumulates in f32 (CUDNN_DATA_FLOAT compute type).
    const cudnnDataType_t compute = t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv.d, as_int(p.padding[0]), as_int(p.padding[1]),
                                                      as_int(p.stride[0]), as_int(p.stride[1]),
                                                      as_int(p.dilation[0]), as_int(p.dilation[1]),
                                                      CUDNN_CROSS_CORRELATION, compute));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.d, as_int(p.groups)));
    f32_no_tf32 = t == DType::f32 && !ember::cuda::allow_tf32();
    set_math(t == DType::f64 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH);
    key = {int64_t(device.index), int64_t(t), f32_no_tf32, xs[0], xs[1], xs[2], xs[3], ws[0], ws[1], ws[2],
           ws[3], p.stride[0], p.stride[1], p.padding[0], p.padding[1], p.dilation[0], p.dilation[1], p.groups};
  }
  // The math type for the heuristics' query and for the run; f32 without TF32 always FMA.
  void set_math(cudnnMathType_t m) {
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, f32_no_tf32 ? CUDNN_FMA_MATH : m));
  }
  // alpha = 1, beta = 0 in the scaling type cuDNN expects (double for f64 data).
  const void* one() const { return dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one_f; }
  const void* zero() const { return dtype == DType::f64 ? static_cast<const void*>(&zero_d) : &zero_f; }
  float one_f = 1.0f, zero_f = 0.0f;
  double one_d = 1.0, zero_d = 0.0;
};

// ---- algorithm choice ----

enum class Pass { forward, backward_data, backward_filter };

struct AlgoChoice {
  int algo;
  cudnnMathType_t math;
  size_t workspace;
};

// cuDNN's ranking of the supported algorithms for (pass, geometry, dtype, math), heuristic
// or (ops::cudnn_benchmark()) measured, cached: under set_deterministic(true) only the
// deterministic ones (an error when there is none); otherwise all of them in the ranking's
// order, fastest first, as PyTorch does (preferring deterministic ones regardless would give
// up the fastest algorithms for nothing the user asked for).
// The ranked candidates of one convolution, and where to start: after a candidate's workspace
// could not be had, later calls start at the one that ran, instead of failing the same
// allocations again (each failure empties the allocator's cache, a device-wide wait).
struct Candidates {
  std::vector<AlgoChoice> algos;
  std::atomic<size_t> first{0};
};

// A device buffer of `bytes` from ember's allocator (kept alive by the returned tensor).
Tensor workspace(size_t bytes, Device device) {
  return detail::make_tensor({int64_t(std::max<size_t>(bytes, 1))}, DType::u8, device);
}

// Whether the handle's stream is being captured into a CUDA graph (a query that fails counts
// as captured: the caller then avoids anything that synchronizes).
bool stream_is_capturing(cudnnHandle_t handle) {
  cudaStream_t stream = nullptr;
  EMBER_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: clear it so the next check does not report it
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// A workspace of at most `bytes` for timing algorithms: halved until the allocator can give it.
Tensor find_workspace(size_t bytes, Device device) {
  for (;; bytes /= 2) {
    try {
      return workspace(bytes, device);
    } catch (const OutOfMemoryError&) {
      if (bytes == 0) throw;
    }
  }
}

// `query(n, &returned, perf)` fills perf with the heuristics' ranking; with
// ops::cudnn_benchmark() and the stream not captured, `find(n, &returned, perf, ws, bytes)`
// then times the algorithms whose workspace fits `bytes` (the largest the heuristics'
// candidates need within the limit) and fills perf fastest first.
template <class Perf, class Query, class Find>
Candidates& candidates(Pass pass, const ConvSetup& s, Device device, Query query, Find find) {
  static std::mutex mu;
  static std::map<std::vector<int64_t>, Candidates> cache;  // node-based: entries never move
  const bool deterministic = is_deterministic();
  const bool measure = ops::cudnn_benchmark() && !stream_is_capturing(s.handle);
  std::vector<int64_t> key = s.key;
  key.push_back(int64_t(pass));
  key.push_back(deterministic);
  key.push_back(measure);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  constexpr int kMaxAlgos = 16;
  Perf perf[kMaxAlgos];
  int returned = 0;
  EMBER_CUDNN_CHECK(query(kMaxAlgos, &returned, perf));
  if (measure) {
    const int64_t limit = cudnn_workspace_limit();
    size_t bytes = 0;
    for (int i = 0; i < returned; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && (limit < 0 || perf[i].memory <= uint64_t(limit)))
        bytes = std::max(bytes, perf[i].memory);
    const Tensor ws = find_workspace(bytes, device);
    returned = 0;
    EMBER_CUDNN_CHECK(find(kMaxAlgos, &returned, perf, ws.data_ptr(), size_t(ws.numel())));
  }
  std::vector<AlgoChoice> out;
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      out.push_back({int(perf[i].algo), perf[i].mathType, perf[i].memory});
  // Under set_deterministic(true) a nondeterministic fallback is an error, not a silent choice.
  EMBER_CHECK(!out.empty() || !deterministic, DeviceError,
              "[conv2d] set_deterministic(true) but cuDNN offers no deterministic algorithm for this "
              "convolution (pass ", int(pass), ")");
  EMBER_CHECK(!out.empty(), DeviceError, "[conv2d] cuDNN offers no algorithm for x ", s.key[3], "x",
              s.key[4], "x", s.key[5], "x", s.key[6], " and weight ", s.key[7], "x", s.key[8], "x", s.key[9],
              "x", s.key[10]);
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = cache.try_emplace(std::move(key));
  if (fresh) it->second.algos = std::move(out);
  return it->second;
}

// Runs the first candidate whose workspace (size_of(algo)) is within cudnn_workspace_limit()
// and can be allocated: `run(algo, workspace, bytes)`. An algorithm whose workspace cannot be
// had is passed over for the next one (the caching allocator has already released its cache
// before saying so); only when none fits is that an OutOfMemoryError, naming what was tried.
template <class SizeOf, class Run>
void run_first_that_fits(Candidates& cands, ConvSetup& s, Device device, const char* pass, SizeOf size_of,
                         Run run) {
  const int64_t limit = cudnn_workspace_limit();
  std::string tried;
  const size_t first = cands.first.load(std::memory_order_relaxed);
  for (size_t i = first; i < cands.algos.size(); ++i) {
    const AlgoChoice& c = cands.algos[i];
    s.set_math(c.math);
    const size_t bytes = size_of(c.algo);
    if (limit >= 0 && bytes > uint64_t(limit)) {
      tried += str(" algorithm ", c.algo, " (", uint64_t(bytes), " bytes: over the limit)");
      continue;
    }
    Tensor ws;
    try {
      ws = workspace(bytes, device);
    } catch (const OutOfMemoryError&) {
      tried += str(" algorithm ", c.algo, " (", uint64_t(bytes), " bytes: out of memory)");
      continue;
    }
    run(c.algo, ws.data_ptr(), bytes);
    // Out of memory for the ones before: start here next time (a limit is applied anew at
    // every call, so it is not remembered this way).
    if (tried.find("out of memory") != std::string::npos) cands.first.store(i, std::memory_order_relaxed);
    return;
  }
  throw OutOfMemoryError(str("[conv2d] no cuDNN algorithm for the ", pass, " pass has a workspace that fits "
                             "(limit ", limit, " bytes, set_cudnn_workspace_limit):", tried));
}

// ---- kernels of our own ----

// y[n, o, :] += bias[o].
template <class S>
__global__ void conv2d_bias_fwd_kernel(S* y, const S* bias, int64_t O, int64_t hw, int64_t total) {
  using C = compute_t<S>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x)
    y[t] = S(C(C(y[t]) + C(bias[(t / hw) % O])));
}

// The accumulation type of max_pool2d's backward: f32 for every type but f64.
template <class S>
using acc_t = std::conditional_t<std::is_same_v<S, double>, double, float>;

struct PoolGeom {
  int64_t H, W, Ho, Wo, kh, kw, sh, sw, ph, pw;
};

template <class C>
__device__ __forceinline__ bool is_nan(C v) {
  return v != v;
}

// One thread per output element; the window scan is the CPU's (ops/cpu/conv.cpp): the first
// maximum in row-major window order wins, NaN wins and stops the scan.
template <class S>
__global__ void max_pool2d_fwd_kernel_(const S* x, S* y, int64_t* indices, PoolGeom g, int64_t total) {
  using C = compute_t<S>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = t % g.Wo, oh = (t / g.Wo) % g.Ho, pl = t / (g.Wo * g.Ho);
    const S* xp = x + pl * g.H * g.W;
    const int64_t h0 = oh * g.sh - g.ph, hs = max(h0, int64_t(0)), he = min(h0 + g.kh, g.H);
    const int64_t w0 = ow * g.sw - g.pw, ws = max(w0, int64_t(0)), we = min(w0 + g.kw, g.W);
    int64_t best_i = hs * g.W + ws;
    C best = C(xp[best_i]);
    for (int64_t ih = hs; ih < he && !is_nan(best); ++ih)
      for (int64_t iw = ws; iw < we; ++iw) {
        const C v = C(xp[ih * g.W + iw]);
        if (v > best || is_nan(v)) {
          best = v;
          best_i = ih * g.W + iw;
          if (is_nan(v)) break;
        }
      }
    y[t] = S(best);
    indices[t] = best_i;
  }
}

// One warp per plane walks the plane's outputs 32 at a time in order. Lanes whose indices
// coincide (overlapping windows) are grouped with __match_any_sync; the group's lowest lane
// adds the old value and then the group's gradients in lane order, so every input element
// receives its gradients in ascending output order, exactly the CPU's loop, with no atomics.
template <class S, class A>
__global__ void max_pool2d_bwd_kernel_(const S* gy, const int64_t* indices, A* acc, int64_t planes,
                                       int64_t hw_in, int64_t hw_out) {
  const int lane = int(threadIdx.x) & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) / 32;
  for (int64_t pl = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; pl < planes; pl += warps) {
    const S* g = gy + pl * hw_out;
    const int64_t* ip = indices + pl * hw_out;
    A* a = acc + pl * hw_in;
    for (int64_t b = 0; b < hw_out; b += 32) {
      const int64_t j = b + lane;
      const bool valid = j < hw_out;
      const long long i = valid ? ip[j] : -1 - lane;  // invalid lanes each form their own group
      const A v = valid ? A(g[j]) : A(0);
      const unsigned group = __match_any_sync(0xffffffffu, (unsigned long long)i);
      const bool leader = lane == __ffs(group) - 1;
      A sum = leader && valid ? a[i] : A(0);
      for (int l = 0; l < 32; ++l) {
        const A vl = __shfl_sync(0xffffffffu, v, l);
        if (leader && ((group >> l) & 1u)) sum += vl;
      }
      if (leader && valid) a[i] = sum;
      __syncwarp();  // this chunk's writes are visible to the next chunk's reads
    }
  }
}

template <class U>
__global__ void max_pool2d_gather_fwd_kernel(const U* gx, const int64_t* indices, U* gy, int64_t hw_in,
                                             int64_t hw_out, int64_t total) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x)
    gy[t] = gx[(t / hw_out) * hw_in + indices[t]];
}

}  // namespace

void conv2d_fwd_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                       const Conv2dParams& p) {
  ConvSetup s(x.sizes(), w.sizes(), y.sizes(), x.dtype(), x.device(), p);
  auto& cands = candidates<cudnnConvolutionFwdAlgoPerf_t>(
      Pass::forward, s, x.device(),
      [&](int n, int* got, auto* perf) {
        return cudnnGetConvolutionForwardAlgorithm_v7(s.handle, s.x.d, s.w.d, s.conv.d, s.y.d, n, got, perf);
      },
      [&](int n, int* got, auto* perf, void* ws, size_t bytes) {  // writes y, which the run overwrites
        return cudnnFindConvolutionForwardAlgorithmEx(s.handle, s.x.d, x.data_ptr(), s.w.d, w.data_ptr(), s.conv.d,
                                                      s.y.d, y.data_ptr(), n, got, perf, ws, bytes);
      });
  run_first_that_fits(
      cands, s, x.device(), "forward",
      [&](int algo) {
        size_t bytes = 0;
        EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(s.handle, s.x.d, s.w.d, s.conv.d, s.y.d,
                                                                  cudnnConvolutionFwdAlgo_t(algo), &bytes));
        return bytes;
      },
      [&](int algo, void* ws, size_t bytes) {
        EMBER_CUDNN_CHECK(cudnnConvolutionForward(s.handle, s.one(), s.x.d, x.data_ptr(), s.w.d, w.data_ptr(),
                                                  s.conv.d, cudnnConvolutionFwdAlgo_t(algo), ws, bytes, s.zero(),
                                                  s.y.d, y.data_ptr()));
      });
  if (!bias.defined()) return;
  const int64_t total = y.numel(), O = y.sizes()[1], hw = y.sizes()[2] * y.sizes()[3];
  const auto on = ember::cuda::detail::on_device(y.device());
  cudaStream_t stream = on.stream;
  visit_floating(y.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(conv2d_bias_fwd_kernel<S>, blocks_for(total), kThreads, 0, stream,
        static_cast<S*>(y.data_ptr()), static_cast<const S*>(bias.data_ptr()), O, hw, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void conv2d_bwd_input_kernel(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  ConvSetup s(gx.sizes(), w.sizes(), gy.sizes(), gy.dtype(), gy.device(), p);
  auto& cands = candidates<cudnnConvolutionBwdDataAlgoPerf_t>(
      Pass::backward_data, s, gy.device(),
      [&](int n, int* got, auto* perf) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(s.handle, s.w.d, s.y.d, s.conv.d, s.x.d, n, got, perf);
      },
      [&](int n, int* got, auto* perf, void* ws, size_t bytes) {  // writes gx, which the run overwrites
        return cudnnFindConvolutionBackwardDataAlgorithmEx(s.handle, s.w.d, w.data_ptr(), s.y.d, gy.data_ptr(),
                                                           s.conv.d, s.x.d, gx.data_ptr(), n, got, perf, ws, bytes);
      });
  run_first_that_fits(
      cands, s, gy.device(), "input-gradient",
      [&](int algo) {
        size_t bytes = 0;
        EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
            s.handle, s.w.d, s.y.d, s.conv.d, s.x.d, cudnnConvolutionBwdDataAlgo_t(algo), &bytes));
        return bytes;
      },
      [&](int algo, void* ws, size_t bytes) {
        // beta = 0: gx is overwritten, never read (it is freshly allocated).
        EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(s.handle, s.one(), s.w.d, w.data_ptr(), s.y.d, gy.data_ptr(),
                                                       s.conv.d, cudnnConvolutionBwdDataAlgo_t(algo), ws, bytes,
                                                       s.zero(), s.x.d, gx.data_ptr()));
      });
}

void conv2d_bwd_weight_kernel(const Tensor& gy, const Tensor& x, const Tensor& gw, const Conv2dParams& p) {
  ConvSetup s(x.sizes(), gw.sizes(), gy.sizes(), gy.dtype(), gy.device(), p);
  auto& cands = candidates<cudnnConvolutionBwdFilterAlgoPerf_t>(
      Pass::backward_filter, s, gy.device(),
      [&](int n, int* got, auto* perf) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(s.handle, s.x.d, s.y.d, s.conv.d, s.w.d, n, got, perf);
      },
      [&](int n, int* got, auto* perf, void* ws, size_t bytes) {  // writes gw, which the run overwrites
        return cudnnFindConvolutionBackwardFilterAlgorithmEx(s.handle, s.x.d, x.data_ptr(), s.y.d, gy.data_ptr(),
                                                             s.conv.d, s.w.d, gw.data_ptr(), n, got, perf, ws,
                                                             bytes);
      });
  run_first_that_fits(
      cands, s, gy.device(), "weight-gradient",
      [&](int algo) {
        size_t bytes = 0;
        EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            s.handle, s.x.d, s.y.d, s.conv.d, s.w.d, cudnnConvolutionBwdFilterAlgo_t(algo), &bytes));
        return bytes;
      },
      [&](int algo, void* ws, size_t bytes) {
        EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(s.handle, s.one(), s.x.d, x.data_ptr(), s.y.d,
                                                         gy.data_ptr(), s.conv.d,
                                                         cudnnConvolutionBwdFilterAlgo_t(algo), ws, bytes, s.zero(),
                                                         s.w.d, gw.data_ptr()));
      });
}

void max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p) {
  const PoolGeom g{x.sizes()[2], x.sizes()[3], y.sizes()[2], y.sizes()[3], p.kernel[0], p.kernel[1],
                   p.stride[0],  p.stride[1],  p.padding[0], p.padding[1]};
  const int64_t total = y.numel();
  if (total == 0) return;
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(max_pool2d_fwd_kernel_<S>, blocks_for(total), kThreads, 0, stream,
        static_cast<const S*>(x.data_ptr()), static_cast<S*>(y.data_ptr()),
        static_cast<int64_t*>(indices.data_ptr()), g, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void max_pool2d_bwd_kernel(const Tensor& gy, const Tensor& indices, const Tensor& gx) {
  const int64_t planes = gx.sizes()[0] * gx.sizes()[1], hw_in = gx.sizes()[2] * gx.sizes()[3];
  const int64_t hw_out = gy.sizes()[2] * gy.sizes()[3];
  const auto on = ember::cuda::detail::on_device(gx.device());
  cudaStream_t stream = on.stream;
  const unsigned blocks = blocks_for(planes * 32);
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using A = acc_t<S>;
    // 16-bit gradients are summed in an f32 buffer and rounded once at the end, as the CPU.
    constexpr bool direct = std::is_same_v<S, A>;
    Tensor acc = direct ? gx : detail::make_tensor(gx.sizes(), DType::f32, gx.device());
    EMBER_CUDA_CHECK(cudaMemsetAsync(acc.data_ptr(), 0, size_t(acc.numel()) * acc.element_size(), stream));
    ::ember::cuda::launch_kernel(max_pool2d_bwd_kernel_<S, A>, blocks, kThreads, 0, stream,
        static_cast<const S*>(gy.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
        static_cast<A*>(acc.data_ptr()), planes, hw_in, hw_out);
    EMBER_CUDA_CHECK_LAUNCH();
    if constexpr (!direct) copy_kernel(gx, acc);
  });
}

void max_pool2d_gather_kernel(const Tensor& gx, const Tensor& indices, const Tensor& gy) {
  const int64_t hw_in = gx.sizes()[2] * gx.sizes()[3], hw_out = gy.sizes()[2] * gy.sizes()[3];
  const int64_t total = gy.numel();
  if (total == 0) return;
  const auto on = ember::cuda::detail::on_device(gx.device());
  cudaStream_t stream = on.stream;
  auto launch = [&](auto utag) {
    using U = decltype(utag);
    ::ember::cuda::launch_kernel(max_pool2d_gather_fwd_kernel<U>, blocks_for(total), kThreads, 0, stream,
        static_cast<const U*>(gx.data_ptr()), static_cast<const int64_t*>(indices.data_ptr()),
        static_cast<U*>(gy.data_ptr()), hw_in, hw_out, total);
  };
  if (gx.element_size() == 2) launch(uint16_t{});
  else if (gx.element_size() == 4) launch(uint32_t{});
  else launch(uint64_t{});
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
