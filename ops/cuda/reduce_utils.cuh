// Device helpers shared by the CUDA reduce, nn, attention and classifier families (ops/cuda/
// reduce.cu, nn.cu, attention.cu, classifier.cu) and other kernels: 16-byte vector packs,
// 16-bit loads/stores through the hardware conversions, exp/log in the compute type, online
// softmax statistics, warp shuffles of any small trivially-copyable value, and deterministic
// warp/row reductions.
//
// Invariants (Note [deterministic CUDA reductions]):
// - Every reduction here combines values in an order fixed by the launch shape alone (lane
//   and warp numbers, never timing): warp_reduce is a fixed shuffle-down tree, row_reduce
//   combines the per-warp results in warp order. Kernels built on them never use float
//   atomics, so two runs give bit-identical results.
// - `combine(a, b)` is always called with a from lower lanes (warps) than b, each covering a
//   contiguous range of lanes. Threads themselves take strided elements, so a combine that
//   cares about element order (first-index argmax) compares the indices it carries.
// - row_reduce must be reached by every thread of the block (it synchronizes): kernels keep
//   threads of out-of-range rows alive with a neutral value instead of returning early.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "ember/dtype.h"

namespace ember::ops::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

// Vectorized access: kVec<S> elements of S fill one 16-byte load/store, and Pack<S, V> is V
// elements read or written as one aligned unit (V = 1 gives the scalar form of the same kernel,
// for strided or unaligned operands). Reinterpreting a pointer as Pack<S, V>* needs it aligned
// to sizeof(S) * V; callers check that before choosing V > 1.
template <class S>
constexpr int kVec = int(16 / sizeof(S));

template <class S, int V = kVec<S>>
struct alignas(sizeof(S) * V) Pack {
  S v[V];
};

// Accumulator type of sums (and of variance/statistics) for a storage type S: 16-bit floats
// accumulate in f32; f32 in f64 like the CPU path (so long f32 sums keep full accuracy and
// agree with the CPU; on sm_90 the f64 rate is half the f32 rate, invisible in a memory-bound
// reduction); f64 in f64; integers in i64.
template <class S>
struct AccType {
  using type = std::conditional_t<std::is_floating_point_v<S>, double,
                                  std::conditional_t<std::is_integral_v<S>, int64_t, float>>;
};
template <class S>
using acc_t = typename AccType<S>::type;

// Storage -> compute type through the hardware conversion (the Half/BFloat16 operators are
// portable bit manipulation; these are single instructions on sm_90).
template <class S>
__device__ __forceinline__ compute_t<S> load_c(const S* p) {
  if constexpr (std::is_same_v<S, Half>) {
    return __half2float(__ushort_as_half(p->bits));
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return __uint_as_float(uint32_t(p->bits) << 16);
  } else {
    return *p;
  }
}

// Compute type -> storage, rounding to nearest even (as the CPU's Half/BFloat16 do).
template <class S, class C>
__device__ __forceinline__ void store_c(S* p, C v) {
  if constexpr (std::is_same_v<S, Half>) {
    p->bits = __half_as_ushort(__float2half_rn(float(v)));
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    p->bits = __bfloat16_as_ushort(__float2bfloat16_rn(float(v)));
  } else {
    *p = S(v);
  }
}

// exp/log in the compute type: the f32 intrinsics for f32 (exp/log would promote to f64).
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

// Online softmax statistics of a set of elements: max m and sum s of exp(x - m). A set of
// only -inf keeps m = -inf, s = 0 (never exp(-inf - -inf)); a NaN makes s NaN.
template <class C>
struct MaxSum {
  C m, s;
};

// Statistics of the union of two sets.
template <class C>
__device__ __forceinline__ MaxSum<C> max_sum_merge(MaxSum<C> a, MaxSum<C> b) {
  const C m = a.m > b.m ? a.m : b.m;
  if (m == -std::numeric_limits<C>::infinity()) return {m, a.s + b.s};
  return {m, a.s * exp_c(a.m - m) + b.s * exp_c(b.m - m)};
}

template <class T>
__device__ __forceinline__ bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// __shfl_down_sync / __shfl_sync of any trivially copyable value, word by word.
template <class T>
__device__ __forceinline__ T shfl_down_any(T v, int delta) {
  static_assert(std::is_trivially_copyable_v<T>);
  if constexpr (sizeof(T) < 4) {
    int w = 0;
    memcpy(&w, &v, sizeof(T));
    w = __shfl_down_sync(kFullMask, w, delta);
    memcpy(&v, &w, sizeof(T));
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffled values are padded to 32-bit words");
    int w[sizeof(T) / 4];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < int(sizeof(T) / 4); ++i) w[i] = __shfl_down_sync(kFullMask, w[i], delta);
    memcpy(&v, w, sizeof(T));
  }
  return v;
}

template <class T>
__device__ __forceinline__ T shfl_any(T v, int src_lane) {
  static_assert(std::is_trivially_copyable_v<T>);
  if constexpr (sizeof(T) < 4) {
    int w = 0;
    memcpy(&w, &v, sizeof(T));
    w = __shfl_sync(kFullMask, w, src_lane);
    memcpy(&v, &w, sizeof(T));
  } else {
    static_assert(sizeof(T) % 4 == 0, "shuffled values are padded to 32-bit words");
    int w[sizeof(T) / 4];
    memcpy(w, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < int(sizeof(T) / 4); ++i) w[i] = __shfl_sync(kFullMask, w[i], src_lane);
    memcpy(&v, w, sizeof(T));
  }
  return v;
}

// Shuffle-down tree over the first n (<= 32) lanes of a full warp; lane 0 gets
// combine(v_0, v_1, ..., v_{n-1}) grouped as a balanced binary tree of adjacent lanes
// ((v0 v1)(v2 v3))... All 32 lanes must call it.
template <class T, class Combine>
__device__ __forceinline__ T warp_reduce(T v, const Combine& combine, int n = 32) {
  const int lane = int(threadIdx.x) & 31;
#pragma unroll
  for (int delta = 1; delta < 32; delta <<= 1) {
    const T other = shfl_down_any(v, delta);
    if (lane + delta < n && (lane & (2 * delta - 1)) == 0) v = combine(v, other);
  }
  return v;
}

// Reduces over the threads of one block row (the blockDim.x threads sharing threadIdx.y;
// blockDim.x is a multiple of 32, at most 1024). `smem` holds 32 values per block row. With
// `broadcast` every thread of the row gets the result, else only threadIdx.x == 0 does.
// Every thread of the block must call it (it synchronizes when a row spans several warps).
template <class T, class Combine>
__device__ __forceinline__ T row_reduce(T v, const Combine& combine, T* smem, bool broadcast) {
  v = warp_reduce(v, combine);
  const int warps = int(blockDim.x) >> 5;
  if (warps == 1) return broadcast ? shfl_any(v, 0) : v;
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  T* s = smem + threadIdx.y * 32;
  if (lane == 0) s[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = s[lane < warps ? lane : 0];
    w = warp_reduce(w, combine, warps);
    // Lanes past `warps` read s[0] above, which lane 0 now overwrites. The shuffles already
    // order those reads first (each lane's read feeds its first shuffle), but only a
    // __syncwarp says so in the memory model: compute-sanitizer racecheck reported this
    // read/write pair in every kernel using row_reduce on the first GPU run (as warnings).
    __syncwarp();
    if (lane == 0) s[0] = w;
    v = w;
  }
  __syncthreads();
  if (broadcast) v = s[0];
  __syncthreads();  // s may be reused by the caller's next reduction
  return v;
}

// Threads per row for a row of n elements: about 8 elements per thread, a whole number of
// warps, at most 1024 (a function of n alone, so the reduction order is fixed by the shape).
inline int threads_per_row(int64_t n) {
  int t = 32;
  while (t < 1024 && int64_t(t) * 8 < n) t *= 2;
  return t;
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
__host__ __device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

}  // namespace ember::ops::cuda
