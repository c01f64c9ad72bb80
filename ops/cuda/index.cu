// CUDA driver of the indexing/joining family (preconditions in ops/kernels/index.h; the CPU
// twin is ops/cpu/index.cpp, whose semantics this file follows element for element).
//
// Invariants:
// - Every launch goes to the thread's current stream of the tensors' device
//   (ember::cuda::detail::current_stream_handle) and is followed by a last-error check.
// - No floating-point atomics anywhere: accumulating kernels are deterministic.
//   index_add (and so embedding's backward) stable-sorts (index, j) pairs with CUB's radix
//   sort and lets one thread own each (destination row, column), adding its sources in j
//   order into a compute-type accumulator that starts from the old value and is rounded once.
//   For f32/f64 that is exactly the CPU's order, so the results are bit-identical with it.
//   scatter_add gives each line (every coordinate fixed but dim) to one thread, which adds
//   in j order exactly as the CPU does (rounding after each add, as the CPU).
// - Index values are validated on the device: a kernel that meets an out-of-range value
//   skips it (never reads or writes out of bounds) and records it in a small device buffer;
//   the host reads that buffer back (one stream synchronization per op) and throws the CPU's
//   IndexError. While the stream is being captured into a CUDA graph a synchronization is
//   not allowed, so the check is skipped there: bad indices are then ignored, not reported.
// - The dropout mask follows Note [dropout Philox layout] (ops/cpu/index.cpp): thread c
//   draws counter offset + c and writes elements 4c .. 4c + 3 with the CPU's comparison, so
//   CPU and CUDA masks are bit-identical for the same generator state.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <vector>

#include "ember/cuda/stream_handle.h"
#include "kernels/elementwise.h"
#include "kernels/index.h"
#include "loops.cuh"

namespace ember::ops::cuda {

namespace {

// ---- launch helpers ----

cudaStream_t stream_for(Device device) {
  EMBER_CUDA_CHECK(cudaSetDevice(device.index));
  return ember::cuda::detail::current_stream_handle(device.index);
}

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

struct IndexFault {
  unsigned long long hit;  // 0 until some thread meets a bad index
  long long value;         // the bad value of the thread that set hit
};

__device__ __forceinline__ void report_bad_index(IndexFault* f, int64_t v) {
  if (atomicCAS(&f->hit, 0ull, 1ull) == 0ull) f->value = v;
}

// The device side of the CPU's IndexCheck: a zeroed IndexFault on the stream, read back by
// throw_if_failed after the kernels that may report into it.
class DeviceIndexCheck {
 public:
  DeviceIndexCheck(Device device, cudaStream_t stream)
      : buf_(detail::make_tensor({2}, DType::i64, device)), stream_(stream) {
    EMBER_CUDA_CHECK(cudaMemsetAsync(buf_.data_ptr(), 0, sizeof(IndexFault), stream_));
  }
  IndexFault* get() const { return static_cast<IndexFault*>(buf_.data_ptr()); }
  void throw_if_failed(const char* op, int64_t dim, int64_t size) const {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    EMBER_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    if (capture != cudaStreamCaptureStatusNone) return;  // see the file-top invariants
    IndexFault host{};
    EMBER_CUDA_CHECK(cudaMemcpyAsync(&host, get(), sizeof(host), cudaMemcpyDeviceToHost, stream_));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (host.hit)
      throw IndexError(str("[", op, "] index ", int64_t(host.value), " is out of range for dim ",
                           dim, " of size ", size));
  }

 private:
  Tensor buf_;
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
                                        int64_t size, int64_t units, int64_t total, IndexFault* fault) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t u = t % units, k = t / units, o = k / n, j = k % n;
    const int64_t v = i32 ? int64_t(static_cast<const int32_t*>(index)[j]) : static_cast<const int64_t*>(index)[j];
    if (v < 0 || v >= size) {
      if (u == 0) report_bad_index(fault, v);
      continue;
    }
    out[t] = x[(o * size + v) * units + u];
  }
}

// Validates index values and writes the sort's input pairs (key: the value, as unsigned so
// CUB sorts plain bits; value: the position j). Bad values are reported and keyed 0.
template <class I>
__global__ void index_keys_kernel(const I* index, int64_t n, int64_t size, unsigned long long* keys,
                                  int64_t* pos, IndexFault* fault) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = int64_t(index[j]);
    const bool bad = v < 0 || v >= size;
    if (bad) report_bad_index(fault, v);
    if (keys) {
      keys[j] = bad ? 0ull : (unsigned long long)v;
      pos[j] = j;
    }
  }
}

// ---- index_add ----

// Thread t = ((o * n) + k) * inner + c; only the first k of each run of equal sorted keys
// works: it owns out[o, key, c] and adds src[o, pos[k'], c] for the run k' in ascending j.
template <class S>
__global__ void index_add_fwd_kernel(S* out, const S* src, const unsigned long long* keys, const int64_t* pos,
                                     int64_t n, int64_t size, int64_t inner, int64_t total) {
  using C = compute_t<S>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = t % inner, k = (t / inner) % n, o = t / (inner * n);
    const unsigned long long v = keys[k];
    if (k > 0 && keys[k - 1] == v) continue;
    S* dst = out + (o * size + int64_t(v)) * inner + c;
    const S* s = src + o * n * inner + c;
    C acc = C(*dst);
    for (int64_t kk = k; kk < n && keys[kk] == v; ++kk) acc = C(acc + C(s[pos[kk] * inner]));
    *dst = S(acc);
  }
}

// ---- gather / scatter_add ----

// Operands: 0 out, 1 index, 2 x (x's stride along dim is xs_dim; dim is not in `s`, whose
// dims are index's; `len` is index.size(dim)).
template <class U, class I>
__global__ void gather_fwd_kernel(U* out, const I* index, const U* x, Strides<3> s, int64_t len, int64_t os_dim,
                                  int64_t is_dim, int64_t xs_dim, int64_t size, int64_t total, IndexFault* fault) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = t % len;
    int64_t off[3];
    offsets_of<3>(s, t / len, off);
    const int64_t v = int64_t(index[off[1] + j * is_dim]);
    if (v < 0 || v >= size) {
      report_bad_index(fault, v);
      continue;
    }
    out[off[0] + j * os_dim] = x[off[2] + v * xs_dim];
  }
}

// One thread per line (all coordinates but dim): it owns its out line, so no races, and it
// adds in j order like the CPU.
template <class S, class I>
__global__ void scatter_add_fwd_kernel(S* out, const I* index, const S* src, Strides<3> s, int64_t len,
                                       int64_t os_dim, int64_t is_dim, int64_t ss_dim, int64_t size, int64_t lines,
                                       IndexFault* fault) {
  using C = compute_t<S>;
  for (int64_t line = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; line < lines;
       line += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets_of<3>(s, line, off);
    for (int64_t j = 0; j < len; ++j) {
      const int64_t v = int64_t(index[off[1] + j * is_dim]);
      if (v < 0 || v >= size) {
        report_bad_index(fault, v);
        continue;
      }
      S& o = out[off[0] + v * os_dim];
      o = S(C(C(o) + C(src[off[2] + j * ss_dim])));
    }
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
  cudaStream_t stream = stream_for(out.device());
  CatTable table{};
  table.out = static_cast<char*>(out.data_ptr());
  table.out_row_bytes = int64_t(uint64_t(os[dim] * inner) * isz);
  table.outer = outer;
  int pieces = 0;
  int64_t widest = 0;  // most units of one piece in this table
  auto flush = [&] {
    if (pieces == 0) return;
    const dim3 grid(blocks_for(widest), unsigned(pieces));
    cat_fwd_kernel<<<grid, kThreads, 0, stream>>>(table);
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
  cudaStream_t stream = stream_for(x.device());
  DeviceIndexCheck check(x.device(), stream);
  if (outer == 0 || inner == 0) {  // nothing to copy, but bad indices are still errors
    visit_index(index.dtype(), [&](auto tag) {
      using I = decltype(tag);
      index_keys_kernel<I><<<blocks_for(n), kThreads, 0, stream>>>(
          static_cast<const I*>(index.data_ptr()), n, size, nullptr, nullptr, check.get());
    });
    EMBER_CUDA_CHECK_LAUNCH();
    check.throw_if_failed(op, dim, size);
    return;
  }
  // Rows of inner elements move as units of the widest word that divides and aligns them.
  const uint64_t row_bytes = uint64_t(inner) * x.element_size();
  const int unit = copy_unit({row_bytes, uint64_t(reinterpret_cast<uintptr_t>(x.data_ptr())),
                              uint64_t(reinterpret_cast<uintptr_t>(out.data_ptr()))});
  const int64_t units = int64_t(row_bytes) / unit, total = outer * n * units;
  auto launch = [&](auto utag) {
    using U = decltype(utag);
    index_select_fwd_kernel<U><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const U*>(x.data_ptr()), index.data_ptr(), index.dtype() == DType::i32,
        static_cast<U*>(out.data_ptr()), n, size, units, total, check.get());
  };
  switch (unit) {
    case 16: launch(uint4{}); break;
    case 8: launch(uint2{}); break;
    case 4: launch(uint32_t{}); break;
    case 2: launch(uint16_t{}); break;
    default: launch(uint8_t{}); break;
  }
  EMBER_CUDA_CHECK_LAUNCH();
  check.throw_if_failed(op, dim, size);
}

void index_add_kernel(const char* op, const Tensor& out, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  const Shape& os = out.sizes();
  const int64_t outer = prod(os, 0, dim), inner = prod(os, dim + 1, int64_t(os.size()));
  const int64_t size = os[dim], n = index.numel();
  if (out.dtype() == DType::b8) throw DTypeError(str("[", op, "] is not defined for bool tensors"));
  if (n == 0) return;
  const Device device = out.device();
  cudaStream_t stream = stream_for(device);
  DeviceIndexCheck check(device, stream);
  const bool work = outer > 0 && inner > 0;
  // Sort input: (value, j) pairs, validated first so that a bad index throws before any add.
  Tensor keys_in = detail::make_tensor({work ? n : 0}, DType::i64, device);
  Tensor pos_in = detail::make_tensor({work ? n : 0}, DType::i64, device);
  auto* kin = work ? static_cast<unsigned long long*>(keys_in.data_ptr()) : nullptr;
  auto* pin = work ? static_cast<int64_t*>(pos_in.data_ptr()) : nullptr;
  visit_index(index.dtype(), [&](auto tag) {
    using I = decltype(tag);
    index_keys_kernel<I><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const I*>(index.data_ptr()), n,
                                                                 size, kin, pin, check.get());
  });
  EMBER_CUDA_CHECK_LAUNCH();
  check.throw_if_failed(op, dim, size);
  if (!work) return;

  // A stable radix sort over just the bits that can be set (keys are in [0, size)).
  int end_bit = 1;
  while (end_bit < 63 && (uint64_t(1) << end_bit) < uint64_t(size)) ++end_bit;
  Tensor keys = detail::make_tensor({n}, DType::i64, device);
  Tensor pos = detail::make_tensor({n}, DType::i64, device);
  auto* kout = static_cast<unsigned long long*>(keys.data_ptr());
  auto* pout = static_cast<int64_t*>(pos.data_ptr());
  size_t temp_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, kin, kout, pin, pout, n, 0, end_bit, stream));
  Tensor temp = detail::make_tensor({int64_t(std::max<size_t>(temp_bytes, 1))}, DType::u8, device);
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data_ptr(), temp_bytes, kin, kout, pin, pout, n, 0,
                                                   end_bit, stream));

  const int64_t total = outer * n * inner;
  visit_dtype(out.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    if constexpr (!std::is_same_v<S, bool>) {
      index_add_fwd_kernel<S><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<S*>(out.data_ptr()), static_cast<const S*>(src.data_ptr()), kout, pout, n, size, inner,
          total);
    }
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t size = x.sizes()[dim], len = index.sizes()[dim];
  const int64_t total = index.numel();
  if (total == 0) return;
  cudaStream_t stream = stream_for(x.device());
  DeviceIndexCheck check(x.device(), stream);
  const Strides<3> s =
      make_strides<3>("gather", index.sizes(), {&out.strides(), &index.strides(), &x.strides()}, dim);
  visit_bits(x.element_size(), [&](auto utag) {
    using U = decltype(utag);
    visit_index(index.dtype(), [&](auto itag) {
      using I = decltype(itag);
      gather_fwd_kernel<U, I><<<blocks_for(total), kThreads, 0, stream>>>(
          static_cast<U*>(out.data_ptr()), static_cast<const I*>(index.data_ptr()),
          static_cast<const U*>(x.data_ptr()), s, len, out.strides()[dim], index.strides()[dim],
          x.strides()[dim], size, total, check.get());
    });
  });
  EMBER_CUDA_CHECK_LAUNCH();
  check.throw_if_failed("gather", dim, size);
}

void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t size = out.sizes()[dim], len = index.sizes()[dim];
  if (out.dtype() == DType::b8) throw DTypeError("[scatter_add] is not defined for bool tensors");
  if (index.numel() == 0) return;
  cudaStream_t stream = stream_for(out.device());
  DeviceIndexCheck check(out.device(), stream);
  const int64_t lines = index.numel() / len;
  const Strides<3> s =
      make_strides<3>("scatter_add", index.sizes(), {&out.strides(), &index.strides(), &src.strides()}, dim);
  visit_dtype(out.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    if constexpr (!std::is_same_v<S, bool>) {
      visit_index(index.dtype(), [&](auto itag) {
        using I = decltype(itag);
        scatter_add_fwd_kernel<S, I><<<blocks_for(lines), kThreads, 0, stream>>>(
            static_cast<S*>(out.data_ptr()), static_cast<const I*>(index.data_ptr()),
            static_cast<const S*>(src.data_ptr()), s, len, out.strides()[dim], index.strides()[dim],
            src.strides()[dim], size, lines, check.get());
      });
    }
  });
  EMBER_CUDA_CHECK_LAUNCH();
  check.throw_if_failed("scatter_add", dim, size);
}

void tri_kernel(const Tensor& x, const Tensor& out, int64_t diagonal, bool upper) {
  const int64_t nd = x.dim(), total = out.numel();
  if (total == 0) return;
  const int64_t rows = x.sizes()[nd - 2], cols = x.sizes()[nd - 1];
  cudaStream_t stream = stream_for(x.device());
  const Strides<1> s = make_strides<1>(upper ? "triu" : "tril", x.sizes(), {&x.strides()}, -1);
  visit_bits(x.element_size(), [&](auto utag) {
    using U = decltype(utag);
    tri_fwd_kernel<U><<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<const U*>(x.data_ptr()), static_cast<U*>(out.data_ptr()), s, rows, cols, diagonal, upper,
        total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void dropout_mask_kernel(const Tensor& mask, Generator::State s, double p) {
  const int64_t n = mask.numel(), counters = int64_t(dropout_counters(n));
  if (n == 0) return;
  cudaStream_t stream = stream_for(mask.device());
  dropout_mask_fwd_kernel<<<blocks_for(counters), kThreads, 0, stream>>>(static_cast<bool*>(mask.data_ptr()), n,
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
