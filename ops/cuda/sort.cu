// CUDA driver of the sort family (mirror of ops/cpu/sort.cpp; contracts in kernels/sort.h).
//
// Invariants:
// - One order everywhere (Note [sort order] in ember/ops/sort.h): every key is first mapped to
//   an unsigned integer whose natural order is that order (ordered_key: NaNs canonicalized to
//   one quiet NaN above +inf, -0.0 to +0.0, the sign bit flipped for two's-complement and IEEE
//   values), and ties are broken by the original index. So only two key types exist (u32 for
//   keys of up to 32 bits, u64 for f64/i64), CPU and CUDA agree element for element, and the
//   values written are always the input's own elements gathered through the indices.
// - Rows of up to kBitonicMax elements: one block per row sorts (key, index) pairs in shared
//   memory with a bitonic network (index tie-break, so the result equals the stable order).
//   Longer rows: cub::DeviceSegmentedRadixSort (stable, so ties keep index order) over batches
//   of whole rows of at most kRadixBatch elements (CUB counts items in int; the batch bound
//   also caps the scratch), then a gather of the first k positions. All scratch comes from
//   ember's caching allocator (make_tensor) on the current stream; nothing waits on the host.
// - Scans: "rows" (K == 1) one block per row, a warp-shuffle scan per tile of blockDim
//   elements carried across tiles; "columns" (K > 1) one thread per column walking N, so
//   neighbouring threads read neighbouring elements. Accumulation: f32 for f16/bf16, f64 for
//   f32/f64 (as the CPU, which accumulates in f64), u64 (wrapping) for integers.
// - 64-bit element offsets throughout; grids loop when a count exceeds the launch limits.
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "kernels/sort.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int64_t kBitonicMax = 4096;           // shared memory: 4096 * (8 + 4) = 48 KiB at most
constexpr int64_t kRadixBatch = int64_t(1) << 25;  // elements per segmented radix sort call
constexpr int kScanThreads = 256;
constexpr int64_t kMaxGrid = int64_t(1) << 30;

template <class S>
using key_t = std::conditional_t<sizeof(S) == 8, uint64_t, uint32_t>;

template <class S>
__device__ __forceinline__ key_t<S> ordered_key(const S* p) {
  if constexpr (std::is_same_v<S, double>) {
    double v = *p;
    uint64_t u = v != v ? 0x7ff8000000000000ull : (v == 0.0 ? 0ull : uint64_t(__double_as_longlong(v)));
    return (u >> 63) ? ~u : (u | 0x8000000000000000ull);
  } else if constexpr (std::is_same_v<S, int64_t>) {
    return uint64_t(*p) ^ 0x8000000000000000ull;
  } else if constexpr (std::is_same_v<S, int32_t>) {
    return uint32_t(*p) ^ 0x80000000u;
  } else if constexpr (std::is_same_v<S, uint8_t> || std::is_same_v<S, bool>) {
    return uint32_t(*p);
  } else {  // f32, f16, bf16: through f32 (exact)
    const float v = load_c(p);
    uint32_t u = v != v ? 0x7fc00000u : (v == 0.0f ? 0u : __float_as_uint(v));
    return (u >> 31) ? ~u : (u | 0x80000000u);
  }
}

// ---- bitonic sort of one row per block ----

// (key, index) pairs; padding carries index INT_MAX and the key that sorts last.
template <class U>
__device__ __forceinline__ bool before(U ka, int ia, U kb, int ib, bool descending) {
  if (ka != kb) return descending ? ka > kb : ka < kb;
  return ia < ib;
}

template <class S>
__global__ void bitonic_rows_kernel(const S* __restrict__ x, int64_t rows, int64_t rs, int n,
                                    int n_pad, int k, bool descending, S* __restrict__ values,
                                    int64_t* __restrict__ indices) {
  using U = key_t<S>;
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  U* keys = reinterpret_cast<U*>(smem);
  int* idx = reinterpret_cast<int*>(keys + n_pad);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const S* row = x + r * rs;
    for (int i = threadIdx.x; i < n_pad; i += blockDim.x) {
      if (i < n) {
        keys[i] = ordered_key(row + i);
        idx[i] = i;
      } else {
        keys[i] = descending ? U(0) : ~U(0);
        idx[i] = INT_MAX;
      }
    }
    __syncthreads();
    for (int size = 2; size <= n_pad; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int i = threadIdx.x; i < n_pad; i += blockDim.x) {
          const int j = i ^ stride;
          if (j > i) {
            const bool up = (i & size) == 0;  // this run sorts in the requested direction
            const U ki = keys[i], kj = keys[j];
            const int ii = idx[i], ij = idx[j];
            const bool swap = up ? before(kj, ij, ki, ii, descending) : before(ki, ii, kj, ij, descending);
            if (swap) {
              keys[i] = kj;
              keys[j] = ki;
              idx[i] = ij;
              idx[j] = ii;
            }
          }
        }
        __syncthreads();
      }
    }
    for (int j = threadIdx.x; j < k; j += blockDim.x) {
      const int src = idx[j];
      values[r * k + j] = row[src];
      indices[r * k + j] = src;
    }
    __syncthreads();  // the next row reuses the shared arrays
  }
}

// ---- segmented radix sort of long rows ----

template <class S>
__global__ void radix_prep_kernel(const S* __restrict__ x, int64_t rs, int64_t n, int64_t count,
                                  key_t<S>* __restrict__ keys, int64_t* __restrict__ pos,
                                  int* __restrict__ offsets, int64_t rows) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / n, j = e - r * n;
    keys[e] = ordered_key(x + r * rs + j);
    pos[e] = j;
    if (j == 0) offsets[r] = int(e);
    if (e == count - 1) offsets[rows] = int(count);
  }
}

template <class S>
__global__ void radix_gather_kernel(const S* __restrict__ x, int64_t rs, int64_t n, int64_t k,
                                    int64_t rows, const int64_t* __restrict__ pos,
                                    S* __restrict__ values, int64_t* __restrict__ indices) {
  const int64_t count = rows * k;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k, j = e - r * k;
    const int64_t src = pos[r * n + j];
    values[e] = x[r * rs + src];
    indices[e] = src;
  }
}

unsigned elementwise_blocks(int64_t count, int threads) {
  return unsigned(std::min<int64_t>(ceil_div(count, threads), int64_t(1) << 16));
}

template <class S>
void sort_rows(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  using U = key_t<S>;
  const int64_t M = in.sizes()[0], N = in.sizes()[1], rs = in.strides()[0], k = values.sizes()[1];
  if (M == 0 || k == 0) return;
  const S* x = static_cast<const S*>(in.data_ptr());
  S* vo = static_cast<S*>(values.data_ptr());
  int64_t* io = static_cast<int64_t*>(indices.data_ptr());
  const auto on = ember::cuda::detail::on_device(in.device());
  cudaStream_t stream = on.stream;

  if (N <= kBitonicMax) {
    int n_pad = 1;
    while (n_pad < N) n_pad <<= 1;
    const int threads = std::max(32, std::min(1024, n_pad / 2));
    const size_t smem = size_t(n_pad) * (sizeof(U) + sizeof(int));
    ::ember::cuda::launch_kernel(bitonic_rows_kernel<S>, unsigned(std::min(M, kMaxGrid)), threads, smem, stream,
        x, M, rs, int(N), n_pad, int(k), descending, vo, io);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }

  EMBER_CHECK(N <= INT_MAX, ShapeError, "[sort] rows of ", N, " elements exceed the CUDA sort's limit of ",
              INT_MAX);
  const int64_t batch_rows = std::max<int64_t>(1, kRadixBatch / N);
  const int64_t cap = std::min(batch_rows, M) * N;
  const Device dev = in.device();
  Tensor keys_in = detail::make_tensor({cap * int64_t(sizeof(U))}, DType::u8, dev);
  Tensor keys_out = detail::make_tensor({cap * int64_t(sizeof(U))}, DType::u8, dev);
  Tensor pos_in = detail::make_tensor({cap}, DType::i64, dev);
  Tensor pos_out = detail::make_tensor({cap}, DType::i64, dev);
  Tensor offsets = detail::make_tensor({std::min(batch_rows, M) + 1}, DType::i32, dev);
  U* kin = static_cast<U*>(keys_in.data_ptr());
  U* kout = static_cast<U*>(keys_out.data_ptr());
  int64_t* pin = pos_in.data_ptr<int64_t>();
  int64_t* pout = pos_out.data_ptr<int64_t>();
  int* off = offsets.data_ptr<int32_t>();
  for (int64_t r0 = 0; r0 < M; r0 += batch_rows) {
    const int64_t rows = std::min(batch_rows, M - r0), count = rows * N;
    ::ember::cuda::launch_kernel(radix_prep_kernel<S>, elementwise_blocks(count, 256), 256, 0, stream,
        x + r0 * rs, rs, N, count, kin, pin, off, rows);
    EMBER_CUDA_CHECK_LAUNCH();
    auto call = [&](void* temp, size_t& bytes) {
      return descending
                 ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                       temp, bytes, kin, kout, pin, pout, int(count), int(rows), off, off + 1, 0,
                       int(sizeof(U) * 8), stream)
                 : cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, kin, kout, pin, pout,
                                                            int(count), int(rows), off, off + 1, 0,
                                                            int(sizeof(U) * 8), stream);
    };
    size_t bytes = 0;
    EMBER_CUDA_CHECK(call(nullptr, bytes));
    Tensor temp = detail::make_tensor({int64_t(std::max<size_t>(bytes, 1))}, DType::u8, dev);
    EMBER_CUDA_CHECK(call(temp.data_ptr(), bytes));
    ::ember::cuda::launch_kernel(radix_gather_kernel<S>, elementwise_blocks(rows * k, 256), 256, 0, stream,
        x + r0 * rs, rs, N, k, rows, pout, vo + r0 * k, io + r0 * k);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  // The scratch tensors are released here on the host; the caching allocator hands their
  // blocks only to later work on this stream, which runs after these kernels.
}

// ---- scans ----

template <class S>
using scan_acc_t = std::conditional_t<std::is_integral_v<S>, uint64_t,
                                      std::conditional_t<sizeof(S) == 2, float, double>>;

template <class S, class A>
__device__ __forceinline__ A scan_load(const S* p) {
  if constexpr (std::is_integral_v<S>) return A(int64_t(*p));
  else return A(load_c(p));
}
template <class S, class A>
__device__ __forceinline__ void scan_store(S* p, A a) {
  if constexpr (std::is_integral_v<S>) *p = S(int64_t(a));
  else store_c(p, a);
}

template <bool kProd, class A>
__device__ __forceinline__ A combine(A a, A b) {
  if constexpr (kProd) return a * b;
  else return a + b;
}

// One block per row (K == 1): tiles of blockDim elements, scanned by warp shuffles and a
// second-level scan of the warp totals, then offset by the carry of the previous tiles.
template <class S, bool kProd>
__global__ void scan_rows_kernel(const S* __restrict__ x, int64_t rows, int64_t os, int64_t n,
                                 int64_t ns, S* __restrict__ y) {
  using A = scan_acc_t<S>;
  __shared__ A warp_total[32];
  __shared__ A carry_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const A ident = kProd ? A(1) : A(0);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    A carry = ident;
    for (int64_t t0 = 0; t0 < n; t0 += blockDim.x) {
      const int64_t i = t0 + threadIdx.x;
      A v = i < n ? scan_load<S, A>(x + r * os + i * ns) : ident;
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) {
        const A u = __shfl_up_sync(kFullMask, v, off);
        if (lane >= off) v = combine<kProd>(u, v);
      }
      if (lane == 31) warp_total[warp] = v;
      __syncthreads();
      if (warp == 0) {
        A w = lane < nwarps ? warp_total[lane] : ident;
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) {
          const A u = __shfl_up_sync(kFullMask, w, off);
          if (lane >= off) w = combine<kProd>(u, w);
        }
        if (lane < nwarps) warp_total[lane] = w;  // inclusive prefix over warps
      }
      __syncthreads();
      if (warp > 0) v = combine<kProd>(warp_total[warp - 1], v);
      v = combine<kProd>(carry, v);
      if (i < n) scan_store(y + r * n + i, v);
      if (threadIdx.x == blockDim.x - 1) carry_s = v;
      __syncthreads();
      carry = carry_s;
      __syncthreads();  // warp_total and carry_s are rewritten by the next tile
    }
  }
}

// One thread per column (K > 1): neighbouring threads take neighbouring k (coalesced).
template <class S, bool kProd>
__global__ void scan_cols_kernel(const S* __restrict__ x, int64_t O, int64_t os, int64_t n,
                                 int64_t ns, int64_t K, int64_t ks, S* __restrict__ y) {
  using A = scan_acc_t<S>;
  const int64_t cols = O * K;
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
       c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = c / K, k = c - o * K;
    const S* src = x + o * os + k * ks;
    S* dst = y + o * n * K + k;
    A acc = kProd ? A(1) : A(0);
    for (int64_t i = 0; i < n; ++i) {
      acc = combine<kProd>(acc, scan_load<S, A>(src + i * ns));
      scan_store(dst + i * K, acc);
    }
  }
}

template <class S, bool kProd>
void scan_typed(const Tensor& in, const Tensor& out) {
  const int64_t O = in.sizes()[0], N = in.sizes()[1], K = in.sizes()[2];
  const int64_t os = in.strides()[0], ns = in.strides()[1], ks = in.strides()[2];
  const S* x = static_cast<const S*>(in.data_ptr());
  S* y = static_cast<S*>(out.data_ptr());
  const auto on = ember::cuda::detail::on_device(in.device());
  if (K == 1) {
    int threads = kScanThreads;
    while (threads > 32 && threads / 2 >= N) threads /= 2;
    ::ember::cuda::launch_kernel(scan_rows_kernel<S, kProd>, unsigned(std::min(O, kMaxGrid)), threads, 0, on.stream,
        x, O, os, N, ns, y);
  } else {
    ::ember::cuda::launch_kernel(scan_cols_kernel<S, kProd>, elementwise_blocks(O * K, 256), 256, 0, on.stream,
        x, O, os, N, ns, K, ks, y);
  }
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void sort_kernel(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  visit_dtype(in.dtype(), [&](auto tag) { sort_rows<decltype(tag)>(in, values, indices, descending); });
}

void topk_kernel(const Tensor& in, const Tensor& values, const Tensor& indices, bool largest) {
  visit_dtype(in.dtype(), [&](auto tag) { sort_rows<decltype(tag)>(in, values, indices, largest); });
}

void scan_kernel(ScanOp op, const Tensor& in, const Tensor& out) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) {
      throw DTypeError("[scan] internal error: bool input (the front casts it to i64)");
    } else {
      if (op == ScanOp::cumprod) scan_typed<S, true>(in, out);
      else scan_typed<S, false>(in, out);
    }
  });
}

}  // namespace ember::ops::cuda
