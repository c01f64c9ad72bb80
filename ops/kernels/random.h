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

// The largest value of `dtype` strictly below `high` (any sign): a uniform draw that rounds
// up to `high` in a narrow dtype is replaced by it, so [low, high) stays half-open in
// f16/bf16/f32. The nearest value of the dtype to `high` is the answer when it is below;
// otherwise one step from it toward -inf (16-bit values are sign and magnitude: a step down
// is bits - 1 above zero, bits + 1 below it, and the negative subnormal 0x8001 from zero).
template <class S16>
double largest_below_16(double high) {
  S16 r{float(high)};
  if (double(float(r)) < high) return double(float(r));
  const uint16_t b = r.bits;
  if ((b & 0x7fffu) == 0) r.bits = 0x8001u;       // +0 or -0: the smallest negative subnormal
  else if (b & 0x8000u) r.bits = uint16_t(b + 1);  // negative: one ulp more magnitude
  else r.bits = uint16_t(b - 1);                   // positive: one ulp less
  return double(float(r));
}
inline double largest_below(double high, DType dtype) {
  switch (dtype) {
    case DType::f16: return largest_below_16<Half>(high);
    case DType::bf16: return largest_below_16<BFloat16>(high);
    case DType::f32: {
      const float r = float(high);
      return double(r) < high ? double(r) : double(std::nextafter(r, -INFINITY));
    }
    default: return std::nextafter(high, -INFINITY);
  }
}
}
