// CUDA driver of the indexing/joining family (preconditions in ops/kernels/index.h; the CPU
// twin is ops/cpu/index.cpp, whose semantics this file follows element for element).
//
// Invariants:
// - Every launch goes to the thread's current stream of the tensors' device
//   (ember::cuda::detail::current_stream_handle) and is followed by a last-error check.
// - No floating-point atomics anywhere: accumulating kernels are deterministic.
//   index_add (and so embedding's backward) and scatter_add follow Note [ordered index sums]
//   below: sources sorted by destination (a stable radix sort keeps them in source order), each
//   destination summed in that order, long runs in fixed chunks; for runs of at most kChunk
//   sources that is exactly the CPU's order, so f32/f64 results are bit-identical with it.
// - Index values are checked on the device (Note [deferred device checks],
//   core/cuda/include/ember/cuda/device_checks.h): a kernel that meets an out-of-range value
//   skips it (never reads or writes out of bounds) and records it; the IndexError, with the
//   CPU's message, is raised at the next host synchronization (or at once under
//   cuda::set_sync_checks(true)). No op here waits for the device.
// - The dropout mask follows Note [dropout Philox layout] (ops/cpu/index.cpp): thread c
//   draws counter offset + c and writes elements 4c .. 4c + 3 with the CPU's comparison, so
//   CPU and CUDA masks are bit-identical for the same generator state.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "ember/cuda/launch.h"
#include "ember/cuda/device_checks.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/elementwise.h"
#include "kernels/index.h"
#include "cub_scratch.cuh"
#include "loops.cuh"

namespace ember::ops::cuda {

namespace {

// ---- launch helpers ----

unsigned blocks_for(int64_t n, int threads = kThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t(1) << 16));
}

int64_t prod(const Shape& s, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

template <class F>
void visit_index(DType t, F&& f) {
  if (t == DType::i32) f(int32_t{});
  else f(int64_t{});
}

// Calls f(U{}) with U an unsigned integer of `bytes` bytes: kernels that only move elements
// (gather, tril/triu) are instantiated once per element size, not per dtype.
template <class F>
void visit_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

// ---- index validation ----

// The device side of the CPU's IndexCheck: kernels report a bad index into site(); done()
// after the launches raises at once only in synchronous-check mode.
class IndexCheck {
 public:
  IndexCheck(Device device, cudaStream_t stream, const char* op, int64_t dim, int64_t size)
      : site_(ember::cuda::detail::fault_site(device.index, ember::cuda::FaultKind::index_out_of_range, op, dim,
                                              size)),
        stream_(stream) {}
  const ember::cuda::FaultSite& site() const { return site_; }
  void done() const { ember::cuda::detail::after_checked_launch(stream_); }

 private:
  ember::cuda::FaultSite site_;
  cudaStream_t stream_;
};

// ---- strided N-d offsets (gather, scatter_add, tril/triu) ----

// Element strides of N operands over up to kMaxDims dims; offsets of a linear index are
// found by div/mod from the last dim.
template <int N>
struct Strides {
  int nd = 0;
  int64_t sizes[kMaxDims];
  int64_t st[N][kMaxDims];
};

template <int N>
Strides<N> make_strides(const char* op, const Shape& sizes, const std::array<const Shape*, N>& strides,
                        int64_t skip_dim) {
  Strides<N> s;
  EMBER_CHECK(int64_t(sizes.size()) <= kMaxDims, ShapeError, "[", op, "] tensors of ",
              int64_t(sizes.size()), " dims exceed the CUDA limit of ", kMaxDims);
  for (int64_t d = 0; d < int64_t(sizes.size()); ++d) {
    if (d == skip_dim) continue;
    s.sizes[s.nd] = sizes[d];
    for (int k = 0; k < N; ++k) s.st[k][s.nd] = (*strides[k])[d];
    ++s.nd;
  }
  return s;
}

template <int N>
__device__ __forceinline__ void offsets_of(const Strides<N>& s, int64_t i, int64_t off[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = s.nd - 1; d >= 0; --d) {
    const int64_t idx = i % s.sizes[d];
    i /= s.sizes[d];
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * s.st[k][d];
  }
}

// ---- cat ----

// A same-dtype contiguous input: `outer` rows of row_bytes, each written at offset_bytes
// within an out row, copied in units of `unit` bytes (the widest that divides every size and
// aligns every address involved).
struct CatPiece {
  const char* src;
  int64_t row_bytes;
  int64_t offset_bytes;
  int unit;
};

constexpr int kCatMaxPieces = 64;  // the table stays a few KiB of kernel parameters

struct CatTable {
  char* out;
  int64_t out_row_bytes;
  int64_t outer;
  CatPiece piece[kCatMaxPieces];
};

template <class U>
__device__ __forceinline__ void cat_copy(const CatPiece& p, char* out, int64_t out_row_bytes, int64_t outer) {
  const int64_t units = p.row_bytes / int64_t(sizeof(U)), total = outer * units;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = i / units, u = i % units;
    const U v = reinterpret_cast<const U*>(p.src + o * p.row_bytes)[u];
    reinterpret_cast<U*>(out + o * out_row_bytes + p.offset_bytes)[u] = v;
  }
}

// blockIdx.y picks the piece, so one launch copies every piece of the table.
__global__ void cat_fwd_kernel(const __grid_constant__ CatTable t) {
  const CatPiece& p = t.piece[blockIdx.y];
  switch (p.unit) {
    case 16: cat_copy<uint4>(p, t.out, t.out_row_bytes, t.outer); break;
    case 8: cat_copy<uint2>(p, t.out, t.out_row_bytes, t.outer); break;
    case 4: cat_copy<uint32_t>(p, t.out, t.out_row_bytes, t.outer); break;
    case 2: cat_copy<uint16_t>(p, t.out, t.out_row_bytes, t.outer); break;
    default: cat_copy<uint8_t>(p, t.out, t.out_row_bytes, t.outer); break;
  }
}

int copy_unit(std::initializer_list<uint64_t> values) {
  for (int u : {16, 8, 4, 2}) {
    bool ok = true;
    for (uint64_t v : values) ok = ok && v % uint64_t(u) == 0;
    if (ok) return u;
  }
  return 1;
}

// ---- index_select ----

template <class U>
__global__ void index_select_fwd_kernel(const U* x, const void* index, bool i32, U* out, int64_t n,
                                        int64_t size, int64_t units, int64_t total, const ember::cuda::FaultSite fault) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t u = t % units, k = t / units, o = k / n, j = k % n;
    const int64_t v = i32 ? int64_t(static_cast<const int32_t*>(index)[j]) : static_cast<const int64_t*>(index)[j];
    if (v < 0 || v >= size) {
      if (u == 0) fault.report(v);
      continue;
    }
    out[t] = x[(o * size + v) * units + u];
  }
}

// ---- ordered sums into destinations: index_add, scatter_add ----
//
// Note [ordered index sums]: index_add (so embedding's backward) and scatter_add add many
// sources into fewer destinations. Without atomics, and in a fixed order:
// 1. each source gets a key, its destination (`sentinel` for a bad index, which is reported
//    and then skipped), and its position; a stable radix sort by key keeps the positions of a
//    destination in ascending order, the CPU's order;
// 2. runs of equal keys are counted (a run-length encoding: each run's key and length) and
//    their starts found (an exclusive scan of the lengths); with 64-bit positions, where CUB's
//    encoding (int counts) cannot go, head flags and an inclusive scan numbering the runs;
// 3. a run of at most kChunk sources is summed by one thread per column, starting from the
//    destination's old value, exactly in the CPU's order (bit-identical for f32/f64; scatter_add
//    also rounds after every add in 16-bit dtypes, as the CPU; index_add, so embedding's
//    backward, sums 16-bit values in f32 and rounds once, more accurate than the CPU's
//    rounding after every add);
// 4. a longer run (a padding token in a language-model batch, a 1-d scatter into few bins) is
//    cut into chunks of kChunk sources, each summed by its own thread into a compute-type
//    partial, and the partials are added to the old value in order. That order is fixed, so
//    the result is identical from run to run, but it rounds differently from the CPU's
//    one-by-one sum. The work per thread is at most kChunk adds plus one add per chunk of its
//    run, instead of the whole run.
// Everything is stream-ordered: no host synchronization, legal under graph capture. Keys and
// positions are 32-bit where every key and position fits (destinations and sources below
// 2^32 and 2^31: nearly always), 64-bit otherwise; each scratch array is of that width. Scratch:
// about 24 bytes per source at 32 bits, 48 at 64 (keys and positions sorted, the runs' lengths,
// starts and chunk counts), freed after the op; the radix sort covers only the bits a key can
// have.
constexpr int64_t kChunk = 256;

// Validates index values and writes the sort's input pairs (key: the value, as unsigned so
// CUB sorts plain bits; value: the position j). A bad value is reported and keyed `size`, one
// past the last destination: it sorts last and is skipped.
template <class I, class K, class P>
__global__ void index_keys_kernel(const I* index, int64_t n, int64_t size, K* keys, P* pos,
                                  const ember::cuda::FaultSite fault) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = int64_t(index[j]);
    const bool bad = v < 0 || v >= size;
    if (bad) fault.report(v);
    if (keys) {
      keys[j] = bad ? K(size) : K(v);
      pos[j] = P(j);
    }
  }
}

// scatter_add's pairs: source t = line * len + j gets key line * size + index[line, j] (or
// the sentinel lines * size) and position t.
template <class I, class K, class P>
__global__ void scatter_keys_kernel(const I* index, Strides<3> s, int64_t len, int64_t is_dim, int64_t size,
                                    int64_t n, K* keys, P* pos, const ember::cuda::FaultSite fault) {
  const K sentinel = K(n / len) * K(size);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t line = t / len, j = t % len;
    int64_t off[3];
    offsets_of<3>(s, line, off);
    const int64_t v = int64_t(index[off[1] + j * is_dim]);
    const bool bad = v < 0 || v >= size;
    if (bad) fault.report(v);
    keys[t] = bad ? sentinel : K(line) * K(size) + K(v);
    pos[t] = P(t);
  }
}

// Where index_add's source (position, column) comes from and its destination goes; a column is
// (o, c) of outer x inner.
template <class S>
struct IndexAddAccess {
  S* out;
  const S* src;
  int64_t n, size, inner;
  __device__ __forceinline__ S* dest(unsigned long long key, int64_t col) const {
    return out + ((col / inner) * size + int64_t(key)) * inner + col % inner;
  }
  __device__ __forceinline__ S source(int64_t pos, int64_t col) const {
    return src[((col / inner) * n + pos) * inner + col % inner];
  }
};

// scatter_add's: one column; keys and positions carry the line.
template <class S>
struct ScatterAddAccess {
  S* out;
  const S* src;
  Strides<3> s;
  int64_t len, size, os_dim, ss_dim;
  __device__ __forceinline__ S* dest(unsigned long long key, int64_t) const {
    int64_t off[3];
    offsets_of<3>(s, int64_t(key / (unsigned long long)size), off);
    return out + off[0] + int64_t(key % (unsigned long long)size) * os_dim;
  }
  __device__ __forceinline__ S source(int64_t pos, int64_t) const {
    int64_t off[3];
    offsets_of<3>(s, pos / len, off);
    return src[off[2] + (pos % len) * ss_dim];
  }
};

template <class K, class P>
__global__ void run_heads_kernel(const K* keys, int64_t n, P* head) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x)
    head[k] = k == 0 || keys[k] != keys[k - 1] ? 1 : 0;
}

// run_id = inclusive sum of the heads (1-based): run r starts at start[r] with key run_key[r];
// start[runs] = n.
template <class K, class P>
__global__ void run_starts_kernel(const K* keys, const P* head, const P* run_id, int64_t n, P* start, K* run_key,
                                  P* runs) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    if (head[k]) {
      start[run_id[k] - 1] = P(k);
      run_key[run_id[k] - 1] = keys[k];
    }
    if (k == n - 1) {
      start[run_id[k]] = P(n);
      *runs = run_id[k];
    }
  }
}

// Chunks of each run longer than kChunk (0 for the others and past the last run).
template <class P>
__global__ void run_chunks_kernel(const P* start, const P* runs, int64_t n, P* chunks) {
  const int64_t R = *runs;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t len = r < R ? int64_t(start[r + 1]) - int64_t(start[r]) : 0;
    chunks[r] = P(len > kChunk ? (len + kChunk - 1) / kChunk : 0);
  }
}

// Thread (q, col) sums chunk q of its run into partial[q, col]. The number of chunks is read
// on the device (the grid is sized by its bound, 2n / kChunk + 1; the loop stops at the
// actual count, so idle threads cost nothing).
template <class S, class Access, class P>
__global__ void run_partials_kernel(Access a, const P* pos, const P* start, const P* runs, const P* chunks,
                                    const P* chunk_at, int64_t n, int64_t cols, compute_t<S>* partial) {
  using C = compute_t<S>;
  const int64_t R = *runs, total = int64_t(chunk_at[n - 1]) + int64_t(chunks[n - 1]);
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total * cols;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t q = t / cols, col = t % cols;
    // The run holding chunk q: the last r < R with chunk_at[r] <= q (runs without chunks
    // share their successor's chunk_at, so the last one is the run that has q).
    int64_t lo = 0, hi = R;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (chunk_at[mid] <= q) lo = mid;
      else hi = mid;
    }
    const int64_t k0 = int64_t(start[lo]) + (q - int64_t(chunk_at[lo])) * kChunk;
    const int64_t k1 = min(k0 + kChunk, int64_t(start[lo + 1]));
    C acc = C(0);
    for (int64_t k = k0; k < k1; ++k) acc = C(acc + C(a.source(pos[k], col)));
    partial[q * cols + col] = acc;
  }
}

// Thread (r, col) owns destination (key of run r, col): the old value plus the run's sources in
// order (short runs), or plus its chunks' partials in order (long runs).
template <class S, bool kRoundEach, class Access, class K, class P>
__global__ void run_sums_kernel(Access a, const K* run_key, const P* pos, const P* start, const P* runs,
                                const P* chunks, const P* chunk_at, int64_t cols, K sentinel,
                                const compute_t<S>* partial) {
  using C = compute_t<S>;
  const int64_t R = *runs;  // the grid is sized for n runs; the loop stops at the actual count
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < R * cols;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / cols, col = t % cols;
    const K key = run_key[r];
    if (key == sentinel) continue;
    S* d = a.dest(key, col);
    if (chunks[r] == 0) {
      if constexpr (kRoundEach) {
        S o = *d;
        for (int64_t k = start[r]; k < start[r + 1]; ++k) o = S(C(C(o) + C(a.source(pos[k], col))));
        *d = o;
      } else {
        C acc = C(*d);
        for (int64_t k = start[r]; k < start[r + 1]; ++k) acc = C(acc + C(a.source(pos[k], col)));
        *d = S(acc);
      }
    } else {
      C acc = C(*d);
      for (int64_t i = 0; i < int64_t(chunks[r]); ++i) acc = C(acc + partial[(int64_t(chunk_at[r]) + i) * cols + col]);
      *d = S(acc);
    }
  }
}

// Note [ordered index sums], host side, with keys K and positions P: `make_keys(keys, positions)`
// launches the op's key kernel for the n sources; keys lie in [0, sentinel].
template <class S, bool kRoundEach, class K, class P, class Access, class MakeKeys>
void ordered_sums_as(Device device, cudaStream_t stream, int64_t n, uint64_t sentinel, int64_t cols,
                     const Access& a, MakeKeys&& make_keys) {
  using C = compute_t<S>;
  auto scratch = [&](auto* type, int64_t count) {
    using T = std::remove_pointer_t<decltype(type)>;
    Tensor t = detail::make_tensor({std::max<int64_t>(count, 1) * int64_t(sizeof(T))}, DType::u8, device);
    return std::make_pair(t, static_cast<T*>(t.data_ptr()));
  };
  auto [keys_t, keys] = scratch((K*)nullptr, n);
  auto [pos_t, pos] = scratch((P*)nullptr, n);
  {
    auto [keys_in_t, keys_in] = scratch((K*)nullptr, n);
    auto [pos_in_t, pos_in] = scratch((P*)nullptr, n);
    make_keys(keys_in, pos_in);
    // A stable radix sort over just the bits a key can have.
    int end_bit = 1;
    while (end_bit < int(8 * sizeof(K)) && (uint64_t(1) << end_bit) <= sentinel) ++end_bit;
    cub_with_scratch(device, [&](void* temp, size_t& bytes) {
      return cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys, pos_in, pos, n, 0, end_bit, stream);
    });
  }  // the unsorted pairs go back to the stream's pool, reusable by the launches below
  // Runs: each one's key and start (start[runs] = n).
  auto [run_key_t, run_key] = scratch((K*)nullptr, n);
  auto [start_t, start] = scratch((P*)nullptr, n + 1);
  auto [runs_t, runs] = scratch((P*)nullptr, 1);
  if constexpr (sizeof(P) == 4) {
    // Run-length encoding (CUB counts its items in int: n < 2^31 here), the lengths past the
    // last run left 0, and starts by an exclusive scan over n + 1 lengths.
    auto [length_t, length] = scratch((P*)nullptr, n + 1);
    EMBER_CUDA_CHECK(cudaMemsetAsync(length, 0, size_t(n + 1) * sizeof(P), stream));
    cub_with_scratch(device, [&](void* temp, size_t& bytes) {
      return cub::DeviceRunLengthEncode::Encode(temp, bytes, keys, run_key, length, runs, int(n), stream);
    });
    cub_with_scratch(device, [&](void* temp, size_t& bytes) {
      return cub::DeviceScan::ExclusiveSum(temp, bytes, length, start, n + 1, stream);
    });
  } else {
    // 64-bit counts: head flags, an inclusive scan numbering the runs, each head writing its
    // run's start and key.
    auto [head_t, head] = scratch((P*)nullptr, n);
    auto [run_id_t, run_id] = scratch((P*)nullptr, n);
    ::ember::cuda::launch_kernel(run_heads_kernel<K, P>, blocks_for(n), kThreads, 0, stream, keys, n, head);
    EMBER_CUDA_CHECK_LAUNCH();
    cub_with_scratch(device, [&](void* temp, size_t& bytes) {
      return cub::DeviceScan::InclusiveSum(temp, bytes, head, run_id, n, stream);
    });
    ::ember::cuda::launch_kernel(run_starts_kernel<K, P>, blocks_for(n), kThreads, 0, stream,
        keys, head, run_id, n, start, run_key, runs);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  auto [chunks_t, chunks] = scratch((P*)nullptr, n);
  auto [chunk_at_t, chunk_at] = scratch((P*)nullptr, n);
  ::ember::cuda::launch_kernel(run_chunks_kernel<P>, blocks_for(n), kThreads, 0, stream, start, runs, n, chunks);
  EMBER_CUDA_CHECK_LAUNCH();
  cub_with_scratch(device, [&](void* temp, size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(temp, bytes, chunks, chunk_at, n, stream);
  });
  // Only runs longer than kChunk have chunks, each covering more than kChunk / 2 sources on
  // average: at most 2n / kChunk of them.
  const int64_t chunk_bound = 2 * (n / kChunk) + 1;
  Tensor partial = detail::make_tensor({chunk_bound * cols}, dtype_v<C>, device);
  ::ember::cuda::launch_kernel(run_partials_kernel<S, Access, P>, blocks_for(chunk_bound * cols), kThreads, 0,
                               stream, a, pos, start, runs, chunks, chunk_at, n, cols,
                               static_cast<C*>(partial.data_ptr()));
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(run_sums_kernel<S, kRoundEach, Access, K, P>, blocks_for(n * cols), kThreads, 0,
                               stream, a, run_key, pos, start, runs, chunks, chunk_at, cols, K(sentinel),
                               static_cast<const C*>(partial.data_ptr()));
  EMBER_CUDA_CHECK_LAUNCH();
}

// 32-bit keys and positions where they hold every key (sentinel included) and position.
template <class S, bool kRoundEach, class Access, class MakeKeys>
void ordered_sums(Device device, cudaStream_t stream, int64_t n, uint64_t sentinel, int64_t cols, const Access& a,
                  MakeKeys&& make_keys) {
  if (sentinel <= UINT32_MAX && n < (int64_t(1) << 31))
    ordered_sums_as<S, kRoundEach, uint32_t, int32_t>(device, stream, n, sentinel, cols, a, make_keys);
  else
    ordered_sums_as<S, kRoundEach, unsigned long long, int64_t>(device, stream, n, sentinel, cols, a, make_keys);
}

// ---- gather / scatter_add ----

// Operands: 0 out, 1 index, 2 x (x's stride along dim is xs_dim; dim is not in `s`, whose
// dims are index's; `len` is index.size(dim)).
template <class U, class I>
__global__ void gather_fwd_kernel(U* out, const I* index, const U* x, Strides<3> s, int64_t len, int64_t os_dim,
                                  int64_t is_dim, int64_t xs_dim, int64_t size, int64_t total, const ember::cuda::FaultSite fault) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t % len;
    int64_t off[3];
    offsets_of<3>(s, t / len, off);
    const int64_t v = int64_t(index[off[1] + j * is_dim]);
    if (v < 0 || v >= size) {
      fault.report(v);
      continue;
    }
    out[off[0] + j * os_dim] = x[off[2] + v * xs_dim];
  }
}

// ---- tril / triu ----

// out is contiguous; x's element t is found through its strides. Kept: tril j - i <=
// diagonal, triu j - i >= diagonal; the rest is the all-zero bit pattern (0 for every dtype).
template <class U>
__global__ void tri_fwd_kernel(const U* x, U* out, Strides<1> s, int64_t rows, int64_t cols, int64_t diagonal,
                               bool upper, int64_t total) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t % cols, i = (t / cols) % rows;
    const bool keep = upper ? j - i >= diagonal : j - i <= diagonal;
    U v = U(0);
    if (keep) {
      int64_t off[1];
      offsets_of<1>(s, t, off);
      v = x[off[0]];
    }
    out[t] = v;
  }
}

// ---- dropout ----

__global__ void dropout_mask_fwd_kernel(bool* mask, int64_t n, int64_t counters, Generator::State s, double p) {
  for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < counters;
       c += int64_t(gridDim.x) * blockDim.x) {
    uint32_t w[4];
    Philox::draw(s.seed, s.offset + uint64_t(c), w);
    const int64_t base = 4 * c, count = min(int64_t(4), n - base);
    for (int64_t k = 0; k < count; ++k) mask[base + k] = double(Philox::uniform(w[k])) >= p;
  }
}

template <class S>
struct MaskedScaleOp {
  compute_t<S> keep;
  __device__ void operator()(char** p) const {
    using C = compute_t<S>;
    const bool m = *reinterpret_cast<const bool*>(p[2]);
    // Multiplying by 0 (not selecting) keeps NaN and inf visible, as the CPU does.
    *reinterpret_cast<S*>(p[0]) = S(C(C(*reinterpret_cast<const S*>(p[1])) * (m ? keep : C(0))));
  }
};

}  // namespace

void cat_kernel(const TensorList& inputs, int64_t dim, const Tensor& out) {
  const Shape& os = out.sizes();
  const int64_t outer = prod(os, 0, dim), inner = prod(os, dim + 1, int64_t(os.size()));
  const uint64_t isz = out.element_size();
  const auto on = ember::cuda::detail::on_device(out.device());
  cudaStream_t stream = on.stream;
  CatTable table{};
  table.out = static_cast<char*>(out.data_ptr());
  table.out_row_bytes = int64_t(uint64_t(os[dim] * inner) * isz);
  table.outer = outer;
  int pieces = 0;
  int64_t widest = 0;  // most units of one piece in this table
  auto flush = [&] {
    if (pieces == 0) return;
    const dim3 grid(blocks_for(widest), unsigned(pieces));
    ::ember::cuda::launch_kernel(cat_fwd_kernel, grid, kThreads, 0, stream, table);
    EMBER_CUDA_CHECK_LAUNCH();
    pieces = 0;
    widest = 0;
  };
  // Same-dtype contiguous inputs go through the one table-driven launch; the others (a dtype
  // to convert, a strided layout) through the converting strided copy into their slice.
  int64_t at = 0;
  for (const Tensor& t : inputs) {
    const int64_t len = t.sizes()[dim];
    if (t.numel() > 0) {
      if (t.dtype() == out.dtype() && t.is_contiguous()) {
        CatPiece& p = table.piece[pieces++];
        p.src = static_cast<const char*>(t.data_ptr());
        p.row_bytes = int64_t(uint64_t(len * inner) * isz);
        p.offset_bytes = int64_t(uint64_t(at * inner) * isz);
        p.unit = copy_unit({uint64_t(p.row_bytes), uint64_t(p.offset_bytes), uint64_t(table.out_row_bytes),
                            uint64_t(reinterpret_cast<uintptr_t>(p.src)),
                            uint64_t(reinterpret_cast<uintptr_t>(table.out))});
        widest = std::max(widest, outer * (p.row_bytes / p.unit));
        if (pieces == kCatMaxPieces) flush();
      } else {
        Tensor slice = ember::detail::make_view(out, t.sizes(), out.strides(),
                                                out.storage_offset() + at * out.strides()[dim]);
        copy_kernel(slice, t);
      }
    }
    at += len;
  }
  flush();
}

void index_select_kernel(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         const Tensor& out) {
  const Shape& xs = x.sizes();
  const int64_t outer = prod(xs, 0, dim), inner = prod(xs, dim + 1, int64_t(xs.size()));
  const int64_t size = xs[dim], n = index.numel();
  if (n == 0) return;
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  const IndexCheck check(x.device(), stream, op, dim, size);
  if (outer == 0 || inner == 0) {  // nothing to copy, but bad indices are still errors
    visit_index(index.dtype(), [&](auto tag) {
      using I = decltype(tag);
      ::ember::cuda::launch_kernel(index_keys_kernel<I, uint32_t, int32_t>, blocks_for(n), kThreads, 0, stream,
          static_cast<const I*>(index.data_ptr()), n, size, nullptr, nullptr, check.site());
    });
    EMBER_CUDA_CHECK_LAUNCH();
    check.done();
    return;
  }
  // Rows of inner elements move as units of the widest word that divides and aligns them.
  const uint64_t row_bytes = uint64_t(inner) * x.element_size();
  const int unit = copy_unit({row_bytes, uint64_t(reinterpret_cast<uintptr_t>(x.data_ptr())),
                              uint64_t(reinterpret_cast<uintptr_t>(out.data_ptr()))});
  const int64_t units = int64_t(row_bytes) / unit, total = outer * n * units;
  auto launch = [&](auto utag) {
    using U = decltype(utag);
    ::ember::cuda::launch_kernel(index_select_fwd_kernel<U>, blocks_for(total), kThreads, 0, stream,
        static_cast<const U*>(x.data_ptr()), index.data_ptr(), index.dtype() == DType::i32,
        static_cast<U*>(out.data_ptr()), n, size, units, total, check.site());
  };
  switch (unit) {
    case 16: launch(uint4{}); break;
    case 8: launch(uint2{}); break;
    case 4: launch(uint32_t{}); break;
    case 2: launch(uint16_t{}); break;
    default: launch(uint8_t{}); break;
  }
  EMBER_CUDA_CHECK_LAUNCH();
  check.done();
}

void index_add_kernel(const char* op, const Tensor& out, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  const Shape& os = out.sizes();
  const int64_t outer = prod(os, 0, dim), inner = prod(os, dim + 1, int64_t(os.size()));
  const int64_t size = os[dim], n = index.numel();
  if (out.dtype() == DType::b8) throw DTypeError(str("[", op, "] is not defined for bool tensors"));
  if (n == 0) return;
  const Device device = out.device();
  const auto on = ember::cuda::detail::on_device(device);
  cudaStream_t stream = on.stream;
  const IndexCheck check(device, stream, op, dim, size);
  auto keys = [&](auto* kin, auto* pin) {
    using K = std::remove_pointer_t<decltype(kin)>;
    using P = std::remove_pointer_t<decltype(pin)>;
    visit_index(index.dtype(), [&](auto tag) {
      using I = decltype(tag);
      ::ember::cuda::launch_kernel(index_keys_kernel<I, K, P>, blocks_for(n), kThreads, 0, stream,
          static_cast<const I*>(index.data_ptr()), n, size, kin, pin, check.site());
    });
    EMBER_CUDA_CHECK_LAUNCH();
  };
  if (outer == 0 || inner == 0) {  // nothing to add, but bad indices are still errors
    keys(static_cast<uint32_t*>(nullptr), static_cast<int32_t*>(nullptr));
    check.done();
    return;
  }
  visit_dtype(out.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    if constexpr (!std::is_same_v<S, bool>) {
      const IndexAddAccess<S> a{static_cast<S*>(out.data_ptr()), static_cast<const S*>(src.data_ptr()), n, size,
                                inner};
      ordered_sums<S, false>(device, stream, n, uint64_t(size), outer * inner, a, keys);
    }
  });
  check.done();
}

void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t size = x.sizes()[dim], len = index.sizes()[dim];
  const int64_t total = index.numel();
  if (total == 0) return;
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  const IndexCheck check(x.device(), stream, "gather", dim, size);
  const Strides<3> s =
      make_strides<3>("gather", index.sizes(), {&out.strides(), &index.strides(), &x.strides()}, dim);
  visit_bits(x.element_size(), [&](auto utag) {
    using U = decltype(utag);
    visit_index(index.dtype(), [&](auto itag) {
      using I = decltype(itag);
      ::ember::cuda::launch_kernel(gather_fwd_kernel<U, I>, blocks_for(total), kThreads, 0, stream,
          static_cast<U*>(out.data_ptr()), static_cast<const I*>(index.data_ptr()),
          static_cast<const U*>(x.data_ptr()), s, len, out.strides()[dim], index.strides()[dim],
          x.strides()[dim], size, total, check.site());
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
  check.done();
}

void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t size = out.sizes()[dim], len = index.sizes()[dim];
  if (out.dtype() == DType::b8) throw DTypeError("[scatter_add] is not defined for bool tensors");
  const int64_t n = index.numel();
  if (n == 0) return;
  const Device device = out.device();
  const auto on = ember::cuda::detail::on_device(device);
  cudaStream_t stream = on.stream;
  const IndexCheck check(device, stream, "scatter_add", dim, size);
  const int64_t lines = n / len;
  const Strides<3> s =
      make_strides<3>("scatter_add", index.sizes(), {&out.strides(), &index.strides(), &src.strides()}, dim);
  // Destination key of source (line, j): line * size + index value (sentinel lines * size).
  auto keys = [&](auto* kin, auto* pin) {
    using K = std::remove_pointer_t<decltype(kin)>;
    using P = std::remove_pointer_t<decltype(pin)>;
    visit_index(index.dtype(), [&](auto itag) {
      using I = decltype(itag);
      ::ember::cuda::launch_kernel(scatter_keys_kernel<I, K, P>, blocks_for(n), kThreads, 0, stream,
          static_cast<const I*>(index.data_ptr()), s, len, index.strides()[dim], size, n, kin, pin, check.site());
    });
    EMBER_CUDA_CHECK_LAUNCH();
  };
  visit_dtype(out.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    if constexpr (!std::is_same_v<S, bool>) {
      const ScatterAddAccess<S> a{static_cast<S*>(out.data_ptr()), static_cast<const S*>(src.data_ptr()), s, len,
                                  size, out.strides()[dim], src.strides()[dim]};
      // The CPU rounds scatter_add's sum after every add: short runs do the same (round_each).
      ordered_sums<S, true>(device, stream, n, uint64_t(lines) * uint64_t(size), 1, a, keys);
    }
  });
  check.done();
}

void tri_kernel(const Tensor& x, const Tensor& out, int64_t diagonal, bool upper) {
  const int64_t nd = x.dim(), total = out.numel();
  if (total == 0) return;
  const int64_t rows = x.sizes()[nd - 2], cols = x.sizes()[nd - 1];
  const auto on = ember::cuda::detail::on_device(x.device());
  cudaStream_t stream = on.stream;
  const Strides<1> s = make_strides<1>(upper ? "triu" : "tril", x.sizes(), {&x.strides()}, -1);
  visit_bits(x.element_size(), [&](auto utag) {
    using U = decltype(utag);
    ::ember::cuda::launch_kernel(tri_fwd_kernel<U>, blocks_for(total), kThreads, 0, stream,
        static_cast<const U*>(x.data_ptr()), static_cast<U*>(out.data_ptr()), s, rows, cols, diagonal, upper,
        total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void dropout_mask_kernel(const Tensor& mask, Generator::State s, double p) {
  const int64_t n = mask.numel(), counters = int64_t(dropout_counters(n));
  if (n == 0) return;
  const auto on = ember::cuda::detail::on_device(mask.device());
  cudaStream_t stream = on.stream;
  ::ember::cuda::launch_kernel(dropout_mask_fwd_kernel, blocks_for(counters), kThreads, 0, stream,
      static_cast<bool*>(mask.data_ptr()), n,
                                                                        counters, s, p);
  EMBER_CUDA_CHECK_LAUNCH();
}

void masked_scale_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    launch_elementwise<3>({&out, &x, &mask}, MaskedScaleOp<S>{compute_t<S>(scale)});
  });
}

}  // namespace ember::ops::cuda
