// CUDA driver of the amp family.
//
// Invariants:
// - amp_unscale_and_check_kernel is ONE launch over a table of (pointer, size, dtype) rows
//   passed as a __grid_constant__ kernel parameter (no host-to-device copy, allocation or
//   synchronization); block b handles chunk b: tensor i owns blocks
//   [chunk_begin[i], chunk_begin[i + 1]). Mixed gradient dtypes share the launch (the dtype is
//   a per-row tag). Only lists longer than kMaxTensors take further launches.
// - Per element, as PyTorch's _amp_foreach_non_finite_check_and_unscale_cuda_: v = C(g), the
//   flag is set when v is not finite, g = v * inv_scale unless inv_scale == 1. The inverse
//   scale is read from device memory, and found_inf is written only with 1.0f (a benign race:
//   every writer stores the same value), so the host never waits.
// - amp_update_scale_kernel is a single-thread kernel: the scale never leaves the device.
// - Launches go to this thread's current stream and are followed by a last-error check.
#include <climits>
#include <cstdint>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/amp.h"
#include "multi_tensor.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int64_t kChunk = 16384;  // elements per block (32 per thread)
constexpr int kMaxTensors = 512;

enum : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kF64 = 3 };

struct UnscaleTable {
  int n;
  int64_t chunk_begin[kMaxTensors + 1];
  void* ptr[kMaxTensors];
  int64_t numel[kMaxTensors];
  uint8_t dtype[kMaxTensors];
};
static_assert(sizeof(UnscaleTable) <= 32000, "a tensor table must fit the kernel parameters");

template <class T, class C>
__device__ __forceinline__ bool unscale_chunk(T* g, int64_t begin, int64_t end, C s, bool identity) {
  bool bad = false;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    const C v = C(g[j]);
    bad = bad || !isfinite(v);
    if (!identity) g[j] = T(v * s);
  }
  return bad;
}

__global__ void amp_unscale_kernel(const __grid_constant__ UnscaleTable t, float* found_inf,
                                   const float* inv_scale) {
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(t, block);
  const int64_t begin = (block - t.chunk_begin[i]) * kChunk;
  const int64_t end = min(begin + kChunk, t.numel[i]);
  const float inv = *inv_scale;
  const bool identity = inv == 1.0f;
  bool bad = false;
  switch (t.dtype[i]) {
    case kF16:
      bad = unscale_chunk<Half, float>(static_cast<Half*>(t.ptr[i]), begin, end, inv, identity);
      break;
    case kBF16:
      bad = unscale_chunk<BFloat16, float>(static_cast<BFloat16*>(t.ptr[i]), begin, end, inv,
                                           identity);
      break;
    case kF64:
      bad = unscale_chunk<double, double>(static_cast<double*>(t.ptr[i]), begin, end, double(inv),
                                          identity);
      break;
    default:
      bad = unscale_chunk<float, float>(static_cast<float*>(t.ptr[i]), begin, end, inv, identity);
      break;
  }
  if (bad) *found_inf = 1.0f;
}

__global__ void amp_update_scale_single_kernel(float* scale, int32_t* tracker,
                                               const float* found_inf, float growth_factor,
                                               float backoff_factor, int32_t growth_interval) {
  if (*found_inf != 0.0f) {
    *scale = *scale * backoff_factor;
    *tracker = 0;
  } else {
    const int32_t successful = *tracker + 1;
    if (successful == growth_interval) {
      const float grown = *scale * growth_factor;
      if (isfinite(grown)) *scale = grown;
      *tracker = 0;
    } else {
      *tracker = successful;
    }
  }
}

uint8_t dtype_tag(DType d) {
  switch (d) {
    case DType::f16: return kF16;
    case DType::bf16: return kBF16;
    case DType::f64: return kF64;
    default: return kF32;
  }
}

}  // namespace

void amp_unscale_and_check_kernel(const TensorList& grads, const Tensor& found_inf,
                                  const Tensor& inv_scale) {
  const int dev = found_inf.device().index;
  const auto on = ember::cuda::detail::on_device(dev);
  cudaStream_t stream = on.stream;
  float* flag = static_cast<float*>(found_inf.data_ptr());
  const float* inv = static_cast<const float*>(inv_scale.data_ptr());
  UnscaleTable t;
  t.n = 0;
  int64_t blocks = 0;
  auto flush = [&] {
    // A table of empty tensors has no chunk to run: a launch of 0 blocks is an invalid
    // configuration on the device, so there is none.
    if (blocks > 0) {
      t.chunk_begin[t.n] = blocks;
      ::ember::cuda::launch_kernel(amp_unscale_kernel, unsigned(blocks), kThreads, 0, stream, t, flag, inv);
      EMBER_CUDA_CHECK_LAUNCH();
    }
    t.n = 0;
    blocks = 0;
  };
  for (const Tensor& g : grads) {
    const int64_t n = g.numel();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    EMBER_CHECK(chunks <= int64_t(INT_MAX), ShapeError, "[amp_unscale_and_check] a tensor of ", n,
                " elements exceeds the launch limit");
    if (t.n == kMaxTensors || blocks + chunks > int64_t(INT_MAX)) flush();
    t.chunk_begin[t.n] = blocks;
    t.ptr[t.n] = g.data_ptr();
    t.numel[t.n] = n;
    t.dtype[t.n] = dtype_tag(g.dtype());
    blocks += chunks;
    ++t.n;
  }
  flush();
}

void amp_update_scale_kernel(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& found_inf, double growth_factor, double backoff_factor,
                             int64_t growth_interval) {
  const int dev = scale.device().index;
  const auto on = ember::cuda::detail::on_device(dev);
  cudaStream_t stream = on.stream;
  ::ember::cuda::launch_kernel(amp_update_scale_single_kernel, 1, 1, 0, stream,
      static_cast<float*>(scale.data_ptr()), static_cast<int32_t*>(growth_tracker.data_ptr()),
      static_cast<const float*>(found_inf.data_ptr()), float(growth_factor), float(backoff_factor),
      int32_t(growth_interval));
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
