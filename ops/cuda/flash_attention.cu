// Tensor-core FlashAttention-2 (Dao, 2023) for f16/bf16 on mma.sync, forward and backward.
// Called first by the attention family's CUDA driver (attention.cu); returning false hands the
// case to the generic kernels there.
//
// Design note (invariants a reviewer checks):
// - Handles: f16 or bf16 (one dtype for all operands), D = 64 or 128, any Tq, Tk >= 1, causal
//   or not, with or without an attn_mask (bool or f32, any non-negative strides over
//   [B, H, Tq, Tk]; never with dropout, which the caller keeps in the generic kernels), every
//   operand 4-D with stride(3) == 1, strides of dims 0..2 non-negative multiples
//   of 8 elements (or the dim has size 1), data 16-byte aligned, lse f32 [B, H, Tq]
//   contiguous, B * H < 2^31 and the Delta grid within gridDim.x.
//   Anything else returns false having launched nothing. A profiler range names the path taken
//   ("flash_attention_fwd" / "_bwd"; the tests assert it). Head bh = b * H + h is addressed
//   as b * s0 + h * s1 + row * s2 (64-bit).
// - Tiles: every kernel is 4 warps (128 threads) and 64 x 64 tiles; a warp owns 16 rows of the
//   block's 64 (queries in the forward and in dQ, keys in dK/dV) and never reads another
//   warp's rows of its own operand, so the epilogue stages its results through those rows of
//   shared memory with only __syncwarp. Shared tiles are [64][D + 8] 16-bit: the 16-byte pad
//   shifts consecutive rows by 4 banks, so every ldmatrix phase (8 rows x 16 bytes) and the
//   epilogue's 32-bit stores are conflict-free. The streamed operand is double buffered with
//   cp.async (zero-filled past the sequence end, so padding rows are finite zeros); a trailing
//   __syncthreads per iteration keeps the buffer being refilled out of use.
// - Fragments (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4): A (16x16, row) holds
//   (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B (16x8, col) holds k = 2t..2t+1
//   and 2t+8.. of column g; C holds (g, 2t..2t+1) and (g+8, 2t..2t+1). So the C fragments of
//   two adjacent 8-column tiles are, packed to 16 bits, the A fragment of one k = 16 step:
//   P and dS go from accumulators to the next product without shared memory. ldmatrix.x4 of a
//   row-major [n][k] tile gives B of S = Q K^T directly; ldmatrix.x4.trans of a row-major
//   [k][n] tile (V, dO, Q, K) gives B of P V, P^T dO, dS^T Q and dS K.
// - Softmax in f32 in the log2 domain: x = s * scale * log2(e), masked to -inf, running max m
//   and per-thread partial row sum l (quad-reduced once at the end), p = 2^(x - m) with
//   ex2.approx; lse = (m + log2 l) ln 2 (natural log, as the generic kernels). P and dS are
//   rounded to the input dtype for the products, as FlashAttention does; all accumulation f32.
// - Masking: key j is visible to query i when j < Tk and (not causal or j <= i + Tk - Tq).
//   Tiles entirely past the causal diagonal are never visited (loop bounds); tiles crossing it
//   or the sequence end are masked element by element. Without an attn_mask every valid row
//   sees key 0; with one a row may see nothing for a tile or for good: it keeps m = -inf and
//   is guarded (alpha = 0, p = 0, not NaN), and a row that saw nothing at all stores lse =
//   +inf, so the backward's 2^(x - lse) is 0 across it (Note [attention masks and dropout]).
// - attn_mask (the kMask instantiations; the unmasked kernels are compiled without it): each
//   score, once scaled into the log2 domain, reads its mask element (b, h, i, j) through the
//   mask's own strides (stride 0 on broadcast dims: a key-padding mask is one cached row per
//   head): bool false -> -inf, f32 added times log2(e). The same rule recomputes P in both
//   backward kernels. Padding rows and columns past Tq / Tk read nothing. The kernels keep
//   every tile (a fully masked tile is computed and gives P = 0).
// - Backward (deterministic, no atomics, Note [deterministic CUDA reductions]): Delta =
//   rowsum(dO * O) in f32 (scratch from the caching allocator on the current stream, summed in
//   a fixed lane order), then dK/dV (block owns 64 keys, loops over query tiles recomputing
//   P^T = 2^(S^T scale log2 e - lse log2 e)) and dQ (block owns 64 queries, loops over key
//   tiles). Each output element is one thread's f32 accumulator summed in tile order.
// - Opt-in atomic dQ (Note [attention dQ atomics] in ember/ops/attention.h; never under
//   set_deterministic(true)): the dK/dV kernel stages each query tile's dS^T (rounded as the
//   products round it) in one more shared tile, then each warp adds its 16 queries' dS K over
//   the block's 64 keys into an f32 [BH, Tq, D] buffer with atomicAdd (zeroed by
//   cudaMemsetAsync on the stream first); a small kernel scales and rounds it into dq. The dQ
//   kernel, with its recomputed S and dP, is not launched: 5 tile products instead of 7.
// - Block order (BlockOrder): tiles fastest within a head (the resident blocks share a few
//   heads' K/V in L2), or heads fastest for causal attention that fits L2 (every head's
//   heaviest tile first); each chosen where an H200 measured it faster. Within a head,
//   forward and dQ take the heaviest query tiles (last) first; dK/dV's heaviest key tiles
//   (first) come first naturally.
// - Launches: on the current stream of q's device under a DeviceGuard, grid tiles_grid(),
//   EMBER_CUDA_CHECK_LAUNCH after each, > 48 KiB dynamic shared memory opted into with a
//   checked cudaFuncSetAttribute; no host synchronization, nothing capture-unsafe.
//
// Resources (nvcc 13, sm_90, -O3, ptxas -v; identical for f16 and bf16; 0 bytes stack frame,
// 0 spill stores / loads in every kernel; dynamic shared memory per 128-thread block):
//   flash_fwd_kernel       D=64: 124 regs, 46080 B    D=128: 167 regs,  87040 B
//   flash_bwd_delta_kernel D=64:  28 regs, 0          D=128:  28 regs,  0 (256 threads)
//   flash_bwd_dkdv_kernel  D=64: 226 regs, 56320 B    D=128: 254 regs, 105472 B
//   flash_bwd_dq_kernel    D=64: 130 regs, 55296 B    D=128: 165 regs, 104448 B
//   flash_bwd_dkdv_kernel, atomic dQ (+ 9216 B of dS^T): D=64: 236 regs, D=128: 248 regs
//   flash_bwd_dq_convert_kernel 30 regs, 0 (256 threads)
// With a mask (the same shared memory): forward 144 / 198 regs, dK/dV 241 / 255 (atomic dQ
// 241 / 251), dQ 214 / 232, still 0 spills.
// (dK/dV at D = 128 holds 128 f32 accumulators per thread; it takes the query tile in two
// halves of 32 and reloads its K/V fragments from shared memory to stay under 255.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/deterministic.h"
#include "ember/ops/attention.h"
#include "ember/profiler.h"
#include "flash_attention.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kBlock = 64;      // rows per tile, both the owned and the streamed operand
constexpr int kThreads = 128;   // 4 warps x 16 owned rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct Tile {
  static constexpr int pitch = D + 8;  // elements per shared row (16-byte pad)
  static constexpr int elems = kBlock * pitch;
  static constexpr int bytes = elems * 2;
};

// A strided [B, H, T, D] operand: element (b, h, r, d) at ptr + b*s0 + h*s1 + r*s2 + d.
struct Operand {
  const uint16_t* ptr;
  int64_t s0, s1, s2;
  __device__ const uint16_t* head(int64_t b, int64_t h) const { return ptr + b * s0 + h * s1; }
};

// The attention mask (Note [attention masks and dropout]) as the kernels read it: element
// (b, h, i, j) of its [B, H, Tq, Tk] view at ptr + b*s0 + h*s1 + i*s2 + j*s3 (stride 0 on the
// broadcast dims, never expanded in memory); bool (one byte) keeps the score where nonzero,
// f32 is added to the scaled score. Read only by the kMask instantiations.
struct MaskView {
  const void* ptr;
  int64_t s0, s1, s2, s3;
  bool is_bool;
  __device__ __forceinline__ int64_t head(int64_t b, int64_t h) const { return b * s0 + h * s1; }
  // x, a score already scaled into the log2 domain, after the mask element (i, j) of the head
  // at `head` (i < Tq, j < Tk: the caller keeps padding rows and columns out).
  __device__ __forceinline__ float apply(int64_t head, int64_t i, int64_t j, float x) const {
    const int64_t at = head + i * s2 + j * s3;
    if (is_bool) return static_cast<const uint8_t*>(ptr)[at] != 0 ? x : -INFINITY;
    return fmaf(static_cast<const float*>(ptr)[at], kLog2e, x);
  }
};

// Which head and which 64-row tile of the owned operand a block takes, in one of two grid
// layouts (BlockOrder, chosen per call by block_order()):
// - tiles fastest, grid (tiles, heads over y and z; gridDim.y <= 65535): the resident blocks
//   (about 4 per SM) share the K/V (or Q/dO) of a few heads in L2 instead of streaming every
//   head's at once. Measured faster where the heads' K/V exceed L2 or the work is uniform
//   (non-causal); blocks past the last head (z rounds up) exit before any barrier.
// - heads fastest, grid (heads, tiles): with causal masking every head's heaviest tile runs
//   first, before any light one (longest-first across the whole grid); measured faster for
//   causal attention whose K/V fit L2 (the GPT-2 shape).
// Both read only special registers and the parameter bank, which the compiler re-reads
// instead of keeping (the D = 128 dK/dV kernel has no register to spare).
struct BlockOrder {
  bool heads_fastest;
  __device__ __forceinline__ int64_t head() const {
    return heads_fastest ? int64_t(blockIdx.x) : int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  }
  __device__ __forceinline__ int64_t tile() const { return heads_fastest ? blockIdx.y : blockIdx.x; }
  __device__ __forceinline__ int64_t tiles() const { return heads_fastest ? gridDim.y : gridDim.x; }
};

struct FwdParams {
  Operand q, k, v, out;
  MaskView mask;
  float* lse;
  BlockOrder order;
  int64_t BH, H, Tq, Tk;
  float scale_log2;
  bool causal;
};

struct BwdParams {
  Operand q, k, v, dout, dq, dk, dv;
  MaskView mask;
  const float* lse;
  const float* delta;
  float* dq_accum;  // [BH, Tq, D] f32, zeroed: the atomic dQ (kAtomicDq kernels) adds here
  BlockOrder order;
  int64_t BH, H, Tq, Tk;
  float scale_log2, scale;
  bool causal;
};

// ------------------------------------------------------------------ PTX wrappers

#ifdef EMBER_CUDA_SIM  // the CUDA simulation emulates each instruction (ember/cuda_sim/simt.h)
namespace sim = ::ember::cuda::sim;
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return sim::shared_address(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  sim::cp_async(dst, src, 16, valid ? 16 : 0);
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  sim::cp_async(dst, src, 4, valid ? 4 : 0);
}
__device__ __forceinline__ void cp_async_commit() { sim::cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  sim::cp_async_wait(N);
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { sim::ldmatrix_x4(r, addr, false); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) { sim::ldmatrix_x4(r, addr, true); }
template <class S>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  sim::mma_m16n8k16(c, a, b0, b1, !std::is_same_v<S, Half>);
}
__device__ __forceinline__ float exp2_fast(float x) { return sim::ex2_approx_ftz(x); }
#else
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; src_bytes = 0 zero-fills without reading.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst),
               "l"(__cvta_generic_to_global(src)), "r"(valid ? 4 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The memory clobber keeps the compiler from moving a shared read across __syncthreads.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// c += a * b, 16x8x16, f32 accumulators.
template <class S>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<S, Half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 2^x (ex2.approx: 2 ulp, -inf -> +0).
__device__ __forceinline__ float exp2_fast(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
#endif  // EMBER_CUDA_SIM

// Two floats rounded to nearest even, `lo` in the low 16 bits (the lower column).
template <class S>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<S, Half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&u, &v, 4);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &v, 4);
  }
  return u;
}
template <class S>
__device__ __forceinline__ float2 unpack2(uint32_t u) {
  if constexpr (std::is_same_v<S, Half>) {
    __half2 v;
    memcpy(&v, &u, 4);
    return __half22float2(v);
  } else {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// ------------------------------------------------------------------ tile movement

// Rows [0, rows) of a [64][D] global tile (row stride `stride`) into a shared [64][D + 8]
// tile; rows past `rows` are zero-filled (finite padding for the products).
template <int D>
__device__ __forceinline__ void load_tile(uint32_t dst, const uint16_t* src, int64_t stride,
                                          int64_t rows, int tid) {
  constexpr int kChunks = D / 8;
  static_assert(kBlock * kChunks % kThreads == 0);
#pragma unroll 1  // unrolled, the hoisted addresses cost registers the products need
  for (int k = 0; k < kBlock * kChunks / kThreads; ++k) {
    const int c = tid + k * kThreads, r = c / kChunks, ch = c % kChunks;
    const bool ok = r < rows;
    cp_async16(dst + uint32_t(r * Tile<D>::pitch + ch * 8) * 2,
               ok ? src + r * stride + ch * 8 : src, ok);
  }
}

// 64 consecutive floats (a row tile of lse or Delta) into shared memory, zero past `rows`.
__device__ __forceinline__ void load_stats(uint32_t dst, const float* src, int64_t rows, int tid) {
  if (tid < kBlock) {
    const bool ok = tid < rows;
    cp_async4(dst + uint32_t(tid) * 4, ok ? src + tid : src, ok);
  }
}

// The warp's 16 rows of C fragments acc[D/8][4] (times `mul`), rounded to S, through its own
// 16 rows of the shared tile `stage` to rows [row0, row0 + 16) of dst (rows < rows_valid).
template <class S, int D>
__device__ __forceinline__ void store_rows(float (&acc)[D / 8][4], float mul0, float mul1,
                                           uint16_t* stage, uint16_t* dst, int64_t stride,
                                           int64_t rows_valid, int lane) {
  constexpr int P = Tile<D>::pitch;
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    *reinterpret_cast<uint32_t*>(stage + g * P + n * 8 + 2 * t) =
        pack2<S>(acc[n][0] * mul0, acc[n][1] * mul0);
    *reinterpret_cast<uint32_t*>(stage + (g + 8) * P + n * 8 + 2 * t) =
        pack2<S>(acc[n][2] * mul1, acc[n][3] * mul1);
  }
  __syncwarp();
  constexpr int kChunks = D / 8;
#pragma unroll
  for (int k = 0; k < 16 * kChunks / 32; ++k) {
    const int c = lane + k * 32, r = c / kChunks, ch = c % kChunks;
    if (r < rows_valid)
      *reinterpret_cast<uint4*>(dst + r * stride + ch * 8) =
          *reinterpret_cast<const uint4*>(stage + r * P + ch * 8);
  }
}

// Lane offsets (elements, within a [64][D+8] tile) of the ldmatrix.x4 row addresses:
// - a_off: A operand (16 rows x 16 k) at (row0, k0), or the .trans B operand of a [k][n] tile
//   (16 k x 16 n): matrices (rows 0-7, col 0), (rows 8-15, col 0), (rows 0-7, col 8),
//   (rows 8-15, col 8).
// - b_off: B operand of a row-major [n][k] tile, two 8-column n tiles x 16 k: matrices
//   (n 0-7, k 0), (n 0-7, k 8), (n 8-15, k 0), (n 8-15, k 8) -> b0, b1 of n tile 0, then 1.
template <int D>
__device__ __forceinline__ int a_off(int lane) {
  return (lane & 15) * Tile<D>::pitch + (lane >> 4) * 8;
}
template <int D>
__device__ __forceinline__ int b_off(int lane) {
  return ((lane & 7) + ((lane >> 4) << 3)) * Tile<D>::pitch + ((lane >> 3) & 1) * 8;
}

// acc[NT][4] (16 rows x 8 NT columns) += A (16 x D, from `a` or cached fragments) * B^T where
// B is the row-major [8 NT][D] shared tile (rows of a [64][D + 8] tile) at `b`.
template <class S, int D, int NT>
__device__ __forceinline__ void gemm_abt(float (&acc)[NT][4], uint32_t a_addr, uint32_t b_addr,
                                         int lane) {
  const uint32_t a = a_addr + uint32_t(a_off<D>(lane)) * 2;
  const uint32_t b = b_addr + uint32_t(b_off<D>(lane)) * 2;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    ldsm_x4(af, a + kk * 32);
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t r[4];
      ldsm_x4(r, b + uint32_t(np * 16 * Tile<D>::pitch + kk * 16) * 2);
      mma<S>(acc[2 * np], af, r[0], r[1]);
      mma<S>(acc[2 * np + 1], af, r[2], r[3]);
    }
  }
}
template <class S, int D, int NT>
__device__ __forceinline__ void gemm_abt_cached(float (&acc)[NT][4],
                                                const uint32_t (&af)[D / 16][4],
                                                uint32_t b_addr, int lane) {
  const uint32_t b = b_addr + uint32_t(b_off<D>(lane)) * 2;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t r[4];
      ldsm_x4(r, b + uint32_t(np * 16 * Tile<D>::pitch + kk * 16) * 2);
      mma<S>(acc[2 * np], af[kk], r[0], r[1]);
      mma<S>(acc[2 * np + 1], af[kk], r[2], r[3]);
    }
  }
}
template <int D>
__device__ __forceinline__ void load_a(uint32_t (&af)[D / 16][4], uint32_t a_addr, int lane) {
  const uint32_t a = a_addr + uint32_t(a_off<D>(lane)) * 2;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) ldsm_x4(af[kk], a + kk * 32);
}

// acc[D/8][4] (16 rows x D) += X (16 x 8 NT, the f32 C fragments x[NT][4], rounded to S) * B,
// B the row-major [8 NT][D] shared tile at `b` (k = its rows).
template <class S, int D, int NT>
__device__ __forceinline__ void gemm_xb(float (&acc)[D / 8][4], const float (&x)[NT][4],
                                        uint32_t b_addr, int lane) {
  const uint32_t b = b_addr + uint32_t(a_off<D>(lane)) * 2;
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    const uint32_t af[4] = {pack2<S>(x[2 * kk][0], x[2 * kk][1]),
                            pack2<S>(x[2 * kk][2], x[2 * kk][3]),
                            pack2<S>(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                            pack2<S>(x[2 * kk + 1][2], x[2 * kk + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t r[4];
      ldsm_x4_t(r, b + uint32_t(kk * 16 * Tile<D>::pitch + dp * 16) * 2);
      mma<S>(acc[2 * dp], af, r[0], r[1]);
      mma<S>(acc[2 * dp + 1], af, r[2], r[3]);
    }
  }
}

// ------------------------------------------------------------------ forward

template <class S, int D, bool kMask>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const FwdParams p) {
  using T = Tile<D>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* ks = qs + T::elems;      // [2] tiles
  uint16_t* vs = ks + 2 * T::elems;  // [2] tiles
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = p.order.head(), b = bh / p.H, h = bh % p.H;
  if (bh >= p.BH) return;
  const int64_t q0 = (p.order.tiles() - 1 - p.order.tile()) * kBlock;  // each head's heaviest first
  const int64_t off = p.Tk - p.Tq;
  const int64_t rows_q = min(int64_t(kBlock), p.Tq - q0);
  const int64_t kend = p.causal ? min(p.Tk, q0 + rows_q + off) : p.Tk;
  const int n_tiles = int((kend + kBlock - 1) / kBlock);
  const uint16_t* kg = p.k.head(b, h);
  const uint16_t* vg = p.v.head(b, h);

  load_tile<D>(smem_u32(qs), p.q.head(b, h) + q0 * p.q.s2, p.q.s2, rows_q, tid);
  load_tile<D>(smem_u32(ks), kg, p.k.s2, p.Tk, tid);
  load_tile<D>(smem_u32(vs), vg, p.v.s2, p.Tk, tid);
  cp_async_commit();

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  uint32_t qf[D / 16][4];
  const int64_t row0 = q0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  const uint32_t q_warp = smem_u32(qs + warp * 16 * T::pitch);

  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = int64_t(it) * kBlock;
    if (it + 1 < n_tiles) {
      const int64_t j1 = j0 + kBlock;
      const int nb = (it + 1) & 1;
      load_tile<D>(smem_u32(ks + nb * T::elems), kg + j1 * p.k.s2, p.k.s2, p.Tk - j1, tid);
      load_tile<D>(smem_u32(vs + nb * T::elems), vg + j1 * p.v.s2, p.v.s2, p.Tk - j1, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (it == 0) load_a<D>(qf, q_warp, lane);
    const int buf = it & 1;

    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    gemm_abt_cached<S, D, 8>(s, qf, smem_u32(ks + buf * T::elems), lane);

    const bool need_mask = j0 + kBlock > p.Tk || (p.causal && j0 + kBlock - 1 > q0 + off);
    // In the tile's frame (jl = j - j0 in [0, 64), il = i - q0 - 16 warp in [0, 16)): key jl is
    // hidden when jl >= kv_lim or (causal) jl > il + diag; both clamped into int range.
    const int kv_lim = int(min(p.Tk - j0, int64_t(kBlock)));
    const int diag = int(max(min(q0 + warp * 16 + off - j0, int64_t(kBlock)), int64_t(-2 * kBlock)));
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * p.scale_log2;
        if constexpr (kMask) {
          const int64_t i = row0 + 8 * (e >> 1), j = j0 + n * 8 + 2 * t + (e & 1);
          if (i < p.Tq && j < p.Tk) x = p.mask.apply(p.mask.head(b, h), i, j, x);
        }
        if (need_mask) {
          const int jl = n * 8 + 2 * t + (e & 1), il = g + (e >> 1) * 8;
          if (jl >= kv_lim || (p.causal && jl > il + diag)) x = -INFINITY;
        }
        s[n][e] = x;
      }
    }
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
    }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float mnew = quad_max(mx[r]);
      base[r] = mnew == -INFINITY ? 0.f : mnew;  // nothing visible yet: p = 0, not NaN
      const float alpha = exp2_fast(m[r] - base[r]);
      m[r] = mnew;
      l[r] *= alpha;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2_fast(s[n][e] - base[e >> 1]);
        l[e >> 1] += s[n][e];
      }
    }
    gemm_xb<S, D, 8>(o, s, smem_u32(vs + buf * T::elems), lane);
    __syncthreads();  // the buffer is refilled by the next iteration's prefetch
  }

  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] = quad_sum(l[r]);
    inv[r] = l[r] > 0.f ? 1.f / l[r] : 0.f;
    const int64_t i = row0 + 8 * r;
    // A row that saw no key (every one masked) has l = 0: out 0 and lse +inf, so the
    // backward's 2^(x - lse) is 0 across it (Note [attention masks and dropout]).
    if (t == 0 && i < p.Tq) p.lse[bh * p.Tq + i] = l[r] > 0.f ? (m[r] + log2f(l[r])) * kLn2 : INFINITY;
  }
  const int64_t wrow = q0 + warp * 16;
  store_rows<S, D>(o, inv[0], inv[1], qs + warp * 16 * T::pitch,
                   const_cast<uint16_t*>(p.out.head(b, h)) + wrow * p.out.s2, p.out.s2,
                   p.Tq - wrow, lane);
}

// ------------------------------------------------------------------ backward

// Delta[bh * Tq + i] = sum_d dO[b, h, i, d] * O[b, h, i, d], D / 8 lanes per row (16 bytes
// each), summed in a fixed order.
template <class S, int D>
__global__ void __launch_bounds__(256) flash_bwd_delta_kernel(const Operand o, const Operand dout,
                                                              float* delta, int64_t H, int64_t Tq,
                                                              int64_t rows) {
  constexpr int kLanes = D / 8;
  const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int c = threadIdx.x % kLanes;
  float acc = 0.f;
  if (r < rows) {
    const int64_t bh = r / Tq, i = r % Tq, b = bh / H, h = bh % H;
    const uint4 ov = *reinterpret_cast<const uint4*>(o.head(b, h) + i * o.s2 + c * 8);
    const uint4 gv = *reinterpret_cast<const uint4*>(dout.head(b, h) + i * dout.s2 + c * 8);
    const uint32_t ow[4] = {ov.x, ov.y, ov.z, ov.w}, gw[4] = {gv.x, gv.y, gv.z, gv.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 a = unpack2<S>(ow[w]), bb = unpack2<S>(gw[w]);
      acc = fmaf(a.x, bb.x, acc);
      acc = fmaf(a.y, bb.y, acc);
    }
  }
#pragma unroll
  for (int s = kLanes / 2; s > 0; s /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (c == 0 && r < rows) delta[r] = acc;
}

// dQ rows [row0, row0 + 16) (warp w's 16 queries of the tile, row0 = i0 + 16 w) += dS K over
// the block's 64 keys, added into p.dq_accum with f32 atomics (Note [attention dQ atomics]).
// dS comes from the staged dS^T tile `dss` ([64 keys][64 + 8 queries], every warp's rows):
// ldmatrix.trans of its [k][m] storage gives the A fragments of dS (b_off's lane addresses,
// keys as rows); K is the B operand exactly as in gemm_xb. 16 columns per step: 8 accumulators
// (the D = 128 kernel holds dK and dV in 128 registers already). kCacheDs keeps the 4 dS
// fragments in registers across the steps; without it (the masked D = 128 kernel, which
// would spill) each step reloads them. Each dQ element gets one atomic per block and query
// tile; rows past Tq add nothing.
template <class S, int D, bool kCacheDs>
__device__ __forceinline__ void add_dq_atomic(const BwdParams& p, const uint16_t* dss,
                                              const uint16_t* ks, int64_t bh, int64_t row0,
                                              int warp, int lane) {
  uint32_t af[kCacheDs ? kBlock / 16 : 1][4];
  const uint32_t a = smem_u32(dss) + uint32_t(b_off<kBlock>(lane) + warp * 16) * 2;
  auto load_ds = [&](uint32_t (&f)[4], int kk) { ldsm_x4_t(f, a + uint32_t(kk * 16 * Tile<kBlock>::pitch) * 2); };
  if constexpr (kCacheDs) {
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) load_ds(af[kk], kk);
  }
  const uint32_t b = smem_u32(ks) + uint32_t(a_off<D>(lane)) * 2;
  const int g = lane >> 2, t = lane & 3;
  const bool lo = row0 + g < p.Tq, hi = row0 + g + 8 < p.Tq;
  float* out = p.dq_accum + (bh * p.Tq + row0 + g) * D + 2 * t;
#pragma unroll 1  // addresses differ per step only; unrolled, the loads would take registers
  for (int dp = 0; dp < D / 16; ++dp) {
    float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < kBlock / 16; ++kk) {
      if constexpr (!kCacheDs) load_ds(af[0], kk);
      const uint32_t(&ds)[4] = af[kCacheDs ? kk : 0];
      uint32_t r[4];
      ldsm_x4_t(r, b + uint32_t(kk * 16 * Tile<D>::pitch + dp * 16) * 2);
      mma<S>(c0, ds, r[0], r[1]);  // columns dp * 16 + 0..7
      mma<S>(c1, ds, r[2], r[3]);  // columns dp * 16 + 8..15
    }
    float* o = out + dp * 16;
    if (lo) {
      atomicAdd(o, c0[0]);
      atomicAdd(o + 1, c0[1]);
      atomicAdd(o + 8, c1[0]);
      atomicAdd(o + 9, c1[1]);
    }
    if (hi) {
      atomicAdd(o + 8 * D, c0[2]);
      atomicAdd(o + 8 * D + 1, c0[3]);
      atomicAdd(o + 8 * D + 8, c1[2]);
      atomicAdd(o + 8 * D + 9, c1[3]);
    }
  }
}

// dK, dV for 64 keys (warp w owns keys n0 + 16w ..), looping over query tiles. With kAtomicDq
// it also adds each query tile's dS K into p.dq_accum (add_dq_atomic), staging dS^T through
// one more shared tile, and the dQ kernel is not launched.
template <class S, int D, bool kMask, bool kAtomicDq>
__global__ void __launch_bounds__(kThreads) flash_bwd_dkdv_kernel(const BwdParams p) {
  using T = Tile<D>;
  constexpr bool kCacheA = D == 64;  // K, V fragments in registers (D = 128 would spill)
  // D = 128: the query tile in two halves of 32, so S^T and dP^T take 32 registers, not 64
  // (with dK and dV's 128 the whole tile would spill).
  constexpr int kHalves = D == 128 ? 2 : 1, NT = 8 / kHalves;
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  uint16_t* ks = reinterpret_cast<uint16_t*>(smem);
  uint16_t* vs = ks + T::elems;
  uint16_t* qs = vs + T::elems;      // [2] tiles
  uint16_t* gs = qs + 2 * T::elems;  // [2] tiles of dO
  float* ls = reinterpret_cast<float*>(gs + 2 * T::elems);  // [2][64] lse
  float* dls = ls + 2 * kBlock;                             // [2][64] Delta
  uint16_t* dss = reinterpret_cast<uint16_t*>(dls + 2 * kBlock);  // dS^T (kAtomicDq only)
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = p.order.head(), b = bh / p.H, h = bh % p.H;
  if (bh >= p.BH) return;
  const int64_t n0 = p.order.tile() * kBlock;  // the heaviest (first) first
  const int64_t off = p.Tk - p.Tq;
  const int64_t rows_k = min(int64_t(kBlock), p.Tk - n0);
  // Query i sees key j when i >= j - off: the block's first key n0 is first seen by n0 - off.
  const int64_t i_first = p.causal ? max(int64_t(0), n0 - off) : 0;
  const int t_begin = int(i_first / kBlock), t_end = int((p.Tq + kBlock - 1) / kBlock);

  load_tile<D>(smem_u32(ks), p.k.head(b, h) + n0 * p.k.s2, p.k.s2, rows_k, tid);
  load_tile<D>(smem_u32(vs), p.v.head(b, h) + n0 * p.v.s2, p.v.s2, rows_k, tid);
  // Addresses recomputed from the parameters (constant bank) per tile: long-lived 64-bit
  // pointers would take registers the products need.
  auto load_q_tile = [&](int tile, int buf) {
    const int64_t i0 = int64_t(tile) * kBlock;
    const uint16_t* qg = p.q.head(b, h);
    const uint16_t* gg = p.dout.head(b, h);
    const float* lg = p.lse + bh * p.Tq;
    const float* dg = p.delta + bh * p.Tq;
    load_tile<D>(smem_u32(qs + buf * T::elems), qg + i0 * p.q.s2, p.q.s2, p.Tq - i0, tid);
    load_tile<D>(smem_u32(gs + buf * T::elems), gg + i0 * p.dout.s2, p.dout.s2, p.Tq - i0, tid);
    load_stats(smem_u32(ls + buf * kBlock), lg + i0, p.Tq - i0, tid);
    load_stats(smem_u32(dls + buf * kBlock), dg + i0, p.Tq - i0, tid);
  };
  if (t_begin < t_end) load_q_tile(t_begin, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
  const uint32_t k_warp = smem_u32(ks + warp * 16 * T::pitch);
  const uint32_t v_warp = smem_u32(vs + warp * 16 * T::pitch);
  uint32_t kf[kCacheA ? D / 16 : 1][4], vf[kCacheA ? D / 16 : 1][4];

  for (int it = t_begin; it < t_end; ++it) {
    const int buf = (it - t_begin) & 1;
    if (it + 1 < t_end) {
      load_q_tile(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kCacheA) {
      if (it == t_begin) {
        load_a<D>(kf, k_warp, lane);
        load_a<D>(vf, v_warp, lane);
      }
    }
    const int64_t i0 = int64_t(it) * kBlock;
    const uint32_t qb = smem_u32(qs + buf * T::elems), gb = smem_u32(gs + buf * T::elems);

    const bool need_mask = i0 + kBlock > p.Tq || (p.causal && n0 + kBlock - 1 > i0 + off);
    // Tile frame: il = i - i0 in [0, 64), jl = j - (n0 + 16 warp) in [0, 16); query il is
    // padding when il >= q_lim, key jl hidden from it (causal) when jl > il + diag.
    const int q_lim = int(min(p.Tq - i0, int64_t(kBlock)));
    const int diag =
        int(max(min(i0 + off - n0 - warp * 16, int64_t(2 * kBlock)), int64_t(-2 * kBlock)));
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
      // Columns [c0, c0 + 8 NT) of the tile's queries.
      const int c0 = half * 8 * NT;
      const uint32_t qh = qb + uint32_t(c0 * T::pitch) * 2, gh = gb + uint32_t(c0 * T::pitch) * 2;
      // S^T = K Q^T and dP^T = V dO^T: rows are this warp's keys, columns the queries.
      float st[NT][4], dpt[NT][4];
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[n][e] = dpt[n][e] = 0.f;
      if constexpr (kCacheA) {
        gemm_abt_cached<S, D, NT>(st, kf, qh, lane);
        gemm_abt_cached<S, D, NT>(dpt, vf, gh, lane);
      } else {
        gemm_abt<S, D, NT>(st, k_warp, qh, lane);
        gemm_abt<S, D, NT>(dpt, v_warp, gh, lane);
      }
      // P^T = 2^(S^T scale log2 e - lse log2 e), dS^T = P^T (dP^T - Delta).
      const float* lrow = ls + buf * kBlock + c0;
      const float* drow = dls + buf * kBlock + c0;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const float2 lv = *reinterpret_cast<const float2*>(lrow + n * 8 + 2 * t);
        const float2 dv2 = *reinterpret_cast<const float2*>(drow + n * 8 + 2 * t);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float lse_i = (e & 1) ? lv.y : lv.x, d_i = (e & 1) ? dv2.y : dv2.x;
          float pv;
          if constexpr (kMask) {
            float x = st[n][e] * p.scale_log2;
            const int64_t i = i0 + c0 + n * 8 + 2 * t + (e & 1), j = n0 + warp * 16 + g + (e >> 1) * 8;
            if (i < p.Tq && j < p.Tk) x = p.mask.apply(p.mask.head(b, h), i, j, x);
            pv = exp2_fast(x - lse_i * kLog2e);  // a masked x (-inf) minus any lse: 0
          } else {
            pv = exp2_fast(fmaf(st[n][e], p.scale_log2, -lse_i * kLog2e));
          }
          if (need_mask) {
            const int il = c0 + n * 8 + 2 * t + (e & 1), jl = g + (e >> 1) * 8;
            if (il >= q_lim || (p.causal && jl > il + diag)) pv = 0.f;
          }
          st[n][e] = pv;
          dpt[n][e] = pv * (dpt[n][e] - d_i);
        }
      }
      if constexpr (kAtomicDq) {
        // This warp's keys' dS^T rows, columns c0.., rounded as gemm_xb rounds them. Keys past
        // Tk stage 0: their K rows are zero but their dS need not be finite (an f32 mask can
        // push lse so low that 2^(0 - lse) overflows), and inf * 0 would reach dQ.
        const int kr = warp * 16 + g;
        uint16_t* lo_row = dss + kr * Tile<kBlock>::pitch + c0 + 2 * t;
        uint16_t* hi_row = lo_row + 8 * Tile<kBlock>::pitch;
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          *reinterpret_cast<uint32_t*>(lo_row + n * 8) =
              kr < rows_k ? pack2<S>(dpt[n][0], dpt[n][1]) : 0u;
          *reinterpret_cast<uint32_t*>(hi_row + n * 8) =
              kr + 8 < rows_k ? pack2<S>(dpt[n][2], dpt[n][3]) : 0u;
        }
      }
      gemm_xb<S, D, NT>(dv, st, gh, lane);   // dV += P^T dO
      gemm_xb<S, D, NT>(dk, dpt, qh, lane);  // dK += dS^T Q
    }
    if constexpr (kAtomicDq) {
      __syncthreads();  // every warp's dS^T rows staged
      add_dq_atomic<S, D, !(kMask && D == 128)>(p, dss, ks, bh, i0 + warp * 16, warp, lane);
    }
    __syncthreads();  // the buffer (and dS^T) is refilled by the next iteration
  }

  // The loop ran at least once (query Tq - 1 sees every key), so the K, V copies into the
  // staging rows have completed.
  const int64_t wrow = n0 + warp * 16;
  store_rows<S, D>(dk, p.scale, p.scale, ks + warp * 16 * T::pitch,
                   const_cast<uint16_t*>(p.dk.head(b, h)) + wrow * p.dk.s2, p.dk.s2,
                   p.Tk - wrow, lane);
  store_rows<S, D>(dv, 1.f, 1.f, vs + warp * 16 * T::pitch,
                   const_cast<uint16_t*>(p.dv.head(b, h)) + wrow * p.dv.s2, p.dv.s2,
                   p.Tk - wrow, lane);
}

// dQ for 64 queries (warp w owns queries q0 + 16w ..), looping over key tiles.
template <class S, int D, bool kMask>
__global__ void __launch_bounds__(kThreads) flash_bwd_dq_kernel(const BwdParams p) {
  using T = Tile<D>;
  constexpr bool kCacheA = D == 64;  // Q, dO fragments in registers
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  uint16_t* qs = reinterpret_cast<uint16_t*>(smem);
  uint16_t* gs = qs + T::elems;
  uint16_t* ks = gs + T::elems;      // [2] tiles
  uint16_t* vs = ks + 2 * T::elems;  // [2] tiles
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int64_t bh = p.order.head(), b = bh / p.H, h = bh % p.H;
  if (bh >= p.BH) return;
  const int64_t q0 = (p.order.tiles() - 1 - p.order.tile()) * kBlock;  // each head's heaviest first
  const int64_t off = p.Tk - p.Tq;
  const int64_t rows_q = min(int64_t(kBlock), p.Tq - q0);
  const int64_t kend = p.causal ? min(p.Tk, q0 + rows_q + off) : p.Tk;
  const int n_tiles = int((kend + kBlock - 1) / kBlock);
  const uint16_t* kg = p.k.head(b, h);
  const uint16_t* vg = p.v.head(b, h);

  load_tile<D>(smem_u32(qs), p.q.head(b, h) + q0 * p.q.s2, p.q.s2, rows_q, tid);
  load_tile<D>(smem_u32(gs), p.dout.head(b, h) + q0 * p.dout.s2, p.dout.s2, rows_q, tid);
  load_tile<D>(smem_u32(ks), kg, p.k.s2, p.Tk, tid);
  load_tile<D>(smem_u32(vs), vg, p.v.s2, p.Tk, tid);
  cp_async_commit();

  const int64_t row0 = q0 + warp * 16 + g;  // this thread's rows: row0, row0 + 8
  float lse2[2], dlt[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    lse2[r] = i < p.Tq ? p.lse[bh * p.Tq + i] * kLog2e : 0.f;
    dlt[r] = i < p.Tq ? p.delta[bh * p.Tq + i] : 0.f;
  }
  float dq[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;
  const uint32_t q_warp = smem_u32(qs + warp * 16 * T::pitch);
  const uint32_t g_warp = smem_u32(gs + warp * 16 * T::pitch);
  uint32_t qf[kCacheA ? D / 16 : 1][4], gf[kCacheA ? D / 16 : 1][4];

  for (int it = 0; it < n_tiles; ++it) {
    const int64_t j0 = int64_t(it) * kBlock;
    if (it + 1 < n_tiles) {
      const int64_t j1 = j0 + kBlock;
      const int nb = (it + 1) & 1;
      load_tile<D>(smem_u32(ks + nb * T::elems), kg + j1 * p.k.s2, p.k.s2, p.Tk - j1, tid);
      load_tile<D>(smem_u32(vs + nb * T::elems), vg + j1 * p.v.s2, p.v.s2, p.Tk - j1, tid);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if constexpr (kCacheA) {
      if (it == 0) {
        load_a<D>(qf, q_warp, lane);
        load_a<D>(gf, g_warp, lane);
      }
    }
    const int buf = it & 1;
    const uint32_t kb = smem_u32(ks + buf * T::elems), vb = smem_u32(vs + buf * T::elems);

    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
    if constexpr (kCacheA) {
      gemm_abt_cached<S, D, 8>(s, qf, kb, lane);
      gemm_abt_cached<S, D, 8>(dp, gf, vb, lane);
    } else {
      gemm_abt<S, D, 8>(s, q_warp, kb, lane);
      gemm_abt<S, D, 8>(dp, g_warp, vb, lane);
    }

    const bool need_mask = j0 + kBlock > p.Tk || (p.causal && j0 + kBlock - 1 > q0 + off);
    // Tile frame as in the forward.
    const int kv_lim = int(min(p.Tk - j0, int64_t(kBlock)));
    const int diag = int(max(min(q0 + warp * 16 + off - j0, int64_t(kBlock)), int64_t(-2 * kBlock)));
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pv;
        if constexpr (kMask) {
          float x = s[n][e] * p.scale_log2;
          const int64_t i = row0 + 8 * r, j = j0 + n * 8 + 2 * t + (e & 1);
          if (i < p.Tq && j < p.Tk) x = p.mask.apply(p.mask.head(b, h), i, j, x);
          pv = exp2_fast(x - lse2[r]);  // a masked x (-inf) minus any lse: 0
        } else {
          pv = exp2_fast(fmaf(s[n][e], p.scale_log2, -lse2[r]));
        }
        if (need_mask) {
          const int jl = n * 8 + 2 * t + (e & 1), il = g + r * 8;
          if (jl >= kv_lim || (p.causal && jl > il + diag)) pv = 0.f;
        }
        dp[n][e] = pv * (dp[n][e] - dlt[r]);
      }
    }
    gemm_xb<S, D, 8>(dq, dp, kb, lane);  // dQ += dS K
    __syncthreads();  // the buffer is refilled by the next iteration's prefetch
  }

  const int64_t wrow = q0 + warp * 16;
  store_rows<S, D>(dq, p.scale, p.scale, qs + warp * 16 * T::pitch,
                   const_cast<uint16_t*>(p.dq.head(b, h)) + wrow * p.dq.s2, p.dq.s2,
                   p.Tq - wrow, lane);
}

// dQ = scale * dq_accum, rounded to S, into the strided dq operand: 8 columns (two float4
// loads, one 16-byte store) per thread, rows = BH * Tq. The grid is the Delta kernel's.
template <class S, int D>
__global__ void flash_bwd_dq_convert_kernel(const float* acc, Operand dq, float scale, int64_t H,
                                            int64_t Tq, int64_t rows) {
  constexpr int kChunks = D / 8;
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t r = idx / kChunks;
  if (r >= rows) return;
  const int c = int(idx % kChunks);
  const int64_t bh = r / Tq, i = r % Tq;
  const float4* src = reinterpret_cast<const float4*>(acc + r * D + c * 8);
  const float4 x = src[0], y = src[1];
  const uint4 o = {pack2<S>(x.x * scale, x.y * scale), pack2<S>(x.z * scale, x.w * scale),
                   pack2<S>(y.x * scale, y.y * scale), pack2<S>(y.z * scale, y.w * scale)};
  *reinterpret_cast<uint4*>(const_cast<uint16_t*>(dq.head(bh / H, bh % H)) + i * dq.s2 + c * 8) = o;
}

// ------------------------------------------------------------------ host side

constexpr size_t kDefaultSmem = 48 * 1024;

template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > kDefaultSmem)
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(bytes)));
}

// A [B, H, T, D] operand the kernels can address: unit last stride, the other strides
// non-negative multiples of 8 elements (16-byte rows) unless the dim has size 1, 16-byte
// aligned data.
bool operand_ok(const Tensor& t, DType dtype, const Tensor& like_bh, int64_t T, int64_t D) {
  if (!t.defined() || t.dtype() != dtype || t.dim() != 4 || !t.device().is_cuda() ||
      t.device() != like_bh.device())
    return false;
  if (t.sizes()[0] != like_bh.sizes()[0] || t.sizes()[1] != like_bh.sizes()[1] ||
      t.sizes()[2] != T || t.sizes()[3] != D || t.stride(3) != 1)
    return false;
  for (int i = 0; i < 3; ++i)
    if (t.sizes()[i] != 1 && (t.stride(i) < 0 || t.stride(i) % 8 != 0)) return false;
  return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

Operand operand(const Tensor& t) {
  // A size-1 dim is never stepped over: its stride (possibly unaligned) is replaced by 0.
  auto s = [&](int i) { return t.sizes()[i] == 1 ? int64_t(0) : t.stride(i); };
  return {static_cast<const uint16_t*>(t.data_ptr()), s(0), s(1), s(2)};
}

bool lse_ok(const Tensor& lse, const Tensor& q) {
  return lse.defined() && lse.dtype() == DType::f32 && lse.device() == q.device() &&
         lse.is_contiguous() && lse.numel() == q.sizes()[0] * q.sizes()[1] * q.sizes()[2];
}

// An attn_mask the kernels can read: undefined (none), or bool / f32 viewed as [B, H, Tq, Tk]
// with non-negative strides on q's device (the front's form: ops/src/attention.cpp).
bool mask_ok(const Tensor& m, const Tensor& q, int64_t Tk) {
  if (!m.defined()) return true;
  if ((m.dtype() != DType::b8 && m.dtype() != DType::f32) || m.dim() != 4 || m.device() != q.device())
    return false;
  if (m.sizes()[0] != q.sizes()[0] || m.sizes()[1] != q.sizes()[1] || m.sizes()[2] != q.sizes()[2] ||
      m.sizes()[3] != Tk)
    return false;
  for (int i = 0; i < 4; ++i)
    if (m.stride(i) < 0) return false;
  return true;
}

MaskView mask_view(const Tensor& m) {
  if (!m.defined()) return {nullptr, 0, 0, 0, 0, false};
  auto s = [&](int i) { return m.sizes()[i] == 1 ? int64_t(0) : m.stride(i); };
  return {m.data_ptr(), s(0), s(1), s(2), s(3), m.dtype() == DType::b8};
}

// Calls f(S{}, D, masked) with compile-time values: one instantiation per (dtype, head dim,
// masked or not), so the unmasked kernels carry no trace of the mask (registers, instructions).
template <class F>
void dispatch(DType dt, int64_t D, bool masked, F&& f) {
  auto on_mask = [&](auto s_tag, auto d_tag) {
    if (masked) f(s_tag, d_tag, std::true_type{});
    else f(s_tag, d_tag, std::false_type{});
  };
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  if (dt == DType::f16) {
    if (D == 64) on_mask(Half{}, D64{});
    else on_mask(Half{}, D128{});
  } else {
    if (D == 64) on_mask(BFloat16{}, D64{});
    else on_mask(BFloat16{}, D128{});
  }
}

// The shapes every kernel shares: dims, tile counts inside the grid limits.
bool shape_ok(const Tensor& q, const Tensor& k, bool causal) {
  if (q.dim() != 4 || k.dim() != 4) return false;
  if (q.dtype() != DType::f16 && q.dtype() != DType::bf16) return false;
  const int64_t BH = q.sizes()[0] * q.sizes()[1], Tq = q.sizes()[2], Tk = k.sizes()[2];
  const int64_t D = q.sizes()[3];
  if (D != 64 && D != 128) return false;
  if (BH < 1 || Tq < 1 || Tk < 1 || (causal && Tq > Tk)) return false;
  if (BH > int64_t(INT32_MAX)) return false;  // tiles_grid's x or ceil(BH / 65535) in z
  // The backward's Delta grid (D / 8 threads per row, 256 per block) must fit gridDim.x: checked
  // here so that such a shape declines (generic kernels) instead of throwing after eligibility.
  // BH * Tq * D is q's element count, so the product cannot overflow.
  if ((BH * Tq * (D / 8) + 255) / 256 > int64_t(INT32_MAX)) return false;
  return true;
}

// BlockOrder's choice for a call: heads fastest for causal attention whose K and V (all heads)
// fit in 64 MB (about L2, 50 MB on an H100/H200: the measured case is GPT-2's 48 MB) and whose
// tile count fits gridDim.y; tiles fastest otherwise. Measured on an H200 (docs/performance.md,
// "Flash attention's block order"): tiles fastest took the GPT-2 causal forward from 0.84x to
// 0.77x SDPA, and the non-causal and D = 128 ones from 0.60-0.61x to 0.66-0.67x.
BlockOrder block_order(bool causal, int64_t BH, int64_t Tq, int64_t Tk, int64_t D) {
  const int64_t tiles = (std::max(Tq, Tk) + kBlock - 1) / kBlock;
  const double kv_bytes = 2.0 * 2.0 * double(BH) * double(Tk) * double(D);
  return {causal && kv_bytes <= 64.0 * (1 << 20) && tiles <= 65535};
}

// The grid of `order` over BH heads and ceil(T / 64) tiles. Tiles fastest: T < 2^31 tiles fit
// gridDim.x, BH < 2^31 gives z <= 32769; heads fastest: BH in x, tiles <= 65535 in y
// (block_order).
dim3 tiles_grid(BlockOrder order, int64_t BH, int64_t T) {
  const unsigned tiles = unsigned((T + kBlock - 1) / kBlock);
  if (order.heads_fastest) return dim3(unsigned(BH), tiles);
  const int64_t y = std::min<int64_t>(BH, 65535);
  return dim3(tiles, unsigned(y), unsigned((BH + y - 1) / y));
}

template <class S, int D, bool kMask>
void launch_fwd(const FwdParams& prm, int64_t BH, int64_t Tq, cudaStream_t stream) {
  constexpr size_t bytes = 5 * size_t(Tile<D>::bytes);
  auto kernel = flash_fwd_kernel<S, D, kMask>;
  allow_smem(kernel, bytes);
  ::ember::cuda::launch_kernel(kernel, tiles_grid(prm.order, BH, Tq), kThreads, bytes, stream, prm);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S, int D, bool kMask>
void launch_bwd(const BwdParams& prm, const Operand& out, float* delta, int64_t BH,
                cudaStream_t stream) {
  const int64_t rows = BH * prm.Tq;
  const int64_t threads = rows * (D / 8);
  const int64_t delta_blocks = (threads + 255) / 256;  // <= INT32_MAX (shape_ok)
  ::ember::cuda::launch_kernel(flash_bwd_delta_kernel<S, D>, unsigned(delta_blocks), 256, 0, stream,
      out, prm.dout, delta, prm.H, prm.Tq, rows);
  EMBER_CUDA_CHECK_LAUNCH();

  constexpr size_t kv_bytes = 6 * size_t(Tile<D>::bytes) + 4 * kBlock * sizeof(float);
  if (prm.dq_accum) {  // Note [attention dQ atomics]: dQ from the dK/dV kernel, then scaled
    constexpr size_t bytes = kv_bytes + Tile<kBlock>::bytes;  // + the dS^T tile
    auto kv_kernel = flash_bwd_dkdv_kernel<S, D, kMask, true>;
    allow_smem(kv_kernel, bytes);
    ::ember::cuda::launch_kernel(kv_kernel, tiles_grid(prm.order, BH, prm.Tk), kThreads, bytes, stream, prm);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(flash_bwd_dq_convert_kernel<S, D>, unsigned(delta_blocks), 256, 0, stream,
        prm.dq_accum, prm.dq, prm.scale, prm.H, prm.Tq, rows);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  auto kv_kernel = flash_bwd_dkdv_kernel<S, D, kMask, false>;
  allow_smem(kv_kernel, kv_bytes);
  ::ember::cuda::launch_kernel(kv_kernel, tiles_grid(prm.order, BH, prm.Tk), kThreads, kv_bytes, stream, prm);
  EMBER_CUDA_CHECK_LAUNCH();

  constexpr size_t q_bytes = 6 * size_t(Tile<D>::bytes);
  auto q_kernel = flash_bwd_dq_kernel<S, D, kMask>;
  allow_smem(q_kernel, q_bytes);
  ::ember::cuda::launch_kernel(q_kernel, tiles_grid(prm.order, BH, prm.Tq), kThreads, q_bytes, stream, prm);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool flash_attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& lse, const Tensor& mask, bool causal, double scale) {
  if (!q.defined() || !k.defined() || !shape_ok(q, k, causal)) return false;
  const DType dt = q.dtype();
  const int64_t Tq = q.sizes()[2], Tk = k.sizes()[2], D = q.sizes()[3];
  if (!operand_ok(q, dt, q, Tq, D) || !operand_ok(k, dt, q, Tk, D) ||
      !operand_ok(v, dt, q, Tk, D) || !operand_ok(out, dt, q, Tq, D) || !lse_ok(lse, q) ||
      !mask_ok(mask, q, Tk))
    return false;
  const int64_t BH = q.sizes()[0] * q.sizes()[1];
  // A named range (one relaxed load when no profiler runs) so that a profile, and the tests,
  // can tell that this path ran rather than the generic kernels, which give the same values.
  const ember::profiler::RecordFunction range("flash_attention_fwd");
  const FwdParams prm{operand(q), operand(k), operand(v), operand(out), mask_view(mask),
                      lse.data_ptr<float>(), block_order(causal, BH, Tq, Tk, D), BH,
                      q.sizes()[1], Tq, Tk,
                      float(scale * 1.4426950408889634), causal};
  const auto on = ember::cuda::detail::on_device(q.device());
  dispatch(dt, D, mask.defined(), [&](auto s_tag, auto d_tag, auto m_tag) {
    launch_fwd<decltype(s_tag), decltype(d_tag)::value, decltype(m_tag)::value>(prm, BH, Tq, on.stream);
  });
  return true;
}

bool flash_attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                         const Tensor& dv, const Tensor& mask, bool causal, double scale) {
  if (!q.defined() || !k.defined() || !shape_ok(q, k, causal)) return false;
  const DType dt = q.dtype();
  const int64_t Tq = q.sizes()[2], Tk = k.sizes()[2], D = q.sizes()[3];
  if (!operand_ok(q, dt, q, Tq, D) || !operand_ok(k, dt, q, Tk, D) ||
      !operand_ok(v, dt, q, Tk, D) || !operand_ok(out, dt, q, Tq, D) ||
      !operand_ok(grad, dt, q, Tq, D) || !operand_ok(dq, dt, q, Tq, D) ||
      !operand_ok(dk, dt, q, Tk, D) || !operand_ok(dv, dt, q, Tk, D) || !lse_ok(lse, q) ||
      !mask_ok(mask, q, Tk))
    return false;
  const int64_t BH = q.sizes()[0] * q.sizes()[1];
  const ember::profiler::RecordFunction range("flash_attention_bwd");  // as in the forward
  const auto on = ember::cuda::detail::on_device(q.device());
  // Stream-ordered scratch on the current stream (the caching allocator's pool; a graph
  // capture's private pool while capturing); freed when this returns, after the launches are
  // queued, so its reuse is ordered behind them on the same stream.
  Tensor delta = detail::make_tensor({BH * Tq}, DType::f32, q.device());
  // Note [attention dQ atomics]: an f32 dQ the dK/dV kernel adds into, zeroed on the stream.
  const bool atomic_dq = ops::attention_dq_atomics() && !is_deterministic();
  Tensor dq_accum;
  std::optional<ember::profiler::RecordFunction> atomic_range;  // names the path for profiles/tests
  if (atomic_dq) {
    atomic_range.emplace("flash_attention_bwd_atomic_dq");
    dq_accum = detail::make_tensor({BH * Tq * D}, DType::f32, q.device());
    EMBER_CUDA_CHECK(cudaMemsetAsync(dq_accum.data_ptr(), 0, size_t(BH * Tq * D) * sizeof(float), on.stream));
  }
  BwdParams prm{operand(q),
                operand(k),
                operand(v),
                operand(grad),
                operand(dq),
                operand(dk),
                operand(dv),
                mask_view(mask),
                lse.data_ptr<float>(),
                delta.data_ptr<float>(),
                atomic_dq ? dq_accum.data_ptr<float>() : nullptr,
                block_order(causal, BH, Tq, Tk, D),
                BH,
                q.sizes()[1],
                Tq,
                Tk,
                float(scale * 1.4426950408889634),
                float(scale),
                causal};
  const Operand o = operand(out);
  float* dp = delta.data_ptr<float>();
  dispatch(dt, D, mask.defined(), [&](auto s_tag, auto d_tag, auto m_tag) {
    launch_bwd<decltype(s_tag), decltype(d_tag)::value, decltype(m_tag)::value>(prm, o, dp, BH, on.stream);
  });
  return true;
}

}  // namespace ember::ops::cuda
