// CUDA driver for the fused SwiGLU (mirror of ops/cpu/swiglu.cpp; kernels/swiglu.h has the
// preconditions).
//
// Invariants:
// - Contiguous operands (the common case) take this file's kernels: one thread per V elements
//   with 16-byte loads and stores when every pointer is 16-byte aligned (V = 16 / sizeof(S)),
//   the n % V tail element-wise; grid-stride loops, 64-bit indexing.
// - Any other layout goes through the shared elementwise engine (loops.cuh) with the same
//   math, so both paths round identically.
// - The math is fn::swiglu / fn::swiglu_backward (functors.h, shared with the CPU driver), exp
//   through libdevice (expf for f32); 16-bit values compute in f32 and round once.
// - Runs on the current stream of the inputs' device under a device guard; no host sync.
#include <algorithm>
#include <cstdint>

#include "ember/cuda/launch.h"
#include "ember/ops/functors.h"
#include "kernels/swiglu.h"
#include "loops.cuh"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

template <class S>
__device__ __forceinline__ void swiglu_one(const S* g, const S* u, S* o) {
  store_c(o, fn::swiglu(load_c(g), load_c(u)));
}

// u is read only for dg (the caller may leave it unloaded when dg is null).
template <class S>
__device__ __forceinline__ void swiglu_grad_one(const S* gr, const S* g, const S* u, S* dg,
                                                S* du) {
  using C = compute_t<S>;
  const fn::SwigluGrads<C> d = fn::swiglu_backward(load_c(gr), load_c(g), dg ? load_c(u) : C(0));
  if (dg) store_c(dg, d.dgate);
  if (du) store_c(du, d.dup);
}

template <class S, int V>
__global__ void swiglu_fwd_kernel(const S* __restrict__ g, const S* __restrict__ u,
                                  S* __restrict__ o, int64_t n) {
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = tid; p < packs; p += stride) {
    const Pack<S, V> gp = reinterpret_cast<const Pack<S, V>*>(g)[p];
    const Pack<S, V> up = reinterpret_cast<const Pack<S, V>*>(u)[p];
    Pack<S, V> op;
#pragma unroll
    for (int k = 0; k < V; ++k) swiglu_one(&gp.v[k], &up.v[k], &op.v[k]);
    reinterpret_cast<Pack<S, V>*>(o)[p] = op;
  }
  for (int64_t i = packs * V + tid; i < n; i += stride) swiglu_one(g + i, u + i, o + i);
}

// dg or du may be null (that gradient is not requested; uniform over the grid).
template <class S, int V>
__global__ void swiglu_bwd_kernel(const S* __restrict__ gr, const S* __restrict__ g,
                                  const S* __restrict__ u, S* __restrict__ dg,
                                  S* __restrict__ du, int64_t n) {
  const int64_t packs = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t p = tid; p < packs; p += stride) {
    const Pack<S, V> grp = reinterpret_cast<const Pack<S, V>*>(gr)[p];
    const Pack<S, V> gp = reinterpret_cast<const Pack<S, V>*>(g)[p];
    Pack<S, V> up, dgp, dup;
    if (dg) up = reinterpret_cast<const Pack<S, V>*>(u)[p];
#pragma unroll
    for (int k = 0; k < V; ++k)
      swiglu_grad_one(&grp.v[k], &gp.v[k], &up.v[k], dg ? &dgp.v[k] : nullptr,
                      du ? &dup.v[k] : nullptr);
    if (dg) reinterpret_cast<Pack<S, V>*>(dg)[p] = dgp;
    if (du) reinterpret_cast<Pack<S, V>*>(du)[p] = dup;
  }
  for (int64_t i = packs * V + tid; i < n; i += stride)
    swiglu_grad_one(gr + i, g + i, u + i, dg ? dg + i : nullptr, du ? du + i : nullptr);
}

// The strided forms, on the elementwise engine: operands {out, gate, up} and
// {dgate or dup, dup or dgate, grad, gate, up} (an output not requested is replaced by the
// other one and never written).
template <class S>
struct SwigluFwdOp {
  __device__ void operator()(char** p) const {
    swiglu_one(reinterpret_cast<const S*>(p[1]), reinterpret_cast<const S*>(p[2]),
               reinterpret_cast<S*>(p[0]));
  }
};
template <class S>
struct SwigluBwdOp {
  bool gate, up;
  __device__ void operator()(char** p) const {
    swiglu_grad_one(reinterpret_cast<const S*>(p[2]), reinterpret_cast<const S*>(p[3]),
                    reinterpret_cast<const S*>(p[4]), gate ? reinterpret_cast<S*>(p[0]) : nullptr,
                    up ? reinterpret_cast<S*>(p[1]) : nullptr);
  }
};

bool aligned16(const Tensor& t) {
  return !t.defined() || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
}

unsigned grid_for(int64_t work) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(work, kThreads), int64_t(1) << 20)));
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <class S>
void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (!gate.is_contiguous() || !up.is_contiguous()) {
    launch_elementwise<3>({&out, &gate, &up}, SwigluFwdOp<S>{});
    return;
  }
  const int64_t n = out.numel();
  const bool vec = aligned16(gate) && aligned16(up) && aligned16(out);
  const auto on = ember::cuda::detail::on_device(gate.device());
  const S* g = ptr<const S>(gate);
  const S* u = ptr<const S>(up);
  S* o = ptr<S>(out);
  if (vec)
    ::ember::cuda::launch_kernel(swiglu_fwd_kernel<S, kVec<S>>, grid_for(n / kVec<S> + kVec<S>), kThreads,
                                 0, on.stream,
        g, u, o, n);
  else ::ember::cuda::launch_kernel(swiglu_fwd_kernel<S, 1>, grid_for(n), kThreads, 0, on.stream, g, u, o, n);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S>
void swiglu_bwd(const Tensor& grad, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                const Tensor& dup) {
  if (!grad.is_contiguous() || !gate.is_contiguous() || !up.is_contiguous()) {
    const Tensor& o0 = dgate.defined() ? dgate : dup;
    const Tensor& o1 = dup.defined() ? dup : dgate;
    launch_elementwise<5>({&o0, &o1, &grad, &gate, &up},
                          SwigluBwdOp<S>{dgate.defined(), dup.defined()});
    return;
  }
  const int64_t n = gate.numel();
  const bool vec = aligned16(grad) && aligned16(gate) && aligned16(up) && aligned16(dgate) &&
                   aligned16(dup);
  const auto on = ember::cuda::detail::on_device(gate.device());
  const S* gr = ptr<const S>(grad);
  const S* g = ptr<const S>(gate);
  const S* u = ptr<const S>(up);
  if (vec)
    ::ember::cuda::launch_kernel(swiglu_bwd_kernel<S, kVec<S>>, grid_for(n / kVec<S> + kVec<S>), kThreads,
                                 0, on.stream,
        gr, g, u, ptr<S>(dgate), ptr<S>(dup), n);
  else
    ::ember::cuda::launch_kernel(swiglu_bwd_kernel<S, 1>, grid_for(n), kThreads, 0, on.stream,
        gr, g, u, ptr<S>(dgate),
                                                                     ptr<S>(dup), n);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void swiglu_fwd_kernel(const Tensor& gate, const Tensor& up, const Tensor& out) {
  visit_floating(gate.dtype(), [&](auto tag) { swiglu_fwd<decltype(tag)>(gate, up, out); });
}

void swiglu_bwd_kernel(const Tensor& grad, const Tensor& gate, const Tensor& up,
                       const Tensor& dgate, const Tensor& dup) {
  visit_floating(gate.dtype(), [&](auto tag) {
    swiglu_bwd<decltype(tag)>(grad, gate, up, dgate, dup);
  });
}

}  // namespace ember::ops::cuda
