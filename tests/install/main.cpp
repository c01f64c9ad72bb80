// Consumer of an installed ember (tests/install): builds against the exported package only
// and checks a few values, so a broken install (missing header, library or dependency)
// fails to configure, build or run.
#include <cmath>
#include <cstdio>

#include <ember/ember.h>

int main() {
  using namespace ember;
  manual_seed(0);
  Tensor x = tensor<double>({1.0, 2.0, 3.0}, {3}).requires_grad_();
  Tensor y = x * x + x.exp();  // dy/dx = 2x + exp(x)
  y.backward(ones({3}, DType::f64));
  std::vector<double> g = x.grad().to_vector<double>();
  bool ok = g.size() == 3;
  for (int i = 0; ok && i < 3; ++i) {
    double xi = i + 1.0;
    ok = std::abs(g[i] - (2 * xi + std::exp(xi))) < 1e-9;
  }
  Tensor r = randn({2, 3});
  ok = ok && r.sizes() == Shape{2, 3} && r.dtype() == DType::f32;
  std::printf("installed ember works: grad %s, CUDA runtime %s\n", ok ? "ok" : "WRONG",
              cuda::runtime_version().c_str());
  return ok ? 0 : 1;
}
