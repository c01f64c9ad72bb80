// CUDA driver for the fused nn family (mirror of ops/cpu/nn.cpp): softmax / log_softmax
// forward and backward, cross-entropy forward and backward, layer norm forward and backward
// (the forward optionally fused with the residual add before it, y and dy optionally 16-bit
// around an f32 computation: kernels/nn.h).
//
// Invariants:
// - Row kernels: a group of G threads (one block row; G a multiple of 32 from the row length
//   alone, see threads_per_row) owns one row, thread t taking elements t, t+G, ... Rows are
//   the elements along the reduced dim; any strides are accepted (RowIndexer turns a row
//   number into an element offset, per tensor).
// - One read where the row fits: softmax and cross-entropy compute the row max and the sum of
//   exp(x - max) in a single pass with the online rescaling (m, s) merge, keeping the row in
//   shared memory (compute type) when it fits in kCacheBytes; the write pass reads it from
//   there. Rows that do not fit are read again (from L2, usually).
// - Softmax over a non-last dim with many rows uses one thread per row instead, so that
//   adjacent threads touch adjacent memory (the rows are interleaved with stride `inner`).
// - Math in the compute type (f32 for 16-bit storage, rounded once on store), as on the CPU;
//   layer norm statistics and its parameter-gradient sums accumulate in acc_t (f64 for
//   f32/f64 like the CPU, f32 for 16-bit). Log-probabilities are (x - max) - log(sum).
// - Deterministic (Note [deterministic CUDA reductions]): no float atomics. The cross-entropy
//   total is one block summing the per-row losses in a fixed order; layer norm's dweight and
//   dbias are per-chunk partial column sums followed by an in-order pass over the chunks.
// - Cross-entropy targets are validated on the device (Note [deferred device checks],
//   core/cuda/include/ember/cuda/device_checks.h): the forward records the first bad row and
//   the IndexError, with the CPU's message, is raised at the next host synchronization (at once
//   under cuda::set_sync_checks(true)); the op itself never waits. A bad target yields a NaN
//   loss for its row and no gradient write.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/cuda/launch.h"
#include "ember/cuda/device_checks.h"
#include "kernels/nn.h"
#include "kernels/target_dtype.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kBlockThreads = 256;
constexpr int kMaxRowDims = 25;  // as the elementwise engine (loops.cuh kMaxDims)
constexpr size_t kCacheBytes = 40 * 1024;  // shared memory a block may use to keep its rows

// Row r (row-major over every dim but the reduced one) of a tensor: its first element's
// offset, in elements. The other dims are coalesced where their strides allow.
struct RowIndexer {
  int ndim = 0;
  int64_t sizes[kMaxRowDims];
  int64_t strides[kMaxRowDims];
  __device__ int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (r % sizes[d]) * strides[d];
      r /= sizes[d];
    }
    return off;
  }
};

RowIndexer row_indexer(const Tensor& t, int64_t dim, const char* op) {
  RowIndexer ri;
  std::vector<int64_t> sz, st;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t s = t.sizes()[d], str = t.strides()[d];
    if (d == dim || s == 1) continue;
    if (!st.empty() && st.back() == s * str) {
      sz.back() *= s;
      st.back() = str;
    } else {
      sz.push_back(s);
      st.push_back(str);
    }
  }
  const int n = int(sz.size());
  EMBER_CHECK(n <= kMaxRowDims, ShapeError, "[", op, "] a tensor of shape ", t.sizes(),
              " and strides ", t.strides(), " has more than ", kMaxRowDims,
              " dims that cannot be merged, more than the CUDA kernels take");
  ri.ndim = n;
  for (int i = 0; i < n; ++i) {
    ri.sizes[i] = sz[i];
    ri.strides[i] = st[i];
  }
  return ri;
}

// Launch shape of a row kernel: G threads per row, rows_per_block rows per block.
struct RowLaunch {
  int g, rows_per_block;
  int64_t blocks;
};
RowLaunch row_launch(int64_t rows, int64_t len) {
  RowLaunch l;
  l.g = threads_per_row(len);
  l.rows_per_block = std::max(1, kBlockThreads / l.g);
  l.blocks = ceil_div(rows, l.rows_per_block);
  EMBER_CHECK(l.blocks < (int64_t(1) << 31), ShapeError, "[cuda nn] ", rows,
              " rows exceed the grid limit");
  return l;
}

// ---- online softmax statistics (MaxSum, max_sum_merge: reduce_utils.cuh) ----

// Adds one element. A row of -inf keeps m = -inf, s = 0, so its outputs are NaN, as on the CPU.
template <class C>
__device__ __forceinline__ MaxSum<C> max_sum_add(MaxSum<C> a, C v) {
  if (v > a.m) {
    a.s = a.s * exp_c(a.m - v) + C(1);
    a.m = v;
  } else if (v != -std::numeric_limits<C>::infinity()) {
    a.s += exp_c(v - a.m);
  }
  return a;
}

template <class T>
struct Plus {
  __device__ T operator()(T a, T b) const { return a + b; }
};

template <class A>
struct Pair {
  A a, b;
};
template <class A>
struct PairPlus {
  __device__ Pair<A> operator()(Pair<A> x, Pair<A> y) const { return {x.a + y.a, x.b + y.b}; }
};

// Shared memory of a row kernel: per block row, the reduction scratch (32 values) and, when
// `cache_len` > 0, a cache of cache_len compute-type values per row.
template <class R, class C>
struct RowSmem {
  R* red;
  C* cache;  // this block row's cache, or null
  static size_t bytes(int rows_per_block, int64_t cache_len) {
    return ceil_div(size_t(rows_per_block) * 32 * sizeof(R), 16) * 16 +
           size_t(rows_per_block) * size_t(cache_len) * sizeof(C);
  }
};
template <class R, class C>
__device__ __forceinline__ RowSmem<R, C> row_smem(unsigned char* raw, int64_t cache_len) {
  RowSmem<R, C> s;
  s.red = reinterpret_cast<R*>(raw);
  const size_t red_bytes = ceil_div(size_t(blockDim.y) * 32 * sizeof(R), 16) * 16;
  s.cache = cache_len > 0 ? reinterpret_cast<C*>(raw + red_bytes) + threadIdx.y * cache_len : nullptr;
  return s;
}

// How many compute-type values per row a block may cache (0: none).
template <class C>
int64_t cache_len_for(int64_t len, int rows_per_block, int arrays) {
  return size_t(len) * sizeof(C) * size_t(rows_per_block * arrays) <= kCacheBytes ? len : 0;
}

// ---- softmax ----

template <class S>
__global__ void softmax_fwd_kernel(const S* x, S* y, RowIndexer xi, RowIndexer yi, int64_t rows,
                                   int64_t K, int64_t xstep, int64_t ystep, bool log,
                                   int64_t cache_len) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  const RowSmem<MaxSum<C>, C> sm = row_smem<MaxSum<C>, C>(smem_raw, cache_len);
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const S* xr = valid ? x + xi.offset(row) : x;
  MaxSum<C> ms{-std::numeric_limits<C>::infinity(), C(0)};
  if (valid)
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const C v = load_c(xr + k * xstep);
      if (sm.cache) sm.cache[k] = v;
      ms = max_sum_add(ms, v);
    }
  ms = row_reduce(ms, [](MaxSum<C> a, MaxSum<C> b) { return max_sum_merge(a, b); }, sm.red, true);
  if (!valid) return;
  S* yr = y + yi.offset(row);
  const C inv = C(1) / ms.s, log_s = log_c(ms.s);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const C v = sm.cache ? sm.cache[k] : load_c(xr + k * xstep);
    store_c(yr + k * ystep, log ? (v - ms.m) - log_s : exp_c(v - ms.m) * inv);
  }
}

// One thread per row: for rows interleaved with stride `inner` (softmax over a non-last dim).
template <class S>
__global__ void softmax_fwd_cols_kernel(const S* x, S* y, RowIndexer xi, RowIndexer yi,
                                        int64_t rows, int64_t K, int64_t xstep, int64_t ystep,
                                        bool log) {
  using C = compute_t<S>;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const S* xr = x + xi.offset(row);
    MaxSum<C> ms{-std::numeric_limits<C>::infinity(), C(0)};
    for (int64_t k = 0; k < K; ++k) ms = max_sum_add(ms, load_c(xr + k * xstep));
    S* yr = y + yi.offset(row);
    const C inv = C(1) / ms.s, log_s = log_c(ms.s);
    for (int64_t k = 0; k < K; ++k) {
      const C v = load_c(xr + k * xstep);
      store_c(yr + k * ystep, log ? (v - ms.m) - log_s : exp_c(v - ms.m) * inv);
    }
  }
}

// dx = y * (g - sum(g*y))  or, for log_softmax, g - exp(y) * sum(g).
template <class S>
__global__ void softmax_bwd_kernel(const S* g, const S* y, S* dx, RowIndexer gi, RowIndexer yi,
                                   RowIndexer di, int64_t rows, int64_t K, int64_t gstep,
                                   int64_t ystep, int64_t dstep, bool log, int64_t cache_len) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  const RowSmem<C, C> sm = row_smem<C, C>(smem_raw, 2 * cache_len);  // g then y
  const int64_t row = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = row < rows;
  const S* gr = valid ? g + gi.offset(row) : g;
  const S* yr = valid ? y + yi.offset(row) : y;
  C sum = C(0);
  if (valid)
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
      const C gv = load_c(gr + k * gstep), yv = load_c(yr + k * ystep);
      if (sm.cache) {
        sm.cache[k] = gv;
        sm.cache[cache_len + k] = yv;
      }
      sum += log ? gv : gv * yv;
    }
  sum = row_reduce(sum, Plus<C>{}, sm.red, true);
  if (!valid) return;
  S* dr = dx + di.offset(row);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const C gv = sm.cache ? sm.cache[k] : load_c(gr + k * gstep);
    const C yv = sm.cache ? sm.cache[cache_len + k] : load_c(yr + k * ystep);
    store_c(dr + k * dstep, log ? gv - exp_c(yv) * sum : yv * (gv - sum));
  }
}

template <class S>
__global__ void softmax_bwd_cols_kernel(const S* g, const S* y, S* dx, RowIndexer gi,
                                        RowIndexer yi, RowIndexer di, int64_t rows, int64_t K,
                                        int64_t gstep, int64_t ystep, int64_t dstep, bool log) {
  using C = compute_t<S>;
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += int64_t(gridDim.x) * blockDim.x) {
    const S* gr = g + gi.offset(row);
    const S* yr = y + yi.offset(row);
    C sum = C(0);
    for (int64_t k = 0; k < K; ++k) {
      const C gv = load_c(gr + k * gstep);
      sum += log ? gv : gv * load_c(yr + k * ystep);
    }
    S* dr = dx + di.offset(row);
    for (int64_t k = 0; k < K; ++k) {
      const C gv = load_c(gr + k * gstep), yv = load_c(yr + k * ystep);
      store_c(dr + k * dstep, log ? gv - exp_c(yv) * sum : yv * (gv - sum));
    }
  }
}

// Thread-per-row kernels pay off when rows are interleaved (inner >= 16: a warp then reads
// at least 16 adjacent values per step) and there are enough rows to fill the device.
bool use_cols_kernel(const Tensor& t, int64_t dim, int64_t rows) {
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < t.dim(); ++d) inner *= t.sizes()[d];
  return inner >= 16 && rows >= 4096;
}

int64_t blocks_for_threads(int64_t n) {
  return std::min<int64_t>(ceil_div(n, kBlockThreads), int64_t(1) << 16);
}

template <class S>
void softmax_fwd(const Tensor& x, const Tensor& out, int64_t dim, bool log) {
  using C = compute_t<S>;
  const char* op = log ? "log_softmax" : "softmax";
  const int64_t K = x.sizes()[dim], rows = x.numel() / K;
  const RowIndexer xi = row_indexer(x, dim, op), yi = row_indexer(out, dim, op);
  const int64_t xstep = x.strides()[dim], ystep = out.strides()[dim];
  const S* xp = static_cast<const S*>(x.data_ptr());
  S* yp = static_cast<S*>(out.data_ptr());
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  if (use_cols_kernel(out, dim, rows)) {
    ::ember::cuda::launch_kernel(softmax_fwd_cols_kernel<S>, unsigned(blocks_for_threads(rows)), kBlockThreads,
                                 0, stream,
        xp, yp, xi, yi, rows, K, xstep, ystep, log);
  } else {
    const RowLaunch l = row_launch(rows, K);
    const int64_t cache = cache_len_for<C>(K, l.rows_per_block, 1);
    ::ember::cuda::launch_kernel(softmax_fwd_kernel<S>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                                 RowSmem<MaxSum<C>, C>::bytes(l.rows_per_block, cache), stream,
        xp, yp, xi, yi, rows, K, xstep, ystep, log, cache);
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S>
void softmax_bwd(const Tensor& grad, const Tensor& y, const Tensor& dx, int64_t dim, bool log) {
  using C = compute_t<S>;
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  const int64_t K = y.sizes()[dim], rows = y.numel() / K;
  const RowIndexer gi = row_indexer(grad, dim, op), yi = row_indexer(y, dim, op),
                   di = row_indexer(dx, dim, op);
  const int64_t gs = grad.strides()[dim], ys = y.strides()[dim], ds = dx.strides()[dim];
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const S* yp = static_cast<const S*>(y.data_ptr());
  S* dp = static_cast<S*>(dx.data_ptr());
  const auto on = ember::cuda::detail::on_device(y.device());
  cudaStream_t stream = on.stream;
  if (use_cols_kernel(dx, dim, rows)) {
    ::ember::cuda::launch_kernel(softmax_bwd_cols_kernel<S>, unsigned(blocks_for_threads(rows)), kBlockThreads,
                                 0, stream,
        gp, yp, dp, gi, yi, di, rows, K, gs, ys, ds, log);
  } else {
    const RowLaunch l = row_launch(rows, K);
    const int64_t cache = cache_len_for<C>(K, l.rows_per_block, 2);
    ::ember::cuda::launch_kernel(softmax_bwd_kernel<S>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                                 RowSmem<C, C>::bytes(l.rows_per_block, 2 * cache), stream,
        gp, yp, dp, gi, yi, di, rows, K, gs, ys, ds, log, cache);
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

// ---- cross-entropy ----

// Per row i: row_max, log_sum, and the row's loss (to `loss` with stride los for reduction
// none, else to row_loss for the total). Bad targets: the smallest such row goes to *bad_row.
template <class S, class T>
__global__ void cross_entropy_fwd_kernel(const S* logits, int64_t n, int64_t classes, int64_t s0,
                                         int64_t s1, const T* target, int64_t ts,
                                         compute_t<S>* row_max, compute_t<S>* log_sum, S* loss,
                                         int64_t los, double* row_loss, int64_t ignore,
                                         compute_t<S> eps, compute_t<S> keep,
                                         unsigned long long* bad_row, int64_t cache_len) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  const RowSmem<MaxSum<C>, C> sm = row_smem<MaxSum<C>, C>(smem_raw, cache_len);
  const int64_t i = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = i < n;
  const S* xr = logits + (valid ? i : 0) * s0;
  MaxSum<C> ms{-std::numeric_limits<C>::infinity(), C(0)};
  if (valid)
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) {
      const C v = load_c(xr + k * s1);
      if (sm.cache) sm.cache[k] = v;
      ms = max_sum_add(ms, v);
    }
  ms = row_reduce(ms, [](MaxSum<C> a, MaxSum<C> b) { return max_sum_merge(a, b); }, sm.red, true);
  const C m = ms.m, ls = log_c(ms.s);
  // Smoothing needs sum_c (x_c - max): a second pass (over the cache when the row fits).
  C centered = C(0);
  if (eps != C(0)) {  // uniform over the launch, so every thread reaches the reduction
    if (valid)
      for (int64_t k = threadIdx.x; k < classes; k += blockDim.x)
        centered += (sm.cache ? sm.cache[k] : load_c(xr + k * s1)) - m;
    // The MaxSum scratch is at least as large as two C values per slot: reuse it.
    centered = row_reduce(centered, Plus<C>{}, reinterpret_cast<C*>(sm.red), false);
  }
  if (!valid || threadIdx.x != 0) return;
  row_max[i] = m;
  log_sum[i] = ls;
  const int64_t t = int64_t(target[i * ts]);
  C li = C(0);
  if (t != ignore) {
    if (t < 0 || t >= classes) {
      atomicMin(bad_row, (unsigned long long)i);  // an integer min: order-independent
      li = std::numeric_limits<C>::quiet_NaN();
    } else {
      // -log p_t = (max - x_t) + log_sum; mean_c(-log p_c) = log_sum - mean_c(x_c - max).
      li = keep * ((m - load_c(xr + t * s1)) + ls);
      if (eps != C(0)) li += eps * (ls - centered / C(classes));
    }
  }
  if (row_loss) row_loss[i] = double(li);
  else store_c(loss + i * los, li);
}

// One block: the sum of the per-row losses in a fixed order, divided by the number of kept
// targets for the mean (0/0 = NaN, as in PyTorch).
template <class S, class T>
__global__ void cross_entropy_total_kernel(const double* row_loss, int64_t n, const T* target,
                                           int64_t ts, int64_t ignore, bool mean, S* loss) {
  using C = compute_t<S>;
  __shared__ Pair<double> smem[32];
  Pair<double> acc{0.0, 0.0};  // (sum, kept count)
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    acc.a += row_loss[i];
    acc.b += int64_t(target[i * ts]) != ignore ? 1.0 : 0.0;
  }
  acc = row_reduce(acc, PairPlus<double>{}, smem, false);
  if (threadIdx.x == 0) store_c(loss, C(mean ? acc.a / acc.b : acc.a));
}

// The shared gradient scale of a mean/sum reduction: grad / count (mean) or grad (sum).
template <class S, class T>
__global__ void cross_entropy_scale_kernel(const S* grad, int64_t n, const T* target, int64_t ts,
                                           int64_t ignore, bool mean, double* scale) {
  using C = compute_t<S>;
  __shared__ double smem[32];
  double kept = 0;
  if (mean)
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
      kept += int64_t(target[i * ts]) != ignore ? 1.0 : 0.0;
  kept = row_reduce(kept, Plus<double>{}, smem, false);
  if (threadIdx.x == 0) {
    double s = double(C(load_c(grad)));
    if (mean) s /= kept > 1.0 ? kept : 1.0;
    *scale = s;
  }
}

// dlogits[i, c] = scale_i * (exp((x - max) - log_sum) - eps/C - (1-eps)*[c == t_i]); 0 for
// ignored rows. Elementwise given the forward's statistics: no reduction.
template <class S, class T>
__global__ void cross_entropy_bwd_kernel(const S* grad, int64_t gs, const double* scale_all,
                                         const S* logits, int64_t n, int64_t classes, int64_t s0,
                                         int64_t s1, const T* target, int64_t ts,
                                         const compute_t<S>* row_max,
                                         const compute_t<S>* log_sum, S* dlogits, int64_t d0,
                                         int64_t ignore, compute_t<S> smooth, compute_t<S> keep) {
  using C = compute_t<S>;
  const int64_t i = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  if (i >= n) return;
  S* dr = dlogits + i * d0;
  const int64_t t = int64_t(target[i * ts]);
  if (t == ignore) {
    for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) store_c(dr + k, C(0));
    return;
  }
  const C scale = scale_all ? C(*scale_all) : load_c(grad + i * gs);
  const C m = row_max[i], ls = log_sum[i];
  const S* xr = logits + i * s0;
  for (int64_t k = threadIdx.x; k < classes; k += blockDim.x) {
    C d = (exp_c((load_c(xr + k * s1) - m) - ls) - smooth) * scale;
    if (k == t) d -= keep * scale;
    store_c(dr + k, d);
  }
}

// The first bad target (the smallest bad row, as the CPU names it) goes to the device-check
// record (Note [deferred device checks]): the IndexError with the CPU's message is raised at
// the next synchronization, or at once in synchronous-check mode. No host wait here.
template <class T>
__global__ void report_bad_target_kernel(const unsigned long long* bad_row, const T* target, int64_t ts,
                                         ember::cuda::FaultSite site) {
  const unsigned long long row = *bad_row;
  if (row == ~0ull) return;
  site.a = (long long)row;
  site.report((long long)target[int64_t(row) * ts]);
}

template <class S, class T>
void cross_entropy_fwd(const Tensor& logits, const Tensor& target, const Tensor& loss,
                       const Tensor& row_max, const Tensor& log_sum, const CrossEntropyParams& p) {
  using C = compute_t<S>;
  const int64_t n = logits.sizes()[0], classes = logits.sizes()[1];
  const bool none = p.reduction == LossReduction::none;
  const T* tp = static_cast<const T*>(target.data_ptr());
  const int64_t ts = target.strides()[0];
  const auto on = ember::cuda::detail::on_device(logits.device());
  cudaStream_t stream = on.stream;
  Tensor bad = detail::make_tensor({1}, DType::i64, logits.device());
  auto* bad_row = static_cast<unsigned long long*>(bad.data_ptr());
  EMBER_CUDA_CHECK(cudaMemsetAsync(bad_row, 0xff, sizeof(unsigned long long), stream));
  Tensor row_loss = none ? Tensor() : detail::make_tensor({n}, DType::f64, logits.device());
  const RowLaunch l = row_launch(n, classes);
  const int64_t cache = cache_len_for<C>(classes, l.rows_per_block, 1);
  ::ember::cuda::launch_kernel(cross_entropy_fwd_kernel<S, T>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                               RowSmem<MaxSum<C>, C>::bytes(l.rows_per_block, cache), stream,
      static_cast<const S*>(logits.data_ptr()), n, classes, logits.strides()[0],
      logits.strides()[1], tp, ts, static_cast<C*>(row_max.data_ptr()),
      static_cast<C*>(log_sum.data_ptr()), static_cast<S*>(loss.data_ptr()),
      none ? loss.strides()[0] : 0, none ? nullptr : static_cast<double*>(row_loss.data_ptr()),
      p.ignore_index, C(p.label_smoothing), C(1.0 - p.label_smoothing), bad_row, cache);
  EMBER_CUDA_CHECK_LAUNCH();
  if (!none) {
    ::ember::cuda::launch_kernel(cross_entropy_total_kernel<S, T>, 1, 1024, 0, stream,
        static_cast<const double*>(row_loss.data_ptr()), n, tp, ts, p.ignore_index,
        p.reduction == LossReduction::mean, static_cast<S*>(loss.data_ptr()));
    EMBER_CUDA_CHECK_LAUNCH();
  }
  ::ember::cuda::launch_kernel(report_bad_target_kernel<T>, 1, 1, 0, stream,
      bad_row, tp, ts,
      ember::cuda::detail::fault_site(logits.device().index, ember::cuda::FaultKind::target_out_of_bounds,
                                      "cross_entropy", 0, classes, p.ignore_index));
  EMBER_CUDA_CHECK_LAUNCH();
  ember::cuda::detail::after_checked_launch(stream);
}

template <class S, class T>
void cross_entropy_bwd(const Tensor& grad, const Tensor& logits, const Tensor& target,
                       const Tensor& row_max, const Tensor& log_sum, const Tensor& dlogits,
                       const CrossEntropyParams& p) {
  using C = compute_t<S>;
  const int64_t n = logits.sizes()[0], classes = logits.sizes()[1];
  const bool none = p.reduction == LossReduction::none;
  const T* tp = static_cast<const T*>(target.data_ptr());
  const int64_t ts = target.strides()[0];
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const auto on = ember::cuda::detail::on_device(logits.device());
  cudaStream_t stream = on.stream;
  Tensor scale = none ? Tensor() : detail::make_tensor({1}, DType::f64, logits.device());
  double* scale_p = none ? nullptr : static_cast<double*>(scale.data_ptr());
  if (!none) {
    ::ember::cuda::launch_kernel(cross_entropy_scale_kernel<S, T>, 1, 1024, 0, stream,
        gp, n, tp, ts, p.ignore_index, p.reduction == LossReduction::mean, scale_p);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  const RowLaunch l = row_launch(n, classes);
  ::ember::cuda::launch_kernel(cross_entropy_bwd_kernel<S, T>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                               0, stream,
      gp, none ? grad.strides()[0] : 0, scale_p, static_cast<const S*>(logits.data_ptr()), n,
      classes, logits.strides()[0], logits.strides()[1], tp, ts,
      static_cast<const C*>(row_max.data_ptr()), static_cast<const C*>(log_sum.data_ptr()),
      static_cast<S*>(dlogits.data_ptr()), dlogits.strides()[0], p.ignore_index,
      C(p.label_smoothing / double(classes)), C(1.0 - p.label_smoothing));
  EMBER_CUDA_CHECK_LAUNCH();
}

// ---- layer norm ----

// v rounded to storage type S and widened back: the value a store to S and a reload give.
template <class S, class C>
__device__ __forceinline__ C round_to(C v) {
  if constexpr (std::is_same_v<S, Half>) return __half2float(__float2half_rn(float(v)));
  else if constexpr (std::is_same_v<S, BFloat16>) return __bfloat162float(__float2bfloat16_rn(float(v)));
  else return C(S(v));
}

// S: the normalized input's storage (x and sum), D: delta's, Y: y's (kernels/nn.h). With a
// delta the row is x + delta rounded to S, written to sum; the statistics are those of the
// stored sum, so y equals the plain kernel's y on that sum bit for bit.
template <class S, class D, class Y>
__global__ void layer_norm_fwd_kernel(const S* x, const D* delta, const S* weight, const S* bias,
                                      S* sum, Y* y, compute_t<S>* mean, compute_t<S>* rstd,
                                      int64_t rows, int64_t cols, acc_t<S> eps, int64_t cache_len) {
  using C = compute_t<S>;
  using A = acc_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  const RowSmem<A, C> sm = row_smem<A, C>(smem_raw, cache_len);
  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = r < rows;
  const int64_t base = (valid ? r : 0) * cols;
  const S* xr = x + base;
  // Where the later passes reread the row without a cache: x, or the stored sum (each
  // thread rereads only the elements it wrote itself, so no barrier is needed).
  const S* vr = delta ? sum + base : xr;
  auto row_value = [&](int64_t k) -> C { return sm.cache ? sm.cache[k] : load_c(vr + k); };
  // Two passes (the mean, then squares around it): no cancellation for large offsets.
  A total = A(0);
  if (valid)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      C v;
      if (delta) {
        v = round_to<S>(C(load_c(xr + k) + load_c(delta + base + k)));
        store_c(sum + base + k, v);
      } else {
        v = load_c(xr + k);
      }
      if (sm.cache) sm.cache[k] = v;
      total += A(v);
    }
  const A mu = row_reduce(total, Plus<A>{}, sm.red, true) / A(cols);
  A sq = A(0);
  if (valid)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const A d = A(row_value(k)) - mu;
      sq += d * d;
    }
  sq = row_reduce(sq, Plus<A>{}, sm.red, true);
  if (!valid) return;
  const A rs = A(1) / sqrt(sq / A(cols) + eps);
  if (threadIdx.x == 0) {
    mean[r] = C(mu);
    rstd[r] = C(rs);
  }
  const C muc = C(mu), rsc = C(rs);
  Y* yr = y + base;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    const C v = row_value(k);
    const C w = weight ? load_c(weight + k) : C(1), b = bias ? load_c(bias + k) : C(0);
    store_c(yr + k, (v - muc) * rsc * w + b);
  }
}

// dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), one row per group.
// G: the output gradient's storage (S's, or 16 bits when S is f32), widened on load.
template <class S, class G>
__global__ void layer_norm_bwd_kernel(const G* grad, const S* x, const S* weight,
                                      const compute_t<S>* mean, const compute_t<S>* rstd, S* dx,
                                      int64_t rows, int64_t cols) {
  using C = compute_t<S>;
  using A = acc_t<S>;
  __shared__ Pair<A> smem[kBlockThreads / 32 * 32];  // 32 per block row, rows_per_block <= 8
  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = r < rows;
  const G* gr = grad + (valid ? r : 0) * cols;
  const S* xr = x + (valid ? r : 0) * cols;
  const C mu = valid ? mean[r] : C(0), rs = valid ? rstd[r] : C(0);
  Pair<A> ab{A(0), A(0)};
  if (valid)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const A gw = A(C(load_c(gr + k))) * A(weight ? load_c(weight + k) : C(1));
      ab.a += gw;
      ab.b += gw * A((load_c(xr + k) - mu) * rs);
    }
  ab = row_reduce(ab, PairPlus<A>{}, smem, true);
  if (!valid) return;
  const C ma = C(ab.a / A(cols)), mb = C(ab.b / A(cols));
  S* dr = dx + r * cols;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
    const C xhat = (load_c(xr + k) - mu) * rs;
    const C w = weight ? load_c(weight + k) : C(1);
    store_c(dr + k, rs * (C(load_c(gr + k)) * w - ma - xhat * mb));
  }
}

// dweight / dbias, pass 1: block (bx = 32 columns) x (by row lanes) sums the rows of one
// chunk for its columns; lanes are combined in lane order. Partials are [chunks, cols].
template <class S, class G>
__global__ void layer_norm_param_grad_kernel(const G* grad, const S* x, const compute_t<S>* mean,
                                             const compute_t<S>* rstd, int64_t rows, int64_t cols,
                                             int64_t chunk_rows, acc_t<S>* pdw, acc_t<S>* pdb) {
  using C = compute_t<S>;
  using A = acc_t<S>;
  __shared__ Pair<A> smem[kBlockThreads];
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  Pair<A> acc{A(0), A(0)};  // (sum g*xhat, sum g)
  if (k < cols) {
    const int64_t r1 = min64(rows, (chunk + 1) * chunk_rows);
    for (int64_t r = chunk * chunk_rows + threadIdx.y; r < r1; r += blockDim.y) {
      const C g = C(load_c(grad + r * cols + k));
      acc.a += A(g) * A((load_c(x + r * cols + k) - mean[r]) * rstd[r]);
      acc.b += A(g);
    }
  }
  smem[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || k >= cols) return;
  for (unsigned yy = 1; yy < blockDim.y; ++yy) {
    const Pair<A> o = smem[yy * blockDim.x + threadIdx.x];
    acc.a += o.a;
    acc.b += o.b;
  }
  if (pdw) pdw[chunk * cols + k] = acc.a;
  if (pdb) pdb[chunk * cols + k] = acc.b;
}

// Pass 2: column k sums its chunk partials in chunk order.
template <class S>
__global__ void layer_norm_param_finish_kernel(const acc_t<S>* pdw, const acc_t<S>* pdb,
                                               int64_t chunks, int64_t cols, S* dweight,
                                               S* dbias) {
  using A = acc_t<S>;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < cols;
       k += int64_t(gridDim.x) * blockDim.x) {
    A dw = A(0), db = A(0);
    for (int64_t c = 0; c < chunks; ++c) {
      if (pdw) dw += pdw[c * cols + k];
      if (pdb) db += pdb[c * cols + k];
    }
    if (dweight) store_c(dweight + k, compute_t<S>(dw));
    if (dbias) store_c(dbias + k, compute_t<S>(db));
  }
}

template <class S>
const S* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const S*>(t.data_ptr()) : nullptr;
}

template <class S, class D, class Y>
void layer_norm_fwd(const Tensor& x, const Tensor& delta, const Tensor& weight, const Tensor& bias,
                    const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                    int64_t cols, double eps) {
  using C = compute_t<S>;
  using A = acc_t<S>;
  const int64_t rows = mean.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  // The same launch shape with or without a delta: the reduction order, hence every bit of
  // y, mean and rstd, is that of the plain layer norm of the stored sum.
  const RowLaunch l = row_launch(rows, cols);
  const int64_t cache = cache_len_for<C>(cols, l.rows_per_block, 1);
  ::ember::cuda::launch_kernel(layer_norm_fwd_kernel<S, D, Y>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                               RowSmem<A, C>::bytes(l.rows_per_block, cache), stream,
      static_cast<const S*>(x.data_ptr()), ptr_or_null<D>(delta), ptr_or_null<S>(weight),
      ptr_or_null<S>(bias), sum.defined() ? static_cast<S*>(sum.data_ptr()) : nullptr,
      static_cast<Y*>(y.data_ptr()), static_cast<C*>(mean.data_ptr()),
      static_cast<C*>(rstd.data_ptr()), rows, cols, A(eps), cache);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S, class G>
void layer_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t cols) {
  using C = compute_t<S>;
  using A = acc_t<S>;
  const int64_t rows = mean.numel();
  if (cols == 0) return;  // dx, dweight and dbias are empty: nothing to write (an empty grid is an error)
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  const G* gp = static_cast<const G*>(grad.data_ptr());
  const S* xp = static_cast<const S*>(x.data_ptr());
  const C* mp = static_cast<const C*>(mean.data_ptr());
  const C* rp = static_cast<const C*>(rstd.data_ptr());
  if (dx.defined()) {
    const RowLaunch l = row_launch(rows, cols);
    ::ember::cuda::launch_kernel(layer_norm_bwd_kernel<S, G>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                                 0, stream,
        gp, xp, ptr_or_null<S>(weight), mp, rp,
                                            static_cast<S*>(dx.data_ptr()), rows, cols);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (!dweight.defined() && !dbias.defined()) return;
  // Chunks of rows: a count from the shape alone (so the summation order is fixed), enough
  // blocks to fill the device, at least 32 rows per lane.
  constexpr int bx = 32, by = kBlockThreads / bx;
  const int64_t col_blocks = ceil_div(cols, bx);
  int64_t chunks = std::max<int64_t>(1, std::min(ceil_div(1024, col_blocks), ceil_div(rows, by * 32)));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t chunk_rows = ceil_div(rows, chunks);
  chunks = ceil_div(rows, chunk_rows);
  const int64_t nparts = chunks * cols;
  Tensor parts = detail::make_tensor({2 * nparts * int64_t(sizeof(A))}, DType::u8, x.device());
  A* pdw = dweight.defined() ? static_cast<A*>(parts.data_ptr()) : nullptr;
  A* pdb = dbias.defined() ? static_cast<A*>(parts.data_ptr()) + nparts : nullptr;
  ::ember::cuda::launch_kernel(layer_norm_param_grad_kernel<S, G>, dim3(unsigned(col_blocks), unsigned(chunks)), dim3(bx, by),
                               0, stream,
      gp, xp, mp, rp, rows, cols, chunk_rows, pdw, pdb);
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(layer_norm_param_finish_kernel<S>, unsigned(blocks_for_threads(cols)), kBlockThreads,
                               0, stream,
      pdw, pdb, chunks, cols, dweight.defined() ? static_cast<S*>(dweight.data_ptr()) : nullptr,
      dbias.defined() ? static_cast<S*>(dbias.data_ptr()) : nullptr);
  EMBER_CUDA_CHECK_LAUNCH();
}

// The loss input checks: each thread looks at its elements and reports a bad one (the first
// report wins); nothing is written otherwise, and nothing waits.
template <class T>
__global__ void check_class_targets_cuda(const T* target, int64_t n, int64_t classes, int64_t ignore_index,
                                         ember::cuda::FaultSite site) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const long long v = (long long)target[i];
    if (v != ignore_index && (v < 0 || v >= classes)) {
      site.a = i;
      site.report(v);
      return;
    }
  }
}

template <class S>
__global__ void check_probabilities_cuda(const S* x, int64_t n, ember::cuda::FaultSite site) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const compute_t<S> v = compute_t<S>(x[i]);
    if (!(v >= compute_t<S>(0) && v <= compute_t<S>(1))) {  // NaN fails both
      site.a = i;
      site.report(0);
      return;
    }
  }
}

}  // namespace

void check_class_targets_kernel(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op) {
  const auto on = ember::cuda::detail::on_device(target.device());
  const int64_t n = target.numel();
  visit_target(target.dtype(), op, [&](auto ttag) {
    using T = decltype(ttag);
    ::ember::cuda::launch_kernel(check_class_targets_cuda<T>, unsigned(blocks_for_threads(n)), kBlockThreads, 0,
                                 on.stream, static_cast<const T*>(target.data_ptr()), n, classes, ignore_index,
                                 ember::cuda::detail::fault_site(target.device().index,
                                                                 ember::cuda::FaultKind::target_out_of_bounds, op, 0,
                                                                 classes, ignore_index));
    EMBER_CUDA_CHECK_LAUNCH();
  });
  ember::cuda::detail::after_checked_launch(on.stream);
}

void check_probabilities_kernel(const Tensor& x, const char* op) {
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t n = x.numel();
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(check_probabilities_cuda<S>, unsigned(blocks_for_threads(n)), kBlockThreads, 0,
                                 on.stream, static_cast<const S*>(x.data_ptr()), n,
                                 ember::cuda::detail::fault_site(x.device().index,
                                                                 ember::cuda::FaultKind::not_a_probability, op));
    EMBER_CUDA_CHECK_LAUNCH();
  });
  ember::cuda::detail::after_checked_launch(on.stream);
}

void softmax_fwd_kernel(const Tensor& x, const Tensor& out, int64_t dim, bool log) {
  visit_floating(x.dtype(), [&](auto tag) { softmax_fwd<decltype(tag)>(x, out, dim, log); });
}

void softmax_bwd_kernel(const Tensor& grad, const Tensor& y, const Tensor& dx, int64_t dim,
                        bool log) {
  visit_floating(y.dtype(), [&](auto tag) { softmax_bwd<decltype(tag)>(grad, y, dx, dim, log); });
}

void cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target, const Tensor& loss,
                              const Tensor& row_max, const Tensor& log_sum,
                              const CrossEntropyParams& p) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "cross_entropy", [&](auto ttag) {
      cross_entropy_fwd<decltype(tag), decltype(ttag)>(logits, target, loss, row_max, log_sum, p);
    });
  });
}

void cross_entropy_bwd_kernel(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& row_max, const Tensor& log_sum,
                              const Tensor& dlogits, const CrossEntropyParams& p) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "cross_entropy", [&](auto ttag) {
      cross_entropy_bwd<decltype(tag), decltype(ttag)>(grad, logits, target, row_max, log_sum,
                                                        dlogits, p);
    });
  });
}

void layer_norm_fwd_kernel(const Tensor& x, const Tensor& delta, const Tensor& weight,
                           const Tensor& bias, const Tensor& sum, const Tensor& y,
                           const Tensor& mean, const Tensor& rstd, int64_t cols, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    visit_layer_norm_side<S>(delta.defined() ? delta.dtype() : x.dtype(), [&](auto dtag) {
      visit_layer_norm_side<S>(y.dtype(), [&](auto ytag) {
        layer_norm_fwd<S, decltype(dtag), decltype(ytag)>(x, delta, weight, bias, sum, y, mean,
                                                          rstd, cols, eps);
      });
    });
  });
}

void layer_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t cols) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    visit_layer_norm_side<S>(grad.dtype(), [&](auto gtag) {
      layer_norm_bwd<S, decltype(gtag)>(grad, x, weight, mean, rstd, dx, dweight, dbias, cols);
    });
  });
}

}  // namespace ember::ops::cuda
