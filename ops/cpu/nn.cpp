// CPU driver for the fused nn family: softmax / log_softmax (forward and backward),
// cross-entropy (log_softmax + NLL with ignore_index and label smoothing) and layer norm (with
// the residual add fused in front of it for residual_layer_norm, and 16-bit y / dy around an
// f32 computation: kernels/nn.h).
//
// Invariants:
// - Each row (the elements along the reduced dim) is handled start to finish by one thread,
//   in the compute type (f32 for 16-bit storage, rounded once on store). Rows are split
//   across OpenMP threads only above kGrain elements.
// - A row is used in place when its storage is already the compute type with unit stride;
//   otherwise it is gathered into a per-thread buffer first (strided rows, 16-bit types) and
//   scattered back. So any strides are accepted and no input is copied whole.
// - Softmax over a non-last dim of a contiguous tensor works on tiles of W adjacent rows
//   (a K x W block whose W-wide lines are contiguous), so memory is read line by line and
//   the math vectorizes across rows (see tile_width).
// - exp/log go through Eigen's vectorized array functions; reductions are max-subtracted
//   (softmax, logsumexp) or two-pass around the mean (layer norm), so large inputs stay finite.
//   Log-probabilities are (x - max) - log(sum): x - logsumexp would lose the small difference
//   when the logits are large (1e4 in f32 has a spacing of 1e-3).
// - Results do not depend on the thread count: every row is computed the same way (tiles
//   and chunks are cut from the sizes alone), and layer norm's parameter gradients sum fixed
//   row chunks in a fixed order.
// - Nothing inside an OpenMP region throws; inputs (cross-entropy targets) are validated
//   serially before it.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "eigen_util.h"
#include "kernels/nn.h"
#include "kernels/target_dtype.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kGrain = 32768;  // elements of work below which one thread is faster

// body(begin, end) over [0, n) split into contiguous ranges, one per thread when the total
// work (n * work_per_item elements) is large enough to pay for threads.
template <class F>
void parallel_ranges(int64_t n, int64_t work_per_item, F&& body) {
  if (n <= 1 || n * std::max<int64_t>(work_per_item, 1) < kGrain) {
    if (n > 0) body(int64_t(0), n);
    return;
  }
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (n + nt - 1) / nt;
    const int64_t b = std::min(n, chunk * t), e = std::min(n, b + chunk);
    if (b < e) body(b, e);
  }
}

// A tensor seen as rows along `dim`: row r (row-major order over the other dims) starts at
// element offset(r) and has K elements `step` apart. The other dims are coalesced so that the
// usual cases cost one multiply per row.
struct Rows {
  int64_t count = 1, K = 1, step = 1;
  Shape sizes, strides;
  Rows(const Tensor& t, int64_t dim) {
    K = t.sizes()[dim];
    step = t.strides()[dim];
    for (int64_t d = 0; d < t.dim(); ++d) {
      const int64_t sz = t.sizes()[d], st = t.strides()[d];
      if (d == dim || sz == 1) continue;
      count *= sz;
      if (!sizes.empty() && strides.back() == sz * st) {
        sizes.back() *= sz;
        strides.back() = st;
      } else {
        sizes.push_back(sz);
        strides.push_back(st);
      }
    }
  }
  int64_t offset(int64_t r) const {
    if (sizes.size() == 1) return r * strides[0];
    int64_t off = 0;
    for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
      off += (r % sizes[d]) * strides[d];
      r /= sizes[d];
    }
    return off;
  }
};

// A row's elements in the compute type C: the storage itself when it already is (unit
// stride), else a gathered copy in `buf`.
template <class C, class S>
const C* load_row(const S* p, int64_t K, int64_t step, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>)
    if (step == 1) return p;
  buf.resize(size_t(K));
  for (int64_t k = 0; k < K; ++k) buf[k] = C(p[k * step]);
  return buf.data();
}
// Where to compute a row's result: the output itself when it can hold C directly, else `buf`
// (then store_row writes it out). `buf` may be the input's buffer: row math is elementwise
// after its reductions.
template <class C, class S>
C* result_row(S* p, int64_t K, int64_t step, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>)
    if (step == 1) return p;
  buf.resize(size_t(K));
  return buf.data();
}
template <class C, class S>
void store_row(const C* r, S* p, int64_t K, int64_t step) {
  if (static_cast<const void*>(r) == static_cast<const void*>(p)) return;
  for (int64_t k = 0; k < K; ++k) p[k * step] = S(r[k]);
}

// Product of the sizes after / before `dim`.
int64_t inner_size(const Tensor& t, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = dim + 1; d < t.dim(); ++d) n *= t.sizes()[d];
  return n;
}
int64_t outer_size(const Tensor& t, int64_t dim) {
  int64_t n = 1;
  for (int64_t d = 0; d < dim; ++d) n *= t.sizes()[d];
  return n;
}

// ---- softmax math on one row of K elements ----

template <class C>
void softmax_row(const C* x, C* y, int64_t K, bool log) {
  CVecMap<C> xv(x, K);
  VecMap<C> yv(y, K);
  const C m = xv.maxCoeff();
  if (log) {
    const C log_sum = std::log((xv - m).exp().sum());
    yv = (xv - m) - log_sum;
  } else {
    yv = (xv - m).exp();
    yv *= C(1) / yv.sum();
  }
}

// dx from g and y: softmax dx = y * (g - sum(g*y)); log_softmax dx = g - exp(y) * sum(g).
// dx may alias g (elementwise after the reduction).
template <class C>
void softmax_bwd_row(const C* g, const C* y, C* dx, int64_t K, bool log) {
  CVecMap<C> gv(g, K), yv(y, K);
  VecMap<C> dv(dx, K);
  if (log) {
    const C s = gv.sum();
    dv = gv - yv.exp() * s;
  } else {
    const C s = (gv * yv).sum();
    dv = yv * (gv - s);
  }
}

// ---- softmax math on a tile: W adjacent rows of a contiguous tensor, over a non-last dim ----
//
// Element k of the W rows is "line" k: W contiguous values at p + k * inner. The passes walk
// the lines in order (max, sum of exp, write), vectorized across the W rows. Lines are used
// where they lie when the storage is the compute type, else converted one line at a time
// (and exp recomputed rather than stored), so no buffer grows with the tile.

// Rows per tile, from the sizes only (so results never depend on the thread count): whole
// inner extents, which makes a tile one contiguous block read as a stream. When there are too
// few outer slices to keep threads busy, inner is split, but into lines of at least kMinLine
// values: short lines at a large stride defeat the prefetcher (3x slower when measured).
int64_t tile_width(int64_t outer, int64_t K, int64_t inner) {
  constexpr int64_t kTargetTiles = 16, kMinLine = 1024;
  if (outer >= kTargetTiles || outer * K * inner < kGrain) return inner;
  const int64_t pieces = std::min((kTargetTiles + outer - 1) / outer,
                                  std::max<int64_t>(1, inner / kMinLine));
  const int64_t w = ((inner + pieces - 1) / pieces + 15) / 16 * 16;
  return std::min(inner, w);
}

// Line p (W storage values) as compute-type values: p itself, or converted into buf.
template <class C, class S>
CVecMap<C> line(const S* p, int64_t W, C* buf) {
  if constexpr (std::is_same_v<S, C>) {
    return CVecMap<C>(p, W);
  } else {
    for (int64_t j = 0; j < W; ++j) buf[j] = C(p[j]);
    return CVecMap<C>(buf, W);
  }
}
// Writes an array expression of W compute-type values to line p (through buf if converting;
// the expression may read buf: it is elementwise).
template <class C, class S, class Expr>
void store_line(S* p, int64_t W, const Expr& e, C* buf) {
  if constexpr (std::is_same_v<S, C>) {
    VecMap<C>(p, W) = e;
  } else {
    VecMap<C>(buf, W) = e;
    for (int64_t j = 0; j < W; ++j) p[j] = S(buf[j]);
  }
}

template <class S, class C = compute_t<S>>
void softmax_tile(const S* x, S* y, int64_t inner, int64_t K, int64_t W, bool log, C* mp, C* sp,
                  C* buf) {
  VecMap<C> m(mp, W), s(sp, W);
  m = line(x, W, buf);
  for (int64_t k = 1; k < K; ++k) m = m.max(line(x + k * inner, W, buf));
  s.setZero();
  if (log) {
    for (int64_t k = 0; k < K; ++k) s += (line(x + k * inner, W, buf) - m).exp();
    s = s.log();
    for (int64_t k = 0; k < K; ++k)
      store_line(y + k * inner, W, (line(x + k * inner, W, buf) - m) - s, buf);
  } else if constexpr (std::is_same_v<S, C>) {  // store exp, then scale it in place
    for (int64_t k = 0; k < K; ++k) {
      VecMap<C> out(y + k * inner, W);
      out = (CVecMap<C>(x + k * inner, W) - m).exp();
      s += out;
    }
    s = s.inverse();
    for (int64_t k = 0; k < K; ++k) VecMap<C>(y + k * inner, W) *= s;
  } else {  // exp recomputed: rounding to 16 bits happens once, on the final value
    for (int64_t k = 0; k < K; ++k) s += (line(x + k * inner, W, buf) - m).exp();
    s = s.inverse();
    for (int64_t k = 0; k < K; ++k)
      store_line(y + k * inner, W, (line(x + k * inner, W, buf) - m).exp() * s, buf);
  }
}

template <class S, class C = compute_t<S>>
void softmax_bwd_tile(const S* g, const S* y, S* dx, int64_t inner, int64_t K, int64_t W,
                      bool log, C* sp, C* gbuf, C* ybuf) {
  VecMap<C> s(sp, W);
  s.setZero();
  if (log) {
    for (int64_t k = 0; k < K; ++k) s += line(g + k * inner, W, gbuf);
    for (int64_t k = 0; k < K; ++k)
      store_line(dx + k * inner, W,
                 line(g + k * inner, W, gbuf) - line(y + k * inner, W, ybuf).exp() * s, gbuf);
  } else {
    for (int64_t k = 0; k < K; ++k)
      s += line(g + k * inner, W, gbuf) * line(y + k * inner, W, ybuf);
    for (int64_t k = 0; k < K; ++k)
      store_line(dx + k * inner, W,
                 line(y + k * inner, W, ybuf) * (line(g + k * inner, W, gbuf) - s), gbuf);
  }
}

// Runs tile(base, w, scratch) over every tile of a contiguous [outer, K, inner] tensor.
template <class C, class F>
void for_each_tile(int64_t outer, int64_t K, int64_t inner, int scratch_lines, F&& tile) {
  const int64_t W = tile_width(outer, K, inner), per_outer = (inner + W - 1) / W;
  parallel_ranges(outer * per_outer, K * W, [&](int64_t b, int64_t e) {
    Buffer<C> scratch(size_t(scratch_lines * W));
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / per_outer, i0 = (t % per_outer) * W;
      tile(o * K * inner + i0, std::min(W, inner - i0), scratch.data(), W);
    }
  });
}

// ---- softmax drivers ----

template <class S>
void softmax_fwd(const Tensor& x, const Tensor& out, int64_t dim, bool log) {
  using C = compute_t<S>;
  const S* xp = x.data_ptr<S>();
  S* op = out.data_ptr<S>();
  const int64_t K = x.sizes()[dim], inner = inner_size(x, dim);
  if (inner > 1 && x.is_contiguous()) {  // tiles of adjacent rows (out is contiguous too)
    for_each_tile<C>(outer_size(x, dim), K, inner, 3, [&](int64_t base, int64_t w, C* sc, int64_t W) {
      softmax_tile<S>(xp + base, op + base, inner, K, w, log, sc, sc + W, sc + 2 * W);
    });
    return;
  }
  const Rows rx(x, dim), ro(out, dim);
  parallel_ranges(rx.count, K, [&](int64_t b, int64_t e) {
    Buffer<C> buf;
    for (int64_t r = b; r < e; ++r) {
      S* orow = op + ro.offset(r);
      const C* in = load_row<C>(xp + rx.offset(r), K, rx.step, buf);
      C* res = result_row<C>(orow, K, ro.step, buf);
      softmax_row(in, res, K, log);
      store_row(res, orow, K, ro.step);
    }
  });
}

template <class S>
void softmax_bwd(const Tensor& grad, const Tensor& y, const Tensor& dx, int64_t dim, bool log) {
  using C = compute_t<S>;
  const S* gp = grad.data_ptr<S>();
  const S* yp = y.data_ptr<S>();
  S* dp = dx.data_ptr<S>();
  const int64_t K = y.sizes()[dim], inner = inner_size(y, dim);
  if (inner > 1 && grad.is_contiguous() && y.is_contiguous()) {
    for_each_tile<C>(outer_size(y, dim), K, inner, 3, [&](int64_t base, int64_t w, C* sc, int64_t W) {
      softmax_bwd_tile<S>(gp + base, yp + base, dp + base, inner, K, w, log, sc, sc + W, sc + 2 * W);
    });
    return;
  }
  const Rows rg(grad, dim), ry(y, dim), rd(dx, dim);
  parallel_ranges(rg.count, K, [&](int64_t b, int64_t e) {
    Buffer<C> gbuf, ybuf;
    for (int64_t r = b; r < e; ++r) {
      S* drow = dp + rd.offset(r);
      const C* g = load_row<C>(gp + rg.offset(r), K, rg.step, gbuf);
      const C* yv = load_row<C>(yp + ry.offset(r), K, ry.step, ybuf);
      // The result goes to dx directly, else into gbuf (it may alias g: elementwise math).
      C* res = result_row<C>(drow, K, rd.step, gbuf);
      softmax_bwd_row(g, yv, res, K, log);
      store_row(res, drow, K, rd.step);
    }
  });
}

// ---- cross-entropy ----

template <class T>
int64_t target_at(const T* t, int64_t i, int64_t stride) {
  return int64_t(t[i * stride]);
}

template <class T>
void check_targets(const char* op, const T* tp, int64_t n, int64_t stride, int64_t classes, int64_t ignore) {
  for (int64_t i = 0; i < n; ++i) check_class_target(op, target_at(tp, i, stride), i, classes, ignore);
}

template <class T>
int64_t count_kept(const T* tp, int64_t n, int64_t stride, int64_t ignore) {
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) c += target_at(tp, i, stride) != ignore;
  return c;
}

template <class S, class T>
void cross_entropy_fwd(const Tensor& logits, const Tensor& target, const Tensor& loss,
                       const Tensor& row_max, const Tensor& log_sum, const CrossEntropyParams& p) {
  using C = compute_t<S>;  // also the stats type
  const int64_t n = logits.sizes()[0], classes = logits.sizes()[1];
  const int64_t s0 = logits.strides()[0], s1 = logits.strides()[1];
  const S* lp = logits.data_ptr<S>();
  const T* tp = target.data_ptr<T>();
  const int64_t ts = target.strides()[0];
  check_targets("cross_entropy", tp, n, ts, classes, p.ignore_index);
  C* maxp = row_max.data_ptr<C>();
  C* lsp = log_sum.data_ptr<C>();
  const bool none = p.reduction == LossReduction::none;
  S* out = loss.data_ptr<S>();
  const int64_t os = none ? loss.strides()[0] : 0;
  std::vector<double> row_loss(none ? 0 : size_t(n));
  const C eps = C(p.label_smoothing), keep = C(1.0 - p.label_smoothing);
  parallel_ranges(n, classes, [&](int64_t b, int64_t e) {
    Buffer<C> buf;
    for (int64_t i = b; i < e; ++i) {
      const C* x = load_row<C>(lp + i * s0, classes, s1, buf);
      CVecMap<C> xv(x, classes);
      const C m = xv.maxCoeff();
      const C ls = std::log((xv - m).exp().sum());
      maxp[i] = m;
      lsp[i] = ls;
      const int64_t t = target_at(tp, i, ts);
      C li = 0;
      if (t != p.ignore_index) {
        // -log p_t = (max - x_t) + log_sum; mean_c(-log p_c) = log_sum - mean_c(x_c - max).
        li = keep * ((m - x[t]) + ls);
        if (eps != C(0)) li += eps * (ls - (xv - m).sum() / C(classes));
      }
      if (none) out[i * os] = S(li);
      else row_loss[size_t(i)] = double(li);
    }
  });
  if (none) return;
  double total = 0;  // serial and in row order: the same value for any thread count
  for (double v : row_loss) total += v;
  if (p.reduction == LossReduction::mean)
    total /= double(count_kept(tp, n, ts, p.ignore_index));  // 0/0 = NaN, as in PyTorch
  out[0] = S(C(total));
}

template <class S, class T>
void cross_entropy_bwd(const Tensor& grad, const Tensor& logits, const Tensor& target,
                       const Tensor& row_max, const Tensor& log_sum, const Tensor& dlogits,
                       const CrossEntropyParams& p) {
  using C = compute_t<S>;
  const int64_t n = logits.sizes()[0], classes = logits.sizes()[1];
  const int64_t s0 = logits.strides()[0], s1 = logits.strides()[1];
  const S* lp = logits.data_ptr<S>();
  const T* tp = target.data_ptr<T>();
  const int64_t ts = target.strides()[0];
  const C* maxp = row_max.data_ptr<C>();
  const C* lsp = log_sum.data_ptr<C>();
  S* dp = dlogits.data_ptr<S>();
  const int64_t d0 = dlogits.strides()[0];
  const S* gp = grad.data_ptr<S>();
  const bool none = p.reduction == LossReduction::none;
  const int64_t gs = none ? grad.strides()[0] : 0;
  double scale_all = double(C(gp[0]));
  if (p.reduction == LossReduction::mean)
    scale_all /= double(std::max<int64_t>(count_kept(tp, n, ts, p.ignore_index), 1));
  const C smooth = C(p.label_smoothing / double(classes)), keep = C(1.0 - p.label_smoothing);
  parallel_ranges(n, classes, [&](int64_t b, int64_t e) {
    Buffer<C> buf;
    for (int64_t i = b; i < e; ++i) {
      S* drow = dp + i * d0;
      const int64_t t = target_at(tp, i, ts);
      if (t == p.ignore_index) {
        std::fill(drow, drow + classes, S(C(0)));
        continue;
      }
      const C scale = none ? C(gp[i * gs]) : C(scale_all);
      const C* x = load_row<C>(lp + i * s0, classes, s1, buf);
      C* res = result_row<C>(drow, classes, 1, buf);
      // softmax - smoothed one-hot, times the row's share of the loss gradient.
      VecMap<C>(res, classes) =
          (((CVecMap<C>(x, classes) - maxp[i]) - lsp[i]).exp() - smooth) * scale;
      // A -inf logit (a masked class, e.g. GPT's padded vocabulary) has probability exactly 0,
      // as in PyTorch; Eigen's vectorized exp clamps its argument and returns a denormal. A
      // second pass over the cached row, not an Eigen select (not vectorized in Eigen 3.4: it
      // would make the exp scalar).
      const C neg_inf = -std::numeric_limits<C>::infinity(), masked = -smooth * scale;
      for (int64_t k = 0; k < classes; ++k) res[k] = x[k] == neg_inf ? masked : res[k];
      res[t] -= keep * scale;
      store_row(res, drow, classes, 1);
    }
  });
}

// ---- layer norm ----

// Rows are split into a number of chunks that depends only on the sizes, so the order in
// which parameter gradients are summed (chunk by chunk) does not depend on the thread count.
int64_t row_chunks(int64_t rows, int64_t cols) {
  return rows * cols < kGrain ? 1 : std::min<int64_t>(rows, 64);
}

// The parameter as a C array: the storage itself when it is already C, else converted;
// `fill` stands in for an absent parameter (1 for weight, 0 for bias).
template <class C, class S>
const C* param_as(const Tensor& t, int64_t cols, C fill, Buffer<C>& buf) {
  if (t.defined()) {
    if constexpr (std::is_same_v<S, C>) return t.data_ptr<S>();
    const S* p = t.data_ptr<S>();
    buf.assign(p, p + cols);  // converts each element
    return buf.data();
  }
  buf.assign(size_t(cols), fill);
  return buf.data();
}

// S: the normalized input's storage (x and sum), D: delta's, Y: y's (see kernels/nn.h).
template <class S, class D, class Y>
void layer_norm_fwd(const Tensor& x, const Tensor& delta, const Tensor& weight, const Tensor& bias,
                    const Tensor& sum, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                    int64_t cols, double eps) {
  using C = compute_t<S>;
  const int64_t rows = mean.numel();
  Buffer<C> wbuf, bbuf;
  const C* w = param_as<C, S>(weight, cols, C(1), wbuf);
  const C* bi = param_as<C, S>(bias, cols, C(0), bbuf);
  const S* xp = x.data_ptr<S>();
  const D* dp = delta.defined() ? delta.data_ptr<D>() : nullptr;
  S* sp = sum.defined() ? sum.data_ptr<S>() : nullptr;
  Y* yp = y.data_ptr<Y>();
  C* mp = mean.data_ptr<C>();
  C* rp = rstd.data_ptr<C>();
  parallel_ranges(rows, cols, [&](int64_t b, int64_t e) {
    Buffer<C> buf, ybuf;
    for (int64_t r = b; r < e; ++r) {
      const C* xr;
      if (dp) {
        // The residual sum, rounded to S as it is stored: the statistics below are those of
        // the stored sum, so y equals layer_norm(sum) exactly.
        const S* xs = xp + r * cols;
        const D* ds = dp + r * cols;
        S* ss = sp + r * cols;
        if constexpr (std::is_same_v<S, C>) {
#pragma omp simd
          for (int64_t k = 0; k < cols; ++k) ss[k] = xs[k] + C(ds[k]);
          xr = ss;
        } else {
          buf.resize(size_t(cols));
          for (int64_t k = 0; k < cols; ++k) {
            const S v = S(C(xs[k]) + C(ds[k]));
            ss[k] = v;
            buf[k] = C(v);
          }
          xr = buf.data();
        }
      } else {
        xr = load_row<C>(xp + r * cols, cols, 1, buf);
      }
      // Two passes in f64: the mean, then the variance around it (no cancellation).
      double total = 0;
#pragma omp simd reduction(+ : total)
      for (int64_t k = 0; k < cols; ++k) total += double(xr[k]);
      const double mu = total / double(cols);
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t k = 0; k < cols; ++k) {
        const double d = double(xr[k]) - mu;
        sq += d * d;
      }
      const double rs = 1.0 / std::sqrt(sq / double(cols) + eps);
      mp[r] = C(mu);
      rp[r] = C(rs);
      const C muc = C(mu), rsc = C(rs);
      // y is computed in C and rounded once to Y (so a 16-bit y equals the cast of the C one).
      C* res = result_row<C>(yp + r * cols, cols, 1, ybuf);
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k) res[k] = (xr[k] - muc) * rsc * w[k] + bi[k];
      store_row(res, yp + r * cols, cols, 1);
    }
  });
}

// G: the output gradient's storage, S's or (S f32) 16 bits, read and widened row by row.
template <class S, class G>
void layer_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t cols) {
  using C = compute_t<S>;
  const int64_t rows = mean.numel();
  Buffer<C> wbuf;
  const C* w = param_as<C, S>(weight, cols, C(1), wbuf);
  const G* gp = grad.data_ptr<G>();
  const S* xp = x.data_ptr<S>();
  const C* mp = mean.data_ptr<C>();
  const C* rp = rstd.data_ptr<C>();
  S* dxp = dx.defined() ? dx.data_ptr<S>() : nullptr;
  const bool want_dw = dweight.defined(), want_db = dbias.defined();
  const int64_t chunks = row_chunks(rows, cols), per_chunk = (rows + chunks - 1) / chunks;
  // Per-chunk partial sums of g * xhat (dweight) and g (dbias), in f64.
  std::vector<double> pdw(want_dw ? size_t(chunks * cols) : 0),
      pdb(want_db ? size_t(chunks * cols) : 0);
  auto run_chunk = [&](int64_t c) {
    Buffer<C> gbuf, xbuf, dbuf;
    double* cdw = want_dw ? pdw.data() + c * cols : nullptr;
    double* cdb = want_db ? pdb.data() + c * cols : nullptr;
    const int64_t rb = c * per_chunk, re = std::min(rows, rb + per_chunk);
    for (int64_t r = rb; r < re; ++r) {
      const C* g = load_row<C>(gp + r * cols, cols, 1, gbuf);
      const C* xr = load_row<C>(xp + r * cols, cols, 1, xbuf);
      const C mu = mp[r], rs = rp[r];
      if (cdw) {
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) cdw[k] += double(g[k]) * double((xr[k] - mu) * rs);
      }
      if (cdb) {
#pragma omp simd
        for (int64_t k = 0; k < cols; ++k) cdb[k] += double(g[k]);
      }
      if (!dxp) continue;
      // dx = rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat))
      double a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
      for (int64_t k = 0; k < cols; ++k) {
        const double gw = double(g[k]) * double(w[k]);
        a += gw;
        bsum += gw * double((xr[k] - mu) * rs);
      }
      const C ma = C(a / double(cols)), mb = C(bsum / double(cols));
      C* res = result_row<C>(dxp + r * cols, cols, 1, dbuf);
#pragma omp simd
      for (int64_t k = 0; k < cols; ++k) {
        const C xhat = (xr[k] - mu) * rs;
        res[k] = rs * (g[k] * w[k] - ma - xhat * mb);
      }
      store_row(res, dxp + r * cols, cols, 1);
    }
  };
  if (chunks == 1) {
    run_chunk(0);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) run_chunk(c);
  }
  auto finish = [&](const std::vector<double>& part, const Tensor& out) {
    S* op = out.data_ptr<S>();
    for (int64_t k = 0; k < cols; ++k) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += part[size_t(c * cols + k)];
      op[k] = S(C(s));
    }
  };
  if (want_dw) finish(pdw, dweight);
  if (want_db) finish(pdb, dbias);
}

}  // namespace

void softmax_fwd_kernel(const Tensor& x, const Tensor& out, int64_t dim, bool log) {
  visit_floating(x.dtype(), [&](auto tag) { softmax_fwd<decltype(tag)>(x, out, dim, log); });
}

void softmax_bwd_kernel(const Tensor& grad, const Tensor& y, const Tensor& dx, int64_t dim,
                        bool log) {
  visit_floating(y.dtype(), [&](auto tag) { softmax_bwd<decltype(tag)>(grad, y, dx, dim, log); });
}

void cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target, const Tensor& loss,
                              const Tensor& row_max, const Tensor& log_sum,
                              const CrossEntropyParams& p) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "cross_entropy", [&](auto ttag) {
      cross_entropy_fwd<decltype(tag), decltype(ttag)>(logits, target, loss, row_max, log_sum, p);
    });
  });
}

void cross_entropy_bwd_kernel(const Tensor& grad, const Tensor& logits, const Tensor& target,
                              const Tensor& row_max, const Tensor& log_sum,
                              const Tensor& dlogits, const CrossEntropyParams& p) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "cross_entropy", [&](auto ttag) {
      cross_entropy_bwd<decltype(tag), decltype(ttag)>(grad, logits, target, row_max, log_sum,
                                                        dlogits, p);
    });
  });
}

void layer_norm_fwd_kernel(const Tensor& x, const Tensor& delta, const Tensor& weight,
                           const Tensor& bias, const Tensor& sum, const Tensor& y,
                           const Tensor& mean, const Tensor& rstd, int64_t cols, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    visit_layer_norm_side<S>(delta.defined() ? delta.dtype() : x.dtype(), [&](auto dtag) {
      visit_layer_norm_side<S>(y.dtype(), [&](auto ytag) {
        layer_norm_fwd<S, decltype(dtag), decltype(ytag)>(x, delta, weight, bias, sum, y, mean,
                                                          rstd, cols, eps);
      });
    });
  });
}

void layer_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t cols) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    visit_layer_norm_side<S>(grad.dtype(), [&](auto gtag) {
      layer_norm_bwd<S, decltype(gtag)>(grad, x, weight, mean, rstd, dx, dweight, dbias, cols);
    });
  });
}

void check_class_targets_kernel(const Tensor& target, int64_t classes, int64_t ignore_index, const char* op) {
  visit_target(target.dtype(), op, [&](auto ttag) {
    using T = decltype(ttag);
    check_targets(op, static_cast<const T*>(target.data_ptr()), target.numel(), 1, classes, ignore_index);
  });
}

void check_probabilities_kernel(const Tensor& x, const char* op) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* p = static_cast<const S*>(x.data_ptr());
    bool bad = false;
    const int64_t n = x.numel();
#pragma omp parallel for reduction(|| : bad) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) {
      const double v = double(p[i]);
      bad = bad || !(v >= 0.0 && v <= 1.0);  // NaN fails both
    }
    EMBER_CHECK(!bad, ValueError, "[", op, "] ", kProbabilitiesMessage);
  });
}

}  // namespace ember::ops::cpu
