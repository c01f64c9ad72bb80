// CPU driver for rotary_embedding (kernels/rope.h has the preconditions).
//
// Invariants: rows (b, t, h) of D elements are independent; each is read through x's strides
// and written to its contiguous output row, split across OpenMP threads only above kGrain
// elements. The common layouts (unit stride along D) take a loop the compiler vectorizes.
// Nothing inside the parallel region throws (the front validated everything).
#include <cstdint>

#include "kernels/rope.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kGrain = 32768;

// One row: o[i] = x0 c - x1 s, o[i + half] = x1 c + x0 s, s = sign * sin (sign -1: inverse).
template <class S, class C, bool kUnit>
void rope_row(const S* xr, int64_t sd, const C* cr, const C* sr, C sign, S* o, int64_t half) {
  const int64_t step = kUnit ? 1 : sd;
#pragma omp simd
  for (int64_t i = 0; i < half; ++i) {
    const C x0 = C(xr[i * step]), x1 = C(xr[(i + half) * step]);
    const C c = cr[i], s = sign * sr[i];
    o[i] = S(x0 * c - x1 * s);
    o[i + half] = S(x1 * c + x0 * s);
  }
}

template <class S>
void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out, bool inverse) {
  using C = compute_t<S>;
  const int64_t B = x.sizes()[0], T = x.sizes()[1], H = x.sizes()[2], D = x.sizes()[3];
  const int64_t half = D / 2;
  const int64_t sb = x.strides()[0], st = x.strides()[1], sh = x.strides()[2], sd = x.strides()[3];
  const S* xp = static_cast<const S*>(x.data_ptr());
  const C* cp = static_cast<const C*>(cos.data_ptr());
  const C* spp = static_cast<const C*>(sin.data_ptr());
  S* op = static_cast<S*>(out.data_ptr());
  const C sign = inverse ? C(-1) : C(1);
  const int64_t rows = B * T * H;
  const bool unit = sd == 1;
#pragma omp parallel for schedule(static) if (rows * D >= kGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = r % H, bt = r / H, t = bt % T, b = bt / T;
    const S* xr = xp + b * sb + t * st + h * sh;
    const C* cr = cp + t * half;
    const C* sr = spp + t * half;
    if (unit) rope_row<S, C, true>(xr, 1, cr, sr, sign, op + r * D, half);
    else rope_row<S, C, false>(xr, sd, cr, sr, sign, op + r * D, half);
  }
}

}  // namespace

void rope_fwd_kernel(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out) {
  visit_floating(x.dtype(), [&](auto tag) { rope<decltype(tag)>(x, cos, sin, out, false); });
}

void rope_bwd_kernel(const Tensor& grad, const Tensor& cos, const Tensor& sin, const Tensor& dx) {
  visit_floating(grad.dtype(), [&](auto tag) { rope<decltype(tag)>(grad, cos, sin, dx, true); });
}

}  // namespace ember::ops::cpu
