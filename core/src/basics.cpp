// Formatting and small helpers for DType, Device, Shape and errors.
#include <charconv>
#include <cstdio>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/error.h"
#include "ember/grad_mode.h"
#include "ember/macros.h"
#include "ember/random.h"
#include "ember/shape.h"

namespace ember {

namespace detail {
void str_append(std::string& s, double v) {
  char buf[32];
  int n = std::snprintf(buf, sizeof buf, "%g", v);
  s.append(buf, size_t(n));
}
}  // namespace detail

void str_append(std::string& s, const Shape& shape) {
  s.push_back('[');
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s.append(", ");
    s.append(std::to_string(shape[i]));
  }
  s.push_back(']');
}
int64_t Shape::numel_overflowed() const {
  for (int64_t d : *this)
    if (d == 0) return 0;
  throw ShapeError(str("[numel] the shape ", *this, " has more than 2^63 elements"));
}

namespace detail {
void throw_bad_device_index(DeviceType type, int index) {
  throw ValueError(str("[Device] index ", index, " is out of range for ",
                       type == DeviceType::CPU ? "cpu" : "cuda", ": device indices are 0..",
                       Device::kMaxIndex));
}
}  // namespace detail

void str_append(std::string& s, DType t) { s.append(dtype_name(t)); }
void str_append(std::string& s, Device d) { s.append(d.str()); }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::b8: return "bool";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "?";
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::b8: return 0;
      case DType::u8: return 1;
      case DType::i32: return 2;
      case DType::i64: return 3;
      case DType::f16: case DType::bf16: return 4;
      case DType::f32: return 5;
      case DType::f64: return 6;
    }
    return 0;
  };
  int ra = rank(a), rb = rank(b);
  if (ra == 4 && rb == 4) return DType::f32;  // f16 + bf16 have no common 16-bit type
  return ra > rb ? a : b;
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(int(index));
}

Device Device::parse(const std::string& s) {
  if (s == "cpu") return cpu();
  if (s == "cuda") return cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    int idx = -1;
    auto r = std::from_chars(s.data() + 5, s.data() + s.size(), idx);
    if (r.ec == std::errc() && r.ptr == s.data() + s.size() && idx >= 0 && idx < 128)
      return cuda(idx);
  }
  throw ValueError(ember::str("[Device] cannot parse '", s, "': expected cpu, cuda or cuda:N"));
}

Shape contiguous_strides(const Shape& sizes) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    // Only an empty tensor (numel() refuses the rest) can overflow here, and its strides
    // address nothing: saturate instead of overflowing.
    if (__builtin_mul_overflow(s, std::max<int64_t>(sizes[i], 1), &s)) s = INT64_MAX;
  }
  return strides;
}

Shape channels_last_strides(const Shape& sizes) {
  EMBER_CHECK(sizes.size() == 4, ShapeError, "[channels_last] needs a 4-D [N, C, H, W] shape, got ", sizes);
  const int64_t C = sizes[1], H = sizes[2], W = sizes[3];
  // Size-0 dims count as 1 so the strides stay positive, as contiguous_strides' do.
  const int64_t c = std::max<int64_t>(C, 1), w = std::max<int64_t>(W, 1), h = std::max<int64_t>(H, 1);
  return Shape{h * w * c, 1, w * c, c};
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(da == db || da == 1 || db == 1, ShapeError, "[", op, "] shapes ", a, " and ", b,
                " cannot be broadcast together (dim ", int64_t(i), ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = std::max<int64_t>(ndim, 1);  // a 0-d tensor accepts dim 0 and -1
  EMBER_CHECK(dim >= -n && dim < n, IndexError, "[", op, "] dim ", dim,
              " is out of range for a tensor with ", ndim, " dims");
  return dim < 0 ? dim + n : dim;
}

namespace {
EMBER_HOT_TLS thread_local bool grad_mode_enabled = true;
}
bool GradMode::is_enabled() { return grad_mode_enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_enabled = enabled; }

Generator& default_generator(Device device) {
  static Generator cpu_generator;
  static Generator cuda_generators[16];
  if (device.is_cpu()) return cpu_generator;
  EMBER_CHECK(device.index >= 0 && device.index < 16, DeviceError, "[default_generator] device ",
              device, " is out of range");
  return cuda_generators[device.index];
}

void manual_seed(uint64_t seed) {
  default_generator(Device::cpu()).manual_seed(seed);
  for (int i = 0; i < 16; ++i) default_generator(Device::cuda(i)).manual_seed(seed);
}

}  // namespace ember
