// CPU driver for the attention family: scaled dot-product attention forward and backward,
// blocked FlashAttention-2 style.
//
// Invariants:
// - Never materializes the Tq x Tk scores: the forward walks key blocks of kBk rows for a
//   block of kBq queries, keeping a running row max m, sum l and unnormalized output
//   (online softmax: a new block rescales them by exp(m_old - m_new)). Block products are
//   Eigen GEMMs on row-major maps, so the work is cache-resident and vectorized.
// - Operands are strided views (Note [attention strided operands]): f32/f64 inputs are read
//   in place through Eigen maps whose outer stride is the row stride, outputs written row by
//   row through their strides. Compute type C: f64 for f64, f32 otherwise. 16-bit inputs are
//   gathered into contiguous f32 once per call (O(T D), small next to the O(T^2 D) work), and
//   outputs rounded once on store.
// - Causal masking (Note [attention causal alignment]): query i sees keys j <= i + Tk - Tq.
//   Key blocks entirely above the diagonal are skipped (forward) and query blocks entirely
//   before it are skipped (backward); only blocks straddling it are masked element-wise.
// - Backward recomputes P = exp(scale * q k^T - lse) block by block from the saved lse, with
//   Delta_i = sum_d dO_id O_id: dV += P^T dO, dS = P * (dO V^T - Delta), dQ += scale dS K,
//   dK += scale dS^T Q.
// - Mask and dropout (Note [attention masks and dropout]): the mask is applied to each score
//   block after scaling (a bool false -> -inf, a float added), read element by element
//   through its broadcast strides. A row whose running max is still -inf shifts by 0 instead
//   (exp(-inf - -inf) would be NaN); a row that saw no key at all ends with l = 0 and is
//   written as out = 0, lse = +inf. Dropout multiplies the block's probabilities by the
//   regenerated keep / (1 - p) after the row sums took them (lse stays undropped); the
//   backward regenerates the same block: dV += (P Z)^T dO, dS = P (Z dO V^T - Delta). Blocks
//   a bool mask hides entirely (key padding) are skipped in both directions.
// - Parallelism: the forward runs one task per (batch*head, query block), the backward one
//   per batch*head (each owns its dQ, dK, dV rows, so no reduction across threads). Every
//   task computes the same way whatever the thread count, so results are reproducible.
//   Eigen runs single-threaded inside the parallel region. Nothing in it throws.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "eigen_util.h"
#include "kernels/attention.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kBq = 64;   // query rows per block
constexpr int64_t kBk = 64;   // key rows per block
constexpr double kParallelMinMacs = 1 << 18;  // below this, one thread is faster

template <class C>
using Mat = Eigen::Matrix<C, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class C>
using MapM = Eigen::Map<Mat<C>>;
// A block of rows of a strided operand: row stride given, elements within a row adjacent.
template <class C>
using CMapM = Eigen::Map<const Mat<C>, Eigen::Unaligned, Eigen::OuterStride<>>;

// Where the rows of a [B, H, T, D] operand are: row (b, h, t) starts at
// p + b * sb + h * sh + t * st (64-bit offsets), its D elements adjacent.
template <class T>
struct Rows {
  T* p;
  int64_t sb, sh, st, H;
  T* head(int64_t bh) const { return p + (bh / H) * sb + (bh % H) * sh; }
  template <class C>
  CMapM<C> block(int64_t bh, int64_t t0, int64_t n, int64_t D) const {
    return CMapM<C>(head(bh) + t0 * st, n, D, Eigen::OuterStride<>(st));
  }
};

template <class T>
Rows<T> rows_of(const Tensor& t) {
  const Shape& s = t.strides();
  return {static_cast<T*>(t.data_ptr()), s[0], s[1], s[2], t.sizes()[1]};
}

// `t` in the compute type: its own rows when it already is, else a contiguous converted copy
// held in `buf`.
template <class C, class S>
Rows<const C> as_compute(const Tensor& t, Buffer<C>& buf) {
  if constexpr (std::is_same_v<S, C>) {
    return rows_of<const C>(t);
  } else {
    const Rows<const S> src = rows_of<const S>(t);
    const int64_t H = t.sizes()[1], T = t.sizes()[2], D = t.sizes()[3];
    const int64_t rows = t.sizes()[0] * H * T;
    buf.resize(size_t(rows * D));
#pragma omp parallel for schedule(static) if (rows * D > (int64_t(1) << 16) && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
      const S* in = src.head(r / T) + (r % T) * src.st;
      C* o = buf.data() + r * D;
      for (int64_t d = 0; d < D; ++d) o[d] = C(in[d]);
    }
    return {buf.data(), H * T * D, T * D, D, H};
  }
}

// Sets to -inf the scores of block rows [i0, i0+nq) x cols [j0, j0+nk) that the causal mask
// hides (key j visible to query i when j <= i + off).
template <class C>
void mask_block(MapM<C>& s, int64_t i0, int64_t j0, int64_t nq, int64_t nk, int64_t off) {
  const C ninf = -std::numeric_limits<C>::infinity();
  for (int64_t r = 0; r < nq; ++r) {
    const int64_t first_hidden = std::max<int64_t>(0, i0 + r + off + 1 - j0);
    for (int64_t c = first_hidden; c < nk; ++c) s(r, c) = ninf;
  }
}

// The mask and dropout of the kernel call, as seen from one score block.
template <class C>
struct BlockExtras {
  const bool* bmask = nullptr;  // keep where true
  const C* fmask = nullptr;     // added to the scores
  int64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, H = 1;
  double p = 0;
  C keep = 1;
  Generator::State rng{};
  int64_t Tq = 0, Tk = 0;

  BlockExtras(const AttentionKernelExtras& ex, int64_t Tq_, int64_t Tk_) : Tq(Tq_), Tk(Tk_) {
    if (ex.mask.defined()) {
      const Shape& st = ex.mask.strides();
      s0 = st[0]; s1 = st[1]; s2 = st[2]; s3 = st[3];
      H = ex.mask.sizes()[1];
      if (ex.mask.dtype() == DType::b8) bmask = static_cast<const bool*>(ex.mask.data_ptr());
      else fmask = static_cast<const C*>(ex.mask.data_ptr());
    }
    p = ex.dropout_p;
    keep = p > 0 ? C(1.0 / (1.0 - p)) : C(1);
    rng = ex.rng;
  }
  bool has_mask() const { return bmask || fmask; }
  bool has_dropout() const { return p > 0; }

  void apply_mask(MapM<C>& s, int64_t bh, int64_t i0, int64_t j0, int64_t nq, int64_t nk) const {
    const int64_t head = (bh / H) * s0 + (bh % H) * s1;
    const C ninf = -std::numeric_limits<C>::infinity();
    for (int64_t r = 0; r < nq; ++r) {
      const int64_t row = head + (i0 + r) * s2 + j0 * s3;
      C* sr = &s(r, 0);
      // Unit-stride rows (key padding, [Tq, Tk] masks) as branch-free loops the compiler
      // vectorizes; a random bool mask would mispredict a branch about every other element.
      if (bmask && s3 == 1) {
        const bool* mr = bmask + row;
        for (int64_t c = 0; c < nk; ++c) sr[c] = mr[c] ? sr[c] : ninf;
      } else if (bmask) {
        for (int64_t c = 0; c < nk; ++c) sr[c] = bmask[row + c * s3] ? sr[c] : ninf;
      } else if (s3 == 1) {
        const C* mr = fmask + row;
        for (int64_t c = 0; c < nk; ++c) sr[c] += mr[c];
      } else {
        for (int64_t c = 0; c < nk; ++c) sr[c] += fmask[row + c * s3];
      }
    }
  }

  // Whether a bool mask hides the whole block (key padding past a sequence's end): its scores
  // would all be -inf, so it contributes nothing and is skipped. Stops at the first visible
  // element; a mask broadcast over queries (stride 0) is read for one row only.
  bool hides_block(int64_t bh, int64_t i0, int64_t j0, int64_t nq, int64_t nk) const {
    if (!bmask) return false;
    const int64_t head = (bh / H) * s0 + (bh % H) * s1;
    const int64_t rows = s2 == 0 ? 1 : nq;
    for (int64_t r = 0; r < rows; ++r) {
      const bool* mr = bmask + head + (i0 + r) * s2 + j0 * s3;
      for (int64_t c = 0; c < nk; ++c)
        if (mr[c * s3]) return false;
    }
    return true;
  }

  // z[r, c] = keep / (1 - p) or 0 for element (bh, i0 + r, j0 + c): Note [dropout Philox
  // layout] over the [B, H, Tq, Tk] probabilities.
  void dropout_block(MapM<C>& z, int64_t bh, int64_t i0, int64_t j0, int64_t nq, int64_t nk) const {
    uint32_t w[4];
    for (int64_t r = 0; r < nq; ++r) {
      const uint64_t e0 = (uint64_t(bh) * uint64_t(Tq) + uint64_t(i0 + r)) * uint64_t(Tk) + uint64_t(j0);
      uint64_t drawn = ~uint64_t(0);
      for (int64_t c = 0; c < nk; ++c) {
        const uint64_t e = e0 + uint64_t(c), counter = e / 4;
        if (counter != drawn) {
          Philox::draw(rng.seed, rng.offset + counter, w);
          drawn = counter;
        }
        z(r, c) = double(Philox::uniform(w[e % 4])) >= p ? keep : C(0);
      }
    }
  }
};

// Rounds rows [t0, t0 + n) of the contiguous [n, D] `src` into those rows of `dst`.
template <class S, class C>
void store_rows(const Rows<S>& dst, int64_t bh, int64_t t0, int64_t n, int64_t D, const C* src) {
  S* base = dst.head(bh) + t0 * dst.st;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) base[r * dst.st + d] = S(src[r * D + d]);
}

template <class S>
void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const AttentionKernelExtras& extras, bool causal,
                   double scale_d) {
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const int64_t BH = q.sizes()[0] * q.sizes()[1], Tq = q.sizes()[2], Tk = k.sizes()[2],
                D = q.sizes()[3];
  const int64_t off = Tk - Tq;
  const C scale = C(scale_d);
  Buffer<C> qbuf, kbuf, vbuf;
  const Rows<const C> qr = as_compute<C, S>(q, qbuf);
  const Rows<const C> kr = as_compute<C, S>(k, kbuf);
  const Rows<const C> vr = as_compute<C, S>(v, vbuf);
  const Rows<S> orow = rows_of<S>(out);
  C* lp = lse.data_ptr<C>();
  const BlockExtras<C> ex(extras, Tq, Tk);
  const int64_t qblocks = (Tq + kBq - 1) / kBq;
  const int64_t tasks = BH * qblocks;
  const double macs = double(BH) * double(Tq) * double(Tk) * double(D) * 2;

#pragma omp parallel if (macs > kParallelMinMacs && tasks > 1)
  {
    Buffer<C> sbuf(static_cast<size_t>(kBq * kBk)), accbuf(static_cast<size_t>(kBq * D)),
        m(static_cast<size_t>(kBq)), l(static_cast<size_t>(kBq)),
        zbuf(ex.has_dropout() ? static_cast<size_t>(kBq * kBk) : 0);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / qblocks, i0 = (t % qblocks) * kBq;
      const int64_t nq = std::min(kBq, Tq - i0);
      const CMapM<C> qb = qr.template block<C>(bh, i0, nq, D);
      MapM<C> acc(accbuf.data(), nq, D);
      acc.setZero();
      std::fill(m.begin(), m.end(), -std::numeric_limits<C>::infinity());
      std::fill(l.begin(), l.end(), C(0));
      // Keys past the last query's diagonal are invisible to the whole block.
      const int64_t kend = causal ? std::min(Tk, i0 + nq + off) : Tk;
      for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
        const int64_t nk = std::min(kBk, kend - j0);
        if (ex.hides_block(bh, i0, j0, nq, nk)) continue;
        const CMapM<C> kb = kr.template block<C>(bh, j0, nk, D);
        const CMapM<C> vb = vr.template block<C>(bh, j0, nk, D);
        MapM<C> s(sbuf.data(), nq, nk);
        s.noalias() = qb * kb.transpose();
        s *= scale;
        if (causal && j0 + nk - 1 > i0 + off) mask_block(s, i0, j0, nq, nk, off);
        if (ex.has_mask()) ex.apply_mask(s, bh, i0, j0, nq, nk);
        for (int64_t r = 0; r < nq; ++r) {
          auto row = s.row(r).array();
          const C mnew = std::max(m[size_t(r)], row.maxCoeff());
          // A row that sees no key yet (masked so far, or entirely) adds nothing. The zeros are
          // written, not computed: Eigen's vectorized exp clamps its argument (near -88 in f32),
          // so exp(-inf) is a denormal, not 0, and a fully masked row came out as the mean of V
          // with lse = -inf (found by AttentionMaskCuda.FullyMaskedRow on the first GPU run).
          if (mnew == -std::numeric_limits<C>::infinity()) {
            row.setZero();
            continue;
          }
          const C alpha = std::exp(m[size_t(r)] - mnew);  // std::exp(-inf) = 0 exactly
          row = (row - mnew).exp();
          l[size_t(r)] = l[size_t(r)] * alpha + row.sum();
          acc.row(r) *= alpha;
          m[size_t(r)] = mnew;
        }
        if (ex.has_dropout()) {
          MapM<C> z(zbuf.data(), nq, nk);
          ex.dropout_block(z, bh, i0, j0, nq, nk);
          s.array() *= z.array();
        }
        acc.noalias() += s * vb;
      }
      for (int64_t r = 0; r < nq; ++r) {
        const C lr = l[size_t(r)];
        // A fully masked row: out = 0 and lse = +inf (its backward then sees P = 0).
        const C inv = lr > 0 ? C(1) / lr : C(0);
        S* o = orow.head(bh) + (i0 + r) * orow.st;
        for (int64_t d = 0; d < D; ++d) o[d] = S(acc(r, d) * inv);
        lp[bh * Tq + i0 + r] =
            lr > 0 ? m[size_t(r)] + std::log(lr) : std::numeric_limits<C>::infinity();
      }
    }
  }
}

template <class S>
void attention_bwd(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                   const Tensor& dv, const AttentionKernelExtras& extras, bool causal,
                   double scale_d) {
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const int64_t BH = q.sizes()[0] * q.sizes()[1], Tq = q.sizes()[2], Tk = k.sizes()[2],
                D = q.sizes()[3];
  const int64_t off = Tk - Tq;
  const C scale = C(scale_d);
  Buffer<C> qbuf, kbuf, vbuf, gbuf, obuf;
  const Rows<const C> qr = as_compute<C, S>(q, qbuf);
  const Rows<const C> kr = as_compute<C, S>(k, kbuf);
  const Rows<const C> vr = as_compute<C, S>(v, vbuf);
  const Rows<const C> gr = as_compute<C, S>(grad, gbuf);
  const Rows<const C> orow = as_compute<C, S>(out, obuf);
  const C* lp = lse.data_ptr<C>();
  const Rows<S> dqr = rows_of<S>(dq), dkr = rows_of<S>(dk), dvr = rows_of<S>(dv);
  const double macs = double(BH) * double(Tq) * double(Tk) * double(D) * 5;
  const BlockExtras<C> ex(extras, Tq, Tk);

#pragma omp parallel if (macs > kParallelMinMacs && BH > 1)
  {
    Buffer<C> sbuf(static_cast<size_t>(kBq * kBk)), dpbuf(static_cast<size_t>(kBq * kBk)),
        dkbuf(static_cast<size_t>(kBk * D)), dvbuf(static_cast<size_t>(kBk * D)),
        dqbuf(static_cast<size_t>(Tq * D)), delta(static_cast<size_t>(Tq)),
        zbuf(ex.has_dropout() ? static_cast<size_t>(kBq * kBk) : 0);
#pragma omp for schedule(dynamic)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const C* gh = gr.head(bh);
      const C* oh = orow.head(bh);
      const C* lh = lp + bh * Tq;
      for (int64_t i = 0; i < Tq; ++i) {
        C s = 0;
        for (int64_t d = 0; d < D; ++d) s += gh[i * gr.st + d] * oh[i * orow.st + d];
        delta[size_t(i)] = s;
      }
      MapM<C> dqa(dqbuf.data(), Tq, D);
      dqa.setZero();
      for (int64_t j0 = 0; j0 < Tk; j0 += kBk) {
        const int64_t nk = std::min(kBk, Tk - j0);
        const CMapM<C> kb = kr.template block<C>(bh, j0, nk, D);
        const CMapM<C> vb = vr.template block<C>(bh, j0, nk, D);
        MapM<C> dka(dkbuf.data(), nk, D), dva(dvbuf.data(), nk, D);
        dka.setZero();
        dva.setZero();
        // Query rows that see at least one key of this block: i + off >= j0.
        const int64_t qstart = causal ? std::max<int64_t>(0, j0 - off) / kBq * kBq : 0;
        for (int64_t i0 = qstart; i0 < Tq; i0 += kBq) {
          const int64_t nq = std::min(kBq, Tq - i0);
          if (ex.hides_block(bh, i0, j0, nq, nk)) continue;  // P = 0 there
          const CMapM<C> qb = qr.template block<C>(bh, i0, nq, D);
          const CMapM<C> gb = gr.template block<C>(bh, i0, nq, D);
          MapM<C> p(sbuf.data(), nq, nk), dp(dpbuf.data(), nq, nk);
          p.noalias() = qb * kb.transpose();
          p *= scale;
          if (causal && j0 + nk - 1 > i0 + off) mask_block(p, i0, j0, nq, nk, off);
          if (ex.has_mask()) ex.apply_mask(p, bh, i0, j0, nq, nk);
          // lse = +inf (a fully masked row): P = 0 for the whole row, written as in the forward
          // (Eigen's exp(-inf) is a denormal).
          for (int64_t r = 0; r < nq; ++r) {
            if (lh[i0 + r] == std::numeric_limits<C>::infinity()) p.row(r).setZero();
            else p.row(r).array() = (p.row(r).array() - lh[i0 + r]).exp();
          }
          dp.noalias() = gb * vb.transpose();
          if (ex.has_dropout()) {
            MapM<C> z(zbuf.data(), nq, nk);
            ex.dropout_block(z, bh, i0, j0, nq, nk);
            dp.array() *= z.array();
            z.array() *= p.array();  // the dropped probabilities, what the forward multiplied V by
            dva.noalias() += z.transpose() * gb;
          } else {
            dva.noalias() += p.transpose() * gb;
          }
          for (int64_t r = 0; r < nq; ++r)
            dp.row(r).array() = p.row(r).array() * (dp.row(r).array() - delta[size_t(i0 + r)]);
          dqa.middleRows(i0, nq).noalias() += scale * (dp * kb);
          dka.noalias() += scale * (dp.transpose() * qb);
        }
        store_rows(dkr, bh, j0, nk, D, dkbuf.data());
        store_rows(dvr, bh, j0, nk, D, dvbuf.data());
      }
      store_rows(dqr, bh, 0, Tq, D, dqbuf.data());
    }
  }
}

}  // namespace

void attention_fwd_kernel(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const AttentionKernelExtras& extras, bool causal,
                          double scale) {
  visit_floating(q.dtype(), [&](auto tag) {
    attention_fwd<decltype(tag)>(q, k, v, out, lse, extras, causal, scale);
  });
}

void attention_bwd_kernel(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dq,
                          const Tensor& dk, const Tensor& dv, const AttentionKernelExtras& extras,
                          bool causal, double scale) {
  visit_floating(q.dtype(), [&](auto tag) {
    attention_bwd<decltype(tag)>(grad, q, k, v, out, lse, dq, dk, dv, extras, causal, scale);
  });
}

}  // namespace ember::ops::cpu
