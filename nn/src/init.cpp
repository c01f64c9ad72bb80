// Every initializer draws on the CPU in f64 from the generator and copies into the tensor
// (any device, any dtype), so the values depend only on the seed and the shape.
#include "ember/nn/init.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::nn::init {
namespace detail {
double erfinv(double y);
std::vector<double> householder_q(std::vector<double> a, int64_t m, int64_t n);
}  // namespace detail

namespace {

Tensor& assign(Tensor& t, const Tensor& values) {
  NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

void check(const char* op, const Tensor& t) {
  EMBER_CHECK(t.defined(), ValueError, "[", op, "] tensor is undefined");
  EMBER_CHECK(t.is_floating_point(), DTypeError, "[", op, "] needs a floating-point tensor, got ",
              t.dtype());
}

const TensorOptions kHostF64 = TensorOptions(DType::f64);

double fan(const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return double(mode == FanMode::fan_in ? fan_in : fan_out);
}

}  // namespace

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.dim() >= 2, ShapeError,
              "[init] fan in and fan out need a tensor with at least 2 dims, got ", t.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::sigmoid:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::conv_transpose1d:
    case Nonlinearity::conv_transpose2d:
    case Nonlinearity::conv_transpose3d: return 1.0;
    case Nonlinearity::selu: return 3.0 / 4.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

namespace {
thread_local bool skip_init = false;
}  // namespace

SkipInitGuard::SkipInitGuard() : previous_(skip_init) { skip_init = true; }
SkipInitGuard::~SkipInitGuard() { skip_init = previous_; }
bool init_skipped() { return skip_init; }

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check("uniform_", t);
  EMBER_CHECK(low <= high, ValueError, "[uniform_] low ", low, " is above high ", high);
  if (skip_init) return t;
  return assign(t, rand(t.sizes(), kHostF64, gen) * (high - low) + low);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check("normal_", t);
  EMBER_CHECK(std >= 0, ValueError, "[normal_] std must be >= 0, got ", std);
  if (skip_init) return t;
  return assign(t, randn(t.sizes(), kHostF64, gen) * std + mean);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check("trunc_normal_", t);
  EMBER_CHECK(a < b && std > 0, ValueError, "[trunc_normal_] needs a < b and std > 0, got a=", a,
              " b=", b, " std=", std);
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std), u = cdf((b - mean) / std);
  EMBER_CHECK(u > l, ValueError, "[trunc_normal_] [", a, ", ", b, "] holds no mass of N(", mean, ", ",
              std, ") in double precision");
  if (skip_init) return t;
  std::vector<double> v = rand(t.sizes(), kHostF64, gen).to_vector<double>();
  for (double& x : v) {
    const double y = (2 * l - 1) + x * ((2 * u - 1) - (2 * l - 1));
    x = std::clamp(mean + std * std::sqrt(2.0) * detail::erfinv(y), a, b);
  }
  return assign(t, tensor(v, t.sizes(), kHostF64));
}

Tensor& constant_(Tensor& t, double value) {
  EMBER_CHECK(t.defined(), ValueError, "[constant_] tensor is undefined");
  if (skip_init) return t;
  NoGradGuard no_grad;
  t.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  check("kaiming_uniform_", t);
  const double bound = calculate_gain(nonlinearity, a) * std::sqrt(3.0 / fan(t, mode));
  return uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity, Generator* gen) {
  check("kaiming_normal_", t);
  return normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(fan(t, mode)), gen);
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  check("xavier_uniform_", t);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / double(fan_in + fan_out));
  return uniform_(t, -bound, bound, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  check("xavier_normal_", t);
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)), gen);
}

Tensor& orthogonal_(Tensor& t, double gain, Generator* gen) {
  check("orthogonal_", t);
  EMBER_CHECK(t.dim() >= 2, ShapeError, "[orthogonal_] only tensors with 2 or more dims are supported, got ",
              t.sizes());
  if (t.numel() == 0 || skip_init) return t;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  // Factor the tall orientation (m >= n); a wide matrix is transposed before and after.
  const bool wide = rows < cols;
  const int64_t m = wide ? cols : rows, n = wide ? rows : cols;
  std::vector<double> a = randn({m, n}, kHostF64, gen).to_vector<double>();  // row-major [m, n]
  std::vector<double> q = detail::householder_q(a, m, n);
  std::vector<double> out(size_t(rows * cols));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double v = gain * q[size_t(i * n + j)];
      if (wide) out[size_t(j * cols + i)] = v;
      else out[size_t(i * cols + j)] = v;
    }
  return assign(t, tensor(out, t.sizes(), kHostF64));
}

namespace detail {

double erfinv(double y) {
  if (y <= -1) return y == -1 ? -std::numeric_limits<double>::infinity() : std::nan("");
  if (y >= 1) return y == 1 ? std::numeric_limits<double>::infinity() : std::nan("");
  // Giles' single-precision approximation, then Newton steps on erf(x) = y to full f64.
  const double w = -std::log((1.0 - y) * (1.0 + y));
  double x;
  if (w < 5.0) {
    const double v = w - 2.5;
    double p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * v;
    x = p * y;
  } else {
    const double v = std::sqrt(w) - 3.0;
    double p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = c + p * v;
    x = p * y;
  }
  const double two_over_sqrt_pi = 2.0 / std::sqrt(std::numbers::pi);
  for (int it = 0; it < 3; ++it) {
    const double err = std::erf(x) - y;
    const double deriv = two_over_sqrt_pi * std::exp(-x * x);
    if (deriv == 0) break;
    x -= err / deriv;
  }
  return x;
}

std::vector<double> householder_q(std::vector<double> a, int64_t m, int64_t n) {
  // a: row-major [m, n], m >= n. Reflections H_k = I - 2 v v^T / (v^T v) zero column k below
  // the diagonal; R's diagonal is -sign(a_kk) * |x|. Q = H_0 ... H_{n-1} [I_n; 0], and
  // column k of Q is multiplied by sign(R_kk) (torch's q * sign(diag(r))).
  std::vector<std::vector<double>> vs(static_cast<size_t>(n));
  std::vector<double> sign_r(size_t(n), 1.0);
  auto at = [&](int64_t i, int64_t j) -> double& { return a[size_t(i * n + j)]; };
  for (int64_t k = 0; k < n; ++k) {
    double norm = 0;
    for (int64_t i = k; i < m; ++i) norm += at(i, k) * at(i, k);
    norm = std::sqrt(norm);
    std::vector<double> v(size_t(m - k));
    for (int64_t i = k; i < m; ++i) v[size_t(i - k)] = at(i, k);
    const double alpha = at(k, k) >= 0 ? -norm : norm;  // R_kk
    sign_r[size_t(k)] = alpha > 0 ? 1.0 : (alpha < 0 ? -1.0 : 0.0);
    v[0] -= alpha;
    double vv = 0;
    for (double x : v) vv += x * x;
    if (vv > 0)
      for (int64_t j = k; j < n; ++j) {
        double dot = 0;
        for (int64_t i = k; i < m; ++i) dot += v[size_t(i - k)] * at(i, j);
        const double f = 2 * dot / vv;
        for (int64_t i = k; i < m; ++i) at(i, j) -= f * v[size_t(i - k)];
      }
    vs[size_t(k)] = std::move(v);
  }
  std::vector<double> q(size_t(m * n), 0.0);
  for (int64_t k = 0; k < n; ++k) q[size_t(k * n + k)] = 1.0;
  for (int64_t k = n - 1; k >= 0; --k) {
    const std::vector<double>& v = vs[size_t(k)];
    double vv = 0;
    for (double x : v) vv += x * x;
    if (vv == 0) continue;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t i = k; i < m; ++i) dot += v[size_t(i - k)] * q[size_t(i * n + j)];
      const double f = 2 * dot / vv;
      for (int64_t i = k; i < m; ++i) q[size_t(i * n + j)] -= f * v[size_t(i - k)];
    }
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) q[size_t(i * n + j)] *= sign_r[size_t(j)];
  return q;
}

}  // namespace detail

}  // namespace ember::nn::init
