#pragma once
#include "dispatch.h"
#include "ember/tensor.h"

// gemm_kernel: c[i] = a[i] @ b[i] (c[i] += ... when accumulate) for every batch index i.
// Preconditions the front guarantees: a [..., M, K], b [..., K, N], c [..., M, N] have the
// same rank (>= 2) and the same batch sizes; one device, one dtype (not bool). a and b may
// have any strides, stride 0 included (broadcast batch dims, expanded matrices); c has no
// stride-0 dims and does not overlap a or b. M, N, K may be 0 (K == 0 gives zeros, or
// leaves c untouched when accumulating).
//
// gemm_bias_kernel: c = a @ b + bias, broadcast over rows (linear's forward). a [M, K],
// b [K, N], c [M, N] are 2-D with the same guarantees as above; bias is 1-D [N], same dtype
// and device, any stride. On CUDA the bias is added in the GEMM's epilogue (one pass over c);
// the CPU seeds c with the bias and accumulates the product onto it.
//
// The fused GEMMs (Note [GEMM epilogues] in ops/cuda/linalg.cu). a [M, K], b [K, N] 2-D as
// above (any strides); outputs fresh and row-major (rows at any stride >= their length, unit
// column stride); vectors 1-D, of the same dtype; one device. The GELU is the tanh form.
// gemm_bias_gelu_kernel: pre = a @ b + bias (bias [N], any stride), out = gelu_tanh(pre).
// gemm_dgelu_bgrad_kernel: out = (a @ b) * gelu_tanh'(pre) with pre [M, N] (any strides),
//   dbias[N] = out summed over its rows (contiguous).
// gemm_bgrad_kernel: c = a @ b, dbias[M] = a summed over its columns (contiguous): the weight
//   gradient of linear with its bias gradient (a = g^T).
// M, N or K may be 0 (empty sums are 0). CUDA runs each as one cuBLASLt call with the
// matching epilogue when it can, and as the unfused composite (GEMM, elementwise pass,
// reduction) when cuBLASLt cannot; the CPU runs the GEMM and one fused pass.
#define EMBER_LINALG_KERNELS                                                                          \
  void gemm_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool accumulate);              \
  void gemm_bias_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& c);      \
  void gemm_bias_gelu_kernel(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, \
                             const Tensor& pre);                                                      \
  void gemm_dgelu_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& pre, const Tensor& out, \
                               const Tensor& dbias);                                                  \
  void gemm_bgrad_kernel(const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& dbias);

EMBER_DECLARE_KERNELS(EMBER_LINALG_KERNELS)

namespace ember::ops::cpu {
// A strided matrix view in elements, for CPU kernels of other families (conv) that call the
// GEMM on raw buffers: element (i, j) lives at p[i * rs + j * cs].
template <class T>
struct MatRef {
  T* p;
  int64_t rs, cs;
};
// c[M, N] = a[M, K] @ b[K, N] (+= when accumulate), single call, defined for float and
// double. A matrix with a unit stride in either dim is used in place (row- or column-major);
// any other layout is copied first. Runs on Eigen's threads unless called inside an OpenMP
// parallel region (then on the calling thread only: no nested oversubscription).
template <class T>
void gemm(int64_t M, int64_t N, int64_t K, MatRef<const T> a, MatRef<const T> b, MatRef<T> c,
          bool accumulate);
}  // namespace ember::ops::cpu
