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

// EMBER_HOT_TLS: a thread-local that every op's dispatch reads (grad mode, the op scope, the
// small-object free lists). In a shared library the default TLS model reaches a thread-local
// through a __tls_get_addr call each time (13% of a 1-element add in bench_dispatch); the
// initial-exec model is one load at a fixed offset from the thread pointer, as in a static
// build. A library with such a variable has its whole TLS block in the static TLS area; when a
// program loads it later with dlopen (a Python extension would), the block must fit glibc's
// surplus there (on the order of 1-2 KiB, shared by every library): so only small, hot,
// trivially destructible variables (a flag, a pointer) get it, and libember_core keeps its TLS
// block small (240 bytes; tests/install dlopens the installed libraries). Its declaration in a
// header carries it too, so every library reads it the same way. nvcc's front end rejects the
// attribute on a declaration ("does not apply here"): a .cu file reads these with the default
// model, which is valid for any variable, only slower (no .cu file reads one per op).
#if defined(__CUDACC__)
#define EMBER_HOT_TLS
#else
#define EMBER_HOT_TLS [[gnu::tls_model("initial-exec")]]
#endif
