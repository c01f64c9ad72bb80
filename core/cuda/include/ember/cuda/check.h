// Return-code checks for the CUDA runtime. Only code in core/cuda and ops/cuda includes
// this header (it pulls in cuda_runtime.h). Every CUDA call goes through EMBER_CUDA_CHECK,
// and every kernel launch is followed by EMBER_CUDA_CHECK_LAUNCH.
//
// Note [latched CUDA errors]: the runtime also remembers a failed call's error as the thread's
// "last error", which the next cudaGetLastError (every launch check) returns. A failure that
// is caught and handled (a graph that cannot be instantiated, an event that cannot be
// created for lack of memory, a capture that cannot begin) would then be reported a second
// time against the next, unrelated launch, which succeeded. So a check that throws clears the
// last error first. A sticky error (the context is corrupted: an illegal address, a device
// assert) is not lost by this: the runtime keeps returning it from every later call, so the
// next check reports it again, as it must.
#pragma once

#include <cuda_runtime.h>

#include "ember/error.h"

namespace ember::cuda::detail {
// Throws the exception EMBER_CUDA_CHECK reports `err` with (OutOfMemoryError for a failed
// allocation, DeviceError otherwise), after clearing the latched last error.
[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* expr, const char* file,
                                          int line) {
  (void)cudaGetLastError();  // Note [latched CUDA errors]
  if (err == cudaErrorMemoryAllocation)
    throw ::ember::OutOfMemoryError(::ember::str("[cuda] ", expr, " failed: ", cudaGetErrorString(err)));
  throw ::ember::DeviceError(
      ::ember::str("[cuda] ", expr, " failed: ", cudaGetErrorString(err), " at ", file, ":", line));
}
}  // namespace ember::cuda::detail

#define EMBER_CUDA_CHECK(expr)                                                              \
  do {                                                                                      \
    cudaError_t ember_err_ = (expr);                                                        \
    if (ember_err_ != cudaSuccess) [[unlikely]]                                             \
      ::ember::cuda::detail::throw_cuda_error(ember_err_, #expr, __FILE__, __LINE__);       \
  } while (0)

#define EMBER_CUDA_CHECK_LAUNCH() EMBER_CUDA_CHECK(cudaGetLastError())

namespace ember::cuda::detail {
// The answer of cudaStreamQuery / cudaEventQuery: true when the work is done, false when not
// yet; any other result throws. cudaErrorNotReady is an answer, not a failure, but the runtime
// also latches it as the thread's last error, where the next launch check (cudaGetLastError)
// would report it against a launch that succeeded: it is cleared here. Every query in ember
// goes through this (core/cuda/stream.cpp, distributed/nccl).
inline bool query_completed(cudaError_t query_result) {
  if (query_result == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(query_result);
  return true;
}
}  // namespace ember::cuda::detail
