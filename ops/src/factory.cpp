#include "ember/factory.h"
#include "ember/trace.h"

#include <cmath>
#include <cstring>

#include "ember/cuda.h"
#include "ember/ops/elementwise.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"

namespace ember {

namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}
Tensor alloc(const Shape& shape, const TensorOptions& o, const char* op) {
  cuda::detail::check_device(op, o.device_);
  return detail::make_tensor(shape, o.dtype_, o.device_);
}
Generator& pick(Generator* gen, Device d) { return gen ? *gen : default_generator(d); }
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) { return finish(alloc(shape, o, "empty"), o); }

static Tensor filled(const char* op, const Shape& shape, Scalar value, const TensorOptions& o) {
  Tensor t = alloc(shape, o, op);
  ops::fill_(t, value);
  t = finish(t, o);
  // Traced (Note [tracing]): a fill sized by the input (zeros(x.sizes())) follows its sizes.
  EMBER_TRACE(t, "full", {}, {{"shape", shape}, {"value", value.to_double()}});
  return t;
}
Tensor full(const Shape& shape, Scalar value, TensorOptions o) { return filled("full", shape, value, o); }
Tensor zeros(const Shape& shape, TensorOptions o) { return filled("zeros", shape, 0, o); }
Tensor ones(const Shape& shape, TensorOptions o) { return filled("ones", shape, 1, o); }

Tensor arange(Scalar end, std::optional<TensorOptions> o) { return arange(0, end, 1, o); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<TensorOptions> o) {
  const bool any_float = start.is_floating() || end.is_floating() || step.is_floating();
  TensorOptions opts = o.value_or(TensorOptions(any_float ? DType::f32 : DType::i64));
  const double a = start.to_double(), b = end.to_double(), s = step.to_double();
  EMBER_CHECK(s != 0, ValueError, "[arange] step must be nonzero");
  EMBER_CHECK((b - a) / s >= 0, ValueError, "[arange] range [", a, ", ", b,
              ") cannot be reached with step ", s);
  int64_t n = 0;
  if (any_float) {
    // Before the cast: ceil(1e300) or inf as int64 is undefined (it came out negative).
    const double count = std::ceil((b - a) / s);
    EMBER_CHECK(std::isfinite(count) && count < 0x1p63, ValueError, "[arange] range [", a, ", ", b,
                ") with step ", s, " has ", count, " elements, more than a tensor can hold");
    n = int64_t(count);
  } else {  // exact: f64 cannot hold every int64 bound (PyTorch subtracts in int64 too)
    const int64_t ia = start.to_int(), ib = end.to_int(), is = step.to_int();
    const int64_t span = is > 0 ? ib - ia : ia - ib, stride = is > 0 ? is : -is;
    n = span <= 0 ? 0 : span / stride + (span % stride != 0);
  }
  EMBER_CHECK(opts.dtype_ != DType::b8, DTypeError, "[arange] has no bool form");
  const ops::ArangeTerms terms{!any_float, any_float ? 0 : start.to_int(), any_float ? 0 : step.to_int(), a, s};
  Tensor t = alloc({n}, opts, "arange");
  EMBER_DISPATCH_KERNEL(t.device(), arange_kernel, t, terms);
  t = finish(t, opts);
  // Traced (Note [tracing]): a range whose bounds follow the input's sizes (positions 0 .. T)
  // is an ONNX Range over the input's runtime size.
  EMBER_TRACE(t, "arange", {}, {{"start", a}, {"end", b}, {"step", s}});
  return t;
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  EMBER_CHECK(steps >= 0, ValueError, "[linspace] steps must be non-negative, got ", steps);
  std::vector<double> v(static_cast<size_t>(steps));
  const double step = steps > 1 ? (end - start) / double(steps - 1) : 0;
  // Fill from both ends so the last value is exactly `end`, as PyTorch does.
  for (int64_t i = 0; i < steps; ++i)
    v[size_t(i)] = i < steps / 2 ? start + step * double(i) : end - step * double(steps - 1 - i);
  if (steps == 1) v[0] = start;  // a single step is the start, as in PyTorch
  return tensor(v, {steps}, o);
}

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  EMBER_CHECK(is_floating(o.dtype_), DTypeError, "[rand] needs a floating dtype, got ", o.dtype_);
  Tensor t = alloc(shape, o, "rand");
  auto s = pick(gen, o.device_).reserve(ops::random_counters(t.numel()));
  EMBER_DISPATCH_KERNEL(t.device(), uniform_kernel, t, s, 0.0, 1.0);  // [0, 1) in every dtype
  return finish(t, o);
}

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  EMBER_CHECK(is_floating(o.dtype_), DTypeError, "[randn] needs a floating dtype, got ", o.dtype_);
  Tensor t = alloc(shape, o, "randn");
  auto s = pick(gen, o.device_).reserve(ops::random_counters(t.numel()));
  EMBER_DISPATCH_KERNEL(t.device(), normal_kernel, t, s, 0.0, 1.0);
  return finish(t, o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions o, Generator* gen) {
  EMBER_CHECK(low < high, ValueError, "[randint] empty range [", low, ", ", high, ")");
  Tensor t = alloc(shape, o, "randint");
  auto s = pick(gen, o.device_).reserve(ops::random_counters(t.numel()));
  EMBER_DISPATCH_KERNEL(t.device(), randint_kernel, t, s, low, high);
  return finish(t, o);
}

Tensor randperm(int64_t n, Generator* gen) {
  EMBER_CHECK(n >= 0, ValueError, "[randperm] n must be non-negative, got ", n);
  // Fisher-Yates on the host with uniforms drawn from the generator.
  Tensor u = rand({n}, DType::f64, gen);
  std::vector<double> r = u.to_vector<double>();
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(p[size_t(i)], p[size_t(std::min<int64_t>(i, int64_t(r[size_t(i)] * double(i + 1))))]);
  return tensor(p, {n});
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, std::optional<TensorOptions> options) {
  EMBER_CHECK(int64_t(values.size()) == shape.numel(), ShapeError, "[tensor] ",
              uint64_t(values.size()), " values cannot fill shape ", shape);
  TensorOptions o = options.value_or(TensorOptions(dtype_v<T>));
  Tensor host = detail::make_tensor(shape, dtype_v<T>, Device::cpu());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  Tensor t = ops::to(host, o.device_, o.dtype_);
  if (t.is_same(host) && o.requires_grad_) t = t.detach();
  return finish(t, o);
}
template Tensor tensor(const std::vector<float>&, const Shape&, std::optional<TensorOptions>);
template Tensor tensor(const std::vector<double>&, const Shape&, std::optional<TensorOptions>);
template Tensor tensor(const std::vector<int64_t>&, const Shape&, std::optional<TensorOptions>);
template Tensor tensor(const std::vector<int32_t>&, const Shape&, std::optional<TensorOptions>);
template Tensor tensor(const std::vector<uint8_t>&, const Shape&, std::optional<TensorOptions>);

Tensor scalar_tensor(Scalar value, TensorOptions o) {
  cuda::detail::check_device("scalar_tensor", o.device_);
  return finish(ops::scalar_tensor(value, o.dtype_, o.device_), o);
}

static TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), like(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), like(t)); }
Tensor full_like(const Tensor& t, Scalar v) { return full(t.sizes(), v, like(t)); }
Tensor rand_like(const Tensor& t) { return rand(t.sizes(), like(t)); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), like(t)); }

}  // namespace ember
