#pragma once
#include "dispatch.h"
#include "ember/random.h"
#include "ember/tensor.h"

// Random fills of a contiguous tensor from Philox state `s` (see Note [Philox layout] in
// ops/cpu/random.cpp; CUDA must use the same layout so devices agree).
#define EMBER_RANDOM_KERNELS                                                          \
  void uniform_kernel(const Tensor& t, Generator::State s, double low, double high); \
  void normal_kernel(const Tensor& t, Generator::State s, double mean, double stddev); \
  void randint_kernel(const Tensor& t, Generator::State s, int64_t low, int64_t high);

EMBER_DECLARE_KERNELS(EMBER_RANDOM_KERNELS)

namespace ember::ops {
// Philox counters a fill of n elements consumes (two elements per counter).
inline uint64_t random_counters(int64_t n) { return uint64_t(n + 1) / 2; }
}
