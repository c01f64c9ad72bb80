// Differentiable rotary position embeddings (Llama's RoPE, Hugging Face's rotate_half form:
// ember/ops/rope.h has the formula) and the cos/sin tables they read.
//
// The rotation is linear in x and orthogonal, so its VJP is the inverse rotation of the
// gradient: the same kernel with sin negated. That VJP is itself recorded as a rotation, so
// double backward works. cos and sin are constants (position tables, never parameters): no
// gradient flows to them, and a table that requires grad is refused rather than silently
// left without one.
//
// Autocast: no row; the op runs in x's dtype (cos/sin f32 tables serve 16-bit x as they are).
#include <cmath>
#include <utility>
#include <vector>

#include "ember/autograd/function.h"
#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/ops/rope.h"

namespace ember {

using autograd::record;
using autograd::save;

namespace {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, bool inverse) {
  Tensor y = ops::rotary_embedding(x, cos, sin, inverse);
  return record(inverse ? "rotary_embedding_backward" : "rotary_embedding", y, {x},
                [c = save(cos), s = save(sin), inverse](const Tensor& g) -> TensorList {
                  return {rope(g, c, s, !inverse)};
                });
}

}  // namespace

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const char* op = "rotary_embedding";
  ember::detail::check_defined(op, x);
  ember::detail::check_defined(op, cos, "cos");
  ember::detail::check_defined(op, sin, "sin");
  EMBER_CHECK(!GradMode::is_enabled() || (!cos.requires_grad() && !sin.requires_grad()),
              NotImplementedError, "[", op, "] no gradient flows to cos and sin (they are "
              "constant position tables); pass them detached (cos.detach(), sin.detach())");
  Tensor y = rope(x, cos, sin, false);
  EMBER_TRACE(y, "rotary_embedding", {x, cos, sin});
  return y;
}

std::pair<Tensor, Tensor> rope_cos_sin(int64_t max_positions, int64_t head_dim, double theta,
                                       TensorOptions options) {
  const char* op = "rope_cos_sin";
  EMBER_CHECK(max_positions >= 0, ValueError, "[", op, "] max_positions must be >= 0, got ",
              max_positions);
  EMBER_CHECK(head_dim > 0 && head_dim % 2 == 0, ValueError, "[", op,
              "] head_dim must be positive and even, got ", head_dim);
  EMBER_CHECK(theta > 0 && std::isfinite(theta), ValueError, "[", op,
              "] theta must be positive and finite, got ", theta);
  EMBER_CHECK(is_floating(options.dtype_), DTypeError, "[", op,
              "] expects a floating-point dtype, got ", options.dtype_);
  const int64_t half = head_dim / 2;
  std::vector<double> inv_freq(size_t(half), 0.0);
  for (int64_t i = 0; i < half; ++i)
    inv_freq[size_t(i)] = std::pow(theta, -double(2 * i) / double(head_dim));
  std::vector<double> c(size_t(max_positions * half)), s(c.size());
  for (int64_t t = 0; t < max_positions; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double a = double(t) * inv_freq[size_t(i)];
      c[size_t(t * half + i)] = std::cos(a);
      s[size_t(t * half + i)] = std::sin(a);
    }
  const Shape shape{max_positions, half};
  auto finish = [&](const std::vector<double>& v) {
    Tensor t = tensor<double>(v, shape).to(options.device_, options.dtype_);
    return options.requires_grad_ ? t.requires_grad_(true) : t;
  };
  return {finish(c), finish(s)};
}

}  // namespace ember
