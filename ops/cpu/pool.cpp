// CPU avg / adaptive pooling, upsampling and padding, forward and backward.
//
// Invariants: buffers are dense (the front made them contiguous); work is split over
// independent planes (or rows), each written by one thread, so results do not depend on the
// thread count. Sums run in compute_t (f32 for 16-bit, f64 for f64) and round once.
// Backward passes are gathers (each input element sums the outputs that read it, in
// ascending output order), except upsample2d's, which scatters into a per-thread plane of
// accumulators in output order: both fixed orders, so every run gives the same bits.
// The windows, bins and source indices come from ops/kernels/pool.h, shared with CUDA.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/pool.h"

namespace ember::ops::cpu {

namespace {

using namespace pool_index;

constexpr int64_t kGrain = 32768;  // elements touched below which one thread does it all

bool parallel(int64_t work) { return work > kGrain && !omp_in_parallel(); }

template <class S>
const S* in_ptr(const Tensor& t) {
  return static_cast<const S*>(t.data_ptr());
}
template <class S>
S* out_ptr(const Tensor& t) {
  return static_cast<S*>(t.data_ptr());
}

}  // namespace

void avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const AvgPool2dParams& p) {
  const int64_t planes = x.sizes()[0] * x.sizes()[1], H = x.sizes()[2], W = x.sizes()[3];
  const int64_t Ho = y.sizes()[2], Wo = y.sizes()[3];
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* xs = in_ptr<S>(x);
    S* ys = out_ptr<S>(y);
#pragma omp parallel for schedule(static) if (parallel(planes * Ho * Wo * p.kernel[0] * p.kernel[1]))
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* xp = xs + pl * H * W;
      S* yp = ys + pl * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t h0 = oh * p.stride[0] - p.padding[0];
        const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + p.kernel[0], H);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = ow * p.stride[1] - p.padding[1];
          const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + p.kernel[1], W);
          C sum = C(0);
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw) sum += C(xp[ih * W + iw]);
          // A ceil_mode window entirely in the padding has no elements: 0, as PyTorch.
          yp[oh * Wo + ow] = hs < he && ws < we ? S(sum / C(avg_divisor(oh, ow, H, W, p))) : S(0);
        }
      }
    }
  });
}

// The divisor factors per dim (avg_divisor), so the gather runs in two separable passes per
// plane: along W into t[Ho, W] (t[oh, iw] = sum over the ow reading iw of gy[oh, ow] / ext_w(ow)),
// then along H (dx[ih, :] = sum over the oh reading ih of t[oh, :] / ext_h(oh)), a contiguous
// row update. About 3 multiply-adds per input element instead of kh * kw per output.
void avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const AvgPool2dParams& p) {
  const int64_t planes = gx.sizes()[0] * gx.sizes()[1], H = gx.sizes()[2], W = gx.sizes()[3];
  const int64_t Ho = gy.sizes()[2], Wo = gy.sizes()[3];
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    // Per-dim factors of 1 / divisor (0 for an empty window, which no input reads).
    std::vector<C> rh(static_cast<size_t>(Ho)), rw(static_cast<size_t>(Wo));
    for (int64_t o = 0; o < Ho; ++o) {
      const int64_t e = p.divisor_override > 0 ? p.divisor_override
                                               : avg_extent(o, p.kernel[0], p.stride[0], p.padding[0], H, p.count_include_pad);
      rh[size_t(o)] = e > 0 ? C(1) / C(e) : C(0);
    }
    for (int64_t o = 0; o < Wo; ++o) {
      const int64_t e = p.divisor_override > 0 ? 1 : avg_extent(o, p.kernel[1], p.stride[1], p.padding[1], W, p.count_include_pad);
      rw[size_t(o)] = e > 0 ? C(1) / C(e) : C(0);
    }
    // The output ranges reading every input column and row (same for all planes).
    std::vector<int64_t> wf(static_cast<size_t>(W)), wl(static_cast<size_t>(W));
    std::vector<int64_t> hf(static_cast<size_t>(H)), hl(static_cast<size_t>(H));
    for (int64_t i = 0; i < W; ++i) avg_out_range(i, p.kernel[1], p.stride[1], p.padding[1], Wo, wf[size_t(i)], wl[size_t(i)]);
    for (int64_t i = 0; i < H; ++i) avg_out_range(i, p.kernel[0], p.stride[0], p.padding[0], Ho, hf[size_t(i)], hl[size_t(i)]);
    const S* g = in_ptr<S>(gy);
    S* out = out_ptr<S>(gx);
#pragma omp parallel if (parallel(planes * (H * W + Ho * W) * 2))
    {
      std::vector<C> t(static_cast<size_t>(Ho * W)), row(static_cast<size_t>(W));
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl) {
        const S* gp = g + pl * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const S* grow = gp + oh * Wo;
          C* trow = t.data() + oh * W;
          for (int64_t iw = 0; iw < W; ++iw) {
            C sum = C(0);
            for (int64_t ow = wf[size_t(iw)]; ow <= wl[size_t(iw)]; ++ow) sum += C(grow[ow]) * rw[size_t(ow)];
            trow[iw] = sum;
          }
        }
        S* op = out + pl * H * W;
        for (int64_t ih = 0; ih < H; ++ih) {
          std::fill(row.begin(), row.end(), C(0));
          for (int64_t oh = hf[size_t(ih)]; oh <= hl[size_t(ih)]; ++oh) {
            const C f = rh[size_t(oh)];
            const C* trow = t.data() + oh * W;
#pragma omp simd
            for (int64_t iw = 0; iw < W; ++iw) row[size_t(iw)] += trow[iw] * f;
          }
          S* orow = op + ih * W;
          for (int64_t iw = 0; iw < W; ++iw) orow[iw] = S(row[size_t(iw)]);
        }
      }
    }
  });
}

void adaptive_avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y) {
  const int64_t planes = x.sizes()[0] * x.sizes()[1], H = x.sizes()[2], W = x.sizes()[3];
  const int64_t Ho = y.sizes()[2], Wo = y.sizes()[3];
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* xs = in_ptr<S>(x);
    S* ys = out_ptr<S>(y);
    if (Ho == 1 && Wo == 1) {  // the global pool (ResNet's head): one contiguous mean per plane
      const int64_t hw = H * W;
#pragma omp parallel for schedule(static) if (parallel(planes * hw))
      for (int64_t pl = 0; pl < planes; ++pl) {
        const S* xp = xs + pl * hw;
        C sum = C(0);
#pragma omp simd reduction(+ : sum)
        for (int64_t i = 0; i < hw; ++i) sum += C(xp[i]);
        ys[pl] = S(sum / C(hw));
      }
      return;
    }
#pragma omp parallel for schedule(static) if (parallel(planes * H * W))
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* xp = xs + pl * H * W;
      S* yp = ys + pl * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t hs = adaptive_start(oh, H, Ho), he = adaptive_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t ws = adaptive_start(ow, W, Wo), we = adaptive_end(ow, W, Wo);
          C sum = C(0);
          for (int64_t ih = hs; ih < he; ++ih)
            for (int64_t iw = ws; iw < we; ++iw) sum += C(xp[ih * W + iw]);
          yp[oh * Wo + ow] = S(sum / C((he - hs) * (we - ws)));
        }
      }
    }
  });
}

void adaptive_avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx) {
  const int64_t planes = gx.sizes()[0] * gx.sizes()[1], H = gx.sizes()[2], W = gx.sizes()[3];
  const int64_t Ho = gy.sizes()[2], Wo = gy.sizes()[3];
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* g = in_ptr<S>(gy);
    S* out = out_ptr<S>(gx);
    if (Ho == 1 && Wo == 1) {
      const int64_t hw = H * W;
#pragma omp parallel for schedule(static) if (parallel(planes * hw))
      for (int64_t pl = 0; pl < planes; ++pl) {
        const S v = S(C(g[pl]) / C(hw));
        std::fill(out + pl * hw, out + (pl + 1) * hw, v);
      }
      return;
    }
#pragma omp parallel for schedule(static) if (parallel(planes * H * W))
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* gp = g + pl * Ho * Wo;
      S* op = out + pl * H * W;
      for (int64_t ih = 0; ih < H; ++ih) {
        const int64_t hf = adaptive_first_out(ih, H, Ho), hl = adaptive_last_out(ih, H, Ho);
        for (int64_t iw = 0; iw < W; ++iw) {
          const int64_t wf = adaptive_first_out(iw, W, Wo), wl = adaptive_last_out(iw, W, Wo);
          C sum = C(0);
          for (int64_t oh = hf; oh <= hl; ++oh) {
            const int64_t bh = adaptive_end(oh, H, Ho) - adaptive_start(oh, H, Ho);
            for (int64_t ow = wf; ow <= wl; ++ow) {
              const int64_t bw = adaptive_end(ow, W, Wo) - adaptive_start(ow, W, Wo);
              sum += C(gp[oh * Wo + ow]) / C(bh * bw);
            }
          }
          op[ih * W + iw] = S(sum);
        }
      }
    }
  });
}

void adaptive_max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices) {
  const int64_t planes = x.sizes()[0] * x.sizes()[1], H = x.sizes()[2], W = x.sizes()[3];
  const int64_t Ho = y.sizes()[2], Wo = y.sizes()[3];
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* xs = in_ptr<S>(x);
    S* ys = out_ptr<S>(y);
    int64_t* is = out_ptr<int64_t>(indices);
#pragma omp parallel for schedule(static) if (parallel(planes * H * W))
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* xp = xs + pl * H * W;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        const int64_t hs = adaptive_start(oh, H, Ho), he = adaptive_end(oh, H, Ho);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t ws = adaptive_start(ow, W, Wo), we = adaptive_end(ow, W, Wo);
          // max_pool2d's rule (ops/cpu/conv.cpp): the first maximum wins, NaN wins and stops.
          int64_t best_i = hs * W + ws;
          C best = C(xp[best_i]);
          for (int64_t ih = hs; ih < he && !std::isnan(best); ++ih)
            for (int64_t iw = ws; iw < we; ++iw) {
              const C v = C(xp[ih * W + iw]);
              if (v > best || std::isnan(v)) {
                best = v;
                best_i = ih * W + iw;
                if (std::isnan(v)) break;
              }
            }
          const int64_t o = pl * Ho * Wo + oh * Wo + ow;
          ys[o] = S(best);
          is[o] = best_i;
        }
      }
    }
  });
}

namespace {

// Per-dim source tables of an upsample: nearest sources, or bilinear taps.
template <class C>
struct UpsampleTables {
  std::vector<int64_t> nh, nw;
  std::vector<Taps<C>> th, tw;
  UpsampleTables(int64_t H, int64_t W, int64_t Ho, int64_t Wo, const Upsample2dParams& p) {
    if (p.mode == InterpolateMode::nearest) {
      for (int64_t o = 0; o < Ho; ++o) nh.push_back(nearest_src(o, H, Ho, p.scale[0]));
      for (int64_t o = 0; o < Wo; ++o) nw.push_back(nearest_src(o, W, Wo, p.scale[1]));
    } else {
      const C sh = area_scale<C>(H, Ho, p.align_corners, p.scale[0]);
      const C sw = area_scale<C>(W, Wo, p.align_corners, p.scale[1]);
      for (int64_t o = 0; o < Ho; ++o) th.push_back(linear_taps<C>(sh, o, H, p.align_corners));
      for (int64_t o = 0; o < Wo; ++o) tw.push_back(linear_taps<C>(sw, o, W, p.align_corners));
    }
  }
};

}  // namespace

void upsample2d_fwd_kernel(const Tensor& x, const Tensor& y, const Upsample2dParams& p) {
  const int64_t planes = x.sizes()[0] * x.sizes()[1], H = x.sizes()[2], W = x.sizes()[3];
  const int64_t Ho = y.sizes()[2], Wo = y.sizes()[3];
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const UpsampleTables<C> t(H, W, Ho, Wo, p);
    const S* xs = in_ptr<S>(x);
    S* ys = out_ptr<S>(y);
    const bool nearest = p.mode == InterpolateMode::nearest;
#pragma omp parallel for schedule(static) if (parallel(planes * Ho * Wo * (nearest ? 1 : 4)))
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* xp = xs + pl * H * W;
      S* yp = ys + pl * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        S* row = yp + oh * Wo;
        if (nearest) {
          const S* src = xp + t.nh[size_t(oh)] * W;
          for (int64_t ow = 0; ow < Wo; ++ow) row[ow] = src[t.nw[size_t(ow)]];
          continue;
        }
        const Taps<C> h = t.th[size_t(oh)];
        const S* r0 = xp + h.i0 * W;
        const S* r1 = xp + h.i1 * W;
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const Taps<C> w = t.tw[size_t(ow)];
          row[ow] = S(h.l0 * (w.l0 * C(r0[w.i0]) + w.l1 * C(r0[w.i1])) +
                      h.l1 * (w.l0 * C(r1[w.i0]) + w.l1 * C(r1[w.i1])));
        }
      }
    }
  });
}

void upsample2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const Upsample2dParams& p) {
  const int64_t planes = gx.sizes()[0] * gx.sizes()[1], H = gx.sizes()[2], W = gx.sizes()[3];
  const int64_t Ho = gy.sizes()[2], Wo = gy.sizes()[3];
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const UpsampleTables<C> t(H, W, Ho, Wo, p);
    const S* g = in_ptr<S>(gy);
    S* out = out_ptr<S>(gx);
    const bool nearest = p.mode == InterpolateMode::nearest;
#pragma omp parallel if (parallel(planes * (Ho * Wo * (nearest ? 1 : 4) + H * W)))
    {
      std::vector<C> acc(size_t(H * W));
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl) {
        std::fill(acc.begin(), acc.end(), C(0));
        const S* gp = g + pl * Ho * Wo;
        for (int64_t oh = 0; oh < Ho; ++oh) {
          const S* row = gp + oh * Wo;
          if (nearest) {
            C* dst = acc.data() + t.nh[size_t(oh)] * W;
            for (int64_t ow = 0; ow < Wo; ++ow) dst[t.nw[size_t(ow)]] += C(row[ow]);
            continue;
          }
          const Taps<C> h = t.th[size_t(oh)];
          C* a0 = acc.data() + h.i0 * W;
          C* a1 = acc.data() + h.i1 * W;
          for (int64_t ow = 0; ow < Wo; ++ow) {
            const Taps<C> w = t.tw[size_t(ow)];
            const C v = C(row[ow]);
            a0[w.i0] += h.l0 * w.l0 * v;
            a0[w.i1] += h.l0 * w.l1 * v;
            a1[w.i0] += h.l1 * w.l0 * v;
            a1[w.i1] += h.l1 * w.l1 * v;
          }
        }
        S* op = out + pl * H * W;
        for (int64_t i = 0; i < H * W; ++i) op[i] = S(acc[size_t(i)]);
      }
    }
  });
}

void pad_fwd_kernel(const Tensor& x, const Tensor& y, const PadGeom& g, PadMode mode, double value) {
  const int64_t rows = g.outer * g.out[0] * g.out[1];
  const int64_t n2 = g.in[2], o2 = g.out[2], lo2 = g.lo[2];
  // The output columns that copy input columns one to one: [c0, c1).
  const int64_t c0 = std::clamp<int64_t>(lo2, 0, o2), c1 = std::clamp<int64_t>(lo2 + n2, c0, o2);
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S fill = S(compute_t<S>(value));
    const S* xs = in_ptr<S>(x);
    S* ys = out_ptr<S>(y);
#pragma omp parallel for schedule(static) if (parallel(rows * o2))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o1 = r % g.out[1], o0 = (r / g.out[1]) % g.out[0], b = r / (g.out[1] * g.out[0]);
      S* dst = ys + r * o2;
      const int64_t i0 = pad_src(o0, g.lo[0], g.in[0], mode), i1 = pad_src(o1, g.lo[1], g.in[1], mode);
      if (i0 < 0 || i1 < 0) {
        std::fill(dst, dst + o2, fill);
        continue;
      }
      const S* src = xs + ((b * g.in[0] + i0) * g.in[1] + i1) * n2;
      for (int64_t o = 0; o < c0; ++o) {
        const int64_t i = pad_src(o, lo2, n2, mode);
        dst[o] = i < 0 ? fill : src[i];
      }
      if (c1 > c0) std::copy(src + (c0 - lo2), src + (c1 - lo2), dst + c0);
      for (int64_t o = c1; o < o2; ++o) {
        const int64_t i = pad_src(o, lo2, n2, mode);
        dst[o] = i < 0 ? fill : src[i];
      }
    }
  });
}

void pad_bwd_kernel(const Tensor& gy, const Tensor& gx, const PadGeom& g, PadMode mode) {
  const int64_t rows = g.outer * g.in[0] * g.in[1];
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* gs = in_ptr<S>(gy);
    S* out = out_ptr<S>(gx);
#pragma omp parallel for schedule(static) if (parallel(rows * g.in[2]))
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i1 = r % g.in[1], i0 = (r / g.in[1]) % g.in[0], b = r / (g.in[1] * g.in[0]);
      int64_t f0[3], e0[3], f1[3], e1[3], f2[3], e2[3];
      const int n0 = pad_dst_ranges(i0, g.lo[0], g.in[0], g.out[0], mode, f0, e0);
      const int n1 = pad_dst_ranges(i1, g.lo[1], g.in[1], g.out[1], mode, f1, e1);
      S* dst = out + r * g.in[2];
      for (int64_t i2 = 0; i2 < g.in[2]; ++i2) {
        const int n2 = pad_dst_ranges(i2, g.lo[2], g.in[2], g.out[2], mode, f2, e2);
        C sum = C(0);
        for (int a = 0; a < n0; ++a)
          for (int64_t o0 = f0[a]; o0 < e0[a]; ++o0)
            for (int c = 0; c < n1; ++c)
              for (int64_t o1 = f1[c]; o1 < e1[c]; ++o1) {
                const S* row = gs + ((b * g.out[0] + o0) * g.out[1] + o1) * g.out[2];
                for (int d = 0; d < n2; ++d)
                  for (int64_t o2 = f2[d]; o2 < e2[d]; ++o2) sum += C(row[o2]);
              }
        dst[i2] = S(sum);
      }
    }
  });
}

}  // namespace ember::ops::cpu
