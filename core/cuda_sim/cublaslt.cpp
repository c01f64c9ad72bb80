// The cuBLASLt of the CUDA simulation (issue 39): the cuBLASLt functions ember calls
// (ops/cuda/cublaslt.cu), with the same C signatures, implemented on the host by a reference
// GEMM, so that ember's GEMMs and their fused epilogues run in CI. It checks ember's *use* of
// cuBLASLt (descriptors, layouts, the epilogues' contracts, alignment promises, stream order,
// graph capture), not cuBLASLt: the library's kernels, their exact rounding and their speed
// need the card. Linked instead of libcublasLt, never beside it.
//
// Invariants:
// - The problem is cuBLASLt's, column-major: D = alpha op(A) op(B) + beta C, then the epilogue.
//   m x n are D's rows x cols and k comes from op(A); every layout's rows and cols must agree
//   with them, C's with D's, and all batch counts with each other (INVALID_VALUE otherwise,
//   as the library answers a conflict). beta == 0 never reads C (fresh device memory is NaN
//   here, so a read would show).
// - What runs is exactly what ember asks for: A, B, C, D of one type, pointer mode host,
//   column order, strided batches, and
//     CUBLAS_COMPUTE_32F            scale f32   f32, f16, bf16
//     CUBLAS_COMPUTE_32F_FAST_TF32  scale f32   f32 (A and B rounded to TF32 first: 10 explicit
//                                               mantissa bits, to nearest even)
//     CUBLAS_COMPUTE_64F            scale f64   f64
//   with the epilogues below. Any other attribute, value or combination is refused with
//   NOT_SUPPORTED (malformed ones with INVALID_VALUE), never ignored: a use ember adds later
//   fails here until the simulation learns it.
// - Arithmetic: each D element is one accumulator of the compute type (float; double for
//   64F), summed over k in order with fma (so the result does not depend on the build's
//   floating-point contraction), then alpha * acc + beta * C and the epilogue in that type,
//   then one rounding to D's type (to nearest even).
// - Epilogues (NVIDIA's cublasLtEpilogue_t documentation, cublasLt.h; the vector is
//   CUBLASLT_MATMUL_DESC_BIAS_POINTER, contiguous, of D's type; aux is a column-major matrix of
//   D's type with CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, a multiple of 8 and >= m):
//     BIAS           D = v + bias[i]                   (bias: m; shared by every batch entry)
//     GELU_AUX_BIAS  aux = v + bias[i], D = gelu(aux)  (GELU's tanh form; aux written)
//     DGELU_BGRAD    D = v * gelu'(aux), bias[i] = sum over j of D(i, j)   (aux read)
//     BGRADA         D = v, bias[i] = sum over k of op(A)(i, k)            (bias: m)
//     BGRADB         D = v, bias[j] = sum over k of op(B)(k, j)            (bias: n)
//   with v = alpha op(A) op(B) (+ beta C for DEFAULT and BIAS). Batched epilogues other than
//   BIAS would need the batch-stride attributes ember never sets (NOT_SUPPORTED), as do beta
//   != 0 with a gradient or GELU epilogue and alpha != 1 with BGRADA/B (ember never asks; what
//   the library does then is not documented). DGELU_BGRAD with k == 1 is refused as
//   cuBLASLt refuses it (nvmath-python's epilog_protocol.py: "K=1 is not supported by cuBLAS").
//   A vector or aux pointer the epilogue does not use is refused (INVALID_VALUE) where the
//   library would ignore it: its caller meant it to be read or written.
// - The heuristic offers one algorithm (workspace 0) for a supportable problem. The algorithm
//   remembers what it may assume: the preference's MIN_ALIGNMENT_{A,B,C,D}_BYTES (256 unless
//   set), the alignment of the bias and aux pointers the descriptor held (the heuristic reads
//   them for that, as the library's does), and the types and epilogue it was chosen for.
//   cublasLtMatmul refuses pointers that break those assumptions with INVALID_VALUE (on the
//   card a kernel chosen for aligned operands misbehaves on others, undefined; here CI fails),
//   an algorithm chosen for other types or another epilogue with NOT_SUPPORTED, and any
//   pointer off its element's natural alignment (the card's misaligned-address fault). In place
//   (C == D) needs one layout for both, as the library requires.
// - cublasLtMatmul reads alpha, beta and the descriptors when called; the work goes through
//   simt.h's submit: it runs now (device memory is host memory), or is recorded by the graph
//   capture of its stream and runs at each replay, after the descriptors may be gone.
// - Descriptors keep their state in the opaque storage the header defines (a magic word marks
//   it initialized), copied in and out with memcpy; a handle is a heap object found in the
//   registry of live handles (anything else is NOT_INITIALIZED).
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/cuda_sim/simt.h"

// A handle carries no state here: what it stands for (the library's context) is the registry
// entry that makes it live.
struct cublasLtContext {};

namespace ember::cuda::sim {
namespace {

// ---- descriptor state, inside the header's opaque storage

// One per kind, so that a layout passed as a preference, or storage never initialized, fails.
constexpr uint32_t kMatmulDescMagic = 0x4d4c7444;
constexpr uint32_t kLayoutMagic = 0x4c4c7444;
constexpr uint32_t kPreferenceMagic = 0x504c7444;
constexpr uint32_t kAlgoMagic = 0x414c7444;

struct MatmulDescState {
  uint32_t magic = kMatmulDescMagic;
  int32_t compute = 0;  // cublasComputeType_t
  int32_t scale = 0;    // cudaDataType
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int32_t bias_type = -1;      // -1: D's type (the library's default)
  const void* bias = nullptr;  // the bias read, or the bias gradient written
  const void* aux = nullptr;   // GELU's input: written by GELU_AUX_BIAS, read by DGELU_BGRAD
  int64_t aux_ld = 0;
};

struct LayoutState {
  uint32_t magic = kLayoutMagic;
  int32_t type = 0;  // cudaDataType
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batch_stride = 0;  // elements
};

enum Operand { kA, kB, kC, kD };
struct PreferenceState {
  uint32_t magic = kPreferenceMagic;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // the library's defaults, A B C D
  uint64_t max_workspace = 0;
};

// What the heuristic's algorithm was chosen for and may assume.
struct AlgoState {
  uint32_t magic = kAlgoMagic;
  uint32_t alignment[4] = {};  // promised by the preference, A B C D
  uint32_t bias_alignment = 0, aux_alignment = 0;  // of the pointers the heuristic saw
  int32_t compute = 0, scale = 0, type = 0;
  uint32_t epilogue = 0;
};

template <class State, class Opaque>
State load(const Opaque* opaque) {
  static_assert(sizeof(State) <= sizeof(Opaque) && std::is_trivially_copyable_v<State>);
  State s;
  std::memcpy(static_cast<void*>(&s), opaque, sizeof s);
  return s;
}
template <class State, class Opaque>
void store(Opaque* opaque, const State& s) {
  std::memcpy(opaque, &s, sizeof s);
}
template <class State, class Opaque>
bool initialized(const Opaque* opaque, uint32_t magic) {
  return opaque != nullptr && load<State>(opaque).magic == magic;
}

// ---- handles

std::mutex g_mutex;
std::set<const cublasLtContext*> g_handles;

bool live(cublasLtHandle_t h) {
  std::lock_guard<std::mutex> lock(g_mutex);
  return h != nullptr && g_handles.count(h) != 0;
}

// ---- the problem, validated once for the heuristic and the matmul

bool is_float_type(int32_t t) { return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16F || t == CUDA_R_16BF; }
size_t item_size(int32_t t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }

bool has_vector(uint32_t e) { return e != CUBLASLT_EPILOGUE_DEFAULT; }
bool has_aux(uint32_t e) { return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD; }
// The epilogues whose meaning with beta != 0, or with a batch, ember never needs.
bool plain_output(uint32_t e) { return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS; }

// The largest power of two (<= 256) dividing a non-null address: what a kernel may assume of it.
uint32_t alignment_of(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  return uint32_t(std::min<uintptr_t>(256, u & (~u + 1)));
}
bool aligned(const void* p, uint64_t bytes) { return bytes == 0 || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

struct Problem {
  MatmulDescState desc;
  LayoutState layout[4];  // A B C D
  int64_t m = 0, n = 0, k = 0;
  int32_t batch = 1;
  int32_t type = 0;
  size_t item = 0;
};

cublasStatus_t describe(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                        cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, Problem& p) {
  if (!initialized<MatmulDescState>(desc, kMatmulDescMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasLtMatrixLayout_t layouts[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    if (!initialized<LayoutState>(layouts[i], kLayoutMagic)) return CUBLAS_STATUS_INVALID_VALUE;
    p.layout[i] = load<LayoutState>(layouts[i]);
  }
  p.desc = load<MatmulDescState>(desc);
  const LayoutState &la = p.layout[kA], &lb = p.layout[kB], &lc = p.layout[kC], &ld = p.layout[kD];

  // Types: one for all four matrices, in a combination of the table above.
  p.type = ld.type;
  for (const LayoutState& l : p.layout)
    if (!is_float_type(l.type) || l.type != p.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  const int32_t compute = p.desc.compute, scale = p.desc.scale;
  const bool supported = (compute == CUBLAS_COMPUTE_32F && scale == CUDA_R_32F && p.type != CUDA_R_64F) ||
                         (compute == CUBLAS_COMPUTE_32F_FAST_TF32 && scale == CUDA_R_32F && p.type == CUDA_R_32F) ||
                         (compute == CUBLAS_COMPUTE_64F && scale == CUDA_R_64F && p.type == CUDA_R_64F);
  if (!supported) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.item = item_size(p.type);

  // Shapes: D is m x n, op(A) m x k, op(B) k x n, C as D; column-major leading dims.
  for (const LayoutState& l : p.layout)
    if (l.rows > uint64_t(INT32_MAX) || l.cols > uint64_t(INT32_MAX)) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.m = int64_t(ld.rows), p.n = int64_t(ld.cols);
  const bool ta = p.desc.transa != CUBLAS_OP_N, tb = p.desc.transb != CUBLAS_OP_N;
  p.k = int64_t(ta ? la.rows : la.cols);
  const int64_t a_m = int64_t(ta ? la.cols : la.rows);
  const int64_t b_k = int64_t(tb ? lb.cols : lb.rows), b_n = int64_t(tb ? lb.rows : lb.cols);
  if (a_m != p.m || b_k != p.k || b_n != p.n || lc.rows != ld.rows || lc.cols != ld.cols)
    return CUBLAS_STATUS_INVALID_VALUE;
  for (const LayoutState& l : p.layout)
    if (l.ld < std::max<int64_t>(int64_t(l.rows), 1)) return CUBLAS_STATUS_INVALID_VALUE;
  p.batch = ld.batch;
  for (const LayoutState& l : p.layout)
    if (l.batch != p.batch) return CUBLAS_STATUS_INVALID_VALUE;

  // The epilogue's inputs and outputs. A pointer the epilogue would not touch is refused too
  // (the library ignores it): its caller expected it to be read or written.
  const uint32_t e = p.desc.epilogue;
  if (has_vector(e) != (p.desc.bias != nullptr)) return CUBLAS_STATUS_INVALID_VALUE;
  if (has_aux(e) != (p.desc.aux != nullptr)) return CUBLAS_STATUS_INVALID_VALUE;
  if (has_vector(e) && p.desc.bias_type != -1 && p.desc.bias_type != p.type) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (has_aux(e) && (p.desc.aux_ld % 8 != 0 || p.desc.aux_ld < std::max<int64_t>(p.m, 1)))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (p.batch > 1 && !plain_output(e)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD && p.k == 1) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- arithmetic

// f32 to TF32 (8-bit exponent, 10 explicit mantissa bits), to nearest even; Inf and NaN kept.
float round_to_tf32(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;
  u += 0x0fffu + ((u >> 13) & 1u);
  return std::bit_cast<float>(u & 0xffffe000u);
}

template <class T, class Acc>
Acc widen(T v) {
  if constexpr (std::is_same_v<T, __half>) return Acc(__half2float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return Acc(__bfloat162float(v));
  else return Acc(v);
}
template <class T, class Acc>
T narrow(Acc v) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(v));
  else return T(v);
}

// GELU's tanh form (GPT-2's), and its derivative.
template <class Acc>
Acc gelu(Acc x) {
  const Acc c = Acc(0.7978845608028654), a = Acc(0.044715);
  return Acc(0.5) * x * (Acc(1) + std::tanh(c * (x + a * x * x * x)));
}
template <class Acc>
Acc gelu_grad(Acc x) {
  const Acc c = Acc(0.7978845608028654), a = Acc(0.044715);
  const Acc t = std::tanh(c * (x + a * x * x * x));
  return Acc(0.5) * (Acc(1) + t) + Acc(0.5) * x * (Acc(1) - t * t) * c * (Acc(1) + Acc(3) * a * x * x);
}

// out[r] = x_r . y for the `rows` vectors x_r = x + r * k, each summed in order by fma in its
// own accumulator. Each result is that of a lone loop: fma rounds once per step whether it is
// the CPU's instruction or libm's, and four rows at a time only overlap their latency chains.
// (Always inlined so that the copy inside the fma-target wrapper below uses the instruction.)
template <class Acc>
__attribute__((always_inline)) inline void dots(const Acc* x, const Acc* y, int64_t k, int64_t rows, Acc* out) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const Acc *x0 = x + r * k, *x1 = x0 + k, *x2 = x1 + k, *x3 = x2 + k;
    Acc a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int64_t q = 0; q < k; ++q) {
      a0 = std::fma(x0[q], y[q], a0);
      a1 = std::fma(x1[q], y[q], a1);
      a2 = std::fma(x2[q], y[q], a2);
      a3 = std::fma(x3[q], y[q], a3);
    }
    out[r] = a0, out[r + 1] = a1, out[r + 2] = a2, out[r + 3] = a3;
  }
  for (; r < rows; ++r) {
    const Acc* xr = x + r * k;
    Acc a = 0;
    for (int64_t q = 0; q < k; ++q) a = std::fma(xr[q], y[q], a);
    out[r] = a;
  }
}
#if defined(__x86_64__)
template <class Acc>
__attribute__((target("fma"))) void dots_fma_instruction(const Acc* x, const Acc* y, int64_t k, int64_t rows,
                                                         Acc* out) {
  dots(x, y, k, rows, out);
}
#endif
// One column of op(A) op(B): out[i] = row i of op(A) . y for every i, with the fma instruction
// where the CPU has one (about 10x faster than libm's; the same bits).
template <class Acc>
void column_of_products(const Acc* a_rows, const Acc* y, int64_t m, int64_t k, Acc* out) {
#if defined(__x86_64__)
  static const bool has_fma = __builtin_cpu_supports("fma");
  if (has_fma) return dots_fma_instruction(a_rows, y, k, m, out);
#endif
  dots(a_rows, y, k, m, out);
}

// One call's work, fixed when it was issued.
struct Work {
  Problem p;
  double alpha = 1, beta = 0;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void* d = nullptr;
};

template <class T, class Acc>
void run(const Work& w) {
  const Problem& p = w.p;
  const int64_t m = p.m, n = p.n, k = p.k;
  const uint32_t e = p.desc.epilogue;
  const bool ta = p.desc.transa != CUBLAS_OP_N, tb = p.desc.transb != CUBLAS_OP_N;
  const bool tf32 = p.desc.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const Acc alpha = Acc(w.alpha), beta = Acc(w.beta);
  const LayoutState &la = p.layout[kA], &lb = p.layout[kB], &lc = p.layout[kC], &ld = p.layout[kD];
  const T* bias = static_cast<const T*>(p.desc.bias);
  T* bias_grad = const_cast<T*>(bias);  // the gradient epilogues write through the same pointer
  T* aux = static_cast<T*>(const_cast<void*>(p.desc.aux));

  // op(A) by rows and op(B) by columns, each k long and contiguous: every output is one
  // sequential dot product.
  std::vector<Acc> a_rows(static_cast<size_t>(m * k)), b_cols(static_cast<size_t>(n * k));
  std::vector<Acc> products(static_cast<size_t>(m)), row_sums;
  for (int32_t batch = 0; batch < p.batch; ++batch) {
    const T* A = static_cast<const T*>(w.a) + batch * la.batch_stride;
    const T* B = static_cast<const T*>(w.b) + batch * lb.batch_stride;
    const T* C = static_cast<const T*>(w.c) + batch * lc.batch_stride;
    T* D = static_cast<T*>(w.d) + batch * ld.batch_stride;
    auto op_a = [&](int64_t i, int64_t q) { return widen<T, Acc>(ta ? A[q + i * la.ld] : A[i + q * la.ld]); };
    auto op_b = [&](int64_t q, int64_t j) { return widen<T, Acc>(tb ? B[j + q * lb.ld] : B[q + j * lb.ld]); };
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < k; ++q) {
        const Acc v = op_a(i, q);
        a_rows[size_t(i * k + q)] = tf32 ? Acc(round_to_tf32(float(v))) : v;
      }
    for (int64_t j = 0; j < n; ++j)
      for (int64_t q = 0; q < k; ++q) {
        const Acc v = op_b(q, j);
        b_cols[size_t(j * k + q)] = tf32 ? Acc(round_to_tf32(float(v))) : v;
      }
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) row_sums.assign(size_t(m), Acc(0));
    for (int64_t j = 0; j < n; ++j) {
      column_of_products(a_rows.data(), &b_cols[size_t(j * k)], m, k, products.data());
      for (int64_t i = 0; i < m; ++i) {
        Acc v = alpha * products[size_t(i)];
        if (beta != Acc(0)) v = std::fma(beta, widen<T, Acc>(C[i + j * lc.ld]), v);
        switch (e) {
          case CUBLASLT_EPILOGUE_BIAS: v += widen<T, Acc>(bias[i]); break;
          case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
            v += widen<T, Acc>(bias[i]);
            aux[i + j * p.desc.aux_ld] = narrow<T, Acc>(v);
            v = gelu(v);
            break;
          case CUBLASLT_EPILOGUE_DGELU_BGRAD:
            v *= gelu_grad(widen<T, Acc>(aux[i + j * p.desc.aux_ld]));
            row_sums[size_t(i)] += v;
            break;
          default: break;
        }
        D[i + j * ld.ld] = narrow<T, Acc>(v);
      }
    }
    // The bias gradients, summed in order in the compute type: DGELU_BGRAD's from D's values
    // before their rounding, BGRADA/B's from the operands as stored (before any TF32 rounding).
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
      for (int64_t i = 0; i < m; ++i) bias_grad[i] = narrow<T, Acc>(row_sums[size_t(i)]);
    if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (int64_t i = 0; i < m; ++i) {
        Acc s = 0;
        for (int64_t q = 0; q < k; ++q) s += op_a(i, q);
        bias_grad[i] = narrow<T, Acc>(s);
      }
    if (e == CUBLASLT_EPILOGUE_BGRADB)
      for (int64_t j = 0; j < n; ++j) {
        Acc s = 0;
        for (int64_t q = 0; q < k; ++q) s += op_b(q, j);
        bias_grad[j] = narrow<T, Acc>(s);
      }
  }
}

void execute(const Work& w) {
  switch (w.p.type) {
    case CUDA_R_32F: run<float, float>(w); break;
    case CUDA_R_64F: run<double, double>(w); break;
    case CUDA_R_16F: run<__half, float>(w); break;
    case CUDA_R_16BF: run<__nv_bfloat16, float>(w); break;
    default: break;  // describe() admitted only the four
  }
}

// ---- attribute plumbing

template <class V>
cublasStatus_t read_value(const void* buf, size_t size, V& out) {
  if (buf == nullptr || size != sizeof(V)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&out, buf, sizeof(V));
  return CUBLAS_STATUS_SUCCESS;
}

bool is_compute_type(int32_t c) {
  switch (c) {
    case CUBLAS_COMPUTE_16F: case CUBLAS_COMPUTE_16F_PEDANTIC: case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC: case CUBLAS_COMPUTE_32F_FAST_16F: case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32: case CUBLAS_COMPUTE_32F_EMULATED_16BFX9: case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC: case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT: case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return true;
    default:
      return false;
  }
}

// SUCCESS for the epilogues ember uses, NOT_SUPPORTED for cuBLASLt's others, INVALID_VALUE
// for a value that is none.
cublasStatus_t check_epilogue(uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA: case CUBLASLT_EPILOGUE_BGRADB:
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_RELU_AUX: case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DRELU: case CUBLASLT_EPILOGUE_DRELU_BGRAD:
    case CUBLASLT_EPILOGUE_GELU: case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
      return CUBLAS_STATUS_NOT_SUPPORTED;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// N and T (what a real matrix needs); C means T for real types, but ember never passes it.
cublasStatus_t check_operation(int32_t op) {
  if (op == CUBLAS_OP_N || op == CUBLAS_OP_T) return CUBLAS_STATUS_SUCCESS;
  if (op == CUBLAS_OP_C || op == CUBLAS_OP_CONJG) return CUBLAS_STATUS_NOT_SUPPORTED;
  return CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace
}  // namespace ember::cuda::sim

using namespace ember::cuda::sim;

extern "C" {

// ---- status strings and the version

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error (simulated cuBLAS)";
}

// The version of the headers the simulation implements (tools' ember-info reports it).
cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION: *value = CUBLAS_VER_MAJOR; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUBLAS_VER_MINOR; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUBLAS_VER_PATCH; return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

// ---- handles

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* h = new cublasLtContext;
  std::lock_guard<std::mutex> lock(g_mutex);
  g_handles.insert(h);
  *handle = h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (handle == nullptr || g_handles.erase(handle) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matmul descriptors

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (desc == nullptr || !is_compute_type(int32_t(compute))) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDescState s;
  s.compute = int32_t(compute);
  s.scale = int32_t(scale);  // the combination is checked where it is used, as the library does
  *desc = new cublasLtMatmulDescOpaque_t{};
  store(*desc, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  if (desc == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!initialized<MatmulDescState>(desc, kMatmulDescMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!initialized<MatmulDescState>(desc, kMatmulDescMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDescState s = load<MatmulDescState>(desc);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t op = 0;
      if ((st = read_value(buf, size, op)) != CUBLAS_STATUS_SUCCESS) return st;
      if ((st = check_operation(op)) != CUBLAS_STATUS_SUCCESS) return st;
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? s.transa : s.transb) = op;
      break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t e = 0;
      if ((st = read_value(buf, size, e)) != CUBLAS_STATUS_SUCCESS) return st;
      if ((st = check_epilogue(e)) != CUBLAS_STATUS_SUCCESS) return st;
      s.epilogue = e;
      break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if ((st = read_value(buf, size, s.bias)) != CUBLAS_STATUS_SUCCESS) return st;
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
      int32_t t = 0;
      if ((st = read_value(buf, size, t)) != CUBLAS_STATUS_SUCCESS) return st;
      if (t != -1 && !is_float_type(t)) return CUBLAS_STATUS_NOT_SUPPORTED;
      s.bias_type = t;
      break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      if ((st = read_value(buf, size, s.aux)) != CUBLAS_STATUS_SUCCESS) return st;
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      if ((st = read_value(buf, size, s.aux_ld)) != CUBLAS_STATUS_SUCCESS) return st;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // pointer modes, scale pointers, batch strides, ...
  }
  store(desc, s);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- matrix layouts

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  LayoutState s;
  s.type = int32_t(type);
  s.rows = rows, s.cols = cols, s.ld = ld;  // checked against the problem where they are used
  *layout = new cublasLtMatrixLayoutOpaque_t{};
  store(*layout, s);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  if (layout == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!initialized<LayoutState>(layout, kLayoutMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!initialized<LayoutState>(layout, kLayoutMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  LayoutState s = load<LayoutState>(layout);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      if ((st = read_value(buf, size, s.batch)) != CUBLAS_STATUS_SUCCESS) return st;
      if (s.batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
      break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      if ((st = read_value(buf, size, s.batch_stride)) != CUBLAS_STATUS_SUCCESS) return st;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // orders other than column-major, pointer-array batches, ...
  }
  store(layout, s);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- heuristic preferences

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t{};
  store(*pref, PreferenceState{});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!initialized<PreferenceState>(pref, kPreferenceMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!initialized<PreferenceState>(pref, kPreferenceMagic)) return CUBLAS_STATUS_INVALID_VALUE;
  PreferenceState s = load<PreferenceState>(pref);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      st = read_value(buf, size, s.max_workspace);
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: st = read_value(buf, size, s.min_alignment[kA]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: st = read_value(buf, size, s.min_alignment[kB]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: st = read_value(buf, size, s.min_alignment[kC]); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: st = read_value(buf, size, s.min_alignment[kD]); break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;  // search modes, reduction schemes, wave counts, ...
  }
  if (st != CUBLAS_STATUS_SUCCESS) return st;
  store(pref, s);
  return CUBLAS_STATUS_SUCCESS;
}

// ---- the heuristic and the matmul

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || results == nullptr || returned == nullptr ||
      !initialized<PreferenceState>(pref, kPreferenceMagic))
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  Problem p;
  if (const cublasStatus_t st = describe(desc, a, b, c, d, p); st != CUBLAS_STATUS_SUCCESS) return st;
  // No kernel addresses an element off its natural alignment: a smaller promise leaves none.
  const PreferenceState s = load<PreferenceState>(pref);
  for (uint32_t promise : s.min_alignment)
    if (promise < p.item) return CUBLAS_STATUS_NOT_SUPPORTED;
  AlgoState algo;
  std::copy(std::begin(s.min_alignment), std::end(s.min_alignment), algo.alignment);
  algo.bias_alignment = p.desc.bias ? alignment_of(p.desc.bias) : 0;
  algo.aux_alignment = p.desc.aux ? alignment_of(p.desc.aux) : 0;
  algo.compute = p.desc.compute, algo.scale = p.desc.scale, algo.type = p.type;
  algo.epilogue = p.desc.epilogue;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  store(&results[0].algo, algo);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_layout, const void* B, cublasLtMatrixLayout_t b_layout,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_layout, void* D,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (!live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Work w;
  Problem& p = w.p;
  const cublasStatus_t described = describe(desc, a_layout, b_layout, c_layout, d_layout, p);
  if (described != CUBLAS_STATUS_SUCCESS) return described;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // Pointer mode host: the scalars are read now, in the scale type (a capture keeps them).
  if (p.desc.scale == CUDA_R_64F) {
    w.alpha = *static_cast<const double*>(alpha), w.beta = *static_cast<const double*>(beta);
  } else {
    w.alpha = *static_cast<const float*>(alpha), w.beta = *static_cast<const float*>(beta);
  }
  w.a = A, w.b = B, w.c = C, w.d = D;

  const uint32_t e = p.desc.epilogue;
  if (w.beta != 0 && !plain_output(e)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (w.alpha != 1 && (e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB))
    return CUBLAS_STATUS_NOT_SUPPORTED;

  // Every pointer the work dereferences: present, and at its element's natural alignment.
  const bool reads_a = p.m > 0 && p.k > 0, reads_b = p.n > 0 && p.k > 0, writes_d = p.m > 0 && p.n > 0;
  const bool reads_c = writes_d && w.beta != 0;
  const std::pair<bool, const void*> used[] = {{reads_a, A}, {reads_b, B}, {reads_c, C}, {writes_d, D},
                                               {has_vector(e), p.desc.bias}, {has_aux(e), p.desc.aux}};
  for (const auto& [needed, ptr] : used)
    if (needed && (ptr == nullptr || !aligned(ptr, p.item))) return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) only with one layout for both, as the library requires.
  if (C == D && (p.layout[kC].ld != p.layout[kD].ld || p.layout[kC].batch_stride != p.layout[kD].batch_stride))
    return CUBLAS_STATUS_INVALID_VALUE;

  // The algorithm's assumptions (an algorithm of nullptr: the library chooses one for these
  // very pointers).
  if (algo != nullptr) {
    const AlgoState s = load<AlgoState>(algo);
    if (s.magic != kAlgoMagic) return CUBLAS_STATUS_INVALID_VALUE;
    if (s.compute != p.desc.compute || s.scale != p.desc.scale || s.type != p.type || s.epilogue != e)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    const std::pair<bool, const void*> operands[4] = {{reads_a, A}, {reads_b, B}, {reads_c, C}, {writes_d, D}};
    for (int i = 0; i < 4; ++i)
      if (operands[i].first && !aligned(operands[i].second, s.alignment[i])) return CUBLAS_STATUS_INVALID_VALUE;
    if ((p.desc.bias && !aligned(p.desc.bias, s.bias_alignment)) ||
        (p.desc.aux && !aligned(p.desc.aux, s.aux_alignment)))
      return CUBLAS_STATUS_INVALID_VALUE;
  }
  (void)workspace, (void)workspace_bytes;  // every algorithm here needs none

  detail::submit(stream, [w] { execute(w); });
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
