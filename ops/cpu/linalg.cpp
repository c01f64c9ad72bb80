// CPU GEMM: Eigen for f32/f64, a plain loop for integers, f16/bf16 through f32.
//
// Invariants: operands are mapped in place whenever Eigen can read them directly (a unit
// stride in either dim: row-major or column-major, any leading dimension), so transposed
// and sliced views cost no copy; other layouts (stride 0 inside a matrix, two non-unit
// strides) are packed first. A column-major output is handled as its transpose
// (c^T = b^T a^T), so the output is always written in place too.
//
// Note [GEMM threading]: one OpenMP level at a time. A batch runs either one GEMM per
// thread (many small GEMMs) or one GEMM after another, each split by gemm() itself (few
// large GEMMs): whichever keeps more threads busy. A large GEMM is cut along the longer of
// its output dims into independent blocks (multiples of 64 rows or columns, a count that
// depends only on the sizes, so results do not depend on the thread count or schedule),
// handed out dynamically, each one single-threaded Eigen product. Not Eigen's own OpenMP
// GEMM: its threads pack shared panels and spin until every other thread has caught up, so
// one thread descheduled by a busy machine stalls them all (a 2-3x slower GPT step on 2
// loaded cores). Eigen runs single-threaded inside a parallel region (it checks
// omp_get_num_threads()), so a caller that already parallelizes (conv over the batch)
// never oversubscribes.
#include <omp.h>

// GCC 12 reports false -Wmaybe-uninitialized positives inside Eigen's AVX-512 packet code
// when the GEMM is instantiated; they are Eigen's, not ours.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Core>
#include <algorithm>
#include <vector>

#include "ember/ops/functors.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/reduce.h"

namespace ember::ops::cpu {

namespace {

// Eigen's heuristic: it gives a GEMM one thread per ~50k multiply-adds (Parallelizer.h).
constexpr double kEigenMinTaskMacs = 50000;
// Below this much work in total, a parallel region costs more than it saves.
constexpr double kParallelMinMacs = 4 * kEigenMinTaskMacs;
// Splitting one GEMM (Note [GEMM threading]): blocks of at least this much work and at
// least kMinBlockLen rows or columns (each block repacks the whole operand it shares with the
// others: K x kMinBlockLen multiply-adds per element packed keeps that below ~1/256 of its
// work, which matters when K is large, like the lm_head's gradient over a 50k vocabulary),
// at most kMaxBlocks of them, kBlockAlign rows or columns at a time.
constexpr double kMinBlockMacs = 1 << 20;
constexpr int64_t kMaxBlocks = 32, kBlockAlign = 64, kMinBlockLen = 256;

enum class Layout { row, col, none };

// How Eigen can read a rows x cols matrix with strides (rs, cs) in place, and its leading
// dimension. A size-1 dim's stride is irrelevant; the leading dimension must not make rows
// (or columns) overlap, as BLAS requires.
Layout layout_of(int64_t rows, int64_t cols, int64_t rs, int64_t cs, int64_t& ld) {
  if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= std::max<int64_t>(cols, 1))) {
    ld = rows <= 1 ? std::max<int64_t>(cols, 1) : rs;
    return Layout::row;
  }
  if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= std::max<int64_t>(rows, 1))) {
    ld = cols <= 1 ? std::max<int64_t>(rows, 1) : cs;
    return Layout::col;
  }
  return Layout::none;
}

template <class T>
MatRef<const T> pack_row_major(int64_t rows, int64_t cols, MatRef<const T> m, std::vector<T>& buf) {
  buf.resize(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) buf[size_t(i * cols + j)] = m.p[i * m.rs + j * m.cs];
  return {buf.data(), cols, 1};
}

template <class T, int Order>
using ConstMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Order>,
                            Eigen::Unaligned, Eigen::OuterStride<>>;
template <class T>
using RowMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>,
                          Eigen::Unaligned, Eigen::OuterStride<>>;

template <class T, class Lhs, class Rhs>
void product_into(RowMap<T>& c, const Lhs& a, const Rhs& b, bool accumulate) {
  if (accumulate) c.noalias() += a * b;
  else c.noalias() = a * b;
}

// Integers: Eigen's GEMM is tuned for floating types only; a cache-friendly i-k-j loop.
template <class T>
void gemm_loop(int64_t M, int64_t N, int64_t K, MatRef<const T> a, MatRef<const T> b, MatRef<T> c,
               bool accumulate) {
#pragma omp parallel for schedule(static) if (M * N * K > (int64_t(1) << 18) && !omp_in_parallel())
  for (int64_t i = 0; i < M; ++i) {
    T* ci = c.p + i * c.rs;
    if (!accumulate)
      for (int64_t j = 0; j < N; ++j) ci[j * c.cs] = T(0);
    for (int64_t k = 0; k < K; ++k) {
      const T av = a.p[i * a.rs + k * a.cs];
      const T* bk = b.p + k * b.rs;
      for (int64_t j = 0; j < N; ++j) ci[j * c.cs] = T(ci[j * c.cs] + av * bk[j * b.cs]);
    }
  }
}

}  // namespace

template <class T>
void gemm(int64_t M, int64_t N, int64_t K, MatRef<const T> a, MatRef<const T> b, MatRef<T> c,
          bool accumulate) {
  if (M == 0 || N == 0) return;
  int64_t ldc = 0;
  const Layout lc = layout_of(M, N, c.rs, c.cs, ldc);
  if (lc == Layout::col) {  // c^T = b^T a^T with c^T row-major
    gemm<T>(N, M, K, {b.p, b.cs, b.rs}, {a.p, a.cs, a.rs}, {c.p, c.cs, c.rs}, accumulate);
    return;
  }
  if (lc == Layout::none) {  // not produced by ember's fronts; kept for completeness
    std::vector<T> tmp(size_t(M * N));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) tmp[size_t(i * N + j)] = accumulate ? c.p[i * c.rs + j * c.cs] : T(0);
    gemm<T>(M, N, K, a, b, {tmp.data(), N, 1}, true);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c.p[i * c.rs + j * c.cs] = tmp[size_t(i * N + j)];
    return;
  }
  const double macs = double(M) * double(N) * double(K);
  if (macs >= 2 * kMinBlockMacs && !omp_in_parallel() && omp_get_max_threads() > 1) {
    const bool by_rows = M >= N;  // blocks of rows of a and c, or of columns of b and c
    const int64_t len = by_rows ? M : N;
    int64_t blocks = std::min<int64_t>({kMaxBlocks, len / kMinBlockLen, int64_t(macs / kMinBlockMacs)});
    if (blocks >= 2) {
      const int64_t step = ((len + blocks - 1) / blocks + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
      blocks = (len + step - 1) / step;
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t i = 0; i < blocks; ++i) {
        const int64_t at = i * step, n = std::min(step, len - at);
        if (by_rows)
          gemm<T>(n, N, K, {a.p + at * a.rs, a.rs, a.cs}, b, {c.p + at * c.rs, c.rs, c.cs}, accumulate);
        else
          gemm<T>(M, n, K, a, {b.p + at * b.cs, b.rs, b.cs}, {c.p + at * c.cs, c.rs, c.cs}, accumulate);
      }
      return;
    }
  }
  RowMap<T> C(c.p, M, N, Eigen::OuterStride<>(ldc));
  if (K == 0) {
    if (!accumulate) C.setZero();
    return;
  }
  std::vector<T> abuf, bbuf;
  int64_t lda = 0, ldb = 0;
  Layout la = layout_of(M, K, a.rs, a.cs, lda);
  if (la == Layout::none) {
    a = pack_row_major(M, K, a, abuf);
    la = layout_of(M, K, a.rs, a.cs, lda);
  }
  Layout lb = layout_of(K, N, b.rs, b.cs, ldb);
  if (lb == Layout::none) {
    b = pack_row_major(K, N, b, bbuf);
    lb = layout_of(K, N, b.rs, b.cs, ldb);
  }
  auto with_b = [&](const auto& A) {
    if (lb == Layout::row)
      product_into<T>(C, A, ConstMap<T, Eigen::RowMajor>(b.p, K, N, Eigen::OuterStride<>(ldb)), accumulate);
    else
      product_into<T>(C, A, ConstMap<T, Eigen::ColMajor>(b.p, K, N, Eigen::OuterStride<>(ldb)), accumulate);
  };
  if (la == Layout::row) with_b(ConstMap<T, Eigen::RowMajor>(a.p, M, K, Eigen::OuterStride<>(lda)));
  else with_b(ConstMap<T, Eigen::ColMajor>(a.p, M, K, Eigen::OuterStride<>(lda)));
}

template void gemm<float>(int64_t, int64_t, int64_t, MatRef<const float>, MatRef<const float>,
                          MatRef<float>, bool);
template void gemm<double>(int64_t, int64_t, int64_t, MatRef<const double>, MatRef<const double>,
                           MatRef<double>, bool);

namespace {

// An f32 copy of a 16-bit tensor that keeps its broadcast (stride-0) dims broadcast, so an
// expanded operand is converted once, not once per repetition.
Tensor to_f32_compact(const Tensor& t) {
  Shape compact = t.sizes();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0) compact[d] = 1;
  Tensor src = detail::make_view(t, compact, t.strides(), t.storage_offset());
  Tensor dst = detail::make_tensor(compact, DType::f32, t.device());
  copy_kernel(dst, src);
  Shape strides = dst.strides();
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.strides()[d] == 0) strides[d] = 0;
  return detail::make_view(dst, t.sizes(), strides, 0);
}

}  // namespace

void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
  if (c.numel() == 0) return;
  if (c.dtype() == DType::f16 || c.dtype() == DType::bf16) {
    // Multiply in f32 and round once on the way out.
    Tensor c32 = detail::make_tensor(c.sizes(), DType::f32, c.device());
    if (accumulate) copy_kernel(c32, c);
    gemm_kernel(to_f32_compact(a), to_f32_compact(b), c32, accumulate);
    copy_kernel(c, c32);
    return;
  }
  const int64_t nd = c.dim(), nb = nd - 2;
  const int64_t M = c.sizes()[nb], N = c.sizes()[nb + 1], K = a.sizes()[nb + 1];
  int64_t batch = 1;
  for (int64_t d = 0; d < nb; ++d) batch *= c.sizes()[d];

  visit_dtype(c.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      throw DTypeError(str("[matmul] is not implemented for ", c.dtype(), " on the CPU"));
    } else {
      const T* pa = static_cast<const T*>(a.data_ptr());
      const T* pb = static_cast<const T*>(b.data_ptr());
      T* pc = static_cast<T*>(c.data_ptr());
      const int64_t ars = a.strides()[nb], acs = a.strides()[nb + 1];
      const int64_t brs = b.strides()[nb], bcs = b.strides()[nb + 1];
      const int64_t crs = c.strides()[nb], ccs = c.strides()[nb + 1];
      auto one = [&](int64_t i) {
        int64_t oa = 0, ob = 0, oc = 0;
        for (int64_t d = nb - 1, rem = i; d >= 0; --d) {
          const int64_t idx = rem % c.sizes()[d];
          rem /= c.sizes()[d];
          oa += idx * a.strides()[d];
          ob += idx * b.strides()[d];
          oc += idx * c.strides()[d];
        }
        MatRef<const T> ma{pa + oa, ars, acs}, mb{pb + ob, brs, bcs};
        MatRef<T> mc{pc + oc, crs, ccs};
        if constexpr (std::is_floating_point_v<T>) gemm<T>(M, N, K, ma, mb, mc, accumulate);
        else gemm_loop<T>(M, N, K, ma, mb, mc, accumulate);
      };
      // Note [GEMM threading]: threads one GEMM would get from its own split vs from the batch.
      const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
      const double macs = double(M) * double(N) * double(K);
      const int64_t inner = std::clamp<int64_t>(int64_t(macs / kMinBlockMacs), 1, threads);
      if (batch > 1 && threads > 1 && macs * double(batch) >= kParallelMinMacs &&
          std::min(batch, threads) >= inner) {
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < batch; ++i) one(i);
      } else {
        for (int64_t i = 0; i < batch; ++i) one(i);
      }
    }
  });
}

void gemm_bias_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c) {
  if (c.numel() == 0) return;
  // Seed c with the bias broadcast over rows, then accumulate the product onto it: the
  // 16-bit path still rounds once (its f32 accumulator starts from the bias).
  const int64_t M = c.sizes()[0], N = c.sizes()[1];
  copy_kernel(c, detail::make_view(bias, {M, N}, {0, bias.strides()[0]}, bias.storage_offset()));
  gemm_kernel(a, b, c, true);
}

// ---- fused GEMM epilogues: the CPU twins of the cuBLASLt epilogues (ops/cuda/linalg.cu) ----
// Each is the GEMM (f32 for 16-bit dtypes, rounded once on the way out) and one pass over its
// output that does what the CUDA epilogue does, so the CPU reads the product once instead of
// once per composite op. Outputs have a unit column stride (kernels/linalg.h).

namespace {

// Rows per partial sum of a bias gradient: a constant, so the order in which the partial
// sums combine (and so the result) does not depend on the thread count.
constexpr int64_t kSumChunkRows = 128;
// Below this many elements a parallel region costs more than the pass.
constexpr int64_t kParallelElems = int64_t(1) << 15;

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// a @ b in the compute type: into `out` itself for f32/f64, into a fresh f32 matrix for
// 16-bit dtypes (the fused pass then rounds each element once).
Tensor product_in_compute_type(const Tensor& a, const Tensor& b, const Tensor& out) {
  if (!is_half(out.dtype())) {
    gemm_kernel(a, b, out, false);
    return out;
  }
  Tensor acc = detail::make_tensor(out.sizes(), DType::f32, out.device());
  gemm_kernel(to_f32_compact(a), to_f32_compact(b), acc, false);
  return acc;
}

// out[j] = sum_i m[i, j] over a 2-D view, by the reduce family's kernel (what ops::sum runs).
void sum_dim0(const Tensor& m, const Tensor& out) {
  const int64_t R = m.sizes()[0], C = m.sizes()[1], rs = m.strides()[0], cs = m.strides()[1];
  if (cs == 1 || C <= 1) {
    reduce_kernel(ReduceOp::sum, detail::make_view(m, {1, R, C}, {0, rs, 1}, m.storage_offset()), out, {});
  } else if (rs == 1 || R <= 1) {
    reduce_kernel(ReduceOp::sum, detail::make_view(m, {C, R, 1}, {cs, 1, 1}, m.storage_offset()), out, {});
  } else {
    Tensor packed = detail::make_tensor({R, C}, m.dtype(), m.device());
    copy_kernel(packed, m);
    sum_dim0(packed, out);
  }
}

}  // namespace

void gemm_bias_gelu_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                           const Tensor& pre) {
  if (out.numel() == 0) return;
  const int64_t M = out.sizes()[0], N = out.sizes()[1];
  const Tensor acc = product_in_compute_type(a, b, pre);
  visit_floating(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const C* pa = static_cast<const C*>(acc.data_ptr());
    const S* pb = static_cast<const S*>(bias.data_ptr());
    S* po = static_cast<S*>(out.data_ptr());
    S* pp = static_cast<S*>(pre.data_ptr());
    const int64_t ars = acc.strides()[0], ors = out.strides()[0], prs = pre.strides()[0], bs = bias.strides()[0];
    const fn::GeluTanh gelu{};
#pragma omp parallel for schedule(static) if (M * N >= kParallelElems && !omp_in_parallel())
    for (int64_t i = 0; i < M; ++i) {
      const C* ai = pa + i * ars;  // aliases pi for f32/f64: each element is read before it is written
      S* oi = po + i * ors;
      S* pi = pp + i * prs;
      for (int64_t j = 0; j < N; ++j) {
        const C v = ai[j] + C(pb[j * bs]);
        pi[j] = S(v);
        oi[j] = S(gelu(v));
      }
    }
  });
}

void gemm_dgelu_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& pre, const Tensor& out,
                             const Tensor& dbias) {
  const int64_t M = out.sizes()[0], N = out.sizes()[1];
  if (N == 0) return;
  const Tensor acc = M > 0 ? product_in_compute_type(a, b, out) : out;
  visit_floating(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const C* pa = static_cast<const C*>(acc.data_ptr());
    const S* pp = static_cast<const S*>(pre.data_ptr());
    S* po = static_cast<S*>(out.data_ptr());
    S* pd = static_cast<S*>(dbias.data_ptr());
    const int64_t ars = acc.strides()[0], ors = out.strides()[0];
    const int64_t prs = pre.strides()[0], pcs = pre.strides()[1], ds = dbias.strides()[0];
    const int64_t chunks = (M + kSumChunkRows - 1) / kSumChunkRows;
    // One partial column sum per chunk of rows (double: the sum of up to M terms), combined
    // below in chunk order. The sum is of the stored (rounded) gradient, as the composite's.
    std::vector<double> partial(size_t(chunks * N), 0.0);
#pragma omp parallel for schedule(static) if (M * N >= kParallelElems && !omp_in_parallel())
    for (int64_t ch = 0; ch < chunks; ++ch) {
      double* part = partial.data() + ch * N;
      const int64_t end = std::min(M, (ch + 1) * kSumChunkRows);
      for (int64_t i = ch * kSumChunkRows; i < end; ++i) {
        const C* ai = pa + i * ars;  // aliases oi for f32/f64, read before written
        const S* pi = pp + i * prs;
        S* oi = po + i * ors;
        for (int64_t j = 0; j < N; ++j) {
          const S d = S(fn::gelu_tanh_backward(ai[j], C(pi[j * pcs])));
          oi[j] = d;
          part[j] += double(C(d));
        }
      }
    }
#pragma omp parallel for schedule(static) if (chunks * N >= kParallelElems && !omp_in_parallel())
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t ch = 0; ch < chunks; ++ch) sum += partial[size_t(ch * N + j)];
      pd[j * ds] = S(C(sum));
    }
  });
}

void gemm_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& dbias) {
  if (c.numel() > 0) gemm_kernel(a, b, c, false);
  if (dbias.numel() == 0) return;
  // dbias[i] = sum_k a[i, k]: a's transpose summed over its rows.
  sum_dim0(detail::make_view(a, {a.sizes()[1], a.sizes()[0]}, {a.strides()[1], a.strides()[0]}, a.storage_offset()),
           dbias);
}

}  // namespace ember::ops::cpu
