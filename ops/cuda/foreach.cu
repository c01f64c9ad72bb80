// CUDA driver of the foreach family (kernels/foreach.h): multi-tensor launches over tables of
// pointers passed as kernel parameters (multi_tensor.cuh, Note [multi-tensor tables]).
//
// Invariants:
// - foreach_norm is one launch per dtype present (per kMaxTensorsPerLaunch tensors) plus one
//   finishing launch, whatever the list's length. Block b of the pass over all tables writes
//   the partial (sum of squares, sum of |x|, or max |x|) of chunk b into a scratch buffer from
//   the caching allocator, in the accumulation type A (f32, or f64 when the result is f64);
//   within a block, each thread takes fixed elements and the threads combine in a fixed tree
//   (reduce_utils.cuh). The finishing kernel, one block, combines the partials in double in an
//   order fixed by their count, takes the sqrt for ord 2 and writes the 0-dim result. No float
//   atomics anywhere: two runs on the same list agree bit for bit.
// - foreach_mul is one launch per dtype present; the scalar is read from device memory by every
//   block (or passed by value when it was a host scalar), so nothing waits on the host.
// - 16-byte vector loads/stores only where the chunk's address is 16-byte aligned (checked per
//   block on the device; a chunk starts a multiple of kMultiTensorChunk elements into its
//   tensor, so a tensor whose data is aligned has every chunk aligned); scalar loops otherwise.
// - Everything runs on this thread's current stream on the tensors' device (a guard restores
//   the caller's device); no host synchronization, no host-to-device copy: capturable.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/foreach.h"
#include "multi_tensor.cuh"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 512;        // per chunk block: 32 elements per thread
constexpr int kFinishThreads = 1024;

enum class NormKind : int { sum_abs, sum_sq, max_abs };

template <NormKind K, class A>
__device__ __forceinline__ A norm_map(A v) {
  if constexpr (K == NormKind::sum_sq) return v * v;
  else return v < A(0) ? -v : v;  // fabs; NaN stays NaN
}

// a precedes b. Max keeps the first NaN, so a NaN anywhere gives a NaN.
template <NormKind K, class A>
__device__ __forceinline__ A norm_combine(A a, A b) {
  if constexpr (K == NormKind::max_abs) return (a == a && (b != b || b > a)) ? b : a;
  else return a + b;
}

template <NormKind K, class S, class A>
__global__ void foreach_norm_partial_kernel(const __grid_constant__ TensorTable<1> t, A* partial) {
  __shared__ A smem[32];
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(t, block);
  const int64_t begin = (block - t.chunk_begin[i]) * kMultiTensorChunk;
  const int64_t n = min64(kMultiTensorChunk, t.numel[i] - begin);
  const S* x = static_cast<const S*>(t.ptr[0][i]) + begin;
  A acc = A(0);
  int64_t tail = 0;
  constexpr int kVec = 16 / int(sizeof(S));
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {
    const int64_t nv = n / kVec;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
      const uint4 raw = xv[v];
      S vals[kVec];
      memcpy(vals, &raw, sizeof raw);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc = norm_combine<K>(acc, norm_map<K>(A(load_c(&vals[e]))));
    }
    tail = nv * kVec;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += blockDim.x)
    acc = norm_combine<K>(acc, norm_map<K>(A(load_c(&x[j]))));
  acc = row_reduce(acc, [](A a, A b) { return norm_combine<K>(a, b); }, smem, false);
  if (threadIdx.x == 0) partial[block] = acc;
}

template <NormKind K, class A, class O>
__global__ void foreach_norm_finish_kernel(const A* partial, int64_t n, O* out) {
  __shared__ double smem[32];
  double acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = norm_combine<K>(acc, double(partial[j]));
  acc = row_reduce(acc, [](double a, double b) { return norm_combine<K>(a, b); }, smem, false);
  if (threadIdx.x == 0) *out = O(K == NormKind::sum_sq ? sqrt(acc) : acc);
}

template <NormKind K, class A>
void launch_norm(const TensorList& tensors, const Tensor& out, cudaStream_t stream) {
  int64_t total_blocks = 0;
  for (const Tensor& x : tensors) total_blocks += multi_tensor_chunks(x.numel());
  // Released on the host when this returns; the caching allocator hands its block only to
  // later work on the same stream (or, under capture, keeps it in the graph's pool).
  Tensor scratch;
  A* partial = nullptr;
  if (total_blocks > 0) {
    scratch = detail::make_tensor({total_blocks * int64_t(sizeof(A))}, DType::u8, out.device());
    partial = static_cast<A*>(scratch.data_ptr());
  }
  int64_t base = 0;
  for (const auto& [dtype, idx] : group_by_dtype(tensors)) {
    visit_floating(dtype, [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, double> && !std::is_same_v<A, double>) {
        EMBER_CHECK(false, Error, "[foreach_norm] internal: f64 input with an f32 accumulator");
      } else {
        launch_tables<1>(
            tensors, idx, [&](TensorTable<1>& t, int row, size_t i) { t.ptr[0][row] = tensors[i].data_ptr(); },
            [&](const TensorTable<1>& t, int64_t blocks) {
              ::ember::cuda::launch_kernel(foreach_norm_partial_kernel<K, S, A>, unsigned(blocks), kThreads,
                                           0, stream,
                  t, partial + base);
              EMBER_CUDA_CHECK_LAUNCH();
              base += blocks;
            });
      }
    });
  }
  if (out.dtype() == DType::f64)
    ::ember::cuda::launch_kernel(foreach_norm_finish_kernel<K, A, double>, 1, kFinishThreads, 0, stream,
        partial, total_blocks, static_cast<double*>(out.data_ptr()));
  else
    ::ember::cuda::launch_kernel(foreach_norm_finish_kernel<K, A, float>, 1, kFinishThreads, 0, stream,
        partial, total_blocks, static_cast<float*>(out.data_ptr()));
  EMBER_CUDA_CHECK_LAUNCH();
}

template <NormKind K>
void launch_norm(const TensorList& tensors, const Tensor& out, cudaStream_t stream) {
  if (out.dtype() == DType::f64) launch_norm<K, double>(tensors, out, stream);
  else launch_norm<K, float>(tensors, out, stream);
}

// Where the multiplier comes from: a device scalar of one of these dtypes, or `value`.
enum class ScalarKind : int { value, f16, bf16, f32, f64 };

__device__ __forceinline__ double read_scalar(const void* p, ScalarKind kind, double value) {
  switch (kind) {
    case ScalarKind::f16: return load_c(static_cast<const Half*>(p));
    case ScalarKind::bf16: return load_c(static_cast<const BFloat16*>(p));
    case ScalarKind::f32: return *static_cast<const float*>(p);
    case ScalarKind::f64: return *static_cast<const double*>(p);
    default: return value;
  }
}

template <class P>
__global__ void foreach_mul_kernel_impl(const __grid_constant__ TensorTable<1> t, const void* scalar,
                                        ScalarKind kind, double value) {
  using C = compute_t<P>;
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(t, block);
  const int64_t begin = (block - t.chunk_begin[i]) * kMultiTensorChunk;
  const int64_t n = min64(kMultiTensorChunk, t.numel[i] - begin);
  P* x = static_cast<P*>(t.ptr[0][i]) + begin;
  // mul_'s arithmetic: the scalar rounded to P (through float for 16-bit P, as a cast does).
  const double s = read_scalar(scalar, kind, value);
  C m;
  if constexpr (std::is_same_v<P, double>) {
    m = s;
  } else {
    P r;
    store_c(&r, float(s));
    m = load_c(&r);
  }
  int64_t tail = 0;
  constexpr int kVec = 16 / int(sizeof(P));
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {
    const int64_t nv = n / kVec;
    uint4* xv = reinterpret_cast<uint4*>(x);
    for (int64_t v = threadIdx.x; v < nv; v += blockDim.x) {
      uint4 raw = xv[v];
      P vals[kVec];
      memcpy(vals, &raw, sizeof raw);
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_c(&vals[e], C(load_c(&vals[e]) * m));
      memcpy(&raw, vals, sizeof raw);
      xv[v] = raw;
    }
    tail = nv * kVec;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += blockDim.x) store_c(&x[j], C(load_c(&x[j]) * m));
}

}  // namespace

void foreach_norm_kernel(const TensorList& tensors, double ord, const Tensor& out) {
  const auto on = ember::cuda::detail::on_device(out.device());
  if (ord == 2) launch_norm<NormKind::sum_sq>(tensors, out, on.stream);
  else if (ord == 1) launch_norm<NormKind::sum_abs>(tensors, out, on.stream);
  else launch_norm<NormKind::max_abs>(tensors, out, on.stream);
}

void foreach_mul_kernel(const TensorList& tensors, const Tensor& scalar, double value) {
  const auto on = ember::cuda::detail::on_device(tensors[0].device());
  ScalarKind kind = ScalarKind::value;
  const void* sp = nullptr;
  if (scalar.defined()) {
    sp = scalar.data_ptr();
    switch (scalar.dtype()) {
      case DType::f16: kind = ScalarKind::f16; break;
      case DType::bf16: kind = ScalarKind::bf16; break;
      case DType::f64: kind = ScalarKind::f64; break;
      default: kind = ScalarKind::f32; break;
    }
  }
  for (const auto& [dtype, idx] : group_by_dtype(tensors)) {
    visit_floating(dtype, [&](auto tag) {
      using P = decltype(tag);
      launch_tables<1>(
          tensors, idx, [&](TensorTable<1>& t, int row, size_t i) { t.ptr[0][row] = tensors[i].data_ptr(); },
          [&](const TensorTable<1>& t, int64_t blocks) {
            ::ember::cuda::launch_kernel(foreach_mul_kernel_impl<P>, unsigned(blocks), kThreads, 0, on.stream,
                t, sp, kind, value);
            EMBER_CUDA_CHECK_LAUNCH();
          });
    });
  }
}

}  // namespace ember::ops::cuda
