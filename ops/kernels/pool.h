#pragma once
// Kernels of the pool family (ops/cpu/pool.cpp, ops/cuda/pool.cu) and the index math both
// backends share, so their windows, bins and source indices are the same by construction.
#include <cmath>

#include "dispatch.h"
#include "ember/macros.h"
#include "ember/ops/pool.h"

namespace ember::ops {

// A padded tensor viewed as [outer, d0, d1, d2] (d2 innermost); unpadded trailing slots have
// size 1 and pad 0. out = in + lo + hi per dim.
struct PadGeom {
  int64_t outer = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, lo[3] = {0, 0, 0};
};

namespace pool_index {

EMBER_HD inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
EMBER_HD inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// Adaptive bin [start, end) of output i (PyTorch's start_index / end_index).
EMBER_HD inline int64_t adaptive_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
EMBER_HD inline int64_t adaptive_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}
// The outputs [first, last] whose bins contain input j: the inverse of the two above.
EMBER_HD inline int64_t adaptive_first_out(int64_t j, int64_t in, int64_t out) { return (j * out) / in; }
EMBER_HD inline int64_t adaptive_last_out(int64_t j, int64_t in, int64_t out) {
  return ((j + 1) * out + in - 1) / in - 1;
}

// avg_pool2d's window extent along one dim at output o (PyTorch's CPU and CUDA kernels): the
// window clipped to the padded input for count_include_pad, clipped to the input otherwise.
EMBER_HD inline int64_t avg_extent(int64_t o, int64_t k, int64_t s, int64_t pad, int64_t in, bool count_include_pad) {
  int64_t start = o * s - pad, end = min64(start + k, in + pad);
  if (count_include_pad) return end - start;
  start = max64(start, 0);
  end = min64(end, in);
  return end > start ? end - start : 0;
}
// The divisor of output (oh, ow): the product of the extents (so it factors per dim).
EMBER_HD inline int64_t avg_divisor(int64_t oh, int64_t ow, int64_t H, int64_t W, const AvgPool2dParams& p) {
  if (p.divisor_override > 0) return p.divisor_override;
  return avg_extent(oh, p.kernel[0], p.stride[0], p.padding[0], H, p.count_include_pad) *
         avg_extent(ow, p.kernel[1], p.stride[1], p.padding[1], W, p.count_include_pad);
}
// The outputs [first, last] along one dim whose windows contain input j.
EMBER_HD inline void avg_out_range(int64_t j, int64_t k, int64_t s, int64_t pad, int64_t out, int64_t& first,
                                   int64_t& last) {
  const int64_t num = j + pad - k + 1;  // oh * s >= num
  first = num <= 0 ? 0 : (num + s - 1) / s;
  last = min64((j + pad) / s, out - 1);
}

// PyTorch's area_pixel_compute_scale: the source step per destination index.
template <class A>
EMBER_HD inline A area_scale(int64_t in, int64_t out, bool align_corners, double scale) {
  if (align_corners) return out > 1 ? A(in - 1) / A(out - 1) : A(0);
  return scale > 0 ? A(1.0 / scale) : A(in) / A(out);
}

// Bilinear taps along one dim: src = i0 * l0 + i1 * l1 (i1 == i0 at the last input).
template <class A>
struct Taps {
  int64_t i0, i1;
  A l0, l1;
};
template <class A>
EMBER_HD inline Taps<A> linear_taps(A scale, int64_t dst, int64_t in, bool align_corners) {
  A real = align_corners ? scale * A(dst) : scale * (A(dst) + A(0.5)) - A(0.5);
  if (real < A(0)) real = A(0);
  const int64_t i0 = min64(int64_t(real), in - 1);
  A l1 = real - A(i0);
  l1 = l1 < A(0) ? A(0) : (l1 > A(1) ? A(1) : l1);
  return {i0, i0 + (i0 < in - 1 ? 1 : 0), A(1) - l1, l1};
}

// PyTorch's nearest_idx: floor(dst * scale) in float, with its exact 1x and 2x shortcuts.
EMBER_HD inline int64_t nearest_src(int64_t dst, int64_t in, int64_t out, double scale) {
  if (out == in) return dst;
  if (out == 2 * in) return dst >> 1;
  const float s = area_scale<float>(in, out, false, scale);
  return min64(int64_t(floorf(float(dst) * s)), in - 1);
}

// First destination index in [0, out) whose f(dst) >= v (f non-decreasing): the backward
// gathers find the outputs that read an input by bisection over the forward's own formula,
// so forward and backward agree to the last rounding.
template <class F>
EMBER_HD inline int64_t lower_bound(int64_t out, int64_t v, F f) {
  int64_t lo = 0, hi = out;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (f(mid) < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// Source index of output o along a padded dim of input extent n (-1: the constant value).
EMBER_HD inline int64_t pad_src(int64_t o, int64_t lo, int64_t n, PadMode m) {
  int64_t i = o - lo;
  if (m == PadMode::constant) return i >= 0 && i < n ? i : -1;
  if (m == PadMode::replicate) return i < 0 ? 0 : (i >= n ? n - 1 : i);
  if (i < 0) i = -i;  // reflect: pads < n, so one reflection suffices
  if (i >= n) i = 2 * (n - 1) - i;
  return i;
}
// The outputs that copy input i along one dim, as up to 3 disjoint ranges [first[r], end[r])
// in ascending order; returns how many.
EMBER_HD inline int pad_dst_ranges(int64_t i, int64_t lo, int64_t n, int64_t out, PadMode m, int64_t* first,
                                   int64_t* end) {
  int r = 0;
  if (m == PadMode::replicate) {
    const int64_t f = i == 0 ? 0 : i + lo, e = i == n - 1 ? out : i + lo + 1;
    first[r] = f;
    end[r++] = e;
    return r;
  }
  if (m == PadMode::reflect && i >= 1 && i <= lo) {  // left reflection, o = lo - i < lo
    first[r] = lo - i;
    end[r++] = lo - i + 1;
  }
  const int64_t o = i + lo;
  if (o >= 0 && o < out) {
    first[r] = o;
    end[r++] = o + 1;
  }
  if (m == PadMode::reflect) {  // right reflection, o = lo + 2 (n - 1) - i >= lo + n
    const int64_t orr = lo + 2 * (n - 1) - i;
    if (i <= n - 2 && orr < out) {
      first[r] = orr;
      end[r++] = orr + 1;
    }
  }
  return r;
}

}  // namespace pool_index
}  // namespace ember::ops

// Preconditions the front guarantees: tensors contiguous, on one device, one floating dtype
// (pad forward: any dtype; indices: i64); shapes consistent with the params; outputs freshly
// allocated, non-empty, not overlapping inputs. Every kernel overwrites its whole output.
#define EMBER_POOL_KERNELS                                                                              \
  void avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const AvgPool2dParams& p);              \
  void avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const AvgPool2dParams& p);            \
  void adaptive_avg_pool2d_fwd_kernel(const Tensor& x, const Tensor& y);                               \
  void adaptive_avg_pool2d_bwd_kernel(const Tensor& gy, const Tensor& gx);                             \
  void adaptive_max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices);        \
  void upsample2d_fwd_kernel(const Tensor& x, const Tensor& y, const Upsample2dParams& p);              \
  void upsample2d_bwd_kernel(const Tensor& gy, const Tensor& gx, const Upsample2dParams& p);            \
  void pad_fwd_kernel(const Tensor& x, const Tensor& y, const PadGeom& g, PadMode mode, double value); \
  void pad_bwd_kernel(const Tensor& gy, const Tensor& gx, const PadGeom& g, PadMode mode);

EMBER_DECLARE_KERNELS(EMBER_POOL_KERNELS)
