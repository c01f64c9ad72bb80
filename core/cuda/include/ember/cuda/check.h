// Return-code checks for the CUDA runtime. Only code in core/cuda and ops/cuda includes
// this header (it pulls in cuda_runtime.h). Every CUDA call goes through EMBER_CUDA_CHECK,
// and every kernel launch is followed by EMBER_CUDA_CHECK_LAUNCH.
#pragma once

#include <cuda_runtime.h>

#include "ember/error.h"

#define EMBER_CUDA_CHECK(expr)                                                              \
  do {                                                                                      \
    cudaError_t ember_err_ = (expr);                                                        \
    if (ember_err_ != cudaSuccess) [[unlikely]] {                                           \
      if (ember_err_ == cudaErrorMemoryAllocation)                                          \
        throw ::ember::OutOfMemoryError(::ember::str("[cuda] ", #expr, " failed: ",         \
                                                     cudaGetErrorString(ember_err_)));      \
      throw ::ember::DeviceError(::ember::str("[cuda] ", #expr, " failed: ",                \
                                              cudaGetErrorString(ember_err_), " at ",       \
                                              __FILE__, ":", __LINE__));                    \
    }                                                                                       \
  } while (0)

#define EMBER_CUDA_CHECK_LAUNCH() EMBER_CUDA_CHECK(cudaGetLastError())
