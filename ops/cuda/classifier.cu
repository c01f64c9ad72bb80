// CUDA driver of the fused classifier (mirror of ops/cpu/classifier.cpp; Note [fused
// classifier memory] in ember/ops/classifier.h).
//
// Invariants:
// - One block per row of the [N, Vp] logits (blockDim.x a power of two from Vp alone, so the
//   reduction order, and the result, is fixed by the shape: Note [deterministic CUDA
//   reductions]). The row is read twice and written once: pass 1 the online max and sum of
//   exp over the `classes` used columns, pass 2 the loss term and, with write_grad, dlogits
//   = softmax - onehot written over the row in place (0 in the padded columns). Between the
//   passes the row is usually still in L2. At most 512 threads per row with at least 2 blocks
//   per SM (__launch_bounds__): one row's barrier reduction and pass change are covered by
//   another row's loads (1024 threads at 42-54 registers left ONE block per SM, idle at every
//   barrier; 2 x 1024 would spill). Each thread loads kUnroll = 2 packs before using any:
//   32 KB of loads in flight per SM instead of 16 KB. ~26 MB of rows in flight for GPT-2's
//   100 KB bf16 rows, within L2. Registers (nvcc 13, sm_90, -Xptxas -v, vectorized kernel):
//   bf16/f16 48, f32 44, f64 62-63, no spills (kUnroll = 4 spills the 16-bit kernels).
// - 16-byte vector loads and stores when the row start is 16-byte aligned (the front hands
//   a fresh buffer at offset 0, so that is Vp * sizeof(S) % 16 == 0); scalar otherwise.
// - Math in f32 for 16-bit storage (compute_t), rounded once on store; f64 in f64.
// - 64-bit element offsets everywhere (N * Vp exceeds 2^31 for GPT-2 at B >= 16 once padded
//   batches grow); the grid is N blocks (N < 2^31 checked on the host).
// - Race freedom of the in-place write: in pass 2 each element is read and written by the
//   same thread, and the target's logit (for the loss) is read by the thread that owns it in
//   that pass; without write_grad nothing is written and thread 0 reads it.
// - No host synchronization: a second one-block kernel sums the per-row losses in row-chunk
//   order (fixed), counts the kept targets, writes the loss and the gradient factor, and
//   records the first bad target in the device-check record (Note [deferred device checks]),
//   raised as cross_entropy's IndexError at the next synchronization. A bad target's row gets
//   a NaN loss and a softmax without the one-hot (never an out-of-bounds access). Everything
//   is on the current stream; scratch comes from the caching allocator (capture-safe).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "ember/cuda/device_checks.h"
#include "kernels/classifier.h"
#include "kernels/target_dtype.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kMaxThreads = 512;     // per row (Note in the header: 2+ blocks per SM)
constexpr int kMinBlocksPerSm = 2;
constexpr int kUnroll = 2;           // packs a thread loads before it uses any
constexpr int kTotalThreads = 1024;

// p[u] = row[k0 + u * stride] for each u whose pack index is below `end`, all loads issued
// before any value is used (the others left unset: callers stop at `end`).
template <int U, class P>
__device__ __forceinline__ void load_packs(const P* row, int64_t k0, int64_t stride, int64_t end, P (&p)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (k0 + u * stride < end) p[u] = row[k0 + u * stride];
}

// Loss term and dlogits of one row; with kVectorized the row is read and written in 16-byte
// Packs, otherwise one element at a time (Pack<S, 1>). Each thread visits packs tid, tid + B,
// tid + 2B, ... (B = blockDim.x) in that order, kUnroll of them loaded before any is used.
template <class S, class T, bool kVectorized>
__global__ void __launch_bounds__(kMaxThreads, kMinBlocksPerSm)
    linear_cross_entropy_fwd_kernel(S* __restrict__ logits, int64_t vp, int64_t classes,
                                    const T* __restrict__ target, int64_t ts, int64_t ignore,
                                    bool write_grad, double* __restrict__ row_loss) {
  using C = compute_t<S>;
  constexpr C kNegInf = -std::numeric_limits<C>::infinity();
  constexpr int W = kVectorized ? kVec<S> : 1;
  using P = Pack<S, W>;
  __shared__ MaxSum<C> red[32];
  const int64_t i = blockIdx.x;
  P* row = reinterpret_cast<P*>(logits + i * vp);  // kVectorized: 16-byte aligned (host check)
  const int64_t t = int64_t(target[i * ts]);
  const int64_t packs = vp / W;  // kVectorized: vp % W == 0
  const int64_t step = int64_t(kUnroll) * blockDim.x;
  if (t == ignore) {  // uniform over the block: no reduction is reached
    if (threadIdx.x == 0) row_loss[i] = 0.0;
    if (write_grad) {
      P zero;
      for (int j = 0; j < W; ++j) store_c(&zero.v[j], C(0));
      for (int64_t k = threadIdx.x; k < packs; k += blockDim.x) row[k] = zero;
    }
    return;
  }
  const bool bad = t < 0 || t >= classes;

  // Pass 1: per-thread (max, sum of exp) over its elements, merged once per pack.
  MaxSum<C> ms{kNegInf, C(0)};
  const int64_t used_packs = ceil_div(classes, W);
  for (int64_t k0 = threadIdx.x; k0 < used_packs; k0 += step) {
    P p[kUnroll];
    load_packs(row, k0, blockDim.x, used_packs, p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * int64_t(blockDim.x);
      if (k >= used_packs) break;
      C x[W];
#pragma unroll
      for (int j = 0; j < W; ++j) x[j] = k * W + j < classes ? load_c(&p[u].v[j]) : kNegInf;
      C pm = x[0];
#pragma unroll
      for (int j = 1; j < W; ++j) pm = x[j] > pm ? x[j] : pm;
      const C m = ms.m > pm ? ms.m : pm;
      if (m == kNegInf) continue;
      C s = ms.s * exp_c(ms.m - m);
#pragma unroll
      for (int j = 0; j < W; ++j) s += exp_c(x[j] - m);
      // A NaN logit: pm and m may skip it, but exp(NaN - m) makes s NaN, so the loss is NaN.
      ms = {m, s};
    }
  }
  ms = row_reduce(ms, [](MaxSum<C> a, MaxSum<C> b) { return max_sum_merge(a, b); }, red, true);
  const C m = ms.m, log_s = log_c(ms.s), inv_s = C(1) / ms.s;
  const S* srow = logits + i * vp;
  if (bad) {
    if (threadIdx.x == 0) row_loss[i] = double(std::numeric_limits<C>::quiet_NaN());
  } else if (!write_grad) {
    if (threadIdx.x == 0) row_loss[i] = double((m - load_c(srow + t)) + log_s);
    return;
  }
  if (!write_grad) return;

  // Pass 2: dlogits over the whole row (padded columns 0); the owner of column t also
  // writes the loss term, from the value it reads before overwriting it. A bad target
  // (possibly a padded column) matches no column.
  const int64_t tt = bad ? int64_t(-1) : t;
  for (int64_t k0 = threadIdx.x; k0 < packs; k0 += step) {
    P p[kUnroll];
    load_packs(row, k0, blockDim.x, packs, p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = k0 + u * int64_t(blockDim.x);
      if (k >= packs) break;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        const int64_t c = k * W + j;
        const C x = load_c(&p[u].v[j]);
        C d = c < classes ? exp_c(x - m) * inv_s : C(0);
        if (c == tt) {
          row_loss[i] = double((m - x) + log_s);
          d -= C(1);
        }
        store_c(&p[u].v[j], d);
      }
      row[k] = p[u];
    }
  }
}

// One block: the loss (sum of the row terms in a fixed order, divided by the number of kept
// targets for the mean: 0/0 = NaN as in PyTorch), the gradient factor, and the first bad
// target reported to the device-check record.
template <class C, class T>
__global__ void linear_cross_entropy_total_kernel(const double* __restrict__ row_loss, int64_t n,
                                                  const T* __restrict__ target, int64_t ts,
                                                  int64_t ignore, int64_t classes, bool mean, C* loss,
                                                  C* grad_factor, ember::cuda::FaultSite site) {
  struct Acc {
    double sum, kept;
    long long bad;  // smallest bad row, or n
  };
  __shared__ Acc smem[32];
  // Each thread a contiguous chunk of rows: the summation order depends on n alone.
  const int64_t chunk = ceil_div(n, int64_t(blockDim.x));
  const int64_t b = min64(n, int64_t(threadIdx.x) * chunk), e = min64(n, b + chunk);
  Acc acc{0.0, 0.0, (long long)n};
  for (int64_t r = b; r < e; ++r) {
    const int64_t t = int64_t(target[r * ts]);
    acc.sum += row_loss[r];
    if (t != ignore) {
      acc.kept += 1.0;
      if ((t < 0 || t >= classes) && acc.bad == (long long)n) acc.bad = (long long)r;
    }
  }
  acc = row_reduce(acc,
                   [](Acc a, Acc c) {
                     return Acc{a.sum + c.sum, a.kept + c.kept, a.bad < c.bad ? a.bad : c.bad};
                   },
                   smem, false);
  if (threadIdx.x != 0) return;
  *loss = C(mean ? acc.sum / acc.kept : acc.sum);
  if (grad_factor) *grad_factor = C(mean ? 1.0 / (acc.kept > 1.0 ? acc.kept : 1.0) : 1.0);
  if (acc.bad < (long long)n) {
    site.a = acc.bad;
    site.report((long long)target[int64_t(acc.bad) * ts]);
  }
}

// Threads per row: a power of two covering the row's packs (a function of the shape alone).
int row_threads(int64_t packs) {
  int t = 32;
  while (t < kMaxThreads && int64_t(t) < packs) t *= 2;
  return t;
}

template <class S, class T>
void fwd(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& grad_factor,
         int64_t classes, int64_t ignore, bool mean, bool write_grad) {
  using C = compute_t<S>;
  const int64_t n = logits.sizes()[0], vp = logits.sizes()[1];
  EMBER_CHECK(n < (int64_t(1) << 31), ShapeError, "[linear_cross_entropy] ", n,
              " rows exceed the CUDA grid limit");
  S* lp = static_cast<S*>(logits.data_ptr());
  const T* tp = static_cast<const T*>(target.data_ptr());
  const int64_t ts = target.strides()[0];
  const auto on = ember::cuda::detail::on_device(logits.device());
  cudaStream_t stream = on.stream;
  Tensor row_loss = detail::make_tensor({n}, DType::f64, logits.device());
  double* rl = static_cast<double*>(row_loss.data_ptr());
  const bool vec = reinterpret_cast<uintptr_t>(lp) % 16 == 0 && (vp * int64_t(sizeof(S))) % 16 == 0;
  if (vec) {
    ::ember::cuda::launch_kernel(linear_cross_entropy_fwd_kernel<S, T, true>, unsigned(n),
                                 row_threads(vp / kVec<S>), 0, stream, lp, vp, classes, tp, ts, ignore,
                                 write_grad, rl);
  } else {
    ::ember::cuda::launch_kernel(linear_cross_entropy_fwd_kernel<S, T, false>, unsigned(n), row_threads(vp),
                                 0, stream, lp, vp, classes, tp, ts, ignore, write_grad, rl);
  }
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(linear_cross_entropy_total_kernel<C, T>, 1, kTotalThreads, 0, stream,
      rl, n, tp, ts, ignore, classes, mean, static_cast<C*>(loss.data_ptr()),
      write_grad ? static_cast<C*>(grad_factor.data_ptr()) : nullptr,
      ember::cuda::detail::fault_site(logits.device().index, ember::cuda::FaultKind::target_out_of_bounds,
                                      "linear_cross_entropy", 0, classes, ignore));
  EMBER_CUDA_CHECK_LAUNCH();
  ember::cuda::detail::after_checked_launch(stream);
}

// t *= grad * factor, in the compute type.
template <class S, bool kVectorized>
__global__ void linear_cross_entropy_scale_kernel(S* __restrict__ t, int64_t n,
                                                  const compute_t<S>* grad, const compute_t<S>* factor) {
  using C = compute_t<S>;
  const C s = *grad * *factor;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  if constexpr (kVectorized) {
    auto* p = reinterpret_cast<Pack<S>*>(t);
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n / kVec<S>; k += stride) {
      Pack<S> v = p[k];
#pragma unroll
      for (int j = 0; j < kVec<S>; ++j) store_c(&v.v[j], load_c(&v.v[j]) * s);
      p[k] = v;
    }
  } else {
    for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += stride)
      store_c(t + k, load_c(t + k) * s);
  }
}

template <class S>
void scale(const Tensor& t, const Tensor& grad, const Tensor& factor) {
  using C = compute_t<S>;
  S* p = static_cast<S*>(t.data_ptr());
  const int64_t n = t.numel();
  const bool vec = reinterpret_cast<uintptr_t>(p) % 16 == 0 && n % kVec<S> == 0;
  const int64_t items = vec ? n / kVec<S> : n;
  constexpr int kThreads = 256;
  constexpr int64_t kMaxBlocks = 4096;  // grid-stride beyond: enough to fill any current GPU
  const unsigned blocks = unsigned(min64(ceil_div(items, kThreads), kMaxBlocks));
  const auto on = ember::cuda::detail::on_device(t.device());
  const auto* g = static_cast<const C*>(grad.data_ptr());
  const auto* f = static_cast<const C*>(factor.data_ptr());
  if (vec) ::ember::cuda::launch_kernel(linear_cross_entropy_scale_kernel<S, true>, blocks, kThreads, 0, on.stream,
      p, n, g, f);
  else ::ember::cuda::launch_kernel(linear_cross_entropy_scale_kernel<S, false>, blocks, kThreads, 0, on.stream,
      p, n, g, f);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void linear_cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target, const Tensor& loss,
                                     const Tensor& grad_factor, int64_t classes, int64_t ignore_index,
                                     bool mean, bool write_grad) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "linear_cross_entropy", [&](auto ttag) {
      fwd<decltype(tag), decltype(ttag)>(logits, target, loss, grad_factor, classes, ignore_index, mean,
                                         write_grad);
    });
  });
}

void linear_cross_entropy_scale_kernel(const Tensor& t, const Tensor& grad, const Tensor& factor) {
  visit_floating(t.dtype(), [&](auto tag) { scale<decltype(tag)>(t, grad, factor); });
}

}  // namespace ember::ops::cuda
