// Note [Philox layout]: element i of a random fill uses counter (offset + i / 2) and, within
// the four words of that draw, words (2 * (i % 2), 2 * (i % 2) + 1) as one 53-bit uniform.
// Normals pair elements (2k, 2k + 1) through Box-Muller on the counter's two uniforms. The
// result depends only on (seed, offset, i): not on threads, not on the device.
#include <cmath>

#include "kernels/random.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {
template <class F>
void fill_indexed(const Tensor& t, F value_at) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    S* out = static_cast<S*>(t.data_ptr());
    const int64_t n = t.numel();
#pragma omp parallel for if (n > kParallelGrain) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      double v = value_at(i);
      if constexpr (std::is_same_v<S, bool>) out[i] = v != 0;
      else if constexpr (std::is_integral_v<S>) out[i] = S(v);
      else out[i] = S(v);
    }
  });
}

double uniform_at(Generator::State s, int64_t i) {
  uint32_t w[4];
  Philox::draw(s.seed, s.offset + uint64_t(i) / 2, w);
  int k = 2 * int(i % 2);
  return Philox::uniform_double(w[k], w[k + 1]);
}

}  // namespace

void uniform_kernel(const Tensor& t, Generator::State s, double low, double high) {
  const double below = largest_below(high, t.dtype());
  visit_floating(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    fill_indexed(t, [&](int64_t i) {
      double v = low + (high - low) * uniform_at(s, i);
      return double(S(v)) >= high ? below : v;  // rounding to S must not reach `high`
    });
  });
}

void normal_kernel(const Tensor& t, Generator::State s, double mean, double stddev) {
  fill_indexed(t, [&](int64_t i) {
    uint32_t w[4];
    Philox::draw(s.seed, s.offset + uint64_t(i) / 2, w);
    double u1 = Philox::uniform_double(w[0], w[1]), u2 = Philox::uniform_double(w[2], w[3]);
    double r = std::sqrt(-2.0 * std::log(1.0 - u1));
    double theta = 6.283185307179586 * u2;
    return mean + stddev * r * (i % 2 == 0 ? std::cos(theta) : std::sin(theta));
  });
}

void randint_kernel(const Tensor& t, Generator::State s, int64_t low, int64_t high) {
  const double range = double(high - low);
  fill_indexed(t, [&](int64_t i) {
    int64_t v = low + int64_t(std::floor(uniform_at(s, i) * range));
    return double(std::min(v, high - 1));
  });
}

}  // namespace ember::ops::cpu
