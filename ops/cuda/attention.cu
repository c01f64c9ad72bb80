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
// - The tensor-core FlashAttention-2 kernels (flash_attention.cu) are tried first; they decline
//   (returning false, having launched nothing) what they do not handle, which then runs here.
// - Tensor-core forward (attention_fwd_wmma_kernel): f16/bf16 with D = 64 or 128, 16-byte
//   aligned base pointers and stride(0..2) multiples of 8 elements (so every row starts on a
//   16-byte boundary); others take the generic kernel. 64 queries
//   per block of 4 warps (16 query rows per warp), 64-key tiles; S = Q K^T and O += P V are
//   WMMA 16x16x16 products with f32 accumulation; the softmax runs in f32 on S kept in shared
//   memory, and P is rounded to the input dtype for the P V product (as FlashAttention does).
//   The output accumulator lives in shared memory (f32) so that rows can be rescaled.
// - Generic SIMT kernels (every other case, and the whole backward): one warp per row, lanes
//   split the tile's keys (or queries) for the dot products and the head dim for the
//   accumulators; compute type f32 (f64 for f64). D <= 256 (f64: <= 128).
// - Backward without atomics (deterministic, Note [deterministic CUDA reductions]): Delta =
//   rowsum(dO * O) first, then one kernel owns dK and dV rows (loops over query tiles) and one
//   owns dQ rows (loops over key tiles), each summing in a fixed order.
// - Every launch is followed by EMBER_CUDA_CHECK_LAUNCH; shared memory above 48 KiB is opted
//   into per launch with cudaFuncSetAttribute.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "flash_attention.cuh"
#include "kernels/attention.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kRows = 8;       // generic kernels: warps (rows) per block
constexpr int kTile = 32;      // generic kernels: keys (queries) per tile = lanes
constexpr size_t kDefaultSmem = 48 * 1024;

template <class C>
__device__ __forceinline__ C exp_c(C x) {
  if constexpr (std::is_same_v<C, float>) return expf(x);
  else return exp(x);
}
template <class C>
__device__ __forceinline__ C log_c(C x) {
  if constexpr (std::is_same_v<C, float>) return logf(x);
  else return log(x);
}
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
                                 int64_t qblocks, bool causal, compute_t<S> scale) {
  using C = compute_t<S>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
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
      s = dot * scale;
    }
    const C mnew = fmax(m, warp_max(s));
    if (mnew == neg_inf<C>()) continue;  // nothing visible yet
    const C p = exp_c(s - mnew);
    const C alpha = exp_c(m - mnew);
    l = l * alpha + warp_sum(p);
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
  const C inv = C(1) / l;
#pragma unroll
  for (int e = 0; e < NPL; ++e) {
    const int d = lane + 32 * e;
    if (d < D) store_c(out + so.head(bh) + i * so.t + d, acc[e] * inv);
  }
  if (lane == 0) lse[bh * Tq + i] = m + log_c(l);
}

// ---------------------------------------------------------------- tensor-core forward

template <class S>
struct TensorCoreType;
template <>
struct TensorCoreType<Half> {
  using type = __half;
};
template <>
struct TensorCoreType<BFloat16> {
  using type = __nv_bfloat16;
};
template <class S>
using tc_t = typename TensorCoreType<S>::type;

constexpr int kWBq = 64, kWBk = 64, kWWarps = 4;

template <int D>
struct WmmaLayout {
  static constexpr int DP = D + 8;      // Q/K/V row pitch (16-bit elements)
  static constexpr int PP = kWBk + 8;   // P row pitch (16-bit)
  static constexpr int SP = kWBk + 4;   // S row pitch (f32)
  static constexpr int OP = D + 4;      // O row pitch (f32)
  static constexpr size_t bytes() {
    return size_t(3 * kWBq * DP + kWBq * PP) * 2 + size_t(kWBq * SP + kWBq * OP + 3 * kWBq) * 4;
  }
};

// Copies `rows` rows of D 16-bit values (row stride `pitch` elements in global memory) into
// shared memory (pitch P), zero-filling rows [rows, kWBq). 16-byte vectors: D, `pitch` and
// src's offset are multiples of 8 elements (checked by the host before the launch).
template <int D, int P>
__device__ __forceinline__ void load_tile16(uint16_t* dst, const uint16_t* src, int rows,
                                            int64_t pitch) {
  constexpr int kVecPerRow = D / 8;
  for (int e = threadIdx.x; e < kWBq * kVecPerRow; e += kWWarps * 32) {
    const int r = e / kVecPerRow, c = (e % kVecPerRow) * 8;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < rows) val = *reinterpret_cast<const uint4*>(src + int64_t(r) * pitch + c);
    *reinterpret_cast<uint4*>(dst + r * P + c) = val;
  }
}

template <class S, int D>
__global__ void __launch_bounds__(kWWarps * 32)
    attention_fwd_wmma_kernel(const S* __restrict__ q, const S* __restrict__ k,
                              const S* __restrict__ v, S* __restrict__ out,
                              float* __restrict__ lse, RowStrides sq, RowStrides sk,
                              RowStrides sv, RowStrides so, int64_t Tq, int64_t Tk,
                              int64_t qblocks, bool causal, float scale) {
  namespace wmma = nvcuda::wmma;
  using T = tc_t<S>;
  using L = WmmaLayout<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* qs = reinterpret_cast<T*>(smem_raw);
  T* ks = qs + kWBq * L::DP;
  T* vs = ks + kWBk * L::DP;
  T* ps = vs + kWBk * L::DP;
  float* ss = reinterpret_cast<float*>(ps + kWBq * L::PP);
  float* os = ss + kWBq * L::SP;
  float* ms = os + kWBq * L::OP;
  float* ls = ms + kWBq;
  float* as = ls + kWBq;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / qblocks, i0 = (blockIdx.x % qblocks) * kWBq;
  const int64_t off = Tk - Tq;
  const uint16_t* qh = reinterpret_cast<const uint16_t*>(q) + sq.head(bh) + i0 * sq.t;
  const uint16_t* kh = reinterpret_cast<const uint16_t*>(k) + sk.head(bh);
  const uint16_t* vh = reinterpret_cast<const uint16_t*>(v) + sv.head(bh);
  S* oh = out + so.head(bh);

  load_tile16<D, L::DP>(reinterpret_cast<uint16_t*>(qs), qh, int(min64(kWBq, Tq - i0)), sq.t);
  for (int e = threadIdx.x; e < kWBq * L::OP; e += kWWarps * 32) os[e] = 0.f;
  for (int r = threadIdx.x; r < kWBq; r += kWWarps * 32) {
    ms[r] = -INFINITY;
    ls[r] = 0.f;
  }
  const int64_t last = min64(i0 + kWBq, Tq) - 1;
  const int64_t kend = causal ? min64(Tk, last + off + 1) : Tk;
  const int wr = warp * 16;  // this warp's first row in the block
  for (int64_t j0 = 0; j0 < kend; j0 += kWBk) {
    const int nk = int(min64(kWBk, kend - j0));
    __syncthreads();  // previous K/V tile consumed; Q and O initialized
    load_tile16<D, L::DP>(reinterpret_cast<uint16_t*>(ks), kh + j0 * sk.t, nk, sk.t);
    load_tile16<D, L::DP>(reinterpret_cast<uint16_t*>(vs), vh + j0 * sv.t, nk, sv.t);
    __syncthreads();

    // S_w [16 x 64] = Q_w K^T (K row-major [key][d] is K^T column-major).
#pragma unroll
    for (int n = 0; n < kWBk / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::fill_fragment(c, 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;
        wmma::load_matrix_sync(a, qs + wr * L::DP + kk * 16, L::DP);
        wmma::load_matrix_sync(b, ks + (n * 16) * L::DP + kk * 16, L::DP);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(ss + wr * L::SP + n * 16, c, L::SP, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on the warp's 16 rows: two lanes per row, 32 columns each.
    {
      const int row = wr + lane / 2, c0 = (lane % 2) * 32;
      const int64_t gi = i0 + row;
      float* srow = ss + row * L::SP;
      float mx = -INFINITY;
#pragma unroll 8
      for (int c = c0; c < c0 + 32; ++c) {
        const int64_t j = j0 + c;
        const bool vis = c < nk && (!causal || j <= gi + off);
        const float s = vis ? srow[c] * scale : -INFINITY;
        srow[c] = s;
        mx = fmaxf(mx, s);
      }
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      const float mold = ms[row];
      const float mnew = fmaxf(mold, mx);
      const float mref = mnew == -INFINITY ? 0.f : mnew;  // a row with nothing visible yet
      float sum = 0.f;
#pragma unroll 8
      for (int c = c0; c < c0 + 32; ++c) {
        const float p = __expf(srow[c] - mref);
        const T pt = T(p);
        ps[row * L::PP + c] = pt;
        sum += float(pt);  // l sums what P V multiplies
      }
      sum += __shfl_xor_sync(kFullMask, sum, 1);
      const float alpha = __expf(mold - mref);
      __syncwarp();
      if (lane % 2 == 0) {
        ls[row] = ls[row] * alpha + sum;
        ms[row] = mnew;
        as[row] = alpha;
      }
    }
    __syncwarp();
    for (int e = lane; e < 16 * D; e += 32) {
      const int r = wr + e / D;
      os[r * L::OP + e % D] *= as[r];
    }
    __syncwarp();

    // O_w [16 x D] += P_w [16 x 64] V [64 x D].
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
      wmma::load_matrix_sync(c, os + wr * L::OP + n * 16, L::OP, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kWBk / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, ps + wr * L::PP + kk * 16, L::PP);
        wmma::load_matrix_sync(b, vs + (kk * 16) * L::DP + n * 16, L::DP);
        wmma::mma_sync(c, a, b, c);
      }
      wmma::store_matrix_sync(os + wr * L::OP + n * 16, c, L::OP, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncwarp();
  for (int e = lane; e < 16 * D; e += 32) {
    const int r = wr + e / D;
    const int64_t gi = i0 + r;
    if (gi < Tq) store_c(oh + gi * so.t + e % D, os[r * L::OP + e % D] / ls[r]);
  }
  if (lane < 16) {
    const int r = wr + lane;
    const int64_t gi = i0 + r;
    if (gi < Tq) lse[bh * Tq + gi] = ms[r] + logf(ls[r]);
  }
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
                              compute_t<S> scale) {
  using C = compute_t<S>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
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
      p = exp_c(sdot * scale - lt[lane]);
      ds = p * (pdot - dt[lane]);
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
template <class S, int NPL>
__global__ void __launch_bounds__(kRows * 32)
    attention_bwd_dq_kernel(const S* __restrict__ grad, const S* __restrict__ q,
                            const S* __restrict__ k, const S* __restrict__ v,
                            const compute_t<S>* __restrict__ lse,
                            const compute_t<S>* __restrict__ delta, S* __restrict__ dq,
                            RowStrides sg, RowStrides sq, RowStrides sk, RowStrides sv,
                            RowStrides sdq, int64_t Tq, int64_t Tk, int D, int64_t qblocks,
                            bool causal, compute_t<S> scale) {
  using C = compute_t<S>;
  extern __shared__ __align__(16) unsigned char smem_raw[];
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
      const C p = exp_c(sdot * scale - li);
      ds = p * (pdot - di);
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
                   const Tensor& lse, bool causal, double scale) {
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
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) {
    // 16-byte vector loads of every row: the base pointer and each row stride must keep rows
    // on 16-byte boundaries (a view at an odd storage offset, or rows of an odd pitch, take
    // the generic path). The output is stored element by element.
    auto aligned = [](const void* ptr, const RowStrides& s) {
      return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.b % 8 == 0 && s.h % 8 == 0 &&
             s.t % 8 == 0;
    };
    if ((D == 64 || D == 128) && aligned(qp, sq) && aligned(kp, sk) && aligned(vp, sv)) {
      const int64_t qblocks = ceil_div(Tq, kWBq);
      check_launch(BH * qblocks, op);
      auto launch = [&](auto kernel, size_t bytes) {
        allow_smem(kernel, bytes);
        kernel<<<unsigned(BH * qblocks), kWWarps * 32, bytes, stream>>>(
            qp, kp, vp, op_, lp, sq, sk, sv, so, Tq, Tk, qblocks, causal, float(scale));
        EMBER_CUDA_CHECK_LAUNCH();
      };
      if (D == 64) launch(attention_fwd_wmma_kernel<S, 64>, WmmaLayout<64>::bytes());
      else launch(attention_fwd_wmma_kernel<S, 128>, WmmaLayout<128>::bytes());
      return;
    }
  }
  EMBER_CHECK((!std::is_same_v<S, double> || D <= 128), NotImplementedError, "[", op,
              "] f64 head dim ", D, " > 128 has no CUDA kernel");
  const int64_t qblocks = ceil_div(Tq, kRows);
  check_launch(BH * qblocks, op);
  const size_t bytes = size_t(kRows * D + kTile * (D + 1) + kTile * D) * sizeof(C);
  visit_npl(D, op, [&](auto npl) {
    auto kernel = attention_fwd_generic_kernel<S, decltype(npl)::value>;
    allow_smem(kernel, bytes);
    kernel<<<unsigned(BH * qblocks), kRows * 32, bytes, stream>>>(
        qp, kp, vp, op_, lp, sq, sk, sv, so, Tq, Tk, D, qblocks, causal, C(scale));
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

template <class S>
void attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, bool causal, double scale) {
  using C = compute_t<S>;
  const char* op = "scaled_dot_product_attention_backward";
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
  attention_delta_kernel<S><<<unsigned(ceil_div(rows, kRows)), kRows * 32, 0, stream>>>(
      gp, opp, deltap, sg, so, rows, Tq, D);
  EMBER_CUDA_CHECK_LAUNCH();

  visit_npl(D, op, [&](auto npl) {
    constexpr int NPL = decltype(npl)::value;
    const int64_t kblocks = ceil_div(Tk, kRows);
    check_launch(BH * kblocks, op);
    const size_t kv_bytes = size_t(2 * kRows * D + 2 * kTile * (D + 1) + 2 * kTile) * sizeof(C);
    auto kv_kernel = attention_bwd_dkdv_kernel<S, NPL>;
    allow_smem(kv_kernel, kv_bytes);
    kv_kernel<<<unsigned(BH * kblocks), kRows * 32, kv_bytes, stream>>>(
        gp, qp, kp, vp, lp, deltap, dkp, dvp, sg, sq, sk, sv, sdk, sdv, Tq, Tk, D, kblocks, causal,
        C(scale));
    EMBER_CUDA_CHECK_LAUNCH();

    const int64_t qblocks = ceil_div(Tq, kRows);
    check_launch(BH * qblocks, op);
    const size_t q_bytes = size_t(2 * kRows * D + 2 * kTile * (D + 1)) * sizeof(C);
    auto q_kernel = attention_bwd_dq_kernel<S, NPL>;
    allow_smem(q_kernel, q_bytes);
    q_kernel<<<unsigned(BH * qblocks), kRows * 32, q_bytes, stream>>>(
        gp, qp, kp, vp, lp, deltap, dqp, sg, sq, sk, sv, sdq, Tq, Tk, D, qblocks, causal,
        C(scale));
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void attention_fwd_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, bool causal, double scale) {
  if (flash_attention_fwd(q, k, v, out, lse, causal, scale)) return;
  visit_floating(q.dtype(), [&](auto tag) {
    attention_fwd<decltype(tag)>(q, k, v, out, lse, causal, scale);
  });
}

void attention_bwd_kernel(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, bool causal, double scale) {
  if (flash_attention_bwd(grad, q, k, v, out, lse, dq, dk, dv, causal, scale)) return;
  visit_floating(q.dtype(), [&](auto tag) {
    attention_bwd<decltype(tag)>(grad, q, k, v, out, lse, dq, dk, dv, causal, scale);
  });
}

}  // namespace ember::ops::cuda
