// Scalar: a number passed to an op (fill value, alpha, clamp bound). It remembers whether it
// was written as a bool, an integer or a floating value, because PyTorch's promotion treats
// `int_tensor + 1` and `int_tensor + 1.5` differently.
#pragma once

#include <cstdint>
#include <type_traits>

#include "ember/dtype.h"

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Scalar(T v) : kind_(Kind::Int), i_(int64_t(v)) {}
  template <class T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : kind_(Kind::Float), d_(double(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return kind_ == Kind::Float ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? int64_t(d_) : i_; }
  // The dtype a PyTorch "wrapped number" of this kind has: f32 (the default float), i64, bool.
  DType default_dtype() const {
    return kind_ == Kind::Float ? DType::f32 : kind_ == Kind::Int ? DType::i64 : DType::b8;
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

}  // namespace ember
