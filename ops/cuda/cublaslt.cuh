// cuBLASLt plumbing shared by the CUDA GEMM users (ops/cuda/linalg.cu): one handle per
// device, one workspace per (device, stream) or per graph capture, cached heuristic
// algorithm choices, and the status check. Callers describe a column-major problem (cuBLAS's native order); mapping
// ember's row-major, strided tensors onto it is the caller's job.
//
// Invariants:
// - Handles, eager workspaces and the algorithm cache live for the whole process and are
//   never destroyed (they are reached from static pointers that are never freed): their
//   owners (the CUDA context, ember's caching allocator) may already be gone when static
//   destructors run. There are few of them: ember's streams come from a bounded pool.
// - A workspace belongs to one stream: two streams never share one, because cuBLASLt
//   kernels running concurrently would overwrite each other's scratch data. Work queued on
//   one stream is ordered, so every thread may share that stream's workspace.
// - Under a cuda::Graph capture a GEMM uses the capture's own workspace instead: it comes
//   from the graph's private pool, every replay uses it, and it is freed with the graph
//   (Note [capture resources] in ember/cuda/graph_capture.h). Cached per capture stream it
//   would hold the graph's pool, 32 MiB and all, for the rest of the process. The capture is
//   found by its capture id, so a GEMM on a side stream joined into the capture uses it too:
//   that stream's eager workspace may be in use by eager work while the graph replays.
// - What the algorithm cache remembers as failed is only what failed because of the
//   algorithm, on a stream that is not capturing: a broken capture or a sticky context error
//   makes every algorithm fail, and remembering that would leave the shape without an
//   algorithm for the rest of the process (those failures throw instead).
// - The cached algorithm for a problem is keyed on everything the heuristic sees: types,
//   compute type, transposes, layouts (sizes, leading dims, batch), the epilogue and the
//   pointers' alignments (an algorithm chosen for 256-byte-aligned operands may fail on an
//   offset view).
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>

#include <cstdint>

#include "ember/cuda/check.h"
#include "ember/dtype.h"

#define EMBER_CUBLAS_CHECK(expr)                                                             \
  do {                                                                                       \
    cublasStatus_t ember_st_ = (expr);                                                       \
    if (ember_st_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                   \
      if (ember_st_ == CUBLAS_STATUS_ALLOC_FAILED)                                           \
        throw ::ember::OutOfMemoryError(::ember::str("[cublas] ", #expr, " failed: ",        \
                                                     cublasLtGetStatusString(ember_st_)));     \
      throw ::ember::DeviceError(::ember::str("[cublas] ", #expr, " failed: ",               \
                                              cublasLtGetStatusString(ember_st_), " at ",      \
                                              __FILE__, ":", __LINE__));                     \
    }                                                                                        \
  } while (0)

namespace ember::ops::cuda::lt {

// A column-major matrix as cuBLASLt stores it (before its op is applied): rows x cols,
// leading dim ld >= max(rows, 1), and the element offset between consecutive batch entries
// (0 for an operand broadcast over the batch).
struct Layout {
  int64_t rows = 0, cols = 0, ld = 1, batch_stride = 0;
};

// What cuBLASLt does after the product, in its column-major terms (D has c.rows x c.cols).
// The vectors are contiguous, of dtype `dtype`, and the GELU is GPT-2's tanh approximation.
//   none          D = alpha op(A) op(B) + beta C
//   bias          D = AB + bias[row]                                      (bias: c.rows)
//   gelu_aux_bias aux = AB + bias[row], D = gelu(aux)                     (aux written)
//   dgelu_bgrad   D = AB * gelu'(aux), bias_grad[row] = sum over cols of D (aux read)
//   bgrada        D = AB, bias_grad[row] = sum over k of op(A)[row, k]    (bias_grad: c.rows)
//   bgradb        D = AB, bias_grad[col] = sum over k of op(B)[k, col]    (bias_grad: c.cols)
// aux is a c.rows x c.cols column-major matrix with leading dim aux_ld (a multiple of 8, >=
// c.rows, as cuBLASLt requires for the GELU aux matrix). Every epilogue but `none` requires
// beta == 0, and all but none/bias batch == 1 (no batch strides are set for the vectors).
enum class Epilogue : uint8_t { none, bias, gelu_aux_bias, dgelu_bgrad, bgrada, bgradb };

// D = alpha * op_a(A) @ op_b(B) + beta * C, then the epilogue, with C and D the same matrix
// `c`, all of dtype `dtype` (f32, f64, f16 or bf16), batch strided entries. f32 runs TF32
// tensor-core math when `tf32`, exact f32 otherwise; f16/bf16 accumulate in f32; f64 in f64.
struct Gemm {
  DType dtype = DType::f32;
  bool tf32 = true;
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  Layout a, b, c;
  int32_t batch = 1;
  const void* pa = nullptr;
  const void* pb = nullptr;
  void* pc = nullptr;
  Epilogue epilogue = Epilogue::none;
  const void* bias = nullptr;  // bias, gelu_aux_bias
  void* bias_grad = nullptr;   // dgelu_bgrad, bgrada, bgradb
  void* aux = nullptr;         // gelu_aux_bias (written), dgelu_bgrad (read)
  int64_t aux_ld = 0;
  double alpha = 1, beta = 0;
};

// Runs `g` on this thread's current stream of `device` (which must be the current device).
// Returns false, having computed nothing, when cuBLASLt offers no algorithm for it or every
// algorithm it offers fails for it (the next one is tried after each failure); throws on
// out of memory and on failures that are not about the algorithm (an error latched before
// the call, an invalidated graph capture, a sticky context error, a bad handle).
bool matmul(int device, const Gemm& g);

// The cuBLASLt handle of `device` (created on first use, with `device` current).
cublasLtHandle_t handle(int device);

}  // namespace ember::ops::cuda::lt
