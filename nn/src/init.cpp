// Every initializer draws on the CPU in f64 from the generator and copies into the tensor
// (any device, any dtype), so the values depend only on the seed and the shape.
#include "ember/nn/init.h"

#include <cmath>
#include <vector>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::nn::init {
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
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: return std::sqrt(2.0 / (1.0 + param * param));
  }
  return 1.0;
}

Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  check("uniform_", t);
  EMBER_CHECK(low <= high, ValueError, "[uniform_] low ", low, " is above high ", high);
  return assign(t, rand(t.sizes(), kHostF64, gen) * (high - low) + low);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  check("normal_", t);
  EMBER_CHECK(std >= 0, ValueError, "[normal_] std must be >= 0, got ", std);
  return assign(t, randn(t.sizes(), kHostF64, gen) * std + mean);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  check("trunc_normal_", t);
  EMBER_CHECK(a < b && std > 0, ValueError, "[trunc_normal_] needs a < b and std > 0, got a=", a,
              " b=", b, " std=", std);
  // Rejection sampling in blocks: the acceptance rate is P(a <= X <= b), so a window more
  // than ~6 std away from the mean would loop for a long time; refuse it.
  const double lo = (a - mean) / std, hi = (b - mean) / std;
  const double accept = 0.5 * (std::erf(hi / std::sqrt(2.0)) - std::erf(lo / std::sqrt(2.0)));
  EMBER_CHECK(accept > 1e-6, ValueError, "[trunc_normal_] [", a, ", ", b,
              "] holds almost no mass of N(", mean, ", ", std, ")");
  const int64_t n = t.numel();
  std::vector<double> out;
  out.reserve(size_t(n));
  while (int64_t(out.size()) < n) {
    const int64_t want = int64_t(double(n - int64_t(out.size())) / accept) + 16;
    for (double z : randn({want}, kHostF64, gen).to_vector<double>()) {
      const double v = mean + std * z;
      if (v >= a && v <= b && int64_t(out.size()) < n) out.push_back(v);
    }
  }
  return assign(t, tensor(out, t.sizes(), kHostF64));
}

Tensor& constant_(Tensor& t, double value) {
  EMBER_CHECK(t.defined(), ValueError, "[constant_] tensor is undefined");
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

}  // namespace ember::nn::init
