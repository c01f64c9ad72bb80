// CUDA driver for the attention family (mirror of ops/cpu/attention.cpp): FlashAttention-2
// style scaled dot-product attention, forward and backward.
//
// Invariants:
// - Never materializes the Tq x Tk scores: key (or query) tiles stream through shared memory
//   while the running row max m, sum l and the unnormalized output are rescaled per tile
//   (online softmax); the forward saves lse = m + log(l), and the backward recomputes
//   P = exp(scale * q k^T - lse) tile by tile.
// - Causal masking per Note [attention causal alignment] (key j visible to query i when
//   j <= i + Tk - Tq); tiles past the diagonal of a whole block are skipped, not masked.
// - Operands are strided views (Note [attention strided operands]): every kernel addresses row
//   (b, h, t) of each operand through that operand's own stride(0..2) (RowStrides, 64-bit), so
//   q, k, v are read straight out of a packed qkv projection and out, dq, dk, dv written into
//   their views of y and dqkv. Only rows are written, never the gaps between them.
// - Paths, tried in this order, forward and backward alike:
//   1. Tensor cores (flash_attention.cu, mma.sync): f16/bf16 with D = 64 or 128, every
//      operand (out, dq, dk, dv included) 16-byte aligned with stride(0..2) multiples of 8
//      elements, and its grid limits (its design note lists them all). It declines (returning
//      false, having launched nothing) anything else.
//   2. Generic SIMT kernels (this file): every declined case, any floating dtype and stride.
//      One warp per row, lanes split the tile's keys (or queries) for the dot products and the
//      head dim for the accumulators; compute type f32 (f64 for f64). D <= 256 (f64: <= 128).
//   A former WMMA tensor-core forward here sat between the two; it took path 1's forward
//   cases except that it also accepted an unaligned out and more than 65535 query tiles. The
//   front always writes out into a fresh allocation ([B, H, Tq, D], or the packed op's
//   [B, T, C]), so in practice path 1 ran first every time and it was removed. Those two
//   corner cases now take path 2: slower (no tensor cores), the same values up to rounding.
// - Backward without atomics (deterministic, Note [deterministic CUDA reductions]): Delta =
//   rowsum(dO * O) first, then one kernel owns dK and dV rows (loops over query tiles) and one
//   owns dQ rows (loops over key tiles), each summing in a fixed order.
// - Mask and dropout (Note [attention masks and dropout]): path 1 takes masks (bool, or f32
//   after the front's conversion), never dropout: a call with dropout never tries it (it
//   draws no Philox numbers; it must not run and ignore them). Each score the generic kernels
//   form passes through Extras: the mask element read through its broadcast strides (bool
//   false -> -inf, float added), then, for the probabilities, the dropout keep / (1 - p)
//   regenerated from Philox per element (the CPU's layout, so both devices drop the same
//   elements). A row that saw no key ends with l = 0: out = 0 and lse = +inf, so the
//   backward's exp(s - lse) is 0 across it.
// - Every launch is followed by EMBER_CUDA_CHECK_LAUNCH; shared memory above 48 KiB is opted
//   into per launch with cudaFuncSetAttribute.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "flash_attention.cuh"
#include "kernels/attention.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kRows = 8;       // generic kernels: warps (rows) per block
constexpr int kTile = 32;      // generic kernels: keys (queries) per tile = lanes
constexpr size_t kDefaultSmem = 48 * 1024;

template <class C>
__device__ __forceinline__ C warp_max(C v) {
  for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <class C>
__device__ __forceinline__ C warp_sum(C v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
template <class C>
__device__ __forceinline__ C neg_inf() {
  return -std::numeric_limits<C>::infinity();
}

// Where the rows of a [B, H, T, D] operand are: row (bh, t) starts head(bh) + t * this->t
// elements past its data pointer (b, h, t: stride(0), stride(1), stride(2); H = size(1)).
struct RowStrides {
  int64_t b, h, t, H;
  __device__ __forceinline__ int64_t head(int64_t bh) const { return (bh / H) * b + (bh % H) * h; }
};

RowStrides row_strides(const Tensor& x) {
  return {x.strides()[0], x.strides()[1], x.strides()[2], x.sizes()[1]};
}

// The mask and dropout of one call, by value in each kernel's parameters.
template <class C>
struct Extras {
  const bool* bmask;  // keep where true (or null)
  const C* fmask;     // added to the scaled scores (or null)
  int64_t s0, s1, s2, s3, H;
  double p;  // dropout probability; 0 = none
  C keep;    // 1 / (1 - p)
  uint64_t seed, offset;
  int64_t Tq, Tk;

  // Score (bh, i, j) after the mask.
  __device__ __forceinline__ C mask(int64_t bh, int64_t i, int64_t j, C s) const {
    if (bmask == nullptr && fmask == nullptr) return s;
    const int64_t at = (bh / H) * s0 + (bh % H) * s1 + i * s2 + j * s3;
    if (bmask != nullptr) return bmask[at] ? s : neg_inf<C>();
    return s + fmask[at];
  }
  // The dropout factor of probability (bh, i, j): Note [dropout Philox layout] over
  // [B, H, Tq, Tk].
  __device__ __forceinline__ C drop(int64_t bh, int64_t i, int64_t j) const {
    if (p <= 0) return C(1);
    const uint64_t e = (uint64_t(bh) * uint64_t(Tq) + uint64_t(i)) * uint64_t(Tk) + uint64_t(j);
    uint32_t w[4];
    Philox::draw(seed, offset + e / 4, w);
    return double(Philox::uniform(w[e % 4])) >= p ? keep : C(0);
  }
};

template <class C>
Extras<C> extras_of(const AttentionKernelExtras& ex, int64_t Tq, int64_t Tk) {
  Extras<C> x{nullptr, nullptr, 0, 0, 0, 0, 1, ex.dropout_p, C(1), ex.rng.seed, ex.rng.offset, Tq, Tk};
  if (ex.dropout_p > 0) x.keep = C(1.0 / (1.0 - ex.dropout_p));
  if (ex.mask.defined()) {
    const Shape& st = ex.mask.strides();
    x.s0 = st[0];
    x.s1 = st[1];
    x.s2 = st[2];
    x.s3 = st[3];
    x.H = ex.mask.sizes()[1];
    if (ex.mask.dtype() == DType::b8) x.bmask = static_cast<const bool*>(ex.mask.data_ptr());
    else x.fmask = static_cast<const C*>(ex.mask.data_ptr());
  }
  return x;
}

template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultSmem)
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(bytes)));
}

// ---------------------------------------------------------------- generic forward
//
// Block: kRows warps, warp w owns query row i = first + w. Shared memory: the block's q rows
// [kRows][D], a key tile [kTile][D+1] (padded: lane t reads row t) and a value tile [kTile][D].
// Lane t scores key j0 + t; lane l accumulates output dims l, l+32, ... (NPL of them).
template <class S, int NPL>
__global__ void __launch_bounds__(kRows * 32)
    attention_fwd_generic_kernel(const S* __restrict__ q, const S* __restrict__ k,
                                 const S* __restrict__ v, S* __restrict__ out,
                                 compute_t<S>* __restrict__ lse, RowStrides sq, RowStrides sk,
                                 RowStrides sv, RowStrides so, int64_t Tq, int64_t Tk, int D,
                                 int64_t qblocks, bool causal, compute_t<S> scale,
                                 Extras<compute_t<S>> ex) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  C* qs = reinterpret_cast<C*>(smem_raw);
  C* ks = qs + kRows * D;
  C* vs = ks + kTile * (D + 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / qblocks, first = (blockIdx.x % qblocks) * kRows;
  const int64_t off = Tk - Tq, i = first + warp;
  const bool valid = i < Tq;
  const S* qh = q + sq.head(bh);
  const S* kh = k + sk.head(bh);
  const S* vh = v + sv.head(bh);
  for (int d = lane; d < D; d += 32) qs[warp * D + d] = valid ? load_c(qh + i * sq.t + d) : C(0);
  C m = neg_inf<C>(), l = 0, acc[NPL];
#pragma unroll
  for (int e = 0; e < NPL; ++e) acc[e] = 0;
  const int64_t last = min64(first + kRows, Tq) - 1;
  const int64_t kend = causal ? min64(Tk, last + off + 1) : Tk;
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    const int nk = int(min64(kTile, kend - j0));
    __syncthreads();  // the previous tile is consumed (and qs written, the first time)
    for (int e = threadIdx.x; e < nk * D; e += kRows * 32) {
      const int r = e / D, c = e % D;
      ks[r * (D + 1) + c] = load_c(kh + (j0 + r) * sk.t + c);
      vs[r * D + c] = load_c(vh + (j0 + r) * sv.t + c);
    }
    __syncthreads();
    if (!valid) continue;
    const int64_t j = j0 + lane;
    C s = neg_inf<C>();
    if (lane < nk && (!causal || j <= i + off)) {
      C dot = 0;
      for (int d = 0; d < D; ++d) dot += qs[warp * D + d] * ks[lane * (D + 1) + d];
      s = ex.mask(bh, i, j, dot * scale);
    }
    const C mnew = fmax(m, warp_max(s));
    if (mnew == neg_inf<C>()) continue;  // nothing visible yet
    C p = exp_c(s - mnew);
    const C alpha = exp_c(m - mnew);
    l = l * alpha + warp_sum(p);
    if (lane < nk) p *= ex.drop(bh, i, j);  // after the row sum: lse stays undropped
    m = mnew;
#pragma unroll
    for (int e = 0; e < NPL; ++e) acc[e] *= alpha;
    for (int t = 0; t < nk; ++t) {
      const C pt = __shfl_sync(kFullMask, p, t);
#pragma unroll
      for (int e = 0; e < NPL; ++e) {
        const int d = lane + 32 * e;
        if (d < D) acc[e] += pt * vs[t * D + d];
      }
    }
  }
  if (!valid) return;
  // A row that saw no key (fully masked): out = 0, lse = +inf.
  const C inv = l > C(0) ? C(1) / l : C(0);
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int d = lane + 32 * e;
    if (d < D) store_c(out + so.head(bh) + i * so.t + d, acc[e] * inv);
  }
  if (lane == 0) lse[bh * Tq + i] = l > C(0) ? m + log_c(l) : -neg_inf<C>();
}

// ---------------------------------------------------------------- generic backward

// Delta_i = sum_d dO_id O_id, one warp per row.
template <class S>
__global__ void __launch_bounds__(kRows * 32)
    attention_delta_kernel(const S* __restrict__ grad, const S* __restrict__ out,
                           compute_t<S>* __restrict__ delta, RowStrides sg, RowStrides so,
                           int64_t rows, int64_t Tq, int D) {
  using C = compute_t<S>;
  const int64_t r = int64_t(blockIdx.x) * kRows + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t bh = r / Tq, i = r % Tq;
  const S* gr = grad + sg.head(bh) + i * sg.t;
  const S* orow = out + so.head(bh) + i * so.t;
  C s = 0;
  for (int d = lane; d < D; d += 32) s += load_c(gr + d) * load_c(orow + d);
  s = warp_sum(s);
  if (lane == 0) delta[r] = s;
}

// dK and dV: warp w owns key row j = first + w (its k and v rows in shared memory); query
// tiles [kTile][D+1] of q and dO stream through shared memory with their lse and Delta.
// Lane t handles query i0 + t for the scores; lane l accumulates dims l, l+32, ...
template <class S, int NPL>
__global__ void __launch_bounds__(kRows * 32)
    attention_bwd_dkdv_kernel(const S* __restrict__ grad, const S* __restrict__ q,
                              const S* __restrict__ k, const S* __restrict__ v,
                              const compute_t<S>* __restrict__ lse,
                              const compute_t<S>* __restrict__ delta, S* __restrict__ dk,
                              S* __restrict__ dv, RowStrides sg, RowStrides sq, RowStrides sk,
                              RowStrides sv, RowStrides sdk, RowStrides sdv, int64_t Tq,
                              int64_t Tk, int D, int64_t kblocks, bool causal,
                              compute_t<S> scale, Extras<compute_t<S>> ex) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  C* krow = reinterpret_cast<C*>(smem_raw);  // [kRows][D]
  C* vrow = krow + kRows * D;                // [kRows][D]
  C* qs = vrow + kRows * D;                  // [kTile][D+1]
  C* gs = qs + kTile * (D + 1);              // [kTile][D+1]
  C* lt = gs + kTile * (D + 1);              // [kTile]
  C* dt = lt + kTile;                        // [kTile]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / kblocks, first = (blockIdx.x % kblocks) * kRows;
  const int64_t off = Tk - Tq, j = first + warp;
  const bool valid = j < Tk;
  const S* qh = q + sq.head(bh);
  const S* gh = grad + sg.head(bh);
  for (int d = lane; d < D; d += 32) {
    krow[warp * D + d] = valid ? load_c(k + sk.head(bh) + j * sk.t + d) : C(0);
    vrow[warp * D + d] = valid ? load_c(v + sv.head(bh) + j * sv.t + d) : C(0);
  }
  C adk[NPL], adv[NPL];
#pragma unroll
  for (int e = 0; e < NPL; ++e) adk[e] = adv[e] = 0;
  // Queries that see the block's first key: i + off >= first.
  const int64_t qstart = causal ? (first - off > 0 ? first - off : 0) : 0;
  for (int64_t i0 = qstart; i0 < Tq; i0 += kTile) {
    const int nq = int(min64(kTile, Tq - i0));
    __syncthreads();
    for (int e = threadIdx.x; e < nq * D; e += kRows * 32) {
      const int r = e / D, c = e % D;
      qs[r * (D + 1) + c] = load_c(qh + (i0 + r) * sq.t + c);
      gs[r * (D + 1) + c] = load_c(gh + (i0 + r) * sg.t + c);
    }
    for (int r = threadIdx.x; r < nq; r += kRows * 32) {
      lt[r] = lse[bh * Tq + i0 + r];
      dt[r] = delta[bh * Tq + i0 + r];
    }
    __syncthreads();
    if (!valid) continue;
    const int64_t i = i0 + lane;
    C p = 0, ds = 0;
    if (lane < nq && (!causal || j <= i + off)) {
      C sdot = 0, pdot = 0;
      for (int d = 0; d < D; ++d) {
        sdot += qs[lane * (D + 1) + d] * krow[warp * D + d];
        pdot += gs[lane * (D + 1) + d] * vrow[warp * D + d];
      }
      // lse = +inf (a fully masked row) or a masked score gives p = 0.
      p = exp_c(ex.mask(bh, i, j, sdot * scale) - lt[lane]);
      const C z = ex.drop(bh, i, j);
      ds = p * (pdot * z - dt[lane]);
      p *= z;  // dV takes the dropped probabilities
    }
    for (int t = 0; t < nq; ++t) {
      const C pt = __shfl_sync(kFullMask, p, t), dst = __shfl_sync(kFullMask, ds, t);
#pragma unroll
      for (int e = 0; e < NPL; ++e) {
        const int d = lane + 32 * e;
        if (d < D) {
          adv[e] += pt * gs[t * (D + 1) + d];
          adk[e] += dst * qs[t * (D + 1) + d];
        }
      }
    }
  }
  if (!valid) return;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int d = lane + 32 * e;
    if (d < D) {
      store_c(dk + sdk.head(bh) + j * sdk.t + d, adk[e] * scale);
      store_c(dv + sdv.head(bh) + j * sdv.t + d, adv[e]);
    }
  }
}

// dQ: warp w owns query row i = first + w (its q and dO rows in shared memory); key tiles of
// k and v stream through shared memory. Lane t handles key j0 + t for the scores.
// NPL 8 (D > 128): without a minimum of blocks ptxas held this kernel to 64 registers and
// spilled (24 bytes, f32/f16/bf16); its 2 * (8 * D + 32 * (D + 1)) compute-type values of
// shared memory (82 KB at f32, D = 256) allow only 2 blocks per SM anyway, so asking for 2
// (up to 128 registers) costs no occupancy. f64 (80 registers by default, spilling at 64)
// asks for 2 as well; f32/f16/bf16 with smaller NPL keep the 64 registers the default gave.
template <class S, int NPL>
__global__ void __launch_bounds__(kRows * 32, (NPL >= 8 || std::is_same_v<S, double>) ? 2 : 4)
    attention_bwd_dq_kernel(const S* __restrict__ grad, const S* __restrict__ q,
                            const S* __restrict__ k, const S* __restrict__ v,
                            const compute_t<S>* __restrict__ lse,
                            const compute_t<S>* __restrict__ delta, S* __restrict__ dq,
                            RowStrides sg, RowStrides sq, RowStrides sk, RowStrides sv,
                            RowStrides sdq, int64_t Tq, int64_t Tk, int D, int64_t qblocks,
                            bool causal, compute_t<S> scale, Extras<compute_t<S>> ex) {
  using C = compute_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  C* qrow = reinterpret_cast<C*>(smem_raw);  // [kRows][D]
  C* grow = qrow + kRows * D;                // [kRows][D]
  C* ks = grow + kRows * D;                  // [kTile][D+1]
  C* vs = ks + kTile * (D + 1);              // [kTile][D+1]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / qblocks, first = (blockIdx.x % qblocks) * kRows;
  const int64_t off = Tk - Tq, i = first + warp;
  const bool valid = i < Tq;
  const S* kh = k + sk.head(bh);
  const S* vh = v + sv.head(bh);
  for (int d = lane; d < D; d += 32) {
    qrow[warp * D + d] = valid ? load_c(q + sq.head(bh) + i * sq.t + d) : C(0);
    grow[warp * D + d] = valid ? load_c(grad + sg.head(bh) + i * sg.t + d) : C(0);
  }
  const C li = valid ? lse[bh * Tq + i] : C(0), di = valid ? delta[bh * Tq + i] : C(0);
  C adq[NPL];
#pragma unroll
  for (int e = 0; e < NPL; ++e) adq[e] = 0;
  const int64_t last = min64(first + kRows, Tq) - 1;
  const int64_t kend = causal ? min64(Tk, last + off + 1) : Tk;
  for (int64_t j0 = 0; j0 < kend; j0 += kTile) {
    const int nk = int(min64(kTile, kend - j0));
    __syncthreads();
    for (int e = threadIdx.x; e < nk * D; e += kRows * 32) {
      const int r = e / D, c = e % D;
      ks[r * (D + 1) + c] = load_c(kh + (j0 + r) * sk.t + c);
      vs[r * (D + 1) + c] = load_c(vh + (j0 + r) * sv.t + c);
    }
    __syncthreads();
    if (!valid) continue;
    const int64_t j = j0 + lane;
    C ds = 0;
    if (lane < nk && (!causal || j <= i + off)) {
      C sdot = 0, pdot = 0;
      for (int d = 0; d < D; ++d) {
        sdot += qrow[warp * D + d] * ks[lane * (D + 1) + d];
        pdot += grow[warp * D + d] * vs[lane * (D + 1) + d];
      }
      const C p = exp_c(ex.mask(bh, i, j, sdot * scale) - li);
      ds = p * (pdot * ex.drop(bh, i, j) - di);
    }
    for (int t = 0; t < nk; ++t) {
      const C dst = __shfl_sync(kFullMask, ds, t);
#pragma unroll
      for (int e = 0; e < NPL; ++e) {
        const int d = lane + 32 * e;
        if (d < D) adq[e] += dst * ks[t * (D + 1) + d];
      }
    }
  }
  if (!valid) return;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int d = lane + 32 * e;
    if (d < D) store_c(dq + sdq.head(bh) + i * sdq.t + d, adq[e] * scale);
  }
}

// ---------------------------------------------------------------- host drivers

// Calls f(std::integral_constant<int, NPL>) with NPL = ceil(D / 32) rounded up to 1, 2, 4, 8.
template <class F>
void visit_npl(int D, const char* op, F&& f) {
  if (D <= 32) return f(std::integral_constant<int, 1>{});
  if (D <= 64) return f(std::integral_constant<int, 2>{});
  if (D <= 128) return f(std::integral_constant<int, 4>{});
  if (D <= 256) return f(std::integral_constant<int, 8>{});
  throw NotImplementedError(str("[", op, "] head dim ", D, " > 256 has no CUDA kernel"));
}

void check_launch(int64_t blocks, const char* op) {
  EMBER_CHECK(blocks < (int64_t(1) << 31), ShapeError, "[", op, "] ", blocks,
              " blocks exceed the grid limit");
}

template <class S>
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const AttentionKernelExtras& extras, bool causal,
                   double scale) {
  using C = compute_t<S>;
  const char* op = "scaled_dot_product_attention";
  const int64_t BH = q.sizes()[0] * q.sizes()[1], Tq = q.sizes()[2], Tk = k.sizes()[2];
  const int D = int(q.sizes()[3]);
  const S* qp = static_cast<const S*>(q.data_ptr());
  const S* kp = static_cast<const S*>(k.data_ptr());
  const S* vp = static_cast<const S*>(v.data_ptr());
  S* op_ = static_cast<S*>(out.data_ptr());
  C* lp = static_cast<C*>(lse.data_ptr());
  const RowStrides sq = row_strides(q), sk = row_strides(k), sv = row_strides(v),
                   so = row_strides(out);
  const auto on = ember::cuda::detail::on_device(q.device());
  cudaStream_t stream = on.stream;
  EMBER_CHECK((!std::is_same_v<S, double> || D <= 128), NotImplementedError, "[", op,
              "] f64 head dim ", D, " > 128 has no CUDA kernel");
  const int64_t qblocks = ceil_div(Tq, kRows);
  check_launch(BH * qblocks, op);
  const size_t bytes = size_t(kRows * D + kTile * (D + 1) + kTile * D) * sizeof(C);
  visit_npl(D, op, [&](auto npl) {
    auto kernel = attention_fwd_generic_kernel<S, decltype(npl)::value>;
    allow_smem(kernel, bytes);
    ::ember::cuda::launch_kernel(kernel, unsigned(BH * qblocks), kRows * 32, bytes, stream,
        qp, kp, vp, op_, lp, sq, sk, sv, so, Tq, Tk, D, qblocks, causal, C(scale),
        extras_of<C>(extras, Tq, Tk));
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

template <class S>
void attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, const AttentionKernelExtras& extras, bool causal,
                   double scale) {
  using C = compute_t<S>;
  const char* op = "scaled_dot_product_attention_backward";
  const Extras<C> ex = extras_of<C>(extras, q.sizes()[2], k.sizes()[2]);
  const int64_t BH = q.sizes()[0] * q.sizes()[1], Tq = q.sizes()[2], Tk = k.sizes()[2];
  const int D = int(q.sizes()[3]);
  EMBER_CHECK((!std::is_same_v<S, double> || D <= 128), NotImplementedError, "[", op,
              "] f64 head dim ", D, " > 128 has no CUDA kernel");
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const S* qp = static_cast<const S*>(q.data_ptr());
  const S* kp = static_cast<const S*>(k.data_ptr());
  const S* vp = static_cast<const S*>(v.data_ptr());
  const S* opp = static_cast<const S*>(out.data_ptr());
  const C* lp = static_cast<const C*>(lse.data_ptr());
  S* dqp = static_cast<S*>(dq.data_ptr());
  S* dkp = static_cast<S*>(dk.data_ptr());
  S* dvp = static_cast<S*>(dv.data_ptr());
  const RowStrides sg = row_strides(grad), sq = row_strides(q), sk = row_strides(k),
                   sv = row_strides(v), so = row_strides(out), sdq = row_strides(dq),
                   sdk = row_strides(dk), sdv = row_strides(dv);
  const auto on = ember::cuda::detail::on_device(q.device());
  cudaStream_t stream = on.stream;

  Tensor delta = detail::make_tensor({BH * Tq}, lse.dtype(), q.device());
  C* deltap = static_cast<C*>(delta.data_ptr());
  const int64_t rows = BH * Tq;
  check_launch(ceil_div(rows, kRows), op);
  ::ember::cuda::launch_kernel(attention_delta_kernel<S>, unsigned(ceil_div(rows, kRows)), kRows * 32, 0, stream,
      gp, opp, deltap, sg, so, rows, Tq, D);
  EMBER_CUDA_CHECK_LAUNCH();

  visit_npl(D, op, [&](auto npl) {
    constexpr int NPL = decltype(npl)::value;
    const int64_t kblocks = ceil_div(Tk, kRows);
    check_launch(BH * kblocks, op);
    const size_t kv_bytes = size_t(2 * kRows * D + 2 * kTile * (D + 1) + 2 * kTile) * sizeof(C);
    auto kv_kernel = attention_bwd_dkdv_kernel<S, NPL>;
    allow_smem(kv_kernel, kv_bytes);
    ::ember::cuda::launch_kernel(kv_kernel, unsigned(BH * kblocks), kRows * 32, kv_bytes, stream,
        gp, qp, kp, vp, lp, deltap, dkp, dvp, sg, sq, sk, sv, sdk, sdv, Tq, Tk, D, kblocks, causal,
        C(scale), ex);
    EMBER_CUDA_CHECK_LAUNCH();

    const int64_t qblocks = ceil_div(Tq, kRows);
    check_launch(BH * qblocks, op);
    const size_t q_bytes = size_t(2 * kRows * D + 2 * kTile * (D + 1)) * sizeof(C);
    auto q_kernel = attention_bwd_dq_kernel<S, NPL>;
    allow_smem(q_kernel, q_bytes);
    ::ember::cuda::launch_kernel(q_kernel, unsigned(BH * qblocks), kRows * 32, q_bytes, stream,
        gp, qp, kp, vp, lp, deltap, dqp, sg, sq, sk, sv, sdq, Tq, Tk, D, qblocks, causal,
        C(scale), ex);
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void attention_fwd_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const AttentionKernelExtras& extras, bool causal,
                          double scale) {
  if (extras.dropout_p <= 0 && flash_attention_fwd(q, k, v, out, lse, extras.mask, causal, scale))
    return;
  visit_floating(q.dtype(), [&](auto tag) {
    attention_fwd<decltype(tag)>(q, k, v, out, lse, extras, causal, scale);
  });
}

void attention_bwd_kernel(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, const AttentionKernelExtras& extras,
                          bool causal, double scale) {
  if (extras.dropout_p <= 0 &&
      flash_attention_bwd(grad, q, k, v, out, lse, dq, dk, dv, extras.mask, causal, scale))
    return;
  visit_floating(q.dtype(), [&](auto tag) {
    attention_bwd<decltype(tag)>(grad, q, k, v, out, lse, dq, dk, dv, extras, causal, scale);
  });
}

}  // namespace ember::ops::cuda
