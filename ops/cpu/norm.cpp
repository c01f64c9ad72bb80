// CPU driver for the fused normalization family: batch norm, group norm and RMS norm, forward
// and backward (kernels/norm.h has the preconditions).
//
// Invariants:
// - Batch norm works channel by channel, one OpenMP thread per channel from start to finish
//   (an [N, C] input, HW == 1, or a channels_last one: by chunks of rows, see the rows kernels):
//   a channel's N segments of HW contiguous elements are read once from memory, and the later
//   passes over the same channel (the variance around the mean, the normalization; the dx
//   pass of backward) find it in L2 (a channel of [128, C, 28, 28] is 400 KB). Small planes
//   (HW < kMinSegment) and 16-bit storage are gathered into a per-thread f32 buffer first.
// - Group norm works on rows (n, group), each Cg * HW contiguous elements, one thread per row.
// - RMS norm works on rows of `cols` contiguous elements; dweight sums fixed row chunks in a
//   fixed order (as layer norm's), so results do not depend on the thread count anywhere.
// - Sums: each contiguous segment is summed in the compute type (vectorized) and folded into
//   an f64 total; variances are two-pass around the mean, so large offsets do not cancel.
// - Nothing inside an OpenMP region throws (the front validated everything).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "eigen_util.h"
#include "kernels/norm.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kGrain = 32768;     // elements of work below which one thread is faster
constexpr int64_t kMinSegment = 16;   // shorter planes are gathered (strided) into a buffer

template <class C>
C* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<C*>(t.data_ptr()) : nullptr;
}

// sum(p[0..n) - m) and sum((p - m)^2) in C, vectorized; callers fold them into f64. The
// mean is summed shifted by a value of the data (its first element): around a large mean
// (|mean| >> std) an unshifted f32 sum rounds at the mean's magnitude and the mean comes out
// several ulps off, which the normalized output multiplies by 1/std.
template <class C>
C seg_sum(const C* p, int64_t n, C m) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += p[i] - m;
  return s;
}
template <class C>
C seg_sq(const C* p, int64_t n, C m) {
  C s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) {
    const C d = p[i] - m;
    s += d * d;
  }
  return s;
}

// The same over a long run, in blocks of kBlock folded into f64 (bounded f32 rounding).
constexpr int64_t kBlock = 1024;
template <class C>
double long_sum(const C* p, int64_t n, C m) {
  double s = 0;
  for (int64_t i = 0; i < n; i += kBlock) s += double(seg_sum(p + i, std::min(kBlock, n - i), m));
  return s;
}
template <class C>
double long_sq(const C* p, int64_t n, C m) {
  double s = 0;
  for (int64_t i = 0; i < n; i += kBlock) s += double(seg_sq(p + i, std::min(kBlock, n - i), m));
  return s;
}

// One channel of an [N, C, HW] tensor as N segments of HW compute-type values `stride`
// apart: the storage itself (S == C, HW >= kMinSegment) or a gathered copy in `buf`.
template <class C>
struct Planes {
  const C* base;
  int64_t stride, N, HW;
  const C* seg(int64_t n) const { return base + n * stride; }
};
template <class C, class S>
Planes<C> channel(const S* x, int64_t c, int64_t N, int64_t Cn, int64_t HW, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>)
    if (HW >= kMinSegment) return {x + c * HW, Cn * HW, N, HW};
  buf.resize(size_t(N * HW));
  for (int64_t n = 0; n < N; ++n) {
    const S* s = x + (n * Cn + c) * HW;
    C* d = buf.data() + n * HW;
    for (int64_t i = 0; i < HW; ++i) d[i] = C(s[i]);
  }
  return {buf.data(), HW, N, HW};
}

// out[i] = a * p[i] + b, rounded once to S.
template <class C, class S>
void affine_store(const C* p, S* out, int64_t n, C a, C b) {
  if constexpr (std::is_same_v<S, C>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = a * p[i] + b;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = S(a * p[i] + b);
  }
}
// out[i] = k1 * g[i] + k2 * x[i] + k3, rounded once to S.
template <class C, class S>
void dx_store(const C* g, const C* x, S* out, int64_t n, C k1, C k2, C k3) {
  if constexpr (std::is_same_v<S, C>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = k1 * g[i] + k2 * x[i] + k3;
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = S(k1 * g[i] + k2 * x[i] + k3);
  }
}

// Runs body(i) for i in [0, n), in parallel when the total work is large enough.
template <class F>
void parallel_items(int64_t n, int64_t work_per_item, F&& body) {
  if (n * std::max<int64_t>(work_per_item, 1) < kGrain || n == 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) body(i);
}

// ---- batch norm ----

// One channel's statistics, finished: in training from its batch (mean mu and sum of squared
// deviations m2 over M values; the running statistics updated with the unbiased variance), else
// its running estimates. Writes the saved mean and invstd and returns the normalization as the
// affine {scale, shift} (the weight and bias folded in).
template <class C>
std::pair<double, double> finish_channel(int64_t c, bool training, double mu, double m2, int64_t M, double momentum,
                                         double eps, const C* w, const C* b, C* mp, C* ip, C* rm, C* rv) {
  double is;
  if (training) {
    is = 1.0 / std::sqrt(m2 / double(M) + eps);
    if (rm) {
      rm[c] = C((1.0 - momentum) * double(rm[c]) + momentum * mu);
      rv[c] = C((1.0 - momentum) * double(rv[c]) + momentum * m2 / double(M - 1));
    }
  } else {
    mu = double(rm[c]);
    is = 1.0 / std::sqrt(double(rv[c]) + eps);
  }
  mp[c] = C(mu);
  ip[c] = C(is);
  const double scale = is * (w ? double(w[c]) : 1.0);
  return {scale, (b ? double(b[c]) : 0.0) - mu * scale};
}

// Rows [M, C] with the channels innermost: BatchNorm1d's [N, C] input (HW == 1) and a
// channels_last [N, C, H, W] (Note [Memory format]) as [N*H*W, C]. The rows are cut into
// chunks of kRowChunk (a fixed cut, so results do not depend on the thread count); each
// chunk's per-channel mean and sum of squared deviations come from two passes over the chunk
// while it is in L1, in parallel across chunks, and are merged in chunk order by Chan's
// pairwise formula in f64. The normalization (backward: dx) is one more parallel pass.
constexpr int64_t kRowChunk = 128;

template <class F>
void for_row_chunks(int64_t M, int64_t Cn, int64_t passes, F&& body) {
  const int64_t chunks = (M + kRowChunk - 1) / kRowChunk;
  parallel_items(chunks, passes * kRowChunk * Cn, [&](int64_t k) {
    const int64_t r0 = k * kRowChunk;
    body(k, r0, std::min(kRowChunk, M - r0));
  });
}

template <class S>
void batch_norm_fwd_rows(const S* xp, S* yp, const compute_t<S>* w, const compute_t<S>* b,
                         compute_t<S>* mp, compute_t<S>* ip, compute_t<S>* rm, compute_t<S>* rv,
                         int64_t M, int64_t Cn, bool training, double momentum, double eps) {
  using C = compute_t<S>;
  const int64_t chunks = (M + kRowChunk - 1) / kRowChunk;
  std::vector<double> mean(static_cast<size_t>(Cn)), m2(static_cast<size_t>(Cn));
  if (training) {
    std::vector<double> cmean(static_cast<size_t>(chunks * Cn)), cm2(static_cast<size_t>(chunks * Cn));
    for_row_chunks(M, Cn, 2, [&](int64_t k, int64_t r0, int64_t n) {
      double* mu = cmean.data() + k * Cn;
      double* sq = cm2.data() + k * Cn;
      for (int64_t r = r0; r < r0 + n; ++r)
        for (int64_t c = 0; c < Cn; ++c) mu[c] += double(C(xp[r * Cn + c]));
      for (int64_t c = 0; c < Cn; ++c) mu[c] /= double(n);
      for (int64_t r = r0; r < r0 + n; ++r)
        for (int64_t c = 0; c < Cn; ++c) {
          const double d = double(C(xp[r * Cn + c])) - mu[c];
          sq[c] += d * d;
        }
    });
    for (int64_t c = 0; c < Cn; ++c) {
      double mu = cmean[size_t(c)], q = cm2[size_t(c)], count = double(std::min(kRowChunk, M));
      for (int64_t k = 1; k < chunks; ++k) {
        const double nk = double(std::min(kRowChunk, M - k * kRowChunk)), total = count + nk;
        const double delta = cmean[size_t(k * Cn + c)] - mu;
        mu += delta * nk / total;
        q += cm2[size_t(k * Cn + c)] + delta * delta * count * nk / total;
        count = total;
      }
      mean[size_t(c)] = mu;
      m2[size_t(c)] = q;
    }
  }
  std::vector<C> scale(static_cast<size_t>(Cn)), shift(static_cast<size_t>(Cn));
  for (int64_t c = 0; c < Cn; ++c) {
    const auto [sc, sh] =
        finish_channel<C>(c, training, mean[size_t(c)], m2[size_t(c)], M, momentum, eps, w, b, mp, ip, rm, rv);
    scale[size_t(c)] = C(sc);
    shift[size_t(c)] = C(sh);
  }
  const C* a = scale.data();
  const C* s = shift.data();
  for_row_chunks(M, Cn, 1, [&](int64_t, int64_t r0, int64_t n) {
    for (int64_t r = r0; r < r0 + n; ++r)
#pragma omp simd
      for (int64_t c = 0; c < Cn; ++c) yp[r * Cn + c] = S(a[c] * C(xp[r * Cn + c]) + s[c]);
  });
}

template <class S>
void batch_norm_bwd_rows(const S* gp, const S* xp, const compute_t<S>* w, const compute_t<S>* mp,
                         const compute_t<S>* ip, S* dxp, compute_t<S>* dwp, compute_t<S>* dbp,
                         int64_t M, int64_t Cn, bool training) {
  using C = compute_t<S>;
  const int64_t chunks = (M + kRowChunk - 1) / kRowChunk;
  // Per chunk: sum(g) and sum(g * (x - mean)), folded in chunk order below.
  std::vector<double> csg(static_cast<size_t>(chunks * Cn)), csgx(static_cast<size_t>(chunks * Cn));
  for_row_chunks(M, Cn, 2, [&](int64_t k, int64_t r0, int64_t n) {
    double* sg = csg.data() + k * Cn;
    double* sgx = csgx.data() + k * Cn;
    for (int64_t r = r0; r < r0 + n; ++r)
      for (int64_t c = 0; c < Cn; ++c) {
        const double g = double(C(gp[r * Cn + c]));
        sg[c] += g;
        sgx[c] += g * (double(C(xp[r * Cn + c])) - double(mp[c]));
      }
  });
  std::vector<C> k1(static_cast<size_t>(Cn)), k2(static_cast<size_t>(Cn)), k3(static_cast<size_t>(Cn));
  for (int64_t c = 0; c < Cn; ++c) {
    double sg = 0, sgx = 0;
    for (int64_t k = 0; k < chunks; ++k) sg += csg[size_t(k * Cn + c)], sgx += csgx[size_t(k * Cn + c)];
    const double is = double(ip[c]);
    if (dbp) dbp[c] = C(sg);
    if (dwp) dwp[c] = C(sgx * is);
    const double a = is * (w ? double(w[c]) : 1.0);
    double b2 = 0, b3 = 0;
    if (training) {
      b2 = -a * is * is * sgx / double(M);
      b3 = -a * sg / double(M) - double(mp[c]) * b2;
    }
    k1[size_t(c)] = C(a);
    k2[size_t(c)] = C(b2);
    k3[size_t(c)] = C(b3);
  }
  if (!dxp) return;
  const C* a1 = k1.data();
  const C* a2 = k2.data();
  const C* a3 = k3.data();
  for_row_chunks(M, Cn, 1, [&](int64_t, int64_t r0, int64_t n) {
    for (int64_t r = r0; r < r0 + n; ++r)
#pragma omp simd
      for (int64_t c = 0; c < Cn; ++c) {
        const int64_t at = r * Cn + c;
        dxp[at] = S(a1[c] * C(gp[at]) + a2[c] * C(xp[at]) + a3[c]);
      }
  });
}

template <class S>
void batch_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                    const Tensor& running_var, int64_t N, int64_t Cn, int64_t HW, bool training,
                    double momentum, double eps) {
  using C = compute_t<S>;
  const S* xp = x.data_ptr<S>();
  S* yp = y.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  const C* b = ptr_or_null<C>(bias);
  C* mp = mean.data_ptr<C>();
  C* ip = invstd.data_ptr<C>();
  C* rm = ptr_or_null<C>(running_mean);
  C* rv = ptr_or_null<C>(running_var);
  if (HW == 1) {
    batch_norm_fwd_rows<S>(xp, yp, w, b, mp, ip, rm, rv, N, Cn, training, momentum, eps);
    return;
  }
  const int64_t M = N * HW;
  parallel_items(Cn, M, [&](int64_t c) {
    Buffer<C> buf;
    double mu = 0, sq = 0;
    const Planes<C> pl = channel<C>(xp, c, N, Cn, HW, buf);
    if (training) {
      const C K = M > 0 ? pl.seg(0)[0] : C(0);
      double total = 0;
      for (int64_t n = 0; n < N; ++n) total += long_sum(pl.seg(n), HW, K);
      mu = double(K) + total / double(M);
      for (int64_t n = 0; n < N; ++n) sq += long_sq(pl.seg(n), HW, C(mu));
    }
    const auto [scale, shift] = finish_channel<C>(c, training, mu, sq, M, momentum, eps, w, b, mp, ip, rm, rv);
    for (int64_t n = 0; n < N; ++n)
      affine_store(pl.seg(n), yp + (n * Cn + c) * HW, HW, C(scale), C(shift));
  });
}

template <class S>
void batch_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& invstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t N, int64_t Cn, int64_t HW, bool training) {
  using C = compute_t<S>;
  const S* gp = grad.data_ptr<S>();
  const S* xp = x.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  const C* mp = mean.data_ptr<C>();
  const C* ip = invstd.data_ptr<C>();
  S* dxp = dx.defined() ? dx.data_ptr<S>() : nullptr;
  C* dwp = ptr_or_null<C>(dweight);
  C* dbp = ptr_or_null<C>(dbias);
  if (HW == 1) {
    batch_norm_bwd_rows<S>(gp, xp, w, mp, ip, dxp, dwp, dbp, N, Cn, training);
    return;
  }
  const int64_t M = N * HW;
  parallel_items(Cn, 2 * M, [&](int64_t c) {
    Buffer<C> gbuf, xbuf;
    const Planes<C> gpl = channel<C>(gp, c, N, Cn, HW, gbuf);
    const Planes<C> xpl = channel<C>(xp, c, N, Cn, HW, xbuf);
    const C mu = mp[c];
    const double is = double(ip[c]);
    // sg = sum(g), sgx = sum(g * (x - mean)): the two reductions of every formula below.
    double sg = 0, sgx = 0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i0 = 0; i0 < HW; i0 += kBlock) {
        const C* g = gpl.seg(n) + i0;
        const C* xs = xpl.seg(n) + i0;
        const int64_t len = std::min(kBlock, HW - i0);
        C a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
        for (int64_t i = 0; i < len; ++i) {
          a += g[i];
          bsum += g[i] * (xs[i] - mu);
        }
        sg += double(a);
        sgx += double(bsum);
      }
    }
    if (dbp) dbp[c] = C(sg);
    if (dwp) dwp[c] = C(sgx * is);
    if (!dxp) return;
    const double wc = w ? double(w[c]) : 1.0;
    const double k1 = is * wc;
    double k2 = 0, k3 = 0;
    if (training) {
      // dx = w * invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))
      k2 = -k1 * is * is * sgx / double(M);
      k3 = -k1 * sg / double(M) - double(mu) * k2;
    }
    for (int64_t n = 0; n < N; ++n)
      dx_store(gpl.seg(n), xpl.seg(n), dxp + (n * Cn + c) * HW, HW, C(k1), C(k2), C(k3));
  });
}

// ---- group norm ----

// A row of n storage values as compute-type values: the storage or a converted copy.
template <class C, class S>
const C* row_as(const S* p, int64_t n, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>) return p;
  buf.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) buf[i] = C(p[i]);
  return buf.data();
}

template <class S>
void group_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, int64_t N, int64_t Cn, int64_t HW,
                    int64_t G, double eps) {
  using C = compute_t<S>;
  const S* xp = x.data_ptr<S>();
  S* yp = y.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  const C* b = ptr_or_null<C>(bias);
  C* mp = mean.data_ptr<C>();
  C* rp = rstd.data_ptr<C>();
  const int64_t Cg = Cn / G, L = Cg * HW;
  parallel_items(N * G, L, [&](int64_t row) {
    Buffer<C> buf;
    const C* xr = row_as<C>(xp + row * L, L, buf);
    const C K = L > 0 ? xr[0] : C(0);
    const double mu = double(K) + long_sum(xr, L, K) / double(L);
    const double sq = long_sq(xr, L, C(mu));
    const double rs = 1.0 / std::sqrt(sq / double(L) + eps);
    mp[row] = C(mu);
    rp[row] = C(rs);
    const int64_t c0 = (row % G) * Cg;
    for (int64_t k = 0; k < Cg; ++k) {
      const double scale = rs * (w ? double(w[c0 + k]) : 1.0);
      const double shift = (b ? double(b[c0 + k]) : 0.0) - mu * scale;
      affine_store(xr + k * HW, yp + row * L + k * HW, HW, C(scale), C(shift));
    }
  });
}

template <class S>
void group_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t N, int64_t Cn, int64_t HW, int64_t G) {
  using C = compute_t<S>;
  const S* gp = grad.data_ptr<S>();
  const S* xp = x.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  const C* mp = mean.data_ptr<C>();
  const C* rp = rstd.data_ptr<C>();
  S* dxp = dx.defined() ? dx.data_ptr<S>() : nullptr;
  C* dwp = ptr_or_null<C>(dweight);
  C* dbp = ptr_or_null<C>(dbias);
  const int64_t Cg = Cn / G, L = Cg * HW;
  // Per (n, c): ds = sum_hw g * (x - mean), db = sum_hw g (PyTorch's decomposition, with x
  // centered on its group's mean so that no later difference cancels: the group's sums and
  // the parameter gradients all follow from them).
  std::vector<double> ds(static_cast<size_t>(N * Cn)), db(static_cast<size_t>(N * Cn));
  parallel_items(N * G, 2 * L, [&](int64_t row) {
    Buffer<C> gbuf, xbuf;
    const C* gr = row_as<C>(gp + row * L, L, gbuf);
    const C* xr = row_as<C>(xp + row * L, L, xbuf);
    const int64_t n = row / G, c0 = (row % G) * Cg;
    const C mu_c = mp[row];
    double A = 0, B = 0;  // sum g*w, sum g*w*(x - mean) over the group
    for (int64_t k = 0; k < Cg; ++k) {
      const C* g = gr + k * HW;
      const C* xs = xr + k * HW;
      C a = 0, s = 0;
#pragma omp simd reduction(+ : a, s)
      for (int64_t i = 0; i < HW; ++i) {
        a += g[i];
        s += g[i] * (xs[i] - mu_c);
      }
      const size_t at = size_t(n * Cn + c0 + k);
      db[at] = double(a);
      ds[at] = double(s);
      const double wc = w ? double(w[c0 + k]) : 1.0;
      A += wc * double(a);
      B += wc * double(s);
    }
    if (!dxp) return;
    const double mu = double(mp[row]), rs = double(rp[row]), M = double(L);
    // dx = rs * (g*w - A/M - xhat * rs * B / M), xhat = (x - mu) * rs
    const double k2 = -rs * rs * rs * B / M;
    const double k3 = -rs * A / M - mu * k2;
    for (int64_t k = 0; k < Cg; ++k) {
      const double wc = w ? double(w[c0 + k]) : 1.0;
      dx_store(gr + k * HW, xr + k * HW, dxp + row * L + k * HW, HW, C(rs * wc), C(k2), C(k3));
    }
  });
  for (int64_t c = 0; c < Cn; ++c) {
    const int64_t g = c / Cg;
    double sw = 0, sb = 0;
    for (int64_t n = 0; n < N; ++n) {
      const size_t at = size_t(n * Cn + c);
      sw += ds[at] * double(rp[n * G + g]);
      sb += db[at];
    }
    if (dwp) dwp[c] = C(sw);
    if (dbp) dbp[c] = C(sb);
  }
}

// ---- RMS norm ----

int64_t row_chunks(int64_t rows, int64_t cols) {
  return rows * cols < kGrain ? 1 : std::min<int64_t>(rows, 64);
}

template <class S>
void rms_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                  int64_t cols, double eps) {
  using C = compute_t<S>;
  const S* xp = x.data_ptr<S>();
  S* yp = y.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  C* rp = rstd.data_ptr<C>();
  const int64_t rows = rstd.numel();
  const int64_t chunks = row_chunks(rows, cols), per = (rows + chunks - 1) / chunks;
  parallel_items(chunks, per * cols, [&](int64_t ch) {
    Buffer<C> buf, ybuf;
    const int64_t r1 = std::min(rows, (ch + 1) * per);
    for (int64_t r = ch * per; r < r1; ++r) {
      const C* xr = row_as<C>(xp + r * cols, cols, buf);
      const C rs = C(1.0 / std::sqrt(long_sq(xr, cols, C(0)) / double(cols) + eps));
      rp[r] = rs;
      S* yr = yp + r * cols;
      if constexpr (std::is_same_v<S, C>) {
        if (w) {
#pragma omp simd
          for (int64_t k = 0; k < cols; ++k) yr[k] = xr[k] * rs * w[k];
        } else {
#pragma omp simd
          for (int64_t k = 0; k < cols; ++k) yr[k] = xr[k] * rs;
        }
      } else {
        ybuf.resize(size_t(cols));
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) ybuf[k] = xr[k] * rs * (w ? w[k] : C(1));
        for (int64_t k = 0; k < cols; ++k) yr[k] = S(ybuf[k]);
      }
    }
  });
}

template <class S>
void rms_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                  const Tensor& dx, const Tensor& dweight, int64_t cols) {
  using C = compute_t<S>;
  const S* gp = grad.data_ptr<S>();
  const S* xp = x.data_ptr<S>();
  const C* w = ptr_or_null<C>(weight);
  const C* rp = rstd.data_ptr<C>();
  S* dxp = dx.defined() ? dx.data_ptr<S>() : nullptr;
  C* dwp = ptr_or_null<C>(dweight);
  const int64_t rows = rstd.numel();
  const int64_t chunks = row_chunks(rows, cols), per = (rows + chunks - 1) / chunks;
  // Per-chunk partial sums of g * x * rstd (dweight), in C per row and f64 across rows.
  std::vector<double> pdw(dwp ? size_t(chunks * cols) : 0);
  parallel_items(chunks, 2 * per * cols, [&](int64_t ch) {
    Buffer<C> gbuf, xbuf, dbuf;
    double* cdw = dwp ? pdw.data() + ch * cols : nullptr;
    const int64_t r1 = std::min(rows, (ch + 1) * per);
    for (int64_t r = ch * per; r < r1; ++r) {
      const C* g = row_as<C>(gp + r * cols, cols, gbuf);
      const C* xr = row_as<C>(xp + r * cols, cols, xbuf);
      const C rs = rp[r];
      if (cdw) {
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) cdw[k] += double(g[k] * xr[k] * rs);
      }
      if (!dxp) continue;
      // dx = rs * (g*w - xhat * mean(g*w*xhat)), xhat = x * rs
      C s = 0;
      if (w) {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < cols; ++k) s += g[k] * w[k] * xr[k];
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t k = 0; k < cols; ++k) s += g[k] * xr[k];
      }
      const C k2 = C(-double(rs) * double(rs) * double(rs) * double(s) / double(cols));
      S* dr = dxp + r * cols;
      C* res = std::is_same_v<S, C> ? reinterpret_cast<C*>(dr) : (dbuf.resize(size_t(cols)), dbuf.data());
      if (w) {
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) res[k] = rs * g[k] * w[k] + k2 * xr[k];
      } else {
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) res[k] = rs * g[k] + k2 * xr[k];
      }
      if constexpr (!std::is_same_v<S, C>)
        for (int64_t k = 0; k < cols; ++k) dr[k] = S(res[k]);
    }
  });
  if (!dwp) return;
  for (int64_t k = 0; k < cols; ++k) {
    double s = 0;
    for (int64_t c = 0; c < chunks; ++c) s += pdw[size_t(c * cols + k)];
    dwp[k] = C(s);
  }
}

}  // namespace

void batch_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& y, const Tensor& mean, const Tensor& invstd,
                           const Tensor& running_mean, const Tensor& running_var, int64_t N,
                           int64_t C, int64_t HW, bool training, double momentum, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    batch_norm_fwd<decltype(tag)>(x, weight, bias, y, mean, invstd, running_mean, running_var, N,
                                  C, HW, training, momentum, eps);
  });
}

void batch_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& invstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C,
                           int64_t HW, bool training) {
  visit_floating(x.dtype(), [&](auto tag) {
    batch_norm_bwd<decltype(tag)>(grad, x, weight, mean, invstd, dx, dweight, dbias, N, C, HW,
                                  training);
  });
}

void group_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t N,
                           int64_t C, int64_t HW, int64_t G, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    group_norm_fwd<decltype(tag)>(x, weight, bias, y, mean, rstd, N, C, HW, G, eps);
  });
}

void group_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C,
                           int64_t HW, int64_t G) {
  visit_floating(x.dtype(), [&](auto tag) {
    group_norm_bwd<decltype(tag)>(grad, x, weight, mean, rstd, dx, dweight, dbias, N, C, HW, G);
  });
}

void rms_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& y,
                         const Tensor& rstd, int64_t cols, double eps) {
  visit_floating(x.dtype(),
                 [&](auto tag) { rms_norm_fwd<decltype(tag)>(x, weight, y, rstd, cols, eps); });
}

void rms_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                         int64_t cols) {
  visit_floating(x.dtype(), [&](auto tag) {
    rms_norm_bwd<decltype(tag)>(grad, x, weight, rstd, dx, dweight, cols);
  });
}

}  // namespace ember::ops::cpu
