// CUDA GEMM: matmul, batched matmul and linear's forward through cuBLASLt (cublaslt.cuh).
//
// Invariants:
// - Operands are read in place whenever cuBLAS can address them: a matrix with a unit
//   stride in either dim is a column-major matrix or the transpose of one (op T), so
//   transposed and sliced views need no copy. Only other layouts (a stride-0 dim inside a
//   matrix, two non-unit strides) are packed into a contiguous copy first.
// - ember's tensors are row-major and cuBLAS is column-major: a row-major C [M, N] is the
//   column-major C^T [N, M] = B^T A^T, so the operands are swapped and each transposed
//   (which, for a row-major operand, is again a free relabelling of its strides).
// - Batch dims of a, b and c are coalesced together; the innermost run that is uniformly
//   strided in all three becomes one strided-batched cuBLASLt call (stride 0 for an operand
//   broadcast over it); any remaining outer batch dims are a host loop over such calls.
// - Types: f32 on TF32 tensor cores unless ember::cuda::allow_tf32() is off (then exact
//   f32), f16/bf16 on tensor cores with f32 accumulation, f64 in f64. Integer dtypes have no
//   CUDA GEMM (NotImplementedError).
// - linear's bias is added by CUBLASLT_EPILOGUE_BIAS (one pass over the output), from a
//   contiguous, 16-byte aligned vector (a strided or misaligned bias is copied first). When
//   the epilogue does not apply (no algorithm, a column-major output), the bias seeds the
//   output and the GEMM accumulates onto it, as on the CPU.
// - Everything runs on the current stream of the output's device.
#include <algorithm>
#include <climits>
#include <vector>

#include "cublaslt.cuh"
#include "ember/cuda/device_guard.h"
#include "ember/profiler.h"
#include "ember/ops/matmul_config.h"
#include "kernels/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/reduce.h"

namespace ember::ops::cuda {

namespace {

// One matrix of a batched operand: element (i, j) of batch entry 0 at p[i * rs + j * cs].
struct Mat {
  int64_t rows, cols, rs, cs;
};

Mat transposed(const Mat& m) { return {m.cols, m.rows, m.cs, m.rs}; }

// How cuBLAS reads `m` in place: as a column-major matrix (op N) or as the transpose of
// one (op T). False when neither works (the operand must be packed).
bool as_column_major(const Mat& m, cublasOperation_t& op, lt::Layout& l) {
  const int64_t R = m.rows, C = m.cols;
  if ((m.rs == 1 || R <= 1) && (C <= 1 || m.cs >= std::max<int64_t>(R, 1))) {
    op = CUBLAS_OP_N;
    l.rows = R, l.cols = C, l.ld = C <= 1 ? std::max<int64_t>(R, 1) : m.cs;
    return true;
  }
  if ((m.cs == 1 || C <= 1) && (R <= 1 || m.rs >= std::max<int64_t>(C, 1))) {
    op = CUBLAS_OP_T;
    l.rows = C, l.cols = R, l.ld = R <= 1 ? std::max<int64_t>(C, 1) : m.rs;
    return true;
  }
  return false;
}

Mat matrix_of(const Tensor& t) {
  const int64_t d = t.dim();
  return {t.sizes()[d - 2], t.sizes()[d - 1], t.strides()[d - 2], t.strides()[d - 1]};
}

bool addressable(const Tensor& t) {
  cublasOperation_t op;
  lt::Layout l;
  return as_column_major(matrix_of(t), op, l);
}

// c is written in place when it is row-major (then swapped) or column-major (as is).
bool row_major(const Mat& m) { return (m.cs == 1 || m.cols <= 1) && (m.rows <= 1 || m.rs >= std::max<int64_t>(m.cols, 1)); }
bool col_major(const Mat& m) { return (m.rs == 1 || m.rows <= 1) && (m.cols <= 1 || m.cs >= std::max<int64_t>(m.rows, 1)); }

// A contiguous copy of t that keeps its broadcast batch dims broadcast (stride 0), so an
// expanded operand is copied once, not once per repetition.
Tensor pack(const Tensor& t) {
  const int64_t nb = t.dim() - 2;
  Shape compact = t.sizes();
  for (int64_t d = 0; d < nb; ++d)
    if (t.strides()[d] == 0) compact[d] = 1;
  Tensor src = ember::detail::make_view(t, compact, t.strides(), t.storage_offset());
  Tensor dst = ember::detail::make_tensor(compact, t.dtype(), t.device());
  copy_kernel(dst, src);
  Shape strides = dst.strides();
  for (int64_t d = 0; d < nb; ++d)
    if (t.strides()[d] == 0) strides[d] = 0;
  return ember::detail::make_view(dst, t.sizes(), strides, 0);
}

void check_dtype(const char* op, DType t) {
  if (t != DType::f32 && t != DType::f64 && t != DType::f16 && t != DType::bf16)
    throw NotImplementedError(str("[", op, "] is not implemented for ", t, " on CUDA"));
}

struct BatchDim {
  int64_t size, sa, sb, sc;
};

// What follows the product, in ember's row-major terms (Note [GEMM epilogues]).
enum class Fused : uint8_t {
  none,
  bias,           // c = a b + bias[col]
  gelu_aux_bias,  // aux = a b + bias[col], c = gelu_tanh(aux)
  dgelu_bgrad,    // c = (a b) * gelu_tanh'(aux), vec[col] = sum over rows of c
  bgrad_a,        // c = a b, vec[row] = sum over k of a[row, k]
};
struct Fusion {
  Fused kind = Fused::none;
  const void* bias = nullptr;
  void* bias_grad = nullptr;
  void* aux = nullptr;  // row-major [M, N] with unit column stride and row stride aux_rs
  int64_t aux_rs = 0;
};

// Note [GEMM epilogues]: ember's c [M, N] is row-major, so cuBLASLt computes D = c^T
// (column-major, N x M) = b^T a^T; "rows of D" are c's columns, "columns of D" c's rows,
// and the GEMM's k is a's columns. Hence:
// - bias[col] and dgelu_bgrad's sum over c's rows are per row of D: BIAS, GELU_AUX_BIAS and
//   DGELU_BGRAD as they are (their vectors have D's row count, N);
// - a row-major aux [M, N] with row stride r is the column-major N x M matrix with leading
//   dim r: AUX_LD = r (which cuBLASLt wants a multiple of 8);
// - sum over k of a[row, k] is a sum over k of op(B) = a^T in cuBLASLt's terms: BGRADB (a
//   vector of D's column count, M). For a column-major c (D = c, no swap) it is BGRADA.
// Every fused kind but bgrad_a needs the swap (a row-major c): a column-major c returns false
// and the caller takes the unfused path, as it does when cuBLASLt offers no algorithm.
//
// c = a @ b (+ beta * c) with `f` through cuBLASLt. Preconditions: a and b addressable, c
// row- or column-major, vectors contiguous; any fused kind but `bias` on a 2-D problem. False
// when cuBLASLt has no algorithm for the first call (nothing ran then; the problem shape is
// the same for every call of the loop, so it is all or nothing).
bool lt_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double beta, const Fusion& f = {}) {
  const int64_t nb = c.dim() - 2;
  // Coalesce batch dims (innermost first): dim d joins the run inside it when every
  // operand's stride chains across them.
  std::vector<BatchDim> dims;
  for (int64_t d = nb - 1; d >= 0; --d) {
    const BatchDim x{c.sizes()[d], a.strides()[d], b.strides()[d], c.strides()[d]};
    if (x.size == 1) continue;
    if (!dims.empty()) {
      BatchDim& in = dims.back();
      if (x.sa == in.sa * in.size && x.sb == in.sb * in.size && x.sc == in.sc * in.size) {
        in.size *= x.size;
        continue;
      }
    }
    dims.push_back(x);
  }
  const BatchDim inner = dims.empty() ? BatchDim{1, 0, 0, 0} : dims.front();
  const std::vector<BatchDim> outer(dims.empty() ? dims.end() : dims.begin() + 1, dims.end());
  int64_t outer_count = 1;
  for (const BatchDim& d : outer) outer_count *= d.size;

  // The column-major problem D = op_a(A) op_b(B): for a row-major c, C^T = B^T A^T.
  Mat ma = matrix_of(a), mb = matrix_of(b), mc = matrix_of(c);
  int64_t sa = inner.sa, sb = inner.sb;
  const bool swap = row_major(mc);
  const char* pa = static_cast<const char*>(a.data_ptr());
  const char* pb = static_cast<const char*>(b.data_ptr());
  if (swap) {
    const Mat t = ma;
    ma = transposed(mb), mb = transposed(t), mc = transposed(mc);
    std::swap(sa, sb);
    std::swap(pa, pb);
  }
  lt::Gemm g;
  g.dtype = c.dtype();
  g.tf32 = ember::cuda::allow_tf32();
  g.beta = beta;
  switch (f.kind) {
    case Fused::none: break;
    case Fused::bias: g.epilogue = lt::Epilogue::bias; break;
    case Fused::gelu_aux_bias: g.epilogue = lt::Epilogue::gelu_aux_bias; break;
    case Fused::dgelu_bgrad: g.epilogue = lt::Epilogue::dgelu_bgrad; break;
    case Fused::bgrad_a: g.epilogue = swap ? lt::Epilogue::bgradb : lt::Epilogue::bgrada; break;
  }
  if (f.kind != Fused::none && f.kind != Fused::bgrad_a && !swap) return false;
  if (f.kind != Fused::none && f.kind != Fused::bias && (inner.size != 1 || outer_count != 1)) return false;
  g.bias = f.bias;
  g.bias_grad = f.bias_grad;
  g.aux = f.aux;
  g.aux_ld = f.aux_rs;
  if (!as_column_major(ma, g.op_a, g.a) || !as_column_major(mb, g.op_b, g.b))
    throw Error("[matmul] internal: an operand layout cuBLAS cannot address after packing");
  g.c = {mc.rows, mc.cols, mc.cols <= 1 ? std::max<int64_t>(mc.rows, 1) : mc.cs, inner.sc};
  g.a.batch_stride = sa;
  g.b.batch_stride = sb;

  const int64_t item = int64_t(itemsize(c.dtype()));
  const int device = c.device().index;
  bool first = true;
  for (int64_t o = 0; o < outer_count; ++o) {
    // Element offsets of outer batch entry o (outer is innermost-first).
    int64_t oa = 0, ob = 0, oc = 0;
    for (size_t k = 0, rem = size_t(o); k < outer.size(); ++k) {
      const int64_t idx = int64_t(rem % size_t(outer[k].size));
      rem /= size_t(outer[k].size);
      oa += idx * outer[k].sa, ob += idx * outer[k].sb, oc += idx * outer[k].sc;
    }
    if (swap) std::swap(oa, ob);
    // cuBLASLt's batch count is an int32: split a larger run.
    for (int64_t start = 0; start < inner.size; start += INT_MAX) {
      g.batch = int32_t(std::min<int64_t>(inner.size - start, INT_MAX));
      g.pa = pa + (oa + start * sa) * item;
      g.pb = pb + (ob + start * sb) * item;
      g.pc = static_cast<char*>(c.data_ptr()) + (oc + start * inner.sc) * item;
      if (!lt::matmul(device, g)) {
        if (first) return false;
        throw DeviceError("[matmul] cuBLASLt found no algorithm for part of a batched GEMM");
      }
      first = false;
    }
  }
  return true;
}

// a, b and c as a problem cuBLAS can run in place: packed operands, and a fresh output when
// c is neither row- nor column-major (then copied back).
void gemm(const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
  const Tensor A = addressable(a) ? a : pack(a);
  const Tensor B = addressable(b) ? b : pack(b);
  const Mat mc = matrix_of(c);
  if (!row_major(mc) && !col_major(mc)) {  // never produced by ember's fronts
    Tensor tmp = ember::detail::make_tensor(c.sizes(), c.dtype(), c.device());
    if (accumulate) copy_kernel(tmp, c);
    gemm(A, B, tmp, accumulate);
    copy_kernel(c, tmp);
    return;
  }
  if (lt_gemm(A, B, c, accumulate ? 1.0 : 0.0)) return;
  // No algorithm for these leading dims / alignments: retry on fresh, tightly packed and
  // fully aligned copies, which every cuBLASLt kernel family accepts.
  Tensor A2 = ember::detail::make_tensor(A.sizes(), A.dtype(), A.device());
  Tensor B2 = ember::detail::make_tensor(B.sizes(), B.dtype(), B.device());
  Tensor C2 = ember::detail::make_tensor(c.sizes(), c.dtype(), c.device());
  copy_kernel(A2, A);
  copy_kernel(B2, B);
  if (accumulate) copy_kernel(C2, c);
  if (!lt_gemm(A2, B2, C2, accumulate ? 1.0 : 0.0))
    throw DeviceError(str("[matmul] cuBLASLt has no algorithm for ", c.dtype(), " ", a.sizes(), " x ", b.sizes()));
  copy_kernel(c, C2);
}

}  // namespace

void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate) {
  if (c.numel() == 0) return;
  check_dtype("matmul", c.dtype());
  const ember::cuda::detail::DeviceGuard guard(c.device().index);
  if (a.sizes()[size_t(a.dim() - 1)] == 0) {  // K == 0: an empty sum
    if (!accumulate) fill_kernel(c, Scalar(0));
    return;
  }
  gemm(a, b, c, accumulate);
}

void gemm_bias_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c) {
  if (c.numel() == 0) return;
  check_dtype("linear", c.dtype());
  const ember::cuda::detail::DeviceGuard guard(c.device().index);
  const int64_t M = c.sizes()[0], N = c.sizes()[1];
  const Tensor bias_rows = ember::detail::make_view(bias, {M, N}, {0, bias.strides()[0]}, bias.storage_offset());
  if (a.sizes()[1] > 0 && row_major(matrix_of(c))) {
    // The epilogue reads the bias as a contiguous vector of D's rows (= c's columns), with
    // vector loads: the heuristic cannot be told the bias pointer's alignment (there is no
    // preference for it, unlike A-D), so a view that starts off a 16-byte boundary (e.g.
    // narrow(0, 1, N) of an f32 vector) is copied to a fresh, aligned tensor first.
    Tensor bias_c = bias;
    const bool misaligned = reinterpret_cast<uintptr_t>(bias.data_ptr()) % 16 != 0;
    if ((bias.strides()[0] != 1 && N > 1) || misaligned) {
      bias_c = ember::detail::make_tensor({N}, bias.dtype(), bias.device());
      copy_kernel(bias_c, bias);
    }
    const Tensor A = addressable(a) ? a : pack(a);
    const Tensor B = addressable(b) ? b : pack(b);
    if (lt_gemm(A, B, c, 0.0, {Fused::bias, bias_c.data_ptr()})) return;
  }
  copy_kernel(c, bias_rows);  // seed with the bias, then accumulate the product onto it
  if (a.sizes()[1] > 0) gemm(a, b, c, true);
}

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A row-major [M, N] matrix cuBLASLt can read or write as an epilogue's aux matrix (Note
// [GEMM epilogues]): unit column stride, a row stride that is a multiple of 8 elements, a
// 16-byte aligned start (the heuristic sees the pointer, this keeps a view that starts off
// the grid from relying on it).
bool aux_addressable(const Tensor& t) {
  const Mat m = matrix_of(t);
  return (m.cs == 1 || m.cols <= 1) && m.rs % 8 == 0 && m.rs >= std::max<int64_t>(m.cols, 1) &&
         aligned16(t.data_ptr());
}

// A contiguous vector the epilogue reads or writes with vector loads.
bool vector_addressable(const Tensor& v) { return (v.strides()[0] == 1 || v.numel() <= 1) && aligned16(v.data_ptr()); }

// out[j] = sum_i m[i, j] over a 2-D view (the unfused paths' bias gradient), through the
// reduce family's kernel: the same reduction ops::sum runs for the composite.
void sum_dim0(const Tensor& m, const Tensor& out) {
  const int64_t R = m.sizes()[0], C = m.sizes()[1];
  const Mat x = matrix_of(m);
  if (x.cs == 1 || C <= 1) {  // "columns": each output a strided run down the rows
    reduce_kernel(ReduceOp::sum, ember::detail::make_view(m, {1, R, C}, {0, x.rs, 1}, m.storage_offset()), out, {});
  } else if (x.rs == 1 || R <= 1) {  // "rows": each output one contiguous run
    reduce_kernel(ReduceOp::sum, ember::detail::make_view(m, {C, R, 1}, {x.cs, 1, 1}, m.storage_offset()), out, {});
  } else {
    Tensor packed = ember::detail::make_tensor({R, C}, m.dtype(), m.device());
    copy_kernel(packed, m);
    sum_dim0(packed, out);
  }
}

Tensor transposed_view(const Tensor& t) {
  return ember::detail::make_view(t, {t.sizes()[1], t.sizes()[0]}, {t.strides()[1], t.strides()[0]},
                                  t.storage_offset());
}

// The bias vector as the epilogue reads it: contiguous and 16-byte aligned (copied if not;
// see gemm_bias_kernel).
Tensor epilogue_bias(const Tensor& bias) {
  if (vector_addressable(bias)) return bias;
  Tensor b = ember::detail::make_tensor({bias.sizes()[0]}, bias.dtype(), bias.device());
  copy_kernel(b, bias);
  return b;
}

}  // namespace

void gemm_bias_gelu_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                           const Tensor& pre) {
  if (out.numel() == 0) return;
  check_dtype("gelu_mlp", out.dtype());
  const ember::cuda::detail::DeviceGuard guard(out.device().index);
  if (a.sizes()[1] > 0 && row_major(matrix_of(out)) && aux_addressable(pre)) {
    const Tensor bias_c = epilogue_bias(bias);
    const Tensor A = addressable(a) ? a : pack(a);
    const Tensor B = addressable(b) ? b : pack(b);
    if (lt_gemm(A, B, out, 0.0, {Fused::gelu_aux_bias, bias_c.data_ptr(), nullptr, pre.data_ptr(), pre.strides()[0]}))
      return;
  }
  // Unfused: the GEMM with its bias epilogue, then GELU as its own pass. The epilogue and this
  // path give the same values, so a named range is the only way a profile (and the GPU tests,
  // FusedMlpCuda.EpiloguesRunWhereAligned) can tell that cuBLASLt refused the fusion.
  const ember::profiler::RecordFunction range("gemm_bias_gelu_unfused");
  gemm_bias_kernel(a, b, bias, pre);
  unary_kernel(UnaryOp::gelu_tanh, pre, out, {});
}

void gemm_dgelu_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& pre, const Tensor& out,
                             const Tensor& dbias) {
  if (dbias.numel() == 0) return;  // N == 0: nothing to compute
  check_dtype("gelu_mlp", out.dtype());
  const ember::cuda::detail::DeviceGuard guard(out.device().index);
  if (out.numel() == 0 || a.sizes()[1] == 0) {  // no rows, or K == 0: zero gradients
    if (out.numel() > 0) fill_kernel(out, Scalar(0));
    fill_kernel(dbias, Scalar(0));
    return;
  }
  if (row_major(matrix_of(out)) && aux_addressable(pre) && vector_addressable(dbias)) {
    const Tensor A = addressable(a) ? a : pack(a);
    const Tensor B = addressable(b) ? b : pack(b);
    if (lt_gemm(A, B, out, 0.0,
                {Fused::dgelu_bgrad, nullptr, dbias.data_ptr(), const_cast<void*>(pre.data_ptr()), pre.strides()[0]}))
      return;
  }
  // Unfused: the GEMM, GELU's derivative as its own pass, the bias gradient as a reduction
  // (named as in gemm_bias_gelu_kernel).
  const ember::profiler::RecordFunction range("gemm_dgelu_bgrad_unfused");
  Tensor dh = ember::detail::make_tensor(out.sizes(), out.dtype(), out.device());
  gemm(a, b, dh, false);
  binary_kernel(BinaryOp::gelu_tanh_backward, dh, pre, out);
  sum_dim0(out, dbias);
}

void gemm_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& dbias) {
  if (dbias.numel() == 0) {  // M == 0: c is empty too
    return;
  }
  check_dtype("linear", c.dtype());
  const ember::cuda::detail::DeviceGuard guard(c.device().index);
  const int64_t K = a.sizes()[1];
  if (K == 0) {  // empty sums
    if (c.numel() > 0) fill_kernel(c, Scalar(0));
    fill_kernel(dbias, Scalar(0));
    return;
  }
  if (c.numel() > 0 && vector_addressable(dbias)) {
    const Tensor A = addressable(a) ? a : pack(a);
    const Tensor B = addressable(b) ? b : pack(b);
    const Mat mc = matrix_of(c);
    if ((row_major(mc) || col_major(mc)) && lt_gemm(A, B, c, 0.0, {Fused::bgrad_a, nullptr, dbias.data_ptr()}))
      return;
  }
  // Unfused: the GEMM, then the bias gradient as a reduction over a's columns (named as in
  // gemm_bias_gelu_kernel).
  const ember::profiler::RecordFunction range("gemm_bgrad_unfused");
  if (c.numel() > 0) gemm_kernel(a, b, c, false);
  sum_dim0(transposed_view(a), dbias);
}

}  // namespace ember::ops::cuda
