// Gradients of the fused nn ops: gradcheck in f64 (finite differences of the forward, so the
// fused backward kernels are checked against the op they differentiate), hand-computed
// gradients for tiny cases, host-loop references for the large (multi-threaded, tiled)
// paths and the 16-bit dtypes, and double backward (composite for softmax/log_softmax,
// a clear NotImplementedError for cross_entropy and layer_norm).
#include <omp.h>

#include <cmath>
#include <limits>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;

namespace {

const DType kLowTypes[] = {DType::f32, DType::f16, DType::bf16};

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t) {
  switch (t) {
    case DType::f64: return {1e-11, 1e-12};
    case DType::f32: return {1e-4, 1e-5};
    case DType::f16: return {1e-2, 1e-3};
    default: return {5e-2, 1e-2};  // bf16
  }
}

// dx of softmax (y * (g - sum(g*y))) or log_softmax (g - exp(y) * sum(g)) along dim of
// row-major [outer, K, inner] values, in double.
std::vector<double> host_softmax_bwd(const std::vector<double>& y, const std::vector<double>& g,
                                     const Shape& shape, int64_t dim, bool log) {
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= shape[i];
  for (int64_t i = dim + 1; i < int64_t(shape.size()); ++i) inner *= shape[i];
  const int64_t K = shape[dim];
  std::vector<double> dx(y.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return size_t((o * K + k) * inner + i); };
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += log ? g[at(k)] : g[at(k)] * y[at(k)];
      for (int64_t k = 0; k < K; ++k)
        dx[at(k)] = log ? g[at(k)] - std::exp(y[at(k)]) * s : y[at(k)] * (g[at(k)] - s);
    }
  return dx;
}

struct LnGrads {
  std::vector<double> dx, dw, db;
};
LnGrads host_layer_norm_bwd(const std::vector<double>& x, const std::vector<double>& w,
                            const std::vector<double>& g, int64_t cols, double eps) {
  const int64_t rows = int64_t(x.size()) / cols;
  LnGrads r{std::vector<double>(x.size()), std::vector<double>(size_t(cols)),
            std::vector<double>(size_t(cols))};
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = &x[size_t(i * cols)];
    const double* gr = &g[size_t(i * cols)];
    double mu = 0, var = 0;
    for (int64_t k = 0; k < cols; ++k) mu += xr[k];
    mu /= double(cols);
    for (int64_t k = 0; k < cols; ++k) var += (xr[k] - mu) * (xr[k] - mu);
    const double rs = 1 / std::sqrt(var / double(cols) + eps);
    double a = 0, b = 0;
    for (int64_t k = 0; k < cols; ++k) {
      const double xhat = (xr[k] - mu) * rs;
      a += gr[k] * w[size_t(k)];
      b += gr[k] * w[size_t(k)] * xhat;
      r.dw[size_t(k)] += gr[k] * xhat;
      r.db[size_t(k)] += gr[k];
    }
    a /= double(cols);
    b /= double(cols);
    for (int64_t k = 0; k < cols; ++k)
      r.dx[size_t(i * cols + k)] = rs * (gr[k] * w[size_t(k)] - a - (xr[k] - mu) * rs * b);
  }
  return r;
}

// x in `dtype` as a fresh leaf that requires grad.
Tensor leaf(const Tensor& f64, DType dtype) { return f64.to(dtype).detach().requires_grad_(); }

}  // namespace

// ---------------------------------------------------------------- softmax / log_softmax

TEST(NnGrad, SoftmaxGradcheckEveryDim) {
  Tensor x = randn({3, 4, 5}, DType::f64).requires_grad_();
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(str("dim ", dim, log ? " log" : ""));
      EXPECT_TRUE(gradcheck([dim, log](const TensorList& in) {
        return log ? log_softmax(in[0], dim) : softmax(in[0], dim);
      }, {x}));
    }
  }
}

TEST(NnGrad, SoftmaxGradcheckNonContiguous) {
  // A transposed input (strided rows) and a transposed output (so the incoming gradient is
  // strided too).
  Tensor x = randn({4, 3, 5}, DType::f64).requires_grad_();
  for (int64_t dim : {0, 1, 2}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(str("dim ", dim, log ? " log" : ""));
      EXPECT_TRUE(gradcheck([dim, log](const TensorList& in) {
        Tensor v = in[0].transpose(0, 2);
        return (log ? log_softmax(v, dim) : softmax(v, dim)).transpose(0, 1);
      }, {x}));
    }
  }
}

TEST(NnGrad, SoftmaxHandComputedGradient) {
  // d/dx of <w, softmax(x)> with w = e0 is y0 * (e0 - y).
  const double y0 = 0.09003057317038046, y1 = 0.24472847105479767, y2 = 0.6652409557748219;
  Tensor x = tensor<double>({1, 2, 3}, {3}).requires_grad_();
  softmax(x, 0).backward(tensor<double>({1, 0, 0}, {3}));
  EXPECT_TRUE(test::all_close(x.grad(), {y0 * (1 - y0), -y0 * y1, -y0 * y2}, 1e-14, 1e-15));
  // d/dx of <w, log_softmax(x)> = w - softmax(x) * sum(w).
  Tensor z = tensor<double>({1, 2, 3}, {3}).requires_grad_();
  log_softmax(z, 0).backward(tensor<double>({1, 0, 2}, {3}));
  EXPECT_TRUE(test::all_close(z.grad(), {1 - 3 * y0, -3 * y1, 2 - 3 * y2}, 1e-14, 1e-15));
}

TEST(NnGrad, SoftmaxBackwardLargeAndLowPrecision) {
  // Large enough for several threads and the tiled path over non-last dims.
  const Shape shape{6, 200, 33};
  Tensor x64 = randn(shape, DType::f64);
  Tensor g64 = randn(shape, DType::f64);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    for (int64_t dim : {0, 1, 2}) {
      for (bool log : {false, true}) {
        SCOPED_TRACE(str(dtype_name(dt), " dim ", dim, log ? " log" : ""));
        Tensor x = leaf(x64, dt);
        Tensor g = g64.to(dt);
        Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
        y.backward(g);
        std::vector<double> ref = host_softmax_bwd(y.detach().to(DType::f64).to_vector<double>(),
                                                   g.to(DType::f64).to_vector<double>(), shape, dim, log);
        Tol t = tol_for(dt);
        EXPECT_EQ(x.grad().dtype(), dt);
        EXPECT_TRUE(test::all_close(x.grad(), shape, ref, t.rtol, t.atol));
      }
    }
  }
}

// Double backward: the gradient of softmax's gradient, with respect to both x and the
// incoming gradient v (needs the reduce family's sum).
TEST(NnGrad, SoftmaxDoubleBackward) {
  Tensor x = randn({3, 4}, DType::f64).requires_grad_();
  Tensor v = randn({3, 4}, DType::f64).requires_grad_();
  for (int64_t dim : {0, 1}) {
    for (bool log : {false, true}) {
      SCOPED_TRACE(str("dim ", dim, log ? " log" : ""));
      EXPECT_TRUE(gradcheck([dim, log](const TensorList& in) {
        // gradcheck evaluates finite differences without grad mode: the inner gradient
        // needs it on, and a graph only when the outer one is being recorded.
        const bool outer = GradMode::is_enabled();
        AutoGradMode on(true);
        Tensor y = log ? log_softmax(in[0], dim) : softmax(in[0], dim);
        return autograd::grad({y}, {in[0]}, {in[1]}, /*retain_graph=*/true, /*create_graph=*/outer)[0];
      }, {x, v}));
    }
  }
}

// ---------------------------------------------------------------- cross_entropy

TEST(NnGrad, CrossEntropyGradcheckReductionsIgnoreAndSmoothing) {
  Tensor x = randn({5, 4}, DType::f64).mul(2.0).requires_grad_();
  Tensor t = tensor<int64_t>({1, -100, 3, 0, 2}, {5});
  for (Reduction r : {Reduction::none, Reduction::mean, Reduction::sum}) {
    for (double eps : {0.0, 0.25}) {
      SCOPED_TRACE(str("reduction ", int(r), " smoothing ", eps));
      EXPECT_TRUE(gradcheck([&t, r, eps](const TensorList& in) {
        return cross_entropy(in[0], t, {.reduction = r, .label_smoothing = eps});
      }, {x}));
    }
  }
  // A custom ignore_index, non-contiguous logits, one-sample [C] logits.
  Tensor t3 = tensor<int64_t>({1, 3, 3, 0, 2}, {5});
  EXPECT_TRUE(gradcheck([&t3](const TensorList& in) {
    return cross_entropy(in[0], t3, {.ignore_index = 3, .label_smoothing = 0.1});
  }, {x}));
  Tensor xt = randn({4, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([&t](const TensorList& in) {
    return cross_entropy(in[0].t(), tensor<int64_t>({1, 0, 3, 0, 2}, {5}), {.reduction = Reduction::sum});
  }, {xt}));
  Tensor row = randn({6}, DType::f64).requires_grad_();
  Tensor t0 = scalar_tensor(4, DType::i64);
  for (Reduction r : {Reduction::none, Reduction::mean}) {
    EXPECT_TRUE(gradcheck([&t0, r](const TensorList& in) {
      return cross_entropy(in[0], t0, {.reduction = r, .label_smoothing = 0.3});
    }, {row}));
  }
}

TEST(NnGrad, CrossEntropyHandComputedGradient) {
  // mean over 2 rows: (softmax - onehot) / 2.
  const double p0 = 0.09003057317038046, p1 = 0.24472847105479767, p2 = 0.6652409557748219;
  Tensor x = tensor<double>({1, 2, 3, 1, 1, 1}, {2, 3}).requires_grad_();
  cross_entropy(x, tensor<int64_t>({2, 0}, {2})).backward();
  EXPECT_TRUE(test::all_close(
      x.grad(), {2, 3}, {p0 / 2, p1 / 2, (p2 - 1) / 2, (1.0 / 3 - 1) / 2, 1.0 / 6, 1.0 / 6}, 1e-14, 1e-15));
  // Smoothing 0.3 with C = 3: the target's weight is 0.7 + 0.1, every other class 0.1; the
  // ignored row gets no gradient and the mean divides by 1.
  Tensor z = tensor<double>({1, 2, 3, 1, 1, 1}, {2, 3}).requires_grad_();
  cross_entropy(z, tensor<int64_t>({2, -100}, {2}), {.label_smoothing = 0.3}).backward();
  EXPECT_TRUE(test::all_close(z.grad(), {2, 3}, {p0 - 0.1, p1 - 0.1, p2 - 0.8, 0, 0, 0}, 1e-14, 1e-15));
  // reduction none with a per-row gradient.
  Tensor w = tensor<double>({1, 2, 3, 1, 1, 1}, {2, 3}).requires_grad_();
  cross_entropy(w, tensor<int64_t>({2, 0}, {2}), {.reduction = Reduction::none})
      .backward(tensor<double>({2, -1}, {2}));
  EXPECT_TRUE(test::all_close(
      w.grad(), {2, 3}, {2 * p0, 2 * p1, 2 * (p2 - 1), -(1.0 / 3 - 1), -1.0 / 3, -1.0 / 3}, 1e-14, 1e-15));
}

TEST(NnGrad, CrossEntropyBackwardLargeAndLowPrecision) {
  const int64_t n = 300, c = 257;
  Tensor x64 = randn({n, c}, DType::f64).mul(3.0);
  std::vector<int64_t> tv = randint(0, c, {n}).to_vector<int64_t>();
  for (int64_t i = 0; i < n; i += 7) tv[size_t(i)] = -100;
  int64_t kept = 0;
  for (int64_t v : tv) kept += v != -100;
  Tensor t = tensor<int64_t>(tv, {n});
  const double eps = 0.1;
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = leaf(x64, dt);
    cross_entropy(x, t, {.label_smoothing = eps}).backward();
    std::vector<double> xv = x.detach().to(DType::f64).to_vector<double>();
    std::vector<double> ref(xv.size(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      if (tv[size_t(i)] == -100) continue;
      double m = -std::numeric_limits<double>::infinity(), s = 0;
      for (int64_t k = 0; k < c; ++k) m = std::max(m, xv[size_t(i * c + k)]);
      for (int64_t k = 0; k < c; ++k) s += std::exp(xv[size_t(i * c + k)] - m);
      for (int64_t k = 0; k < c; ++k) {
        double p = std::exp(xv[size_t(i * c + k)] - m) / s;
        double q = (k == tv[size_t(i)] ? 1 - eps : 0) + eps / double(c);
        ref[size_t(i * c + k)] = (p - q) / double(kept);
      }
    }
    Tol tl = tol_for(dt);
    EXPECT_TRUE(test::all_close(x.grad(), {n, c}, ref, tl.rtol, tl.atol / 100));
  }
}

TEST(NnGrad, CrossEntropyDoubleBackwardThrows) {
  Tensor x = randn({3, 4}, DType::f64).requires_grad_();
  Tensor t = tensor<int64_t>({0, 1, 2}, {3});
  Tensor g = autograd::grad({cross_entropy(x, t)}, {x}, {}, true, true)[0];
  EXPECT_TRUE(g.requires_grad());
  try {
    g.backward(ones({3, 4}, DType::f64));
    FAIL() << "double backward through cross_entropy must throw";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("[cross_entropy_backward] double backward"), std::string::npos)
        << e.what();
  }
}

// ---------------------------------------------------------------- layer_norm

TEST(NnGrad, LayerNormGradcheck) {
  Tensor x = randn({3, 4, 5}, DType::f64).requires_grad_();
  Tensor w = randn({4, 5}, DType::f64).requires_grad_();
  Tensor b = randn({4, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0], {4, 5}, in[1], in[2]); },
                        {x, w, b}));
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0], {5}); }, {x}));
  Tensor w5 = randn({5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0], {5}, in[1], Tensor(), 1e-3); },
                        {x, w5}));
  // Only the parameters require grad (dx is not computed), and a non-contiguous input.
  Tensor xc = randn({4, 3, 5}, DType::f64);
  EXPECT_TRUE(gradcheck([&xc](const TensorList& in) {
    return layer_norm(xc.transpose(0, 1), {5}, in[0], in[1]);
  }, {w5, randn({5}, DType::f64).requires_grad_()}));
  Tensor xt = randn({4, 3, 5}, DType::f64).requires_grad_();
  EXPECT_TRUE(gradcheck([](const TensorList& in) { return layer_norm(in[0].transpose(0, 1), {5}, in[1]); },
                        {xt, w5}));
}

TEST(NnGrad, LayerNormOnlyRequestedGradients) {
  Tensor x = randn({2, 6}, DType::f64);
  Tensor w = randn({6}, DType::f64).requires_grad_();
  Tensor b = randn({6}, DType::f64);
  layer_norm(x, {6}, w, b).backward(ones({2, 6}, DType::f64));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  ASSERT_TRUE(w.grad().defined());
  LnGrads r = host_layer_norm_bwd(x.to_vector<double>(), w.to_vector<double>(),
                                  std::vector<double>(12, 1.0), 6, 1e-5);
  EXPECT_TRUE(test::all_close(w.grad(), r.dw, 1e-12, 1e-12));
}

TEST(NnGrad, LayerNormBackwardLargeAndLowPrecision) {
  // 512 x 96: several row chunks, summed in a fixed order.
  const int64_t rows = 512, cols = 96;
  Tensor x64 = randn({rows, cols}, DType::f64).mul(2.0).add(1.0);
  Tensor w64 = randn({cols}, DType::f64);
  Tensor g64 = randn({rows, cols}, DType::f64);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = leaf(x64, dt), w = leaf(w64, dt), b = leaf(zeros({cols}, DType::f64), dt);
    Tensor g = g64.to(dt);
    layer_norm(x, {cols}, w, b).backward(g);
    LnGrads r = host_layer_norm_bwd(x.detach().to(DType::f64).to_vector<double>(),
                                    w.detach().to(DType::f64).to_vector<double>(),
                                    g.to(DType::f64).to_vector<double>(), cols, 1e-5);
    Tol t = tol_for(dt);
    EXPECT_TRUE(test::all_close(x.grad(), {rows, cols}, r.dx, t.rtol, t.atol * 10));
    // dweight and dbias sum 512 rows: an absolute floor of that size.
    EXPECT_TRUE(test::all_close(w.grad(), r.dw, t.rtol, t.atol * 100));
    EXPECT_TRUE(test::all_close(b.grad(), r.db, t.rtol, t.atol * 100));
  }
}

TEST(NnGrad, ResultsDoNotDependOnThreadCount) {
  Tensor x64 = randn({256, 200}, DType::f64);
  Tensor w64 = randn({200}, DType::f64);
  Tensor t = randint(0, 200, {256});
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor x = leaf(x64, DType::f32), w = leaf(w64, DType::f32);
    Tensor loss = cross_entropy(layer_norm(x, {200}, w), t);
    loss.backward();
    return std::vector<std::vector<float>>{loss.to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>()};
  };
  const int before = omp_get_max_threads();
  auto one = run(1), two = run(2), three = run(3);
  omp_set_num_threads(before);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
}

TEST(NnGrad, LayerNormDoubleBackwardThrows) {
  Tensor x = randn({3, 4}, DType::f64).requires_grad_();
  Tensor w = randn({4}, DType::f64).requires_grad_();
  TensorList g = autograd::grad({layer_norm(x, {4}, w)}, {x, w}, {ones({3, 4}, DType::f64)}, true, true);
  EXPECT_THROW(g[0].backward(ones({3, 4}, DType::f64)), NotImplementedError);
  EXPECT_THROW(g[1].backward(ones({4}, DType::f64)), NotImplementedError);
}

// ---------------------------------------------------------------- CUDA against the CPU path
//
// The fused backward kernels reached through autograd on both devices, from the same
// (rounded) leaves and output gradients. Tolerances relative with an absolute floor of the
// same size times the largest |expected| value: f64 1e-12, f32 1e-5, f16 2e-3, bf16 1.6e-2.

namespace {

using test::cuda_rtol;

::testing::AssertionResult grad_close(const Tensor& cuda_grad, const Tensor& cpu_grad, double rtol) {
  if (!cuda_grad.defined() || !cpu_grad.defined()) return ::testing::AssertionFailure() << "no gradient";
  double scale = 0;
  for (double v : cpu_grad.to_vector<double>())
    if (std::isfinite(v)) scale = std::max(scale, std::fabs(v));
  return test::all_close(cuda_grad.to(Device::cpu()), cpu_grad, rtol, rtol * scale);
}

}  // namespace

TEST(NnGradCuda, FusedGradientsMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device gpu = Device::cuda(0);
  const int64_t n = 67, c = 1025;
  Tensor x64 = randn({n, c}, DType::f64).mul(2.0);
  Tensor w64 = randn({c}, DType::f64), b64 = randn({c}, DType::f64);
  Tensor g64 = randn({n, c}, DType::f64);
  std::vector<int64_t> tv = randint(0, c, {n}).to_vector<int64_t>();
  tv[3] = -100;
  Tensor t = tensor<int64_t>(tv, {n});
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    // f(x, w, b) -> a scalar loss built around one fused op; gradients of x (and w, b).
    auto grads = [&](Device dev, int which) {
      Tensor x = x64.to(dev, dt).detach().requires_grad_();
      Tensor w = w64.to(dev, dt).detach().requires_grad_();
      Tensor b = b64.to(dev, dt).detach().requires_grad_();
      Tensor g = g64.to(dev, dt);
      switch (which) {
        case 0: softmax(x, 1).backward(g); break;
        case 1: log_softmax(x, 1).backward(g); break;
        case 2: softmax(x, 0).backward(g); break;
        case 3: log_softmax(x.t(), 1).backward(g.t()); break;  // strided rows
        case 4: cross_entropy(x, t.to(dev), {.label_smoothing = 0.1}).backward(); break;
        case 5: cross_entropy(x, t.to(dev), {.reduction = Reduction::none}).backward(g.select(1, 0)); break;
        default: layer_norm(x, {c}, w, b).backward(g); break;
      }
      return TensorList{x.grad(), w.grad(), b.grad()};
    };
    for (int which = 0; which < 7; ++which) {
      SCOPED_TRACE(str(dtype_name(dt), " case ", which));
      TensorList on_gpu = grads(gpu, which), on_cpu = grads(Device::cpu(), which);
      EXPECT_TRUE(grad_close(on_gpu[0], on_cpu[0], cuda_rtol(dt)));
      if (which == 6) {
        EXPECT_TRUE(grad_close(on_gpu[1], on_cpu[1], cuda_rtol(dt)));
        EXPECT_TRUE(grad_close(on_gpu[2], on_cpu[2], cuda_rtol(dt)));
      }
    }
  }
}
