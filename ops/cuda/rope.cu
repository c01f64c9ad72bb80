// CUDA driver for rotary_embedding (mirror of ops/cpu/rope.cpp; kernels/rope.h has the
// preconditions).
//
// Invariants:
// - One thread per group of V consecutive pairs (i, i + D/2) of one row (b, t, h): it reads
//   x[i..i+V) and x[i+D/2..i+D/2+V) through x's strides, cos/sin[t, i..i+V), and writes both
//   output runs. Consecutive threads take consecutive groups, so loads and stores coalesce.
// - V > 1 (16-byte loads and stores) only when x is unit-stride along D, every other stride
//   and D/2 are multiples of V and x's address is 16-byte aligned; the output is a fresh
//   allocation, so its rows are then aligned too. Otherwise V = 1 with any strides.
// - Index arithmetic (the div/mod that maps a group to (b, t, h, i)) in 32 bits when the
//   group count fits, offsets always in 64 bits; grid-stride loop.
// - Runs on the current stream of x's device under a device guard; no host synchronization.
#include <algorithm>
#include <cstdint>

#include "ember/cuda/launch.h"
#include "kernels/rope.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 256;

template <class S, class Index, int V>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const S* __restrict__ x, int64_t sb, int64_t st, int64_t sh, int64_t sd,
                const compute_t<S>* __restrict__ cos, const compute_t<S>* __restrict__ sin,
                compute_t<S> sign, S* __restrict__ out, int64_t T, int64_t H, int64_t half,
                int64_t groups) {
  using C = compute_t<S>;
  const Index per_row = Index(half / V);
  for (int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < groups;
       p += int64_t(gridDim.x) * blockDim.x) {
    const Index j = Index(p) % per_row, r = Index(p) / per_row;
    const Index h = r % Index(H), bt = r / Index(H);
    const Index t = bt % Index(T), b = bt / Index(T);
    const int64_t i0 = int64_t(j) * V;
    const S* xr = x + int64_t(b) * sb + int64_t(t) * st + int64_t(h) * sh;
    const C* cr = cos + int64_t(t) * half + i0;
    const C* sr = sin + int64_t(t) * half + i0;
    S* o = out + int64_t(r) * 2 * half + i0;
    Pack<S, V> a, bb, ya, yb;
    if constexpr (V > 1) {
      a = *reinterpret_cast<const Pack<S, V>*>(xr + i0);
      bb = *reinterpret_cast<const Pack<S, V>*>(xr + i0 + half);
    } else {
      a.v[0] = xr[i0 * sd];
      bb.v[0] = xr[(i0 + half) * sd];
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const C x0 = load_c(&a.v[k]), x1 = load_c(&bb.v[k]);
      const C c = cr[k], s = sign * sr[k];
      store_c(&ya.v[k], x0 * c - x1 * s);
      store_c(&yb.v[k], x1 * c + x0 * s);
    }
    *reinterpret_cast<Pack<S, V>*>(o) = ya;
    *reinterpret_cast<Pack<S, V>*>(o + half) = yb;
  }
}

template <class S>
void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool inverse) {
  using C = compute_t<S>;
  const int64_t T = x.sizes()[1], H = x.sizes()[2], half = x.sizes()[3] / 2;
  const int64_t rows = x.numel() / (2 * half);
  // A stride of a size-1 dim is never used: any value is as good as an aligned one.
  auto vec_ok = [&](int64_t d) { return x.sizes()[d] == 1 || x.strides()[d] % kVec<S> == 0; };
  const bool vec = x.strides()[3] == 1 && half % kVec<S> == 0 && vec_ok(0) && vec_ok(1) &&
                   vec_ok(2) && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
  const int64_t groups = rows * (vec ? half / kVec<S> : half);
  const bool u32 = groups < (int64_t(1) << 32);
  const auto on = ember::cuda::detail::on_device(x.device());
  const unsigned blocks = unsigned(std::min<int64_t>(ceil_div(groups, kThreads), int64_t(1) << 20));
  const S* xp = static_cast<const S*>(x.data_ptr());
  const C* cp = static_cast<const C*>(cos.data_ptr());
  const C* sp = static_cast<const C*>(sin.data_ptr());
  S* op = static_cast<S*>(out.data_ptr());
  const C sign = inverse ? C(-1) : C(1);
  const int64_t sb = x.strides()[0], st = x.strides()[1], sh = x.strides()[2], sd = x.strides()[3];
  auto launch = [&](auto kernel) {
    ::ember::cuda::launch_kernel(kernel, blocks, kThreads, 0, on.stream,
        xp, sb, st, sh, sd, cp, sp, sign, op, T, H, half,
                                               groups);
    EMBER_CUDA_CHECK_LAUNCH();
  };
  if (vec) {
    if (u32) launch(rope_kernel<S, uint32_t, kVec<S>>);
    else launch(rope_kernel<S, uint64_t, kVec<S>>);
  } else {
    if (u32) launch(rope_kernel<S, uint32_t, 1>);
    else launch(rope_kernel<S, uint64_t, 1>);
  }
}

}  // namespace

void rope_fwd_kernel(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  visit_floating(x.dtype(), [&](auto tag) { rope<decltype(tag)>(x, cos, sin, out, false); });
}

void rope_bwd_kernel(const Tensor& grad, const Tensor& cos, const Tensor& sin, const Tensor& dx) {
  visit_floating(grad.dtype(), [&](auto tag) { rope<decltype(tag)>(grad, cos, sin, dx, true); });
}

}  // namespace ember::ops::cuda
