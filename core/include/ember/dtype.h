// DType, the 16-bit float storage types, and PyTorch's type-promotion rules.
// Half and BFloat16 are plain 16-bit storage types usable on host and device: arithmetic
// converts to float (kernels compute in float and round once on store).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "ember/macros.h"

namespace ember {

enum class DType : uint8_t { b8, u8, i32, i64, f16, bf16, f32, f64 };
constexpr int kNumDTypes = 8;

namespace detail {
EMBER_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
EMBER_HD inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct alignas(2) Half {
  uint16_t bits = 0;
  Half() = default;
  EMBER_HD Half(float f) : bits(from_float(f)) {}
  EMBER_HD operator float() const { return to_float(bits); }

  // IEEE binary16 <-> binary32, round to nearest even, NaN and inf preserved.
  EMBER_HD static uint16_t from_float(float f) {
    uint32_t x = detail::float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {                                    // subnormal or zero in half
      // Add 0.5 (as a float) so the hardware rounds the mantissa for us, then take the bits.
      float v = detail::bits_float(abs) + 0.5f;
      return uint16_t(sign | (detail::float_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
    return uint16_t(sign | (abs >> 13));
  }
  EMBER_HD static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {  // zero or subnormal: value = mant * 2^-24
      float v = float(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

struct alignas(2) BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  EMBER_HD BFloat16(float f) : bits(from_float(f)) {}
  EMBER_HD operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  EMBER_HD static uint16_t from_float(float f) {
    uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);                                          // nearest even
    return uint16_t(x >> 16);
  }
};

constexpr size_t itemsize(DType t) {
  switch (t) {
    case DType::b8: case DType::u8: return 1;
    case DType::f16: case DType::bf16: return 2;
    case DType::i32: case DType::f32: return 4;
    case DType::i64: case DType::f64: return 8;
  }
  return 0;
}
constexpr bool is_floating(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::u8 || t == DType::i32 || t == DType::i64 || (include_bool && t == DType::b8);
}
const char* dtype_name(DType t);  // "f32", "bf16", ...

// PyTorch's promotion lattice: bool < u8 < i32 < i64 < {f16, bf16} < f32 < f64, f16+bf16 = f32.
DType promote_types(DType a, DType b);

// The C++ type of each DType, and back.
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

// Type in which kernels compute for a storage type: 16-bit floats compute in float.
template <class T> struct compute_type { using type = T; };
template <> struct compute_type<Half> { using type = float; };
template <> struct compute_type<BFloat16> { using type = float; };
template <class T> using compute_t = typename compute_type<T>::type;

// Calls f(T{}) with T the C++ type of `t`. Kernels use it once per family driver.
#define EMBER_DTYPE_CASE(enum_name, type) \
  case ::ember::DType::enum_name: return f(type{});
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    EMBER_DTYPE_CASE(b8, bool)
    EMBER_DTYPE_CASE(u8, uint8_t)
    EMBER_DTYPE_CASE(i32, int32_t)
    EMBER_DTYPE_CASE(i64, int64_t)
    EMBER_DTYPE_CASE(f16, Half)
    EMBER_DTYPE_CASE(bf16, BFloat16)
    EMBER_DTYPE_CASE(f32, float)
    EMBER_DTYPE_CASE(f64, double)
  }
  return f(float{});
}
// Floating types only; other dtypes are the caller's error to report.
template <class F>
decltype(auto) visit_floating(DType t, F&& f) {
  switch (t) {
    EMBER_DTYPE_CASE(f16, Half)
    EMBER_DTYPE_CASE(bf16, BFloat16)
    EMBER_DTYPE_CASE(f64, double)
    default: return f(float{});
  }
}
#undef EMBER_DTYPE_CASE

void str_append(std::string& s, DType t);

}  // namespace ember
