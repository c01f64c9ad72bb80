// CPU conv2d (im2col + GEMM) and max_pool2d, forward and backward.
//
// Invariants: buffers are dense NCHW (the front made them contiguous), or for channels_last
// activations dense NHWC, which only oneDNN reads as such (Note [CPU convolution algorithms]).
// Per sample and per group, the convolution is one GEMM:
// y_g[Og, Ho*Wo] = w_g[Og, Cg*kH*kW] @ col[Cg*kH*kW, Ho*Wo], where col is the im2col unfolding of that sample's group of channels (padding reads as 0).
// A 1x1, stride-1, unpadded convolution needs no unfolding: the input plane already is col.
// The backward passes reuse the same GEMM with transposed operands (mapped in place, not
// copied): dcol = w_g^T @ dy_g folded back by col2im, and dw_g += dy_g @ col^T.
// Threading follows Note [GEMM threading] (ops/cpu/linalg.cpp): samples in parallel with a
// single-threaded GEMM each, or samples in turn with Eigen's threads inside each GEMM.
// f16/bf16 compute in f32 (converted once per call, rounded once at the end).
// Each pass of each geometry may instead run as Winograd (ops/cpu/winograd.cpp, Note [Winograd
// convolution]) or on oneDNN (ops/cpu/onednn.h): Note [CPU convolution algorithms] below.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ember/deterministic.h"
#include "conv_key.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "onednn.h"
#include "winograd.h"

namespace ember::ops::cpu {

namespace {

constexpr double kEigenMinTaskMacs = 50000;  // see ops/cpu/linalg.cpp
constexpr double kParallelMinMacs = 4 * kEigenMinTaskMacs;
constexpr int64_t kPoolParallelGrain = 32768;

bool is_16bit(DType t) { return t == DType::f16 || t == DType::bf16; }

Tensor as_f32(const Tensor& t, MemoryFormat format = MemoryFormat::contiguous) {
  if (!t.defined()) return t;
  Tensor out = detail::make_tensor(t.sizes(), DType::f32, t.device(), format);
  copy_kernel(out, t);
  return out;
}

struct Geometry {
  int64_t N, C, H, W;  // input
  int64_t O, kh, kw;   // weight
  int64_t Ho, Wo;      // output
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t Cg, Og, ckk, hw;  // per group: channels in/out, col rows (Cg*kh*kw), col cols (Ho*Wo)
  bool direct;              // 1x1, stride 1, no padding: the input is its own col matrix

  Geometry(const Shape& x, const Shape& w, const Conv2dParams& p)
      : N(x[0]), C(x[1]), H(x[2]), W(x[3]), O(w[0]), kh(w[2]), kw(w[3]),
        Ho(conv_output_size(H, kh, p.stride[0], p.padding[0], p.dilation[0])),
        Wo(conv_output_size(W, kw, p.stride[1], p.padding[1], p.dilation[1])),
        sh(p.stride[0]), sw(p.stride[1]), ph(p.padding[0]), pw(p.padding[1]),
        dh(p.dilation[0]), dw(p.dilation[1]), groups(p.groups), Cg(C / p.groups),
        Og(O / p.groups), ckk(Cg * kh * kw), hw(Ho * Wo),
        direct(kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0) {}

  // The ow range [lo, hi) whose input column ow * sw + off lies inside [0, W).
  void valid_cols(int64_t off, int64_t& lo, int64_t& hi) const {
    lo = off >= 0 ? 0 : (-off + sw - 1) / sw;
    hi = W - off <= 0 ? 0 : (W - 1 - off) / sw + 1;
    lo = std::min(lo, Wo);
    hi = std::clamp(hi, lo, Wo);
  }
  // Whether samples run in parallel (each GEMM on one thread) rather than one GEMM at a time
  // on Eigen's threads: whichever keeps more threads busy.
  bool parallel_samples() const {
    const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
    const double macs = double(Og) * double(hw) * double(ckk);
    const int64_t inner = std::clamp<int64_t>(int64_t(macs / kEigenMinTaskMacs), 1, threads);
    return N > 1 && threads > 1 && macs * double(N * groups) >= kParallelMinMacs &&
           std::min(N, threads) >= inner;
  }
};

// col[Cg*kh*kw, Ho*Wo] from one sample's group of channels x[Cg, H, W].
template <class T>
void im2col(const T* x, const Geometry& g, T* col) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    const T* plane = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        T* dst = col + ((c * g.kh + ki) * g.kw + kj) * g.hw;
        int64_t lo, hi;
        const int64_t off = kj * g.dw - g.pw;
        g.valid_cols(off, lo, hi);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          T* row = dst + oh * g.Wo;
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) {
            std::fill(row, row + g.Wo, T(0));
            continue;
          }
          const T* src = plane + ih * g.W;  // input column of ow: off + ow * sw
          std::fill(row, row + lo, T(0));
          if (g.sw == 1 && lo < hi) std::copy(src + off + lo, src + off + hi, row + lo);
          else
            for (int64_t ow = lo; ow < hi; ++ow) row[ow] = src[off + ow * g.sw];
          std::fill(row + hi, row + g.Wo, T(0));
        }
      }
    }
  }
}

// x[Cg, H, W] += the col2im folding of col (the adjoint of im2col).
template <class T>
void col2im(const T* col, const Geometry& g, T* x) {
  for (int64_t c = 0; c < g.Cg; ++c) {
    T* plane = x + c * g.H * g.W;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const T* src = col + ((c * g.kh + ki) * g.kw + kj) * g.hw;
        int64_t lo, hi;
        const int64_t off = kj * g.dw - g.pw;
        g.valid_cols(off, lo, hi);
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          T* dst = plane + ih * g.W;
          const T* row = src + oh * g.Wo;
          for (int64_t ow = lo; ow < hi; ++ow) dst[off + ow * g.sw] += row[ow];
        }
      }
    }
  }
}

// Runs f(n, col_buffer) for every sample, in parallel or not (Geometry::parallel_samples).
template <class T, class F>
void for_each_sample(const Geometry& g, F f) {
  const size_t col_elems = g.direct ? 0 : size_t(g.ckk * g.hw);
  if (g.parallel_samples()) {
#pragma omp parallel
    {
      std::vector<T> col(col_elems);
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.N; ++n) f(n, col.data());
    }
  } else {
    std::vector<T> col(col_elems);
    for (int64_t n = 0; n < g.N; ++n) f(n, col.data());
  }
}

template <class T>
void conv_forward(const T* x, const T* w, const T* bias, T* y, const Geometry& g) {
  for_each_sample<T>(g, [&](int64_t n, T* col) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const T* xg = x + (n * g.C + gi * g.Cg) * g.H * g.W;
      T* yg = y + (n * g.O + gi * g.Og) * g.hw;
      const T* cols = xg;
      if (!g.direct) {
        im2col(xg, g, col);
        cols = col;
      }
      if (bias)
        for (int64_t o = 0; o < g.Og; ++o) std::fill(yg + o * g.hw, yg + (o + 1) * g.hw, bias[gi * g.Og + o]);
      gemm<T>(g.Og, g.hw, g.ckk, {w + gi * g.Og * g.ckk, g.ckk, 1}, {cols, g.hw, 1}, {yg, g.hw, 1},
              bias != nullptr);
    }
  });
}

template <class T>
void conv_backward_input(const T* gy, const T* w, T* gx, const Geometry& g) {
  for_each_sample<T>(g, [&](int64_t n, T* col) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      T* gxg = gx + (n * g.C + gi * g.Cg) * g.H * g.W;
      const T* gyg = gy + (n * g.O + gi * g.Og) * g.hw;
      MatRef<const T> wt{w + gi * g.Og * g.ckk, 1, g.ckk};  // w_g^T, read in place
      if (g.direct) {
        gemm<T>(g.ckk, g.hw, g.Og, wt, {gyg, g.hw, 1}, {gxg, g.hw, 1}, false);
        continue;
      }
      gemm<T>(g.ckk, g.hw, g.Og, wt, {gyg, g.hw, 1}, {col, g.hw, 1}, false);
      std::fill(gxg, gxg + g.Cg * g.H * g.W, T(0));
      col2im(col, g, gxg);
    }
  });
}

template <class T>
void conv_backward_weight(const T* gy, const T* x, T* gw, const Geometry& g) {
  const size_t wsize = size_t(g.O * g.ckk);
  std::fill(gw, gw + wsize, T(0));
  // dw_g += dy_g[Og, hw] @ col^T[hw, ckk] for one sample, into acc.
  auto sample = [&](int64_t n, T* col, T* acc) {
    for (int64_t gi = 0; gi < g.groups; ++gi) {
      const T* xg = x + (n * g.C + gi * g.Cg) * g.H * g.W;
      const T* gyg = gy + (n * g.O + gi * g.Og) * g.hw;
      const T* cols = xg;
      if (!g.direct) {
        im2col(xg, g, col);
        cols = col;
      }
      gemm<T>(g.Og, g.ckk, g.hw, {gyg, g.hw, 1}, {cols, 1, g.hw}, {acc + gi * g.Og * g.ckk, g.ckk, 1}, true);
    }
  };
  const size_t col_elems = g.direct ? 0 : size_t(g.ckk * g.hw);
  if (g.parallel_samples()) {
    // Samples in parallel: each thread sums its (static, so fixed) samples privately, then
    // the partial sums are added in thread order, never in arrival order, so the result is
    // the same on every run with the same thread count.
    std::vector<std::vector<T>> partial(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
    {
      std::vector<T> col(col_elems), acc(wsize, T(0));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < g.N; ++n) sample(n, col.data(), acc.data());
      partial[size_t(omp_get_thread_num())] = std::move(acc);
    }
    for (const std::vector<T>& acc : partial)
      for (size_t i = 0; i < acc.size(); ++i) gw[i] += acc[i];
  } else {
    std::vector<T> col(col_elems);
    for (int64_t n = 0; n < g.N; ++n) sample(n, col.data(), gw);
  }
}

// One plane of a 2x2, stride-2, unpadded max pool. The scan order is the generic loop's
// (row by row), and so are its rules: the first NaN wins, else the first maximum. A later
// value replaces the best when the best is not NaN and the value is greater or is NaN.
template <class S>
void max_pool_2x2_plane(const S* x, int64_t W, int64_t Ho, int64_t Wo, S* y, int64_t* idx) {
  using C = compute_t<S>;
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const S* r0 = x + 2 * oh * W;
    const S* r1 = r0 + W;
    const int64_t base = 2 * oh * W;
    for (int64_t ow = 0; ow < Wo; ++ow) {
      C best = C(r0[2 * ow]);
      int64_t best_i = base + 2 * ow;
      const C candidates[3] = {C(r0[2 * ow + 1]), C(r1[2 * ow]), C(r1[2 * ow + 1])};
      const int64_t offsets[3] = {1, W, W + 1};
      for (int k = 0; k < 3; ++k) {
        const C v = candidates[k];
        const bool take = !(best != best) && (v > best || v != v);
        best = take ? v : best;
        best_i = take ? base + 2 * ow + offsets[k] : best_i;
      }
      y[oh * Wo + ow] = S(best);
      idx[oh * Wo + ow] = best_i;
    }
  }
}

// The Winograd problem of this convolution when that path computes it (set_conv_winograd).
std::optional<winograd::Problem> winograd_problem(const Shape& x, const Shape& w, const Conv2dParams& p) {
  if (!conv_winograd() || w[2] != 3 || w[3] != 3 || p.stride != std::array<int64_t, 2>{1, 1} ||
      p.dilation != std::array<int64_t, 2>{1, 1})
    return std::nullopt;
  const winograd::Problem q{x[0], x[1], x[2], x[3], w[0], p.padding[0], p.padding[1], p.groups};
  if (!winograd::eligible(q)) return std::nullopt;
  return q;
}

// Note [CPU convolution algorithms]
// Three implementations compute each pass of a CPU convolution: oneDNN's (ops/cpu/onednn.h:
// JIT kernels on blocked layouts, reordered to and from NCHW in each call; f32 only, where
// oneDNN has an optimized kernel for the shape), Winograd F(2x2, 3x3) (3x3, stride 1, enough
// channels) and im2col + GEMM (everything). Which is fastest depends on the shape and the
// machine (on a 2-core AVX-512 machine oneDNN's blocked kernels beat ember's own by 1.5-2.5x
// on the resnet example's 3x3 layers, lost on its 1x1 strided shortcuts and 1-channel stem,
// and on a 128-channel weight gradient ran 1.6x slower than Winograd), so each
// pass of each geometry is measured at its first call (set_conv_autotune): every allowed
// algorithm runs once to warm up (oneDNN creates its primitive, the allocator its blocks) and
// twice timed on the call's own buffers; the fastest by its better time is cached and runs
// from then on. The winner's result is the one the call returns (it runs last, again if it
// must), so a call computes what later calls of the geometry compute. Without measurement
// (autotune off, set_deterministic, inside a caller's parallel region where timings mean
// little) the first allowed of oneDNN, Winograd, im2col runs: a fixed choice, so results
// repeat bit for bit run to run (each algorithm is itself deterministic for a thread count).
// Inside a caller's parallel region oneDNN is not allowed (see allowed_algorithms).
// On channels_last activations (Note [Memory format]) oneDNN reads and writes NHWC as it is,
// while Winograd and im2col run on NCHW copies (as_nchw / into below): each is timed with its
// copies, so the choice weighs the layout too, and the layout is part of the cached key.
enum class Algorithm : uint8_t { onednn, winograd, im2col };

struct Choice {
  std::vector<Algorithm> allowed;  // in the fixed order; never empty (im2col is last)
  std::string onednn_kernel;
  std::optional<winograd::Problem> winograd;
};

Choice allowed_algorithms(ConvPass pass, DType dt, const Shape& x, const Shape& w, const Conv2dParams& p,
                          bool bias, MemoryFormat format) {
  Choice c;
  // Not inside a caller's OpenMP team: oneDNN's weight gradient synchronizes its threads with
  // a spinning barrier sized when the primitive was made, which hangs when the region runs
  // nested (measured: every member of a 6-thread team spun forever).
  if (dt == DType::f32 && conv_onednn() && !omp_in_parallel()) {
    c.onednn_kernel = onednn::kernel_name(pass, x, w, p, bias, format);
    if (!c.onednn_kernel.empty()) c.allowed.push_back(Algorithm::onednn);
  }
  c.winograd = winograd_problem(x, w, p);
  if (c.winograd) c.allowed.push_back(Algorithm::winograd);
  c.allowed.push_back(Algorithm::im2col);
  return c;
}

struct TuneKey {
  ConvKey geometry;
  DType dtype;
  std::vector<Algorithm> allowed;  // a changed setting measures again
  auto operator<=>(const TuneKey&) const = default;
};

std::mutex g_tuned_mutex;
std::map<TuneKey, Algorithm>& tuned() {
  static auto* choices = new std::map<TuneKey, Algorithm>;  // never destroyed: calls after main
  return *choices;
}

TuneKey tune_key(ConvPass pass, DType dt, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias,
                 MemoryFormat format, const Choice& c) {
  return {ConvKey::of(pass, x, w, p, bias, format), dt, c.allowed};
}

bool measures(const Choice& c) {
  return c.allowed.size() > 1 && conv_autotune() && !is_deterministic() && !omp_in_parallel();
}

// Runs one pass by the algorithm Note [CPU convolution algorithms] picks; run(a, c) computes
// the pass's whole output with algorithm a, one of c.allowed.
template <class Run>
void run_chosen(ConvPass pass, DType dt, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias,
                MemoryFormat format, Run run) {
  const Choice c = allowed_algorithms(pass, dt, x, w, p, bias, format);
  if (!measures(c)) return run(c.allowed.front(), c);
  const TuneKey key = tune_key(pass, dt, x, w, p, bias, format, c);
  {
    std::lock_guard<std::mutex> lock(g_tuned_mutex);
    auto it = tuned().find(key);
    if (it != tuned().end()) return run(it->second, c);
  }
  Algorithm best = c.allowed.front();
  double best_s = std::numeric_limits<double>::infinity();
  for (Algorithm a : c.allowed) {
    run(a, c);  // warm-up
    double s = std::numeric_limits<double>::infinity();
    for (int rep = 0; rep < 2; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      run(a, c);
      s = std::min(s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    if (s < best_s) best_s = s, best = a;
  }
  if (best != c.allowed.back()) run(best, c);  // the winner's result is the call's
  std::lock_guard<std::mutex> lock(g_tuned_mutex);
  tuned().emplace(key, best);
}

// Calls f(T{}) for f32 / f64 (the 16-bit types were converted to f32 by the caller).
template <class F>
void visit_f32_f64(DType t, F&& f) {
  if (t == DType::f64) f(double{});
  else f(float{});
}

// The bias pointer, nullptr for none.
template <class T>
const T* bias_ptr(const Tensor& bias) {
  return bias.defined() ? bias.data_ptr<T>() : nullptr;
}

// The activations' layout of a pass: its input's (x, or the output gradient for the
// backward passes), which the front also gave the pass's output.
MemoryFormat format_of(const Tensor& t) { return t.suggest_memory_format(); }

// ember's own kernels (Winograd, im2col) read and write dense NCHW: on channels_last operands
// they run on NCHW copies, the output computed into a dense buffer and copied back. The
// measured choice times those copies with the kernel, so a channels_last shape takes oneDNN
// (reading NHWC directly) unless ember's kernel wins even after them.
Tensor as_nchw(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = detail::make_tensor(t.sizes(), t.dtype(), t.device());
  copy_kernel(out, t);
  return out;
}
template <class Compute>
void into(const Tensor& out, Compute compute) {
  if (out.is_contiguous()) return compute(out);
  const Tensor dense = detail::make_tensor(out.sizes(), out.dtype(), out.device());
  compute(dense);
  copy_kernel(out, dense);
}

}  // namespace

void conv2d_fwd_kernel(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                       const Conv2dParams& p) {
  if (is_16bit(x.dtype())) {
    Tensor y32 = detail::make_tensor(y.sizes(), DType::f32, y.device(), format_of(y));
    conv2d_fwd_kernel(as_f32(x, format_of(x)), as_f32(w), as_f32(bias), y32, p);
    copy_kernel(y, y32);
    return;
  }
  const MemoryFormat format = format_of(x);
  visit_f32_f64(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto run = [&](Algorithm a, const Choice& c) {
      if (a == Algorithm::onednn) {
        if constexpr (std::is_same_v<T, float>)
          onednn::forward(x.data_ptr<T>(), w.data_ptr<T>(), bias_ptr<T>(bias), y.data_ptr<T>(), x.sizes(),
                          w.sizes(), p, format);
        return;
      }
      const Tensor xd = as_nchw(x);
      into(y, [&](const Tensor& yd) {
        if (a == Algorithm::winograd)
          winograd::forward<T>(xd.data_ptr<T>(), w.data_ptr<T>(), bias_ptr<T>(bias), yd.data_ptr<T>(),
                               *c.winograd);
        else
          conv_forward<T>(xd.data_ptr<T>(), w.data_ptr<T>(), bias_ptr<T>(bias), yd.data_ptr<T>(),
                          Geometry(x.sizes(), w.sizes(), p));
      });
    };
    run_chosen(ConvPass::forward, x.dtype(), x.sizes(), w.sizes(), p, bias.defined(), format, run);
  });
}

void conv2d_bwd_input_kernel(const Tensor& gy, const Tensor& w, const Tensor& gx, const Conv2dParams& p) {
  if (is_16bit(gy.dtype())) {
    Tensor gx32 = detail::make_tensor(gx.sizes(), DType::f32, gx.device(), format_of(gx));
    conv2d_bwd_input_kernel(as_f32(gy, format_of(gy)), as_f32(w), gx32, p);
    copy_kernel(gx, gx32);
    return;
  }
  const MemoryFormat format = format_of(gy);
  visit_f32_f64(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto run = [&](Algorithm a, const Choice& c) {
      if (a == Algorithm::onednn) {
        if constexpr (std::is_same_v<T, float>)
          onednn::backward_input(gy.data_ptr<T>(), w.data_ptr<T>(), gx.data_ptr<T>(), gx.sizes(), w.sizes(), p,
                                 format);
        return;
      }
      const Tensor gyd = as_nchw(gy);
      into(gx, [&](const Tensor& gxd) {
        if (a == Algorithm::winograd)
          winograd::backward_input<T>(gyd.data_ptr<T>(), w.data_ptr<T>(), gxd.data_ptr<T>(), *c.winograd);
        else
          conv_backward_input<T>(gyd.data_ptr<T>(), w.data_ptr<T>(), gxd.data_ptr<T>(),
                                 Geometry(gx.sizes(), w.sizes(), p));
      });
    };
    run_chosen(ConvPass::backward_input, gy.dtype(), gx.sizes(), w.sizes(), p, false, format, run);
  });
}

void conv2d_bwd_weight_kernel(const Tensor& gy, const Tensor& x, const Tensor& gw, const Conv2dParams& p) {
  if (is_16bit(gy.dtype())) {
    Tensor gw32 = detail::make_tensor(gw.sizes(), DType::f32, gw.device());
    conv2d_bwd_weight_kernel(as_f32(gy, format_of(gy)), as_f32(x, format_of(x)), gw32, p);
    copy_kernel(gw, gw32);
    return;
  }
  const MemoryFormat format = format_of(gy);
  visit_f32_f64(gy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto run = [&](Algorithm a, const Choice& c) {
      if (a == Algorithm::onednn) {
        if constexpr (std::is_same_v<T, float>)
          onednn::backward_weight(gy.data_ptr<T>(), x.data_ptr<T>(), gw.data_ptr<T>(), x.sizes(), gw.sizes(), p,
                                  format);
        return;
      }
      const Tensor gyd = as_nchw(gy), xd = as_nchw(x);
      if (a == Algorithm::winograd)
        winograd::backward_weight<T>(gyd.data_ptr<T>(), xd.data_ptr<T>(), gw.data_ptr<T>(), *c.winograd);
      else
        conv_backward_weight<T>(gyd.data_ptr<T>(), xd.data_ptr<T>(), gw.data_ptr<T>(),
                                Geometry(x.sizes(), gw.sizes(), p));
    };
    run_chosen(ConvPass::backward_weight, gy.dtype(), x.sizes(), gw.sizes(), p, false, format, run);
  });
}

void max_pool2d_fwd_kernel(const Tensor& x, const Tensor& y, const Tensor& indices, const Pool2dParams& p) {
  const int64_t planes = x.sizes()[0] * x.sizes()[1], H = x.sizes()[2], W = x.sizes()[3];
  const int64_t Ho = y.sizes()[2], Wo = y.sizes()[3];
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* xs = static_cast<const S*>(x.data_ptr());
    S* ys = static_cast<S*>(y.data_ptr());
    int64_t* is = static_cast<int64_t*>(indices.data_ptr());
    // The common 2x2 / stride-2 / unpadded pool has fixed, always-valid windows: four loads
    // and three selects per output instead of the generic loop's clamped bounds and index
    // arithmetic (same results, same scan order; the MNIST CNN's pool: 11 -> 2.5 ms).
    const bool pool_2x2 = kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0;
#pragma omp parallel for schedule(static) if (planes * Ho * Wo * kh * kw > kPoolParallelGrain && !omp_in_parallel())
    for (int64_t pl = 0; pl < planes; ++pl) {
      const S* xp = xs + pl * H * W;
      S* yp = ys + pl * Ho * Wo;
      int64_t* ip = is + pl * Ho * Wo;
      if (pool_2x2) {
        max_pool_2x2_plane(xp, W, Ho, Wo, yp, ip);
        continue;
      }
      for (int64_t oh = 0; oh < Ho; ++oh) {
        // The window is never empty: padding <= kernel / 2 (validated by the front).
        const int64_t h0 = oh * sh - ph, hs = std::max<int64_t>(h0, 0), he = std::min(h0 + kh, H);
        for (int64_t ow = 0; ow < Wo; ++ow) {
          const int64_t w0 = ow * sw - pw, ws = std::max<int64_t>(w0, 0), we = std::min(w0 + kw, W);
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
          yp[oh * Wo + ow] = S(best);
          ip[oh * Wo + ow] = best_i;
        }
      }
    }
  });
}

void max_pool2d_bwd_kernel(const Tensor& gy, const Tensor& indices, const Tensor& gx) {
  const int64_t planes = gx.sizes()[0] * gx.sizes()[1], hw_in = gx.sizes()[2] * gx.sizes()[3];
  const int64_t hw_out = gy.sizes()[2] * gy.sizes()[3];
  visit_floating(gy.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const S* g = static_cast<const S*>(gy.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    S* out = static_cast<S*>(gx.data_ptr());
#pragma omp parallel if (planes * (hw_in + hw_out) > kPoolParallelGrain && !omp_in_parallel())
    {
      // Overlapping windows add several gradients into one element: sum in the compute type.
      std::vector<C> acc(static_cast<size_t>(hw_in));
#pragma omp for schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl) {
        std::fill(acc.begin(), acc.end(), C(0));
        const S* gp = g + pl * hw_out;
        const int64_t* ip = idx + pl * hw_out;
        for (int64_t j = 0; j < hw_out; ++j) acc[size_t(ip[j])] += C(gp[j]);
        S* op = out + pl * hw_in;
        for (int64_t i = 0; i < hw_in; ++i) op[i] = S(acc[size_t(i)]);
      }
    }
  });
}

void max_pool2d_gather_kernel(const Tensor& gx, const Tensor& indices, const Tensor& gy) {
  const int64_t planes = gy.sizes()[0] * gy.sizes()[1], hw_in = gx.sizes()[2] * gx.sizes()[3];
  const int64_t hw_out = gy.sizes()[2] * gy.sizes()[3];
  visit_floating(gx.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* in = static_cast<const S*>(gx.data_ptr());
    const int64_t* idx = static_cast<const int64_t*>(indices.data_ptr());
    S* out = static_cast<S*>(gy.data_ptr());
#pragma omp parallel for schedule(static) if (planes * hw_out > kPoolParallelGrain && !omp_in_parallel())
    for (int64_t pl = 0; pl < planes; ++pl)
      for (int64_t j = 0; j < hw_out; ++j) out[pl * hw_out + j] = in[pl * hw_in + idx[pl * hw_out + j]];
  });
}

}  // namespace ember::ops::cpu

// The public questions about the choice (ember/ops/conv.h), outside the backend namespace.
namespace ember {

std::string ops::cpu_conv_algorithm(ConvPass pass, const Shape& x, const Shape& w, const Conv2dParams& p, DType dtype,
                                    bool bias, MemoryFormat format) {
  using namespace cpu;
  if (is_16bit(dtype)) dtype = DType::f32;  // the kernels compute f16 and bf16 in f32
  const Choice c = allowed_algorithms(pass, dtype, x, w, p, bias, format);
  Algorithm a = c.allowed.front();
  if (measures(c)) {
    std::lock_guard<std::mutex> lock(g_tuned_mutex);
    auto it = tuned().find(tune_key(pass, dtype, x, w, p, bias, format, c));
    if (it != tuned().end()) a = it->second;
  }
  switch (a) {
    case Algorithm::onednn: return "onednn:" + c.onednn_kernel;
    case Algorithm::winograd: return "winograd";
    case Algorithm::im2col: break;
  }
  return "im2col";
}

std::string ops::onednn_version() { return cpu::onednn::version(); }

}  // namespace ember
