// The Winograd convolution's work units (Note [Winograd convolution], ops/cpu/winograd.cpp)
// are runs of tile rows counted across the batch, so one unit can start in the middle of one
// sample and end in the middle of another; the transforms walk such a unit sample by sample.
// Shapes here are picked so that, at the thread counts set below, units cross sample
// boundaries mid-sample (the ResNet's 7x7 maps: 4 tile rows per sample, 15-row units), with
// odd output sizes (a half-used last tile row and column) and every padding the path takes.
// All three passes are compared with the im2col path (test::CpuConvAlgorithm) in f64, where
// the two differ only by rounding, and in f32 within the Winograd rounding.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/ops/conv.h"
#include "support/test_support.h"

using namespace ember;

namespace {

struct Shape4 {
  int64_t N, C, H, W, O, pad;
};

struct ThreadsSetting {
  int prev = omp_get_max_threads();
  explicit ThreadsSetting(int n) { omp_set_num_threads(n); }
  ~ThreadsSetting() { omp_set_num_threads(prev); }
};

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

std::vector<Tensor> passes(const Tensor& x, const Tensor& w, const Tensor& dy, const ops::Conv2dParams& p,
                           bool winograd) {
  test::CpuConvAlgorithm setting(winograd ? "winograd" : "im2col");
  return {ops::conv2d(x, w, Tensor(), p), ops::conv2d_backward_input(dy, w, x.sizes(), p),
          ops::conv2d_backward_weight(dy, x, w.sizes(), p)};
}

}  // namespace

TEST(WinogradFast, UnitsCrossingSamplesMatchIm2col) {
  const std::vector<Shape4> shapes = {
      {30, 16, 7, 7, 16, 1},   // 4 tile rows per sample, units of 15 rows at 2 threads
      {30, 16, 8, 8, 24, 0},   // 6x6 output: 3 tile rows per sample
      {13, 16, 9, 10, 16, 2},  // 11x12 output: odd height, 6 tile rows
      {21, 32, 5, 6, 16, 1},   // 3 tile rows per sample, odd height
  };
  for (int threads : {1, 2}) {
    ThreadsSetting setting(threads);
    for (const Shape4& s : shapes) {
      SCOPED_TRACE(str("threads ", threads, " x[", s.N, ",", s.C, ",", s.H, ",", s.W, "] -> ", s.O, " pad ", s.pad));
      const ops::Conv2dParams p{{1, 1}, {s.pad, s.pad}, {1, 1}, 1};
      const int64_t Ho = s.H + 2 * s.pad - 2, Wo = s.W + 2 * s.pad - 2;
      const Tensor x = randn({s.N, s.C, s.H, s.W}, DType::f64);
      const Tensor w = randn({s.O, s.C, 3, 3}, DType::f64);
      const Tensor dy = randn({s.N, s.O, Ho, Wo}, DType::f64);
      const std::vector<Tensor> on = passes(x, w, dy, p, true), off = passes(x, w, dy, p, false);
      const std::vector<Tensor> on32 = passes(x.to(DType::f32), w.to(DType::f32), dy.to(DType::f32), p, true);
      const std::vector<Tensor> off32 = passes(x.to(DType::f32), w.to(DType::f32), dy.to(DType::f32), p, false);
      for (size_t i = 0; i < on.size(); ++i) {
        SCOPED_TRACE(str("pass ", i));
        const double scale = max_abs(off[i]);
        EXPECT_TRUE(test::all_close(on[i], off[i], 0, 1e-12 * scale));
        // The Winograd path really ran (its f32 rounding differs from im2col's) and is close.
        EXPECT_NE(on32[i].to_vector<float>(), off32[i].to_vector<float>());
        EXPECT_TRUE(test::all_close(on32[i], off[i].to(DType::f32), 0, 1e-5 * scale));
      }
    }
  }
}
