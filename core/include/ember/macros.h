// Portable macros shared by host and device code. No CUDA headers here: EMBER_HD expands
// to __host__ __device__ only when the translation unit is compiled by nvcc.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HD __host__ __device__
#define EMBER_FORCEINLINE __forceinline__
#else
#define EMBER_HD
#define EMBER_FORCEINLINE inline __attribute__((always_inline))
#endif

// 1 while nvcc compiles device code, 0 on the host (host compilers and nvcc's host pass): lets
// a host-and-device function pick host-only code with `if constexpr` (functors.h's math).
#if defined(__CUDA_ARCH__)
#define EMBER_DEVICE_CODE 1
#else
#define EMBER_DEVICE_CODE 0
#endif
