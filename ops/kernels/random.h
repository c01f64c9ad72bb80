#pragma once
#include <cmath>

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

// The largest value of `dtype` below `high` (high > 0): a uniform draw that rounds up to
// `high` in a narrow dtype is replaced by it, so [low, high) stays half-open in f16/bf16/f32.
inline double largest_below(double high, DType dtype) {
  switch (dtype) {
    case DType::f16: return double(Half::to_float(uint16_t(Half::from_float(float(high)) - 1)));
    case DType::bf16: {
      BFloat16 h{float(high)};
      h.bits = uint16_t(h.bits - 1);
      return double(float(h));
    }
    case DType::f32: return double(std::nextafter(float(high), 0.0f));
    default: return std::nextafter(high, 0.0);
  }
}
}
