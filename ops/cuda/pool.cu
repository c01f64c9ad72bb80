// CUDA avg / adaptive pooling, upsampling and padding, forward and backward, with kernels of
// our own. The CPU twin is ops/cpu/pool.cpp; windows, bins and source indices come from the
// same functions (ops/kernels/pool.h), so both backends read the same elements.
//
// Invariants:
// - Buffers are dense (the front made them contiguous); 64-bit indexing throughout;
//   grid-stride loops, so any size runs with a capped grid.
// - One thread per output element in the forwards; one thread per input element in the
//   backwards, which gather the outputs that read that element (found from the forward's
//   own index formulas, for upsampling by bisection over them). No atomics: deterministic,
//   and each element is written once.
// - Sums run in compute_t (f32 for f16/bf16, f64 for f64) and round once.
// - Everything runs on the thread's current stream of the tensors' device, made current by a
//   guard for the launch; every launch is checked.
#include <algorithm>

#include "ember/cuda/launch.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/pool.h"
#include "loops.cuh"

namespace ember::ops::cuda {

namespace {

using namespace pool_index;

unsigned blocks_for(int64_t n, int threads = kThreads) {
  return unsigned(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t(1) << 16));
}

#define EMBER_GRID_STRIDE(t, total)                                                 \
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < (total); \
       t += int64_t(gridDim.x) * blockDim.x)

template <class S>
__global__ void avg_pool2d_fwd_kernel_(const S* x, S* y, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                       AvgPool2dParams p, int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t ow = t % Wo, oh = (t / Wo) % Ho, pl = t / (Wo * Ho);
    const S* xp = x + pl * H * W;
    const int64_t h0 = oh * p.stride[0] - p.padding[0], w0 = ow * p.stride[1] - p.padding[1];
    const int64_t hs = max64(h0, 0), he = min64(h0 + p.kernel[0], H);
    const int64_t ws = max64(w0, 0), we = min64(w0 + p.kernel[1], W);
    C sum = C(0);
    for (int64_t ih = hs; ih < he; ++ih)
      for (int64_t iw = ws; iw < we; ++iw) sum += C(xp[ih * W + iw]);
    y[t] = hs < he && ws < we ? S(sum / C(avg_divisor(oh, ow, H, W, p))) : S(0);
  }
}

template <class S>
__global__ void avg_pool2d_bwd_kernel_(const S* gy, S* gx, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                       AvgPool2dParams p, int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t iw = t % W, ih = (t / W) % H, pl = t / (W * H);
    int64_t hf, hl, wf, wl;
    avg_out_range(ih, p.kernel[0], p.stride[0], p.padding[0], Ho, hf, hl);
    avg_out_range(iw, p.kernel[1], p.stride[1], p.padding[1], Wo, wf, wl);
    const S* gp = gy + pl * Ho * Wo;
    C sum = C(0);
    for (int64_t oh = hf; oh <= hl; ++oh)
      for (int64_t ow = wf; ow <= wl; ++ow) sum += C(gp[oh * Wo + ow]) / C(avg_divisor(oh, ow, H, W, p));
    gx[t] = S(sum);
  }
}

// The global pool: one warp per plane, lanes stride the plane, then a shuffle reduction.
template <class S>
__global__ void global_avg_pool_fwd_kernel(const S* x, S* y, int64_t planes, int64_t hw) {
  using C = compute_t<S>;
  const int lane = int(threadIdx.x) & 31;
  const int64_t warps = (int64_t(gridDim.x) * blockDim.x) / 32;
  for (int64_t pl = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; pl < planes; pl += warps) {
    const S* xp = x + pl * hw;
    C sum = C(0);
    for (int64_t i = lane; i < hw; i += 32) sum += C(xp[i]);
    for (int off = 16; off > 0; off /= 2) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) y[pl] = S(sum / C(hw));
  }
}

template <class S>
__global__ void global_avg_pool_bwd_kernel(const S* gy, S* gx, int64_t hw, int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) gx[t] = S(C(gy[t / hw]) / C(hw));
}

template <class S>
__global__ void adaptive_avg_pool2d_fwd_kernel_(const S* x, S* y, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                                int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t ow = t % Wo, oh = (t / Wo) % Ho, pl = t / (Wo * Ho);
    const S* xp = x + pl * H * W;
    const int64_t hs = adaptive_start(oh, H, Ho), he = adaptive_end(oh, H, Ho);
    const int64_t ws = adaptive_start(ow, W, Wo), we = adaptive_end(ow, W, Wo);
    C sum = C(0);
    for (int64_t ih = hs; ih < he; ++ih)
      for (int64_t iw = ws; iw < we; ++iw) sum += C(xp[ih * W + iw]);
    y[t] = S(sum / C((he - hs) * (we - ws)));
  }
}

template <class S>
__global__ void adaptive_avg_pool2d_bwd_kernel_(const S* gy, S* gx, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                                int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t iw = t % W, ih = (t / W) % H, pl = t / (W * H);
    const int64_t hf = adaptive_first_out(ih, H, Ho), hl = adaptive_last_out(ih, H, Ho);
    const int64_t wf = adaptive_first_out(iw, W, Wo), wl = adaptive_last_out(iw, W, Wo);
    const S* gp = gy + pl * Ho * Wo;
    C sum = C(0);
    for (int64_t oh = hf; oh <= hl; ++oh) {
      const int64_t bh = adaptive_end(oh, H, Ho) - adaptive_start(oh, H, Ho);
      for (int64_t ow = wf; ow <= wl; ++ow) {
        const int64_t bw = adaptive_end(ow, W, Wo) - adaptive_start(ow, W, Wo);
        sum += C(gp[oh * Wo + ow]) / C(bh * bw);
      }
    }
    gx[t] = S(sum);
  }
}

template <class C>
__device__ __forceinline__ bool is_nan(C v) {
  return v != v;
}

// The scan is the CPU's: the first maximum in row-major bin order wins, NaN wins and stops.
template <class S>
__global__ void adaptive_max_pool2d_fwd_kernel_(const S* x, S* y, int64_t* indices, int64_t H, int64_t W,
                                                int64_t Ho, int64_t Wo, int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t ow = t % Wo, oh = (t / Wo) % Ho, pl = t / (Wo * Ho);
    const S* xp = x + pl * H * W;
    const int64_t hs = adaptive_start(oh, H, Ho), he = adaptive_end(oh, H, Ho);
    const int64_t ws = adaptive_start(ow, W, Wo), we = adaptive_end(ow, W, Wo);
    int64_t best_i = hs * W + ws;
    C best = C(xp[best_i]);
    for (int64_t ih = hs; ih < he && !is_nan(best); ++ih)
      for (int64_t iw = ws; iw < we; ++iw) {
        const C v = C(xp[ih * W + iw]);
        if (v > best || is_nan(v)) {
          best = v;
          best_i = ih * W + iw;
          if (is_nan(v)) break;
        }
      }
    y[t] = S(best);
    indices[t] = best_i;
  }
}

template <class S>
__global__ void upsample2d_fwd_kernel_(const S* x, S* y, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                       Upsample2dParams p, int64_t total) {
  using C = compute_t<S>;
  const bool nearest = p.mode == InterpolateMode::nearest;
  const C sh = area_scale<C>(H, Ho, p.align_corners, p.scale[0]);
  const C sw = area_scale<C>(W, Wo, p.align_corners, p.scale[1]);
  EMBER_GRID_STRIDE(t, total) {
    const int64_t ow = t % Wo, oh = (t / Wo) % Ho, pl = t / (Wo * Ho);
    const S* xp = x + pl * H * W;
    if (nearest) {
      y[t] = xp[nearest_src(oh, H, Ho, p.scale[0]) * W + nearest_src(ow, W, Wo, p.scale[1])];
      continue;
    }
    const Taps<C> h = linear_taps<C>(sh, oh, H, p.align_corners);
    const Taps<C> w = linear_taps<C>(sw, ow, W, p.align_corners);
    const S* r0 = xp + h.i0 * W;
    const S* r1 = xp + h.i1 * W;
    y[t] = S(h.l0 * (w.l0 * C(r0[w.i0]) + w.l1 * C(r0[w.i1])) + h.l1 * (w.l0 * C(r1[w.i0]) + w.l1 * C(r1[w.i1])));
  }
}

// The outputs along one dim that read input j, as up to two ranges with their tap: range r
// covers outputs whose tap r (0: i0, 1: i1; nearest: only 0) is j.
template <class C>
struct Readers {
  int64_t first[2], end[2];
};

template <class C>
__device__ Readers<C> readers(int64_t j, int64_t in, int64_t out, bool nearest, C scale, double user_scale,
                              bool align_corners) {
  Readers<C> r{};
  if (nearest) {
    auto f = [&](int64_t o) { return nearest_src(o, in, out, user_scale); };
    r.first[0] = lower_bound(out, j, f);
    r.end[0] = lower_bound(out, j + 1, f);
    r.first[1] = r.end[1] = 0;
    return r;
  }
  auto f0 = [&](int64_t o) { return linear_taps<C>(scale, o, in, align_corners).i0; };
  auto f1 = [&](int64_t o) { return linear_taps<C>(scale, o, in, align_corners).i1; };
  r.first[0] = lower_bound(out, j, f0);
  r.end[0] = lower_bound(out, j + 1, f0);
  r.first[1] = lower_bound(out, j, f1);
  r.end[1] = lower_bound(out, j + 1, f1);
  return r;
}

template <class S>
__global__ void upsample2d_bwd_kernel_(const S* gy, S* gx, int64_t H, int64_t W, int64_t Ho, int64_t Wo,
                                       Upsample2dParams p, int64_t total) {
  using C = compute_t<S>;
  const bool nearest = p.mode == InterpolateMode::nearest;
  const C sh = area_scale<C>(H, Ho, p.align_corners, p.scale[0]);
  const C sw = area_scale<C>(W, Wo, p.align_corners, p.scale[1]);
  EMBER_GRID_STRIDE(t, total) {
    const int64_t iw = t % W, ih = (t / W) % H, pl = t / (W * H);
    const Readers<C> rh = readers<C>(ih, H, Ho, nearest, sh, p.scale[0], p.align_corners);
    const Readers<C> rw = readers<C>(iw, W, Wo, nearest, sw, p.scale[1], p.align_corners);
    const S* gp = gy + pl * Ho * Wo;
    C sum = C(0);
    for (int a = 0; a < 2; ++a)
      for (int64_t oh = rh.first[a]; oh < rh.end[a]; ++oh) {
        C wh = C(1);
        if (!nearest) {
          const Taps<C> th = linear_taps<C>(sh, oh, H, p.align_corners);
          wh = a == 0 ? th.l0 : th.l1;
        }
        for (int b = 0; b < 2; ++b)
          for (int64_t ow = rw.first[b]; ow < rw.end[b]; ++ow) {
            C ww = C(1);
            if (!nearest) {
              const Taps<C> tw = linear_taps<C>(sw, ow, W, p.align_corners);
              ww = b == 0 ? tw.l0 : tw.l1;
            }
            sum += wh * ww * C(gp[oh * Wo + ow]);
          }
      }
    gx[t] = S(sum);
  }
}

template <class S>
__global__ void pad_fwd_kernel_(const S* x, S* y, PadGeom g, PadMode mode, S fill, int64_t total) {
  EMBER_GRID_STRIDE(t, total) {
    const int64_t o2 = t % g.out[2], o1 = (t / g.out[2]) % g.out[1], o0 = (t / (g.out[2] * g.out[1])) % g.out[0];
    const int64_t b = t / (g.out[2] * g.out[1] * g.out[0]);
    const int64_t i0 = pad_src(o0, g.lo[0], g.in[0], mode), i1 = pad_src(o1, g.lo[1], g.in[1], mode);
    const int64_t i2 = pad_src(o2, g.lo[2], g.in[2], mode);
    y[t] = i0 < 0 || i1 < 0 || i2 < 0 ? fill : x[((b * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2];
  }
}

template <class S>
__global__ void pad_bwd_kernel_(const S* gy, S* gx, PadGeom g, PadMode mode, int64_t total) {
  using C = compute_t<S>;
  EMBER_GRID_STRIDE(t, total) {
    const int64_t i2 = t % g.in[2], i1 = (t / g.in[2]) % g.in[1], i0 = (t / (g.in[2] * g.in[1])) % g.in[0];
    const int64_t b = t / (g.in[2] * g.in[1] * g.in[0]);
    int64_t f0[3], e0[3], f1[3], e1[3], f2[3], e2[3];
    const int n0 = pad_dst_ranges(i0, g.lo[0], g.in[0], g.out[0], mode, f0, e0);
    const int n1 = pad_dst_ranges(i1, g.lo[1], g.in[1], g.out[1], mode, f1, e1);
    const int n2 = pad_dst_ranges(i2, g.lo[2], g.in[2], g.out[2], mode, f2, e2);
    C sum = C(0);
    for (int a = 0; a < n0; ++a)
      for (int64_t o0 = f0[a]; o0 < e0[a]; ++o0)
        for (int c = 0; c < n1; ++c)
          for (int64_t o1 = f1[c]; o1 < e1[c]; ++o1) {
            const S* row = gy + ((b * g.out[0] + o0) * g.out[1] + o1) * g.out[2];
            for (int d = 0; d < n2; ++d)
              for (int64_t o2 = f2[d]; o2 < e2[d]; ++o2) sum += C(row[o2]);
          }
    gx[t] = S(sum);
  }
}

#undef EMBER_GRID_STRIDE

}  // namespace

void avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const AvgPool2dParams& p) {
  const int64_t total = y.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(avg_pool2d_fwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(x.data_ptr()), static_cast<S*>(y.data_ptr()), x.sizes()[2], x.sizes()[3],
        y.sizes()[2], y.sizes()[3], p, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const AvgPool2dParams& p) {
  const int64_t total = gx.numel();
  const auto on = ember::cuda::detail::on_device(gx.device());
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(avg_pool2d_bwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(gy.data_ptr()), static_cast<S*>(gx.data_ptr()), gx.sizes()[2], gx.sizes()[3],
        gy.sizes()[2], gy.sizes()[3], p, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void adaptive_avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y) {
  const int64_t H = x.sizes()[2], W = x.sizes()[3], Ho = y.sizes()[2], Wo = y.sizes()[3];
  const int64_t total = y.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x.data_ptr());
    S* ys = static_cast<S*>(y.data_ptr());
    if (Ho == 1 && Wo == 1)
      ::ember::cuda::launch_kernel(global_avg_pool_fwd_kernel<S>, blocks_for(total * 32), kThreads, 0, on.stream,
          xs, ys, total, H * W);
    else
      ::ember::cuda::launch_kernel(adaptive_avg_pool2d_fwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
          xs, ys, H, W, Ho, Wo, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void adaptive_avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx) {
  const int64_t H = gx.sizes()[2], W = gx.sizes()[3], Ho = gy.sizes()[2], Wo = gy.sizes()[3];
  const int64_t total = gx.numel();
  const auto on = ember::cuda::detail::on_device(gx.device());
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* g = static_cast<const S*>(gy.data_ptr());
    S* out = static_cast<S*>(gx.data_ptr());
    if (Ho == 1 && Wo == 1)
      ::ember::cuda::launch_kernel(global_avg_pool_bwd_kernel<S>, blocks_for(total), kThreads, 0, on.stream,
          g, out, H * W, total);
    else
      ::ember::cuda::launch_kernel(adaptive_avg_pool2d_bwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
          g, out, H, W, Ho, Wo, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void adaptive_max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices) {
  const int64_t total = y.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(adaptive_max_pool2d_fwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(x.data_ptr()), static_cast<S*>(y.data_ptr()), static_cast<int64_t*>(indices.data_ptr()),
        x.sizes()[2], x.sizes()[3], y.sizes()[2], y.sizes()[3], total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void upsample2d_fwd_kernel(const Tensor& x, const Tensor& y, const Upsample2dParams& p) {
  const int64_t total = y.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(upsample2d_fwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(x.data_ptr()), static_cast<S*>(y.data_ptr()), x.sizes()[2], x.sizes()[3],
        y.sizes()[2], y.sizes()[3], p, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void upsample2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const Upsample2dParams& p) {
  const int64_t total = gx.numel();
  const auto on = ember::cuda::detail::on_device(gx.device());
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(upsample2d_bwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(gy.data_ptr()), static_cast<S*>(gx.data_ptr()), gx.sizes()[2], gx.sizes()[3],
        gy.sizes()[2], gy.sizes()[3], p, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void pad_fwd_kernel(const Tensor& x, const Tensor& y, const PadGeom& g, PadMode mode, double value) {
  const int64_t total = y.numel();
  const auto on = ember::cuda::detail::on_device(x.device());
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(pad_fwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(x.data_ptr()), static_cast<S*>(y.data_ptr()), g, mode, S(compute_t<S>(value)), total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void pad_bwd_kernel(const Tensor& gy, const Tensor& gx, const PadGeom& g, PadMode mode) {
  const int64_t total = gx.numel();
  const auto on = ember::cuda::detail::on_device(gx.device());
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(pad_bwd_kernel_<S>, blocks_for(total), kThreads, 0, on.stream,
        static_cast<const S*>(gy.data_ptr()), static_cast<S*>(gx.data_ptr()), g, mode, total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
