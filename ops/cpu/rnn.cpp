// CPU driver of the recurrent cell pointwise kernels (kernels/rnn.h, math in ember/ops/rnn.h).
//
// Invariants:
// - One row (batch element) is handled start to finish by one thread; rows are split across
//   OpenMP threads only when the step is large enough to pay for them, so results do not
//   depend on the thread count.
// - The math runs on Eigen arrays (vectorized logistic/tanh for f32) over each gate's H
//   contiguous values; 16-bit storage is converted into per-thread f32 buffers and rounded
//   once on store.
#include <omp.h>

#include <algorithm>
#include <type_traits>

#include "eigen_util.h"
#include "kernels/rnn.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kGrain = 16384;  // elements of a step below which one thread is faster

template <class F>
void parallel_rows(int64_t n, int64_t work_per_row, F&& body) {
  if (n <= 1 || n * work_per_row < kGrain || omp_in_parallel()) {
    for (int64_t r = 0; r < n; ++r) body(r);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) body(r);
}

// A row of a 2-D tensor with unit column stride: element (r, 0).
template <class S>
S* row_ptr(const Tensor& t, int64_t r) {
  return static_cast<S*>(t.data_ptr()) + r * t.strides()[0];
}

// Row r of t as compute-type values: in place when S == C, else converted into buf.
template <class C, class S>
const C* load(const Tensor& t, int64_t r, int64_t len, Buffer<C>& buf) {
  const S* p = row_ptr<S>(t, r);
  if constexpr (std::is_same_v<S, C>) {
    return p;
  } else {
    buf.resize(size_t(len));
    for (int64_t k = 0; k < len; ++k) buf[size_t(k)] = C(p[k]);
    return buf.data();
  }
}
// Where a row's compute-type result goes: the output itself when S == C, else buf.
template <class C, class S>
C* out_row(const Tensor& t, int64_t r, int64_t len, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>) {
    return row_ptr<S>(t, r);
  } else {
    buf.resize(size_t(len));
    return buf.data();
  }
}
template <class C, class S>
void store(const Tensor& t, int64_t r, int64_t len, const C* v) {
  if constexpr (!std::is_same_v<S, C>) {
    S* p = row_ptr<S>(t, r);
    for (int64_t k = 0; k < len; ++k) p[k] = S(v[k]);
  }
}

template <class S>
void lstm_fwd(const Tensor& gx, const Tensor& gh, const Tensor& c_prev, const Tensor& h,
              const Tensor& c, const Tensor& gates) {
  using C = compute_t<S>;
  const int64_t N = h.sizes()[0], H = h.sizes()[1];
  parallel_rows(N, 4 * H, [&](int64_t r) {
    thread_local Buffer<C> bx, bh, bc, bo_h, bo_c, bo_g;
    const C* x = load<C, S>(gx, r, 4 * H, bx);
    const C* y = gh.defined() ? load<C, S>(gh, r, 4 * H, bh) : nullptr;
    const C* cp = load<C, S>(c_prev, r, H, bc);
    C* hp = out_row<C, S>(h, r, H, bo_h);
    C* cn = out_row<C, S>(c, r, H, bo_c);
    C* g = out_row<C, S>(gates, r, 4 * H, bo_g);
    VecMap<C> ga(g, 4 * H);
    if (y) ga = CVecMap<C>(x, 4 * H) + CVecMap<C>(y, 4 * H);
    else ga = CVecMap<C>(x, 4 * H);
    // i, f, o: sigmoid; g: tanh (in place in the saved gates).
    ga.segment(0, 2 * H) = ga.segment(0, 2 * H).logistic();
    ga.segment(2 * H, H) = ga.segment(2 * H, H).tanh();
    ga.segment(3 * H, H) = ga.segment(3 * H, H).logistic();
    VecMap<C> cm(cn, H);
    cm = ga.segment(H, H) * CVecMap<C>(cp, H) + ga.segment(0, H) * ga.segment(2 * H, H);
    VecMap<C>(hp, H) = ga.segment(3 * H, H) * cm.tanh();
    store<C, S>(h, r, H, hp);
    store<C, S>(c, r, H, cn);
    store<C, S>(gates, r, 4 * H, g);
  });
}

template <class S>
void lstm_bwd(const Tensor& dh, const Tensor& dc, const Tensor& gates, const Tensor& c_prev,
              const Tensor& c, const Tensor& dgates, const Tensor& dc_prev, bool accumulate) {
  using C = compute_t<S>;
  const int64_t N = dh.sizes()[0], H = dh.sizes()[1];
  parallel_rows(N, 4 * H, [&](int64_t r) {
    thread_local Buffer<C> bdh, bdc, bg, bcp, bc, bo_dg, bo_dcp, bacc, btc;
    CVecMap<C> dhv(load<C, S>(dh, r, H, bdh), H), dcv(load<C, S>(dc, r, H, bdc), H);
    CVecMap<C> g(load<C, S>(gates, r, 4 * H, bg), 4 * H);
    CVecMap<C> cp(load<C, S>(c_prev, r, H, bcp), H), cv(load<C, S>(c, r, H, bc), H);
    btc.resize(size_t(H));
    VecMap<C> tc(btc.data(), H);
    tc = cv.tanh();
    const auto i = g.segment(0, H), f = g.segment(H, H), gg = g.segment(2 * H, H),
               o = g.segment(3 * H, H);
    // dc_total = dc + dh * o * (1 - tanh(c)^2), kept in tc's buffer after do is formed.
    VecMap<C> dg(out_row<C, S>(dgates, r, 4 * H, bo_dg), 4 * H);
    dg.segment(3 * H, H) = dhv * tc * o * (C(1) - o);
    tc = dcv + dhv * o * (C(1) - tc.square());
    dg.segment(0, H) = tc * gg * i * (C(1) - i);
    dg.segment(H, H) = tc * cp * f * (C(1) - f);
    dg.segment(2 * H, H) = tc * i * (C(1) - gg.square());
    store<C, S>(dgates, r, 4 * H, dg.data());
    if (accumulate) {
      const C* prev = load<C, S>(dc_prev, r, H, bacc);
      C* o_ = out_row<C, S>(dc_prev, r, H, bo_dcp);
      VecMap<C>(o_, H) = CVecMap<C>(prev, H) + tc * f;
      store<C, S>(dc_prev, r, H, o_);
    } else {
      C* o_ = out_row<C, S>(dc_prev, r, H, bo_dcp);
      VecMap<C>(o_, H) = tc * f;
      store<C, S>(dc_prev, r, H, o_);
    }
  });
}

template <class S>
void gru_fwd(const Tensor& gx, const Tensor& gh, const Tensor& h_prev, const Tensor& h,
             const Tensor& ws) {
  using C = compute_t<S>;
  const int64_t N = h.sizes()[0], H = h.sizes()[1];
  parallel_rows(N, 3 * H, [&](int64_t r) {
    thread_local Buffer<C> bx, bh, bp, bo_h, bo_w;
    CVecMap<C> x(load<C, S>(gx, r, 3 * H, bx), 3 * H), y(load<C, S>(gh, r, 3 * H, bh), 3 * H);
    CVecMap<C> hp(load<C, S>(h_prev, r, H, bp), H);
    VecMap<C> w(out_row<C, S>(ws, r, 4 * H, bo_w), 4 * H);
    w.segment(0, 2 * H) = (x.segment(0, 2 * H) + y.segment(0, 2 * H)).logistic();
    w.segment(3 * H, H) = y.segment(2 * H, H);
    w.segment(2 * H, H) = (x.segment(2 * H, H) + w.segment(0, H) * y.segment(2 * H, H)).tanh();
    const auto z = w.segment(H, H), n = w.segment(2 * H, H);
    C* ho = out_row<C, S>(h, r, H, bo_h);
    VecMap<C>(ho, H) = n + z * (hp - n);
    store<C, S>(h, r, H, ho);
    store<C, S>(ws, r, 4 * H, w.data());
  });
}

template <class S>
void gru_bwd(const Tensor& dh, const Tensor& ws, const Tensor& h_prev, const Tensor& dgx,
             const Tensor& dgh, const Tensor& dh_prev, bool accumulate) {
  using C = compute_t<S>;
  const int64_t N = dh.sizes()[0], H = dh.sizes()[1];
  parallel_rows(N, 4 * H, [&](int64_t r) {
    thread_local Buffer<C> bdh, bw, bp, bo_x, bo_h, bo_p, bacc;
    CVecMap<C> d(load<C, S>(dh, r, H, bdh), H), w(load<C, S>(ws, r, 4 * H, bw), 4 * H);
    CVecMap<C> hp(load<C, S>(h_prev, r, H, bp), H);
    const auto rr = w.segment(0, H), z = w.segment(H, H), n = w.segment(2 * H, H),
               ghn = w.segment(3 * H, H);
    VecMap<C> gx(out_row<C, S>(dgx, r, 3 * H, bo_x), 3 * H);
    VecMap<C> gh(out_row<C, S>(dgh, r, 3 * H, bo_h), 3 * H);
    // dn_pre = dh (1-z) (1-n^2); dr_pre = dn_pre ghn r (1-r); dz_pre = dh (h_prev-n) z (1-z).
    gx.segment(2 * H, H) = d * (C(1) - z) * (C(1) - n.square());
    gx.segment(0, H) = gx.segment(2 * H, H) * ghn * rr * (C(1) - rr);
    gx.segment(H, H) = d * (hp - n) * z * (C(1) - z);
    gh.segment(0, 2 * H) = gx.segment(0, 2 * H);
    gh.segment(2 * H, H) = gx.segment(2 * H, H) * rr;
    store<C, S>(dgx, r, 3 * H, gx.data());
    store<C, S>(dgh, r, 3 * H, gh.data());
    C* o_ = out_row<C, S>(dh_prev, r, H, bo_p);
    if (accumulate) {
      const C* prev = load<C, S>(dh_prev, r, H, bacc);
      VecMap<C>(o_, H) = CVecMap<C>(prev, H) + d * z;
    } else {
      VecMap<C>(o_, H) = d * z;
    }
    store<C, S>(dh_prev, r, H, o_);
  });
}

}  // namespace

void lstm_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& c_prev,
                          const Tensor& h, const Tensor& c, const Tensor& gates) {
  visit_floating(h.dtype(), [&](auto tag) { lstm_fwd<decltype(tag)>(gx, gh, c_prev, h, c, gates); });
}
void lstm_cell_bwd_kernel(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                          const Tensor& c_prev, const Tensor& c, const Tensor& dgates,
                          const Tensor& dc_prev, bool accumulate) {
  visit_floating(dh.dtype(), [&](auto tag) {
    lstm_bwd<decltype(tag)>(dh, dc, gates, c_prev, c, dgates, dc_prev, accumulate);
  });
}
void gru_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& h_prev,
                         const Tensor& h, const Tensor& ws) {
  visit_floating(h.dtype(), [&](auto tag) { gru_fwd<decltype(tag)>(gx, gh, h_prev, h, ws); });
}
void gru_cell_bwd_kernel(const Tensor& dh, const Tensor& ws, const Tensor& h_prev,
                         const Tensor& dgx, const Tensor& dgh, const Tensor& dh_prev,
                         bool accumulate) {
  visit_floating(dh.dtype(), [&](auto tag) {
    gru_bwd<decltype(tag)>(dh, ws, h_prev, dgx, dgh, dh_prev, accumulate);
  });
}

}  // namespace ember::ops::cpu
