// cuBLASLt plumbing: handles, workspaces, the heuristic cache and one matmul call. See
// cublaslt.cuh for the invariants (process-lifetime caches, whose workspace a GEMM uses,
// what the algorithm cache is keyed on, the fallback over algorithms).
#include "cublaslt.cuh"

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "ember/cuda/graph_capture.h"
#include "ember/cuda/stream_handle.h"
#include "ember/tensor.h"

namespace ember::ops::cuda::lt {

namespace {

// What cuBLAS recommends for Hopper (32 MiB lets every split-K / stream-K kernel run).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Heuristic choices kept per problem: the fallbacks when an algorithm fails at run time.
constexpr int kMaxAlgos = 8;

std::mutex g_mutex;  // guards the three caches below

std::map<int, cublasLtHandle_t>& handles() {
  static auto* m = new std::map<int, cublasLtHandle_t>();
  return *m;
}

// The workspace tensors own their memory through ember's caching allocator.
std::map<std::pair<int, cudaStream_t>, Tensor>& workspaces() {
  static auto* m = new std::map<std::pair<int, cudaStream_t>, Tensor>();
  return *m;
}

using AlgoKey = std::array<int64_t, 27>;
// The heuristic's algorithms for one problem, best first; [first, count) have not failed.
struct CachedAlgos {
  std::array<cublasLtMatmulAlgo_t, kMaxAlgos> algos{};
  int count = 0;
  int first = 0;
};
std::map<AlgoKey, CachedAlgos>& algos() {
  static auto* m = new std::map<AlgoKey, CachedAlgos>();
  return *m;
}

// Its address names cuBLASLt's workspace among a capture's resources.
constexpr char kCaptureWorkspace = 0;

void* workspace(int device, cudaStream_t stream) {
  // Under a graph capture (on the capture stream or a stream joined into it): the capture's
  // own workspace (Note [capture resources]).
  const std::shared_ptr<void> captured = ember::cuda::detail::capture_resource(
      stream, &kCaptureWorkspace, [device]() -> std::shared_ptr<void> {
        return std::make_shared<Tensor>(
            ember::detail::make_tensor({int64_t(kWorkspaceBytes)}, DType::u8, Device::cuda(device)));
      });
  if (captured) return static_cast<Tensor*>(captured.get())->data_ptr();
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& ws = workspaces();
  auto it = ws.find({device, stream});
  if (it == ws.end())
    it = ws.emplace(std::make_pair(device, stream),
                    ember::detail::make_tensor({int64_t(kWorkspaceBytes)}, DType::u8, Device::cuda(device)))
             .first;
  return it->second.data_ptr();
}

bool is_capture_error(cudaError_t err) {
  switch (err) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureMerge:
    case cudaErrorStreamCaptureUnmatched:
    case cudaErrorStreamCaptureUnjoined:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
      return true;
    default:
      return false;
  }
}

// Called after cublasLtMatmul failed with a status that may mean "this algorithm cannot run
// this problem". It may also mean that the stream or the context cannot run anything: a
// capture already invalidated (every launch into it fails), a sticky context error (every
// call fails). Remembering the algorithm as failed then would make later GEMMs of this shape
// find no algorithm for the rest of the process, so those cases throw instead. Returns true
// when the failure is the algorithm's and may be remembered, false when it is the algorithm's
// but the stream is capturing: a launch refused inside a capture says nothing certain about
// eager runs, so nothing is written to the process-wide cache then.
bool algorithm_failure_may_be_cached(cudaStream_t stream, cublasStatus_t st) {
  // A latched error here is the failed call's own: matmul checked none was latched before.
  const cudaError_t latched = cudaGetLastError();  // clears it unless it is sticky
  const cudaError_t sticky = cudaPeekAtLastError();
  if (sticky != cudaSuccess)
    throw DeviceError(str("[matmul] cublasLtMatmul failed (", cublasLtGetStatusString(st),
                          ") and the CUDA context is unusable: ", cudaGetErrorString(sticky)));
  if (latched == cudaErrorMemoryAllocation)
    throw OutOfMemoryError(str("[matmul] cublasLtMatmul failed: ", cudaGetErrorString(latched)));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t query = cudaStreamIsCapturing(stream, &status);
  if (query != cudaSuccess) (void)cudaGetLastError();
  if (is_capture_error(latched) || is_capture_error(query) || status == cudaStreamCaptureStatusInvalidated)
    throw DeviceError(str("[matmul] cublasLtMatmul failed (", cublasLtGetStatusString(st),
                          ") because the graph capture on its stream is broken: ",
                          cudaGetErrorString(is_capture_error(latched) ? latched
                                             : is_capture_error(query) ? query
                                                                       : cudaErrorStreamCaptureInvalidated),
                          ". Something earlier in the captured region is illegal during capture "
                          "(a synchronization, a blocking copy, work on a stream outside the capture)"));
  if (query != cudaSuccess)
    throw DeviceError(str("[matmul] cublasLtMatmul failed (", cublasLtGetStatusString(st),
                          ") and its stream cannot be queried: ", cudaGetErrorString(query)));
  return status == cudaStreamCaptureStatusNone;
}

// The largest power of two (<= 256) dividing the address: what the heuristic may assume.
int64_t alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  if (u == 0) return 0;
  int64_t a = 1;
  while (a < 256 && u % uintptr_t(a * 2) == 0) a *= 2;
  return a;
}

cudaDataType data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: throw DTypeError(str("[matmul] cuBLASLt does not handle ", t));
  }
}

// RAII owners of the per-call descriptors (cheap host objects; the expensive part, the
// heuristic query, is cached).
struct DescDeleter {
  void operator()(cublasLtMatmulDesc_t d) const { cublasLtMatmulDescDestroy(d); }
  void operator()(cublasLtMatrixLayout_t l) const { cublasLtMatrixLayoutDestroy(l); }
  void operator()(cublasLtMatmulPreference_t p) const { cublasLtMatmulPreferenceDestroy(p); }
};

template <class T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

cublasLtMatrixLayout_t make_layout(cudaDataType type, const Layout& l, int32_t batch) {
  cublasLtMatrixLayout_t out = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&out, type, uint64_t(l.rows), uint64_t(l.cols), l.ld));
  if (batch > 1) {
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                        sizeof(batch)));
    EMBER_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &l.batch_stride, sizeof(l.batch_stride)));
  }
  return out;
}

cublasLtEpilogue_t epilogue_of(Epilogue e) {
  switch (e) {
    case Epilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::gelu_aux_bias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::dgelu_bgrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::bgrada: return CUBLASLT_EPILOGUE_BGRADA;
    case Epilogue::bgradb: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// The Gemm contract of cublaslt.cuh: a caller's bug, never a property of the data, so it
// throws instead of falling back.
void check_epilogue(const Gemm& g) {
  if (g.epilogue == Epilogue::none) return;
  const bool wants_bias = g.epilogue == Epilogue::bias || g.epilogue == Epilogue::gelu_aux_bias;
  const bool wants_aux = g.epilogue == Epilogue::gelu_aux_bias || g.epilogue == Epilogue::dgelu_bgrad;
  const bool ok = g.beta == 0 && (wants_bias ? g.bias && !g.bias_grad : g.bias_grad && !g.bias) &&
                  (wants_aux ? g.aux && g.aux_ld % 8 == 0 && g.aux_ld >= std::max<int64_t>(g.c.rows, 1) : !g.aux) &&
                  (g.epilogue == Epilogue::bias || g.batch == 1);
  if (!ok)
    throw Error(str("[matmul] internal: invalid cuBLASLt epilogue request (epilogue ", int(g.epilogue),
                    ", beta ", g.beta, ", batch ", g.batch, ", aux_ld ", g.aux_ld, ")"));
}

}  // namespace

cublasLtHandle_t handle(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& hs = handles();
  auto it = hs.find(device);
  if (it != hs.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtCreate(&h));
  hs.emplace(device, h);
  return h;
}

bool matmul(int device, const Gemm& g) {
  const cudaDataType type = data_type(g.dtype);
  const bool f64 = g.dtype == DType::f64;
  const cublasComputeType_t compute = f64                                        ? CUBLAS_COMPUTE_64F
                                      : g.dtype == DType::f32 && g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                        : CUBLAS_COMPUTE_32F;
  const cudaDataType scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;
  const cublasLtHandle_t h = handle(device);
  const cudaStream_t stream = ember::cuda::detail::current_stream_handle(device);
  void* ws = workspace(device, stream);

  cublasLtMatmulDesc_t raw_desc = nullptr;
  EMBER_CUBLAS_CHECK(cublasLtMatmulDescCreate(&raw_desc, compute, scale_type));
  std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter> desc(raw_desc);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSA, g.op_a);
  set_desc(raw_desc, CUBLASLT_MATMUL_DESC_TRANSB, g.op_b);
  check_epilogue(g);
  if (g.epilogue != Epilogue::none) {
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue_of(g.epilogue));
    // The heuristic reads the vector's and the aux matrix's pointers for their alignment, so
    // they are set before it runs (and are part of the cache key below).
    const void* vec = g.bias ? g.bias : g.bias_grad;
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, vec);
    set_desc(raw_desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, type);
    if (g.aux) {
      set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(g.aux));
      set_desc(raw_desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
    }
  }
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> la(make_layout(type, g.a, g.batch));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> lb(make_layout(type, g.b, g.batch));
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t, DescDeleter> lc(make_layout(type, g.c, g.batch));

  const AlgoKey key{device,       int64_t(g.dtype), int64_t(compute), int64_t(g.op_a), int64_t(g.op_b),
                    g.a.rows,     g.a.cols,         g.a.ld,           g.a.batch_stride, g.b.rows,
                    g.b.cols,     g.b.ld,           g.b.batch_stride, g.c.rows,         g.c.cols,
                    g.c.ld,       g.c.batch_stride, g.batch,          int64_t(g.epilogue), g.beta != 0,
                    alignment(g.pa), alignment(g.pb), alignment(g.pc), alignment(g.bias ? g.bias : g.bias_grad),
                    int64_t(kWorkspaceBytes), alignment(g.aux), g.aux_ld};
  CachedAlgos chosen;
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = algos().find(key);
    if (it != algos().end()) chosen = it->second, cached = true;
  }
  if (!cached) {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_pref));
    std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, DescDeleter> pref(raw_pref);
    const uint64_t ws_bytes = kWorkspaceBytes;
    EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &ws_bytes, sizeof(ws_bytes)));
    // Tell the heuristic the real alignments so it never picks a kernel that needs more.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, const void*> aligns[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.pa},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.pb},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, g.pc},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, g.pc}};
    for (const auto& [attr, p] : aligns) {
      const uint32_t bytes = uint32_t(alignment(p));
      EMBER_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(raw_pref, attr, &bytes, sizeof(bytes)));
    }
    std::array<cublasLtMatmulHeuristicResult_t, kMaxAlgos> results{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, raw_desc, la.get(), lb.get(), lc.get(), lc.get(),
                                                             raw_pref, kMaxAlgos, results.data(), &found);
    // NOT_SUPPORTED: no heuristic for this configuration at all; the caller falls back. An
    // epilogue this build's kernels do not offer for these types may also be refused as an
    // INVALID_VALUE: the caller's unfused path handles it, so that is no algorithm either.
    const bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED ||
                         (st == CUBLAS_STATUS_INVALID_VALUE && g.epilogue != Epilogue::none);
    if (!refused) EMBER_CUBLAS_CHECK(st);
    if (st == CUBLAS_STATUS_SUCCESS)
      for (int i = 0; i < found && i < kMaxAlgos; ++i)
        if (results[size_t(i)].state == CUBLAS_STATUS_SUCCESS) chosen.algos[size_t(chosen.count++)] = results[size_t(i)].algo;
    std::lock_guard<std::mutex> lock(g_mutex);
    algos().emplace(key, chosen);
  }

  const float alpha_f = float(g.alpha), beta_f = float(g.beta);
  const void* alpha = f64 ? static_cast<const void*>(&g.alpha) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&g.beta) : &beta_f;
  // An error latched by an earlier call would make cuBLASLt report this launch as failed
  // (it checks the launch with cudaGetLastError) and the algorithm be blamed for it: report
  // it here, as the launch check after any kernel would.
  if (const cudaError_t earlier = cudaPeekAtLastError(); earlier != cudaSuccess) [[unlikely]]
    ember::cuda::detail::throw_cuda_error(earlier, "an earlier CUDA call (reported before a GEMM)", __FILE__,
                                          __LINE__);
  // The heuristic vouches for an algorithm without running it: one can still fail for this
  // problem (a kernel the driver cannot launch, an operand property the heuristic does not
  // see). Such a failure moves on to the next algorithm, and the cache forgets the failed
  // one; when none is left the caller takes its fallback path. Out of memory and failures
  // that are not about the algorithm (a bad handle, an uninitialized library, a broken
  // capture, a sticky context error: algorithm_failure_may_be_cached) still throw.
  bool may_cache = true;
  for (int i = chosen.first; i < chosen.count; ++i) {
    const cublasStatus_t st = cublasLtMatmul(h, raw_desc, alpha, g.pa, la.get(), g.pb, lb.get(), beta, g.pc,
                                             lc.get(), g.pc, lc.get(), &chosen.algos[size_t(i)], ws,
                                             kWorkspaceBytes, stream);
    if (st == CUBLAS_STATUS_SUCCESS) {
      if (i != chosen.first && may_cache) {
        std::lock_guard<std::mutex> lock(g_mutex);
        CachedAlgos& entry = algos()[key];
        entry.first = std::max(entry.first, i);
      }
      return true;
    }
    const bool algorithm_failed = st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE ||
                                  st == CUBLAS_STATUS_EXECUTION_FAILED || st == CUBLAS_STATUS_ARCH_MISMATCH ||
                                  st == CUBLAS_STATUS_INTERNAL_ERROR;
    if (!algorithm_failed) EMBER_CUBLAS_CHECK(st);
    // Also clears the failed launch's latched error, which the next launch check would
    // report against a kernel that succeeded (Note [latched CUDA errors]).
    may_cache = algorithm_failure_may_be_cached(stream, st) && may_cache;
  }
  if (chosen.count > 0 && may_cache) {
    std::lock_guard<std::mutex> lock(g_mutex);
    algos()[key].first = chosen.count;  // none works: fall back at once next time
  }
  return false;
}

}  // namespace ember::ops::cuda::lt
