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
//   also caps the scratch), then a gather of the first k positions. A batch of fewer than
//   kFewSortRows rows (one row: a flattened tensor) would leave most SMs idle there (CUB gives
//   each segment one block): it takes cub::DeviceRadixSort over the whole GPU instead (one
//   row: the key itself; several rows of u32 keys: a u64 (row << 32 | key); several rows of u64
//   keys stay segmented), descending order as the complemented key (stable again: ties in
//   index order). Top-k of such rows with k <= min(4096, N / 4) selects instead of sorting:
//   radix select of the k-th key, an ordered compaction of the survivors, a bitonic sort of
//   them (topk_select, above select_histogram_kernel). All scratch comes from
//   ember's caching allocator (make_tensor) on the current stream; nothing waits on the host.
// - Scans: "rows" (K == 1) one block per row, a warp-shuffle scan per tile of blockDim
//   elements carried across tiles; rows too few to fill the GPU (O < kFewRows, N >= 4
//   segments) are cut into segments of kScanSegment elements: one block reduces each segment,
//   one thread per row scans the segment totals into carries, and one block per segment scans
//   it from its carry (three launches in a fixed order: deterministic, unlike a look-back scan
//   whose association depends on timing). "columns" (K > 1) one thread per column walking N,
//   so neighbouring threads read neighbouring elements. Accumulation: f32 for f16/bf16, f64 for
//   f32/f64 (as the CPU, which accumulates in f64), u64 (wrapping) for integers.
// - 64-bit element offsets throughout; grids loop when a count exceeds the launch limits.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "cub_scratch.cuh"
#include "kernels/sort.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int64_t kBitonicMax = 4096;           // shared memory: 4096 * (8 + 4) = 48 KiB at most
constexpr int64_t kRadixBatch = int64_t(1) << 25;  // elements per segmented radix sort call
constexpr int64_t kFewSortRows = 32;               // batches of fewer rows sort device-wide
constexpr int kScanThreads = 256;
constexpr int64_t kScanSegment = 16 * kScanThreads;  // elements per block of a split row scan
constexpr int64_t kFewRows = 128;                    // fewer rows than this split long ones
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

// The device-wide sort's keys KO, complemented for a descending sort: the key itself (KO the
// key type, one row), or (row << 32 | key) for u32 keys of several rows (KO = u64).
template <class S, class KO>
__global__ void radix_fold_prep_kernel(const S* __restrict__ x, int64_t rs, int64_t n, int64_t count,
                                       bool descending, KO* __restrict__ keys, int64_t* __restrict__ pos) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / n, j = e - r * n;
    key_t<S> key = ordered_key(x + r * rs + j);
    if (descending) key = ~key;
    if constexpr (sizeof(KO) > sizeof(key)) keys[e] = (KO(r) << 32) | KO(key);
    else keys[e] = key;
    pos[e] = j;
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

// ---- top-k by radix select (k small against a long row) ----
//
// Which k elements a sort would put first, without sorting the row: the k-th key (in the
// select order: the ordered key, complemented for `largest`, so the wanted ones are always the
// smallest) is found 8 bits at a time from the top, each pass a histogram of the next digit
// over the elements that match the digits found so far (integer counts: atomics are exact, so
// this is deterministic), then one thread per row picks the digit holding the wanted rank.
// The survivors are the keys below it and the first `need` keys equal to it in index order,
// written by an ordered compaction (per-chunk counts, per-row offsets, ballot ranks within a
// chunk) so ties keep index order; a bitonic sort of the k survivors per row finishes, and
// their positions map back to the row's. Grids are (chunks, rows) with rows <= 65535 a launch.

constexpr int64_t kSelectChunk = 4096;  // elements per block of the histogram and compaction passes
constexpr int kSelectThreads = 256;

template <class S>
__device__ __forceinline__ key_t<S> select_key(const S* p, bool largest) {
  const key_t<S> key = ordered_key(p);
  return largest ? key_t<S>(~key) : key;
}

// hist[row][d] += the elements of the chunk whose key matches prefix[row] above bit shift + 8
// and has digit d at bits [shift, shift + 8).
template <class S>
__global__ void select_histogram_kernel(const S* __restrict__ x, int64_t rs, int64_t n, bool largest,
                                        const key_t<S>* __restrict__ prefix, int shift,
                                        unsigned* __restrict__ hist) {
  using U = key_t<S>;
  __shared__ unsigned h[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) h[i] = 0;
  __syncthreads();
  const int64_t row = blockIdx.y, j0 = int64_t(blockIdx.x) * kSelectChunk, j1 = min(n, j0 + kSelectChunk);
  const U high = shift + 8 >= int(8 * sizeof(U)) ? U(0) : U(~U(0) << (shift + 8));
  const U want = prefix[row] & high;
  const unsigned lane = threadIdx.x & 31u;
  // Most keys of a row share their top digits (one sign and exponent range): the lanes of a
  // warp holding the same digit add once, through their lowest lane (__match_any_sync), so a
  // hot bin takes one shared atomic per warp, not 32 serialized ones.
  for (int64_t t0 = j0; t0 < j1; t0 += blockDim.x) {  // the same trip count for every lane
    const int64_t j = t0 + threadIdx.x;
    unsigned digit = 256u;  // no bin: past the chunk, or a key off the prefix
    if (j < j1) {
      const U key = select_key(x + row * rs + j, largest);
      if ((key & high) == want) digit = unsigned(key >> shift) & 255u;
    }
    const unsigned peers = __match_any_sync(kFullMask, digit);
    if (digit < 256u && lane == unsigned(__ffs(peers) - 1)) atomicAdd(&h[digit], unsigned(__popc(peers)));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x)
    if (h[i]) atomicAdd(&hist[row * 256 + i], h[i]);
}

// One thread per row: the digit at `shift` of the rank-th (0-based) smallest matching key.
template <class U>
__global__ void select_digit_kernel(const unsigned* __restrict__ hist, int64_t rows, int shift,
                                    U* __restrict__ prefix, int64_t* __restrict__ rank) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int64_t r = rank[row];
  int d = 0;
  for (; d < 255; ++d) {
    const int64_t c = hist[row * 256 + d];
    if (r < c) break;
    r -= c;
  }
  prefix[row] |= U(d) << shift;
  rank[row] = r;
}

// counts[row][chunk] = (keys below the threshold, keys equal to it) in the chunk.
template <class S>
__global__ void select_count_kernel(const S* __restrict__ x, int64_t rs, int64_t n, bool largest,
                                    const key_t<S>* __restrict__ threshold, int64_t chunks,
                                    int64_t* __restrict__ counts) {
  using U = key_t<S>;
  __shared__ long long smem[2][32];
  const int64_t row = blockIdx.y, j0 = int64_t(blockIdx.x) * kSelectChunk, j1 = min(n, j0 + kSelectChunk);
  const U t = threshold[row];
  long long lt = 0, eq = 0;
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const U key = select_key(x + row * rs + j, largest);
    lt += key < t;
    eq += key == t;
  }
  lt = row_reduce(lt, [](long long a, long long b) { return a + b; }, smem[0], false);
  eq = row_reduce(eq, [](long long a, long long b) { return a + b; }, smem[1], false);
  if (threadIdx.x == 0) {
    counts[(row * chunks + blockIdx.x) * 2] = lt;
    counts[(row * chunks + blockIdx.x) * 2 + 1] = eq;
  }
}

// One thread per row: the chunks' counts become their first slots (exclusive scans in chunk
// order, in place): keys below the threshold from slot 0, equal ones after all of those (kept
// while their slot is below k).
__global__ void select_offsets_kernel(int64_t* __restrict__ counts, int64_t rows, int64_t chunks) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  int64_t* c = counts + row * chunks * 2;
  int64_t lt_total = 0;
  for (int64_t q = 0; q < chunks; ++q) lt_total += c[2 * q];
  int64_t lt = 0, eq = lt_total;
  for (int64_t q = 0; q < chunks; ++q) {
    const int64_t a = c[2 * q], b = c[2 * q + 1];
    c[2 * q] = lt;
    c[2 * q + 1] = eq;
    lt += a;
    eq += b;
  }
}

// The survivors of each chunk, in index order, at their slots: a tile of blockDim elements at
// a time, each element's rank from the warps' ballots (warps in order, lanes in order).
template <class S>
__global__ void select_compact_kernel(const S* __restrict__ x, int64_t rs, int64_t n, bool largest,
                                      const key_t<S>* __restrict__ threshold, int64_t chunks,
                                      const int64_t* __restrict__ offsets, int64_t k, S* __restrict__ cand,
                                      int64_t* __restrict__ cand_pos) {
  using U = key_t<S>;
  __shared__ int warp_lt[32], warp_eq[32];
  const int64_t row = blockIdx.y, j0 = int64_t(blockIdx.x) * kSelectChunk, j1 = min(n, j0 + kSelectChunk);
  const U t = threshold[row];
  int64_t lt_base = offsets[(row * chunks + blockIdx.x) * 2], eq_base = offsets[(row * chunks + blockIdx.x) * 2 + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const unsigned below = (1u << lane) - 1u;
  for (int64_t t0 = j0; t0 < j1; t0 += blockDim.x) {  // the same trip count for every thread
    const int64_t j = t0 + threadIdx.x;
    bool lt = false, eq = false;
    if (j < j1) {
      const U key = select_key(x + row * rs + j, largest);
      lt = key < t;
      eq = key == t;
    }
    const unsigned blt = __ballot_sync(kFullMask, lt), beq = __ballot_sync(kFullMask, eq);
    if (lane == 0) {
      warp_lt[warp] = __popc(blt);
      warp_eq[warp] = __popc(beq);
    }
    __syncthreads();
    int64_t off_lt = 0, off_eq = 0, tot_lt = 0, tot_eq = 0;
    for (int w = 0; w < nwarps; ++w) {
      if (w < warp) {
        off_lt += warp_lt[w];
        off_eq += warp_eq[w];
      }
      tot_lt += warp_lt[w];
      tot_eq += warp_eq[w];
    }
    int64_t slot = -1;
    if (lt) slot = lt_base + off_lt + __popc(blt & below);
    if (eq) slot = eq_base + off_eq + __popc(beq & below);
    if (slot >= 0 && slot < k) {
      cand[row * k + slot] = x[row * rs + j];
      cand_pos[row * k + slot] = j;
    }
    lt_base += tot_lt;
    eq_base += tot_eq;
    __syncthreads();  // warp_lt / warp_eq are rewritten by the next tile
  }
}

template <class U>
__global__ void select_init_kernel(U* __restrict__ prefix, int64_t* __restrict__ rank, int64_t rows, int64_t k) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  prefix[row] = U(0);
  rank[row] = k - 1;
}

// The sorted survivors' positions (into the candidate rows) become positions in x's rows.
__global__ void select_positions_kernel(const int64_t* __restrict__ cand_pos, int64_t k, int64_t count,
                                        int64_t* __restrict__ indices) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += int64_t(gridDim.x) * blockDim.x)
    indices[e] = cand_pos[(e / k) * k + indices[e]];
}

unsigned elementwise_blocks(int64_t count, int threads) {
  return unsigned(std::min<int64_t>(ceil_div(count, threads), int64_t(1) << 16));
}

// Top-k of rows longer than the bitonic sort takes, k small against them (the comment above
// select_histogram_kernel).
template <class S>
void topk_select(const S* x, int64_t M, int64_t N, int64_t rs, int64_t k, bool largest, S* vo, int64_t* io,
                 Device dev, cudaStream_t stream) {
  using U = key_t<S>;
  const int64_t chunks = ceil_div(N, kSelectChunk);
  int n_pad = 1;
  while (n_pad < k) n_pad <<= 1;
  const int bitonic_threads = std::max(32, std::min(1024, n_pad / 2));
  const size_t bitonic_smem = size_t(n_pad) * (sizeof(U) + sizeof(int));
  for (int64_t r0 = 0; r0 < M; r0 += 65535) {  // grid.y holds the rows
    const int64_t rows = std::min<int64_t>(65535, M - r0);
    const S* xb = x + r0 * rs;
    Tensor hist = detail::make_tensor({rows * 256}, DType::i32, dev);
    Tensor prefix = detail::make_tensor({rows * int64_t(sizeof(U))}, DType::u8, dev);
    Tensor rank = detail::make_tensor({rows}, DType::i64, dev);
    Tensor counts = detail::make_tensor({rows * chunks * 2}, DType::i64, dev);
    Tensor cand = detail::make_tensor({rows * k * int64_t(sizeof(S))}, DType::u8, dev);
    Tensor cand_pos = detail::make_tensor({rows * k}, DType::i64, dev);
    auto* hp = static_cast<unsigned*>(hist.data_ptr());
    auto* pp = static_cast<U*>(prefix.data_ptr());
    int64_t* rp = rank.data_ptr<int64_t>();
    int64_t* cp = counts.data_ptr<int64_t>();
    auto* cv = static_cast<S*>(cand.data_ptr());
    int64_t* cpos = cand_pos.data_ptr<int64_t>();
    const dim3 grid{unsigned(chunks), unsigned(rows), 1u};
    const unsigned row_blocks = unsigned(ceil_div(rows, int64_t(128)));
    ::ember::cuda::launch_kernel(select_init_kernel<U>, row_blocks, 128, 0, stream, pp, rp, rows, k);
    EMBER_CUDA_CHECK_LAUNCH();
    for (int shift = int(8 * sizeof(U)) - 8; shift >= 0; shift -= 8) {
      EMBER_CUDA_CHECK(cudaMemsetAsync(hp, 0, size_t(rows) * 256 * sizeof(unsigned), stream));
      ::ember::cuda::launch_kernel(select_histogram_kernel<S>, grid, kSelectThreads, 0, stream,
          xb, rs, N, largest, static_cast<const U*>(pp), shift, hp);
      EMBER_CUDA_CHECK_LAUNCH();
      ::ember::cuda::launch_kernel(select_digit_kernel<U>, row_blocks, 128, 0, stream,
          static_cast<const unsigned*>(hp), rows, shift, pp, rp);
      EMBER_CUDA_CHECK_LAUNCH();
    }
    ::ember::cuda::launch_kernel(select_count_kernel<S>, grid, kSelectThreads, 0, stream,
        xb, rs, N, largest, static_cast<const U*>(pp), chunks, cp);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(select_offsets_kernel, row_blocks, 128, 0, stream, cp, rows, chunks);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(select_compact_kernel<S>, grid, kSelectThreads, 0, stream,
        xb, rs, N, largest, static_cast<const U*>(pp), chunks, static_cast<const int64_t*>(cp), k, cv, cpos);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(bitonic_rows_kernel<S>, unsigned(rows), bitonic_threads, bitonic_smem, stream,
        static_cast<const S*>(cv), rows, k, int(k), n_pad, int(k), largest, vo + r0 * k, io + r0 * k);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(select_positions_kernel, elementwise_blocks(rows * k, 256), 256, 0, stream,
        static_cast<const int64_t*>(cpos), k, rows * k, io + r0 * k);
    EMBER_CUDA_CHECK_LAUNCH();
  }
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

  if (N > kBitonicMax && N <= INT_MAX && k <= kBitonicMax && 4 * k <= N) {  // top-k, k small: select
    topk_select<S>(x, M, N, rs, k, descending, vo, io, in.device(), stream);
    return;
  }
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
  // Every batch has at most min(batch_rows, M) rows, so one test decides for all of them.
  const int64_t most_rows = std::min(batch_rows, M);
  auto device_wide = [&](auto key_tag, int end_bit) {
    using KO = decltype(key_tag);
    Tensor keys_in = detail::make_tensor({cap * int64_t(sizeof(KO))}, DType::u8, dev);
    Tensor keys_out = detail::make_tensor({cap * int64_t(sizeof(KO))}, DType::u8, dev);
    Tensor pos_in = detail::make_tensor({cap}, DType::i64, dev), pos_out = detail::make_tensor({cap}, DType::i64, dev);
    auto* kin = static_cast<KO*>(keys_in.data_ptr());
    auto* kout = static_cast<KO*>(keys_out.data_ptr());
    int64_t* pin = pos_in.data_ptr<int64_t>();
    int64_t* pout = pos_out.data_ptr<int64_t>();
    for (int64_t r0 = 0; r0 < M; r0 += batch_rows) {
      const int64_t rows = std::min(batch_rows, M - r0), count = rows * N;
      ::ember::cuda::launch_kernel(radix_fold_prep_kernel<S, KO>, elementwise_blocks(count, 256), 256, 0, stream,
          x + r0 * rs, rs, N, count, descending, kin, pin);
      EMBER_CUDA_CHECK_LAUNCH();
      cub_with_scratch(dev, [&](void* temp, size_t& bytes) {
        return cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, pin, pout, count, 0, end_bit, stream);
      });
      ::ember::cuda::launch_kernel(radix_gather_kernel<S>, elementwise_blocks(rows * k, 256), 256, 0, stream,
          x + r0 * rs, rs, N, k, rows, pout, vo + r0 * k, io + r0 * k);
      EMBER_CUDA_CHECK_LAUNCH();
    }
  };
  if (most_rows == 1) {
    device_wide(U{}, int(8 * sizeof(U)));
    return;
  }
  if (sizeof(U) == 4 && most_rows < kFewSortRows) {
    int row_bits = 0;
    while ((int64_t(1) << row_bits) < most_rows) ++row_bits;
    device_wide(uint64_t{}, 32 + row_bits);
    return;
  }
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
    cub_with_scratch(dev, [&](void* temp, size_t& bytes) {
      return descending
                 ? cub::DeviceSegmentedRadixSort::SortPairsDescending(
                       temp, bytes, kin, kout, pin, pout, int(count), int(rows), off, off + 1, 0,
                       int(sizeof(U) * 8), stream)
                 : cub::DeviceSegmentedRadixSort::SortPairs(temp, bytes, kin, kout, pin, pout,
                                                            int(count), int(rows), off, off + 1, 0,
                                                            int(sizeof(U) * 8), stream);
    });
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

// Block b scans segment b % segs of row b / segs (K == 1; segs == 1: the whole row, from the
// identity), starting from carry_in[b] when given: tiles of blockDim elements, scanned by warp
// shuffles and a second-level scan of the warp totals, then offset by the carry of the
// previous tiles.
template <class S, bool kProd>
__global__ void scan_rows_kernel(const S* __restrict__ x, int64_t rows, int64_t os, int64_t n,
                                 int64_t ns, S* __restrict__ y, int64_t seg, int64_t segs,
                                 const scan_acc_t<S>* __restrict__ carry_in) {
  using A = scan_acc_t<S>;
  __shared__ A warp_total[32];
  __shared__ A carry_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  const A ident = kProd ? A(1) : A(0);
  for (int64_t b = blockIdx.x; b < rows * segs; b += gridDim.x) {
    const int64_t r = b / segs, lo = (b % segs) * seg, hi = min(n, lo + seg);
    A carry = carry_in ? carry_in[b] : ident;
    for (int64_t t0 = lo; t0 < hi; t0 += blockDim.x) {
      const int64_t i = t0 + threadIdx.x;
      A v = i < hi ? scan_load<S, A>(x + r * os + i * ns) : ident;
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
      if (i < hi) scan_store(y + r * n + i, v);
      if (threadIdx.x == blockDim.x - 1) carry_s = v;
      __syncthreads();
      carry = carry_s;
      __syncthreads();  // warp_total and carry_s are rewritten by the next tile
    }
  }
}

// Split row scans, first launch: total[b] = the combination of segment b % segs of row
// b / segs (per-thread strided partials, then row_reduce in warp order: fixed by the shape).
template <class S, bool kProd>
__global__ void scan_segment_totals_kernel(const S* __restrict__ x, int64_t rows, int64_t os, int64_t n,
                                           int64_t ns, int64_t seg, int64_t segs,
                                           scan_acc_t<S>* __restrict__ total) {
  using A = scan_acc_t<S>;
  __shared__ A smem[32];
  for (int64_t b = blockIdx.x; b < rows * segs; b += gridDim.x) {
    const int64_t r = b / segs, lo = (b % segs) * seg, hi = min(n, lo + seg);
    A acc = kProd ? A(1) : A(0);
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
      acc = combine<kProd>(acc, scan_load<S, A>(x + r * os + i * ns));
    acc = row_reduce(acc, [](A a, A c) { return combine<kProd>(a, c); }, smem, false);
    if (threadIdx.x == 0) total[b] = acc;
  }
}

// Second launch, one thread per row: the segment totals of the row become the carries into
// each segment (an exclusive scan, in segment order, in place).
template <class A, bool kProd>
__global__ void scan_segment_carries_kernel(A* __restrict__ total, int64_t rows, int64_t segs) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  A running = kProd ? A(1) : A(0);
  for (int64_t s = 0; s < segs; ++s) {
    const A v = total[r * segs + s];
    total[r * segs + s] = running;
    running = combine<kProd>(running, v);
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
  if (K == 1 && O < kFewRows && N >= 4 * kScanSegment) {
    using A = scan_acc_t<S>;
    const int64_t segs = ceil_div(N, kScanSegment), blocks = O * segs;
    Tensor carries = detail::make_tensor({blocks * int64_t(sizeof(A))}, DType::u8, in.device());
    A* carry = static_cast<A*>(carries.data_ptr());
    const unsigned grid = unsigned(std::min(blocks, kMaxGrid));
    ::ember::cuda::launch_kernel(scan_segment_totals_kernel<S, kProd>, grid, kScanThreads, 0, on.stream,
        x, O, os, N, ns, kScanSegment, segs, carry);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(scan_segment_carries_kernel<A, kProd>, unsigned(ceil_div(O, int64_t(32))), 32, 0,
                                 on.stream, carry, O, segs);
    EMBER_CUDA_CHECK_LAUNCH();
    ::ember::cuda::launch_kernel(scan_rows_kernel<S, kProd>, grid, kScanThreads, 0, on.stream,
        x, O, os, N, ns, y, kScanSegment, segs, static_cast<const A*>(carry));
  } else if (K == 1) {
    int threads = kScanThreads;
    while (threads > 32 && threads / 2 >= N) threads /= 2;
    ::ember::cuda::launch_kernel(scan_rows_kernel<S, kProd>, unsigned(std::min(O, kMaxGrid)), threads, 0, on.stream,
        x, O, os, N, ns, y, N, int64_t(1), static_cast<const scan_acc_t<S>*>(nullptr));
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
