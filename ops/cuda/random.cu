// CUDA random fills with the exact element-to-counter layout of ops/cpu/random.cpp
// (Note [Philox layout]), so a seed gives the same values on both devices.
#include <cmath>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/random.h"

namespace ember::ops::cuda {

namespace {
enum class Dist { uniform, normal, randint };

template <class S>
__global__ void random_kernel(S* out, int64_t n, Generator::State s, Dist dist, double a, double b,
                              double below) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t w[4];
    Philox::draw(s.seed, s.offset + uint64_t(i) / 2, w);
    double v;
    if (dist == Dist::normal) {
      double u1 = Philox::uniform_double(w[0], w[1]), u2 = Philox::uniform_double(w[2], w[3]);
      double r = sqrt(-2.0 * log(1.0 - u1));
      double theta = 6.283185307179586 * u2;
      v = a + b * r * (i % 2 == 0 ? cos(theta) : sin(theta));
    } else {
      int k = 2 * int(i % 2);
      double u = Philox::uniform_double(w[k], w[k + 1]);
      if (dist == Dist::uniform) {
        v = a + (b - a) * u;
        // Keep [a, b) half-open after rounding to S, as the CPU does (ops/cpu/random.cpp): an
        // f64 value is its own rounding (going through float would move values just below b
        // in f64 onto `below`); 16-bit values round through f32, their only conversion.
        if constexpr (std::is_same_v<S, double>) {
          if (v >= b) v = below;
        } else if constexpr (!std::is_same_v<S, bool> && !std::is_integral_v<S>) {
          if (double(float(S(float(v)))) >= b) v = below;
        }
      } else {
        double r = a + floor(u * (b - a));
        v = r > b - 1 ? b - 1 : r;
      }
    }
    if constexpr (std::is_same_v<S, bool>) out[i] = v != 0;
    else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>) out[i] = S(float(v));
    else out[i] = S(v);
  }
}

void launch(const Tensor& t, Generator::State s, Dist dist, double a, double b) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const auto on = ember::cuda::detail::on_device(t.device().index);
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(1) << 16);
  cudaStream_t stream = on.stream;
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(random_kernel<S>, unsigned(blocks), 256, 0, stream,
        static_cast<S*>(t.data_ptr()), n, s, dist, a, b, largest_below(b, t.dtype()));
  });
  EMBER_CUDA_CHECK_LAUNCH();
}
}  // namespace

void uniform_kernel(const Tensor& t, Generator::State s, double low, double high) {
  launch(t, s, Dist::uniform, low, high);
}
void normal_kernel(const Tensor& t, Generator::State s, double mean, double stddev) {
  launch(t, s, Dist::normal, mean, stddev);
}
void randint_kernel(const Tensor& t, Generator::State s, int64_t low, int64_t high) {
  launch(t, s, Dist::randint, double(low), double(high));
}

}  // namespace ember::ops::cuda
