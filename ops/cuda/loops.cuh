// The CUDA elementwise iteration engine (mirror of ops/cpu/loops.h). The host builds the
// shared LoopPlan (coalesced dims, byte strides, operand 0 = output) and passes it by value;
// each thread maps a linear index to per-operand byte offsets with div/mod over at most
// kMaxDims dims, in a grid-stride loop. Same-shape contiguous operands skip the div/mod.
// Launches go to this thread's current stream (ember::cuda::detail::current_stream_handle).
#pragma once

#include <array>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/loop_plan.h"

namespace ember::ops::cuda {

// As many dims as PyTorch's kernels take (MAX_DIMS): the CPU has no limit, and a tensor this
// engine cannot iterate could not even be made contiguous (that is a copy through it). The
// sizes and strides travel as kernel parameters (about 1 KiB for four operands), and the
// offset loop runs over the actual dims only.
constexpr int kMaxDims = 25;
constexpr int kThreads = 256;

template <int N>
struct OffsetCalc {
  int ndim = 0;
  bool contiguous = false;  // every operand unit-stride over one flat dim
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];
  int64_t elem_size[N];
};

template <int N>
struct Ptrs {
  char* p[N];
};

template <int N, class Op>
__global__ void elementwise_kernel(int64_t n, OffsetCalc<N> oc, Ptrs<N> ptrs, Op op) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    char* p[N];
    if (oc.contiguous) {
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] = ptrs.p[k] + i * oc.elem_size[k];
    } else {
      int64_t off[N] = {};
      int64_t rem = i;
      for (int d = oc.ndim - 1; d >= 0; --d) {
        int64_t idx = rem % oc.sizes[d];
        rem /= oc.sizes[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * oc.strides[k][d];
      }
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] = ptrs.p[k] + off[k];
    }
    op(p);
  }
}

// Launches op(char* p[N]) once per element of operand 0 (the output).
template <int N, class Op>
void launch_elementwise(const std::array<const Tensor*, N>& ts, Op op) {
  const int64_t n = ts[0]->numel();
  if (n == 0) return;
  OffsetCalc<N> oc;
  Ptrs<N> ptrs;
  bool flat = true;
  for (int k = 0; k < N; ++k) {
    flat = flat && ts[k]->sizes() == ts[0]->sizes() && ts[k]->is_contiguous();
    oc.elem_size[k] = int64_t(ts[k]->element_size());
  }
  if (flat) {
    oc.contiguous = true;
    for (int k = 0; k < N; ++k) ptrs.p[k] = static_cast<char*>(ts[k]->data_ptr());
  } else {
    LoopPlan<N> plan = make_plan<N>(ts);
    EMBER_CHECK(int(plan.sizes.size()) <= kMaxDims, ShapeError, "[cuda elementwise] a tensor of shape ",
                ts[0]->sizes(), " has ", int64_t(plan.sizes.size()), " dims that cannot be merged, more than the ",
                kMaxDims, " the CUDA kernels take");
    oc.ndim = int(plan.sizes.size());
    for (int d = 0; d < oc.ndim; ++d) oc.sizes[d] = plan.sizes[d];
    for (int k = 0; k < N; ++k) {
      ptrs.p[k] = plan.base[k];
      for (int d = 0; d < oc.ndim; ++d) oc.strides[k][d] = plan.strides[k][d];
    }
  }
  const auto on = ember::cuda::detail::on_device(ts[0]->device().index);
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 16);
  cudaStream_t stream = on.stream;
  ::ember::cuda::launch_kernel(elementwise_kernel<N, Op>, unsigned(blocks), kThreads, 0, stream, n, oc, ptrs, op);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
