// CPU driver of the reduce family. The front hands over an [O, R, K] view (kernels/reduce.h):
// "rows" (K == 1, contiguous R) or "columns" (contiguous K, strided R).
//
// Invariants:
// - Floating sums accumulate in double (f16/bf16/f32 and f64 alike), pairwise within a chunk,
//   so sums of millions of elements keep full f32 accuracy and f64 loses only O(log n) ulps.
// - Determinism: every result is a fixed function of the shape. Rows are cut into chunks of
//   kChunk elements and columns into super-blocks of kSuperRows rows (blocks of kRowBlock
//   inside); partial results are combined left to right in that fixed order. OpenMP only
//   decides who computes which partial, so 1 thread and 16 threads agree bit for bit.
// - A reducer (below) is the math of one op: identity, chunk (a contiguous run), block (up
//   to kRowBlock strided rows of up to kColBlock columns), combine (a precedes b), write.
// - var/std use two passes inside each chunk/block and Chan's formula across them; argmax
//   keeps the first index among ties; max/min/argmax propagate NaN (the first NaN wins).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/reduce.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kChunk = 16384;      // rows: elements per partial
constexpr int64_t kRowBlock = 64;      // columns: rows per block
constexpr int64_t kSuperRows = 4096;   // columns: rows per partial
constexpr int64_t kColBlock = 1024;    // columns: columns per work item (any width gives
                                       // the same results: columns are independent)

template <class S>
inline constexpr bool kFloat = std::is_floating_point_v<compute_t<S>>;

template <class T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// S -> its compute type. f16 converts without branches (a select by mask, not ?:) so the
// loops vectorize: its exponent/mantissa bits placed into a float and scaled by 2^112 give
// normals and subnormals alike; inf/NaN are selected separately. (Half's own conversion
// branches per element, which stops the vectorizer.)
template <class S>
inline compute_t<S> widen(S v) {
  if constexpr (std::is_same_v<S, Half>) {
    const uint32_t em = uint32_t(v.bits & 0x7fffu) << 13, sign = uint32_t(v.bits & 0x8000u) << 16;
    const uint32_t scaled = detail::float_bits(detail::bits_float(em) * 0x1p112f);
    const uint32_t special = 0u - uint32_t(em >= (0x7c00u << 13));  // all ones for inf/NaN
    return detail::bits_float(((special & (em | 0x7f800000u)) | (~special & scaled)) | sign);
  } else {
    return compute_t<S>(v);
  }
}

template <class S>
inline double to_double(S v) {
  return double(widen(v));
}

template <class S>
inline S from_double(double v) {
  if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) return S(float(v));
  else return S(v);
}

// ---- sums of f(x) in double ----

template <class S, class Map>
double pairwise_sum(const S* x, int64_t n, const Map& f) {
  if (n <= 128) {
    double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) a[j] += f(to_double(x[i + j]));
    double s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < n; ++i) s += f(to_double(x[i]));
    return s;
  }
  const int64_t h = (n / 2) & ~int64_t(7);
  return pairwise_sum(x, h, f) + pairwise_sum(x + h, n - h, f);
}

struct Ident {
  double operator()(double v) const { return v; }
};
struct Abs {
  double operator()(double v) const { return std::fabs(v); }
};
struct Square {
  double operator()(double v) const { return v * v; }
};
struct NonZero {
  double operator()(double v) const { return v != 0 ? 1.0 : 0.0; }
};
struct PowAbs {
  double p;
  double operator()(double v) const { return std::pow(std::fabs(v), p); }
};
// |v|^n for a small integer n > 2 by repeated multiplication (std::pow costs ~50x more).
struct IntPowAbs {
  int n;
  double operator()(double v) const {
    const double a = std::fabs(v);
    double r = a;
    for (int i = 1; i < n; ++i) r *= a;
    return r;
  }
};

// Finishes a sum: plain, divided by the count (mean), sqrt or ^(1/p) (norms).
struct Plain {
  double operator()(double s) const { return s; }
};
struct DivBy {
  double n;
  double operator()(double s) const { return s / n; }
};
struct Sqrt {
  double operator()(double s) const { return std::sqrt(s); }
};
struct Root {
  double inv_p;
  double operator()(double s) const { return std::pow(s, inv_p); }
};

template <class S, class Map, class Fin>
struct SumReducer {
  using Acc = double;
  S* out;
  Map f;
  Fin fin;
  Acc identity() const { return 0.0; }
  Acc chunk(const S* x, int64_t n, int64_t) const { return pairwise_sum(x, n, f); }
  // Four rows per pass over the accumulators (a fixed, shape-determined order).
  void block(const S* x, int64_t rs, int64_t nr, int64_t nk, int64_t, Acc* acc) const {
    for (int64_t k = 0; k < nk; ++k) acc[k] = 0.0;
    int64_t r = 0;
    for (; r + 4 <= nr; r += 4) {
      const S *r0 = x + r * rs, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
      for (int64_t k = 0; k < nk; ++k)
        acc[k] += (f(to_double(r0[k])) + f(to_double(r1[k]))) + (f(to_double(r2[k])) + f(to_double(r3[k])));
    }
    for (; r < nr; ++r) {
      const S* row = x + r * rs;
      for (int64_t k = 0; k < nk; ++k) acc[k] += f(to_double(row[k]));
    }
  }
  Acc combine(Acc a, Acc b) const { return a + b; }
  void write(Acc a, int64_t i) const { out[i] = from_double<S>(fin(a)); }
};

// Integer and bool sums: exact in int64 (wrapping like PyTorch on overflow).
template <class S>
struct IntSumReducer {
  using Acc = int64_t;
  int64_t* out;
  Acc identity() const { return 0; }
  Acc chunk(const S* x, int64_t n, int64_t) const {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += uint64_t(int64_t(x[i]));
    return int64_t(s);
  }
  void block(const S* x, int64_t rs, int64_t nr, int64_t nk, int64_t, Acc* acc) const {
    for (int64_t k = 0; k < nk; ++k) acc[k] = 0;
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t k = 0; k < nk; ++k)
        acc[k] = int64_t(uint64_t(acc[k]) + uint64_t(int64_t(x[r * rs + k])));
  }
  Acc combine(Acc a, Acc b) const { return int64_t(uint64_t(a) + uint64_t(b)); }
  void write(Acc a, int64_t i) const { out[i] = a; }
};

// ---- extrema ----

// amax/amin (and the inf/-inf norms with kAbs): exact, so lanes may be combined in any order.
template <class S, bool kMax, bool kAbs = false>
struct ExtremumReducer {
  using C = compute_t<S>;
  using Acc = C;
  S* out;
  template <class E>
  static C map(E v) {
    if constexpr (kAbs) return std::fabs(widen(v));
    else return widen(v);
  }
  static Acc identity() {
    if constexpr (std::is_same_v<C, bool>) return !kMax;
    else if constexpr (std::numeric_limits<C>::has_infinity)
      return kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else return kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  // b replaces a when it is more extreme or NaN; a NaN a stays (b > NaN is false).
  static Acc pick(Acc a, Acc b) {
    if constexpr (kMax) return (b > a || is_nan(b)) ? b : a;
    else return (b < a || is_nan(b)) ? b : a;
  }
  // Eight lanes of a plain compare-select, plus per lane the last NaN seen (also a select, so
  // the loop vectorizes; a NaN anywhere makes the result NaN). E is S, or C for f16/bf16
  // input widened into a buffer first (the conversion and the selects vectorize separately).
  template <class E>
  static Acc lanes(const E* x, int64_t n, Acc a) {
    Acc lane[8], nan[8];
    for (int j = 0; j < 8; ++j) lane[j] = identity(), nan[j] = Acc(0);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) {
        const Acc v = map(x[i + j]);
        if constexpr (kMax) lane[j] = v > lane[j] ? v : lane[j];
        else lane[j] = v < lane[j] ? v : lane[j];
        if constexpr (std::is_floating_point_v<Acc>) nan[j] = v != v ? v : nan[j];
      }
    for (int j = 0; j < 8; ++j) {
      a = pick(a, lane[j]);
      if (is_nan(nan[j])) a = pick(a, nan[j]);
    }
    for (; i < n; ++i) a = pick(a, map(x[i]));
    return a;
  }
  Acc chunk(const S* x, int64_t n, int64_t) const {
    if constexpr (std::is_same_v<S, C>) {
      return lanes(x, n, identity());
    } else {
      C buf[512];
      Acc a = identity();
      for (int64_t b = 0; b < n; b += 512) {
        const int64_t m = std::min<int64_t>(512, n - b);
        for (int64_t i = 0; i < m; ++i) buf[i] = widen(x[b + i]);
        a = lanes(buf, m, a);
      }
      return a;
    }
  }
  void block(const S* x, int64_t rs, int64_t nr, int64_t nk, int64_t, Acc* acc) const {
    for (int64_t k = 0; k < nk; ++k) acc[k] = map(x[k]);
    for (int64_t r = 1; r < nr; ++r)
      for (int64_t k = 0; k < nk; ++k) acc[k] = pick(acc[k], map(x[r * rs + k]));
  }
  Acc combine(Acc a, Acc b) const { return pick(a, b); }
  void write(Acc a, int64_t i) const { out[i] = S(a); }
};

// max/min with the index of the first extremum (or of the first NaN).
template <class S, bool kMax>
struct ArgReducer {
  using C = compute_t<S>;
  struct Acc {
    C value;
    int64_t index;  // -1: identity
  };
  S* values;  // may be null
  int64_t* indices;
  static bool better(C candidate, C best) {
    if (is_nan(best)) return false;
    if constexpr (kMax) return candidate > best || is_nan(candidate);
    else return candidate < best || is_nan(candidate);
  }
  Acc identity() const { return {C(), -1}; }
  // Two vectorizable passes: the extremum (NaN if any), then its first position.
  Acc chunk(const S* x, int64_t n, int64_t first) const {
    if (n == 0) return identity();
    const C best = ExtremumReducer<S, kMax>{nullptr}.chunk(x, n, 0);
    int64_t i = 0;
    if (is_nan(best)) {
      while (!is_nan(widen(x[i]))) ++i;
    } else {
      while (!(widen(x[i]) == best)) ++i;
    }
    return {best, first + i};
  }
  void block(const S* x, int64_t rs, int64_t nr, int64_t nk, int64_t first, Acc* acc) const {
    for (int64_t k = 0; k < nk; ++k) acc[k] = {widen(x[k]), first};
    for (int64_t r = 1; r < nr; ++r)
      for (int64_t k = 0; k < nk; ++k) {
        const C v = widen(x[r * rs + k]);
        if (better(v, acc[k].value)) acc[k] = {v, first + r};
      }
  }
  Acc combine(const Acc& a, const Acc& b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return better(b.value, a.value) ? b : a;  // ties keep a, the earlier index
  }
  void write(const Acc& a, int64_t i) const {
    if (values) values[i] = S(a.value);
    indices[i] = a.index;
  }
};

// ---- variance ----

template <class S>
struct VarReducer {
  struct Acc {
    double n, mean, m2;
  };
  S* out;
  int64_t correction;
  bool take_sqrt;
  Acc identity() const { return {0, 0, 0}; }
  Acc chunk(const S* x, int64_t n, int64_t) const {
    if (n == 0) return identity();
    const double mean = pairwise_sum(x, n, Ident{}) / double(n);
    const double m2 = pairwise_sum(x, n, [mean](double v) {
      const double d = v - mean;
      return d * d;
    });
    return {double(n), mean, m2};
  }
  void block(const S* x, int64_t rs, int64_t nr, int64_t nk, int64_t, Acc* acc) const {
    double sum[kColBlock], m2[kColBlock];  // plain arrays so the column loops vectorize
    for (int64_t k = 0; k < nk; ++k) sum[k] = m2[k] = 0;
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t k = 0; k < nk; ++k) sum[k] += to_double(x[r * rs + k]);
    for (int64_t k = 0; k < nk; ++k) sum[k] /= double(nr);  // now the mean
    for (int64_t r = 0; r < nr; ++r)
      for (int64_t k = 0; k < nk; ++k) {
        const double d = to_double(x[r * rs + k]) - sum[k];
        m2[k] += d * d;
      }
    for (int64_t k = 0; k < nk; ++k) acc[k] = {double(nr), sum[k], m2[k]};
  }
  // Chan et al.: merge two (count, mean, M2) summaries.
  Acc combine(const Acc& a, const Acc& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, delta = b.mean - a.mean;
    return {n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
  }
  void write(const Acc& a, int64_t i) const {
    const double v = a.m2 / std::max(0.0, a.n - double(correction));
    out[i] = from_double<S>(take_sqrt ? std::sqrt(v) : v);
  }
};

// ---- drivers ----

// An uninitialized array (not std::vector: Acc may be bool).
template <class T>
struct Scratch {
  std::unique_ptr<T[]> p;
  explicit Scratch(int64_t n) : p(new T[size_t(std::max<int64_t>(n, 1))]) {}
  T* data() { return p.get(); }
  T& operator[](int64_t i) { return p[size_t(i)]; }
};

// Rows: output o reduces x[o*os + 0 .. R). Partials are the kChunk-element chunks of a row.
template <class S, class Red>
void reduce_rows(const Red& red, const S* x, int64_t O, int64_t os, int64_t R) {
  using Acc = typename Red::Acc;
  const int64_t nchunks = std::max<int64_t>(1, (R + kChunk - 1) / kChunk);
  auto partial = [&](int64_t o, int64_t c) {
    const int64_t b = c * kChunk;
    return red.chunk(x + o * os + b, std::min(kChunk, R - b), b);
  };
  const bool parallel = O * R >= kParallelGrain;
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  if (nchunks == 1 || O >= 4 * threads) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < O; ++o) {
      Acc a = partial(o, 0);
      for (int64_t c = 1; c < nchunks; ++c) a = red.combine(a, partial(o, c));
      red.write(a, o);
    }
    return;
  }
  // Few long rows: compute all (row, chunk) partials in parallel, then combine in order.
  Scratch<Acc> parts(O * nchunks);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < O * nchunks; ++i) parts[i] = partial(i / nchunks, i % nchunks);
  for (int64_t o = 0; o < O; ++o) {
    Acc a = parts[o * nchunks];
    for (int64_t c = 1; c < nchunks; ++c) a = red.combine(a, parts[o * nchunks + c]);
    red.write(a, o);
  }
}

// Columns: output (o, k) reduces x[o*os + r*rs + k] over r. A work item is one o and up to
// kColBlock columns; its partials are super-blocks of kSuperRows rows, each the in-order
// combination of kRowBlock-row blocks.
template <class S, class Red>
void reduce_cols(const Red& red, const S* x, int64_t O, int64_t os, int64_t R, int64_t rs,
                 int64_t K) {
  using Acc = typename Red::Acc;
  const int64_t nkb = (K + kColBlock - 1) / kColBlock;
  const int64_t nsup = std::max<int64_t>(1, (R + kSuperRows - 1) / kSuperRows);
  const int64_t width = std::min(K, kColBlock);
  const int64_t items = O * nkb;
  auto cols_of = [&](int64_t item) { return std::min(kColBlock, K - (item % nkb) * kColBlock); };
  // acc[0, kn) = the partial of super-block s of item (o, kb); blk is scratch.
  auto partial = [&](int64_t item, int64_t s, Acc* acc, Acc* blk) {
    const int64_t o = item / nkb, k0 = (item % nkb) * kColBlock, kn = cols_of(item);
    const int64_t r0 = s * kSuperRows, r1 = std::min(R, r0 + kSuperRows);
    for (int64_t k = 0; k < kn; ++k) acc[k] = red.identity();
    for (int64_t r = r0; r < r1; r += kRowBlock) {
      red.block(x + o * os + r * rs + k0, rs, std::min(kRowBlock, r1 - r), kn, r, blk);
      for (int64_t k = 0; k < kn; ++k) acc[k] = red.combine(acc[k], blk[k]);
    }
  };
  auto write = [&](int64_t item, const Acc* acc) {
    const int64_t o = item / nkb, k0 = (item % nkb) * kColBlock, kn = cols_of(item);
    for (int64_t k = 0; k < kn; ++k) red.write(acc[k], o * K + k0 + k);
  };
  const bool parallel = O * R * K >= kParallelGrain;
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  if (nsup == 1 || items >= 4 * threads) {
#pragma omp parallel if (parallel)
    {
      Scratch<Acc> acc(width), part(width), blk(width);
#pragma omp for schedule(static)
      for (int64_t item = 0; item < items; ++item) {
        partial(item, 0, acc.data(), blk.data());
        for (int64_t s = 1, kn = cols_of(item); s < nsup; ++s) {
          partial(item, s, part.data(), blk.data());
          for (int64_t k = 0; k < kn; ++k) acc[k] = red.combine(acc[k], part[k]);
        }
        write(item, acc.data());
      }
    }
    return;
  }
  // Few items over many rows: all (item, super-block) partials in parallel, then combine.
  Scratch<Acc> parts(items * nsup * width);
#pragma omp parallel
  {
    Scratch<Acc> blk(width);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < items * nsup; ++i)
      partial(i / nsup, i % nsup, parts.data() + i * width, blk.data());
  }
  for (int64_t item = 0; item < items; ++item) {
    Acc* acc = parts.data() + item * nsup * width;
    for (int64_t s = 1, kn = cols_of(item); s < nsup; ++s)
      for (int64_t k = 0; k < kn; ++k) acc[k] = red.combine(acc[k], acc[s * width + k]);
    write(item, acc);
  }
}

template <class S, class Red>
void run(const Red& red, const Tensor& in) {
  const S* x = static_cast<const S*>(in.data_ptr());
  const int64_t O = in.sizes()[0], R = in.sizes()[1], K = in.sizes()[2];
  if (K == 1 && (in.strides()[1] == 1 || R <= 1)) reduce_rows<S>(red, x, O, in.strides()[0], R);
  else reduce_cols<S>(red, x, O, in.strides()[0], R, in.strides()[1], K);
}

template <class S, class Map, class Fin>
void run_sum(const Tensor& in, const Tensor& out, Map f, Fin fin) {
  run<S>(SumReducer<S, Map, Fin>{out.data_ptr<S>(), f, fin}, in);
}

template <class S>
void norm_dispatch(const Tensor& in, const Tensor& out, double p) {
  S* o = out.data_ptr<S>();
  if (p == std::numeric_limits<double>::infinity()) run<S>(ExtremumReducer<S, true, true>{o}, in);
  else if (p == -std::numeric_limits<double>::infinity())
    run<S>(ExtremumReducer<S, false, true>{o}, in);
  else if (p == 0) run_sum<S>(in, out, NonZero{}, Plain{});
  else if (p == 1) run_sum<S>(in, out, Abs{}, Plain{});
  else if (p == 2) run_sum<S>(in, out, Square{}, Sqrt{});
  else if (p > 2 && p <= 8 && p == std::floor(p)) run_sum<S>(in, out, IntPowAbs{int(p)}, Root{1.0 / p});
  else run_sum<S>(in, out, PowAbs{p}, Root{1.0 / p});
}

}  // namespace

void reduce_kernel(ReduceOp op, const Tensor& in, const Tensor& out, const ReduceParams& params) {
  const DType dt = in.dtype();
  switch (op) {
    case ReduceOp::sum:
      if (is_floating(dt)) {
        visit_floating(dt, [&](auto t) { run_sum<decltype(t)>(in, out, Ident{}, Plain{}); });
      } else {
        visit_dtype(dt, [&](auto t) {
          using S = decltype(t);
          if constexpr (!kFloat<S>) run<S>(IntSumReducer<S>{out.data_ptr<int64_t>()}, in);
        });
      }
      return;
    case ReduceOp::mean:
      visit_floating(dt, [&](auto t) {
        run_sum<decltype(t)>(in, out, Ident{}, DivBy{double(in.sizes()[1])});
      });
      return;
    case ReduceOp::amax:
    case ReduceOp::amin:
      visit_dtype(dt, [&](auto t) {
        using S = decltype(t);
        if (op == ReduceOp::amax) run<S>(ExtremumReducer<S, true>{out.data_ptr<S>()}, in);
        else run<S>(ExtremumReducer<S, false>{out.data_ptr<S>()}, in);
      });
      return;
    case ReduceOp::var:
    case ReduceOp::std:
      visit_floating(dt, [&](auto t) {
        using S = decltype(t);
        run<S>(VarReducer<S>{out.data_ptr<S>(), params.correction, op == ReduceOp::std}, in);
      });
      return;
    case ReduceOp::norm:
      visit_floating(dt, [&](auto t) { norm_dispatch<decltype(t)>(in, out, params.p); });
      return;
  }
}

void arg_reduce_kernel(bool is_max, const Tensor& in, const Tensor& values, const Tensor& indices) {
  visit_dtype(in.dtype(), [&](auto t) {
    using S = decltype(t);
    S* v = values.defined() ? values.data_ptr<S>() : nullptr;
    int64_t* i = indices.data_ptr<int64_t>();
    if (is_max) run<S>(ArgReducer<S, true>{v, i}, in);
    else run<S>(ArgReducer<S, false>{v, i}, in);
  });
}

}  // namespace ember::ops::cpu
