// LibTorch-style indexing: x.index({0, Slice(1, None, 2), None, Ellipsis, mask}) and
// x.index_put_({...}, values), with `using namespace ember::indexing`.
//
// Semantics are PyTorch's (Note [indexing semantics], autograd/src/indexing.cpp):
// - an integer selects (the dim goes away), a Slice narrows with a step, None inserts a dim of
//   size 1, Ellipsis stands for as many full slices as the other indices leave; all of these
//   give views of x;
// - a bool tensor is a mask over as many dims as it has (the same as indexing with the columns
//   of nonzero(mask)), an integer tensor (i64/i32) picks elements; these "advanced" indices
//   broadcast together, and the result gathers a copy. When the advanced indices are adjacent
//   their broadcast shape takes their place in the result; otherwise it goes first (NumPy's
//   rule; integers count as selects, not as advanced indices, as in PyTorch);
// - a bool (true/false) inserts a dim of size 1 or 0, as PyTorch does.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>

#include "ember/tensor.h"

namespace ember::indexing {

struct NoneType {
  constexpr NoneType() = default;
};
struct EllipsisType {
  constexpr EllipsisType() = default;
};
inline constexpr NoneType None{};
inline constexpr EllipsisType Ellipsis{};

// A slice bound: an integer or None (absent).
class SliceBound {
 public:
  constexpr SliceBound() = default;
  constexpr SliceBound(NoneType) {}
  template <class T>
    requires(std::integral<T> && !std::same_as<T, bool>)
  constexpr SliceBound(T v) : value_(int64_t(v)) {}
  constexpr const std::optional<int64_t>& value() const { return value_; }

 private:
  std::optional<int64_t> value_;
};

// Slice(start, stop, step) as Python's start:stop:step; negative start/stop count from the
// end, out-of-range bounds clamp. The step must be positive (as in PyTorch).
class Slice {
 public:
  constexpr Slice(SliceBound start = {}, SliceBound stop = {}, SliceBound step = {})
      : start_(start.value()), stop_(stop.value()), step_(step.value()) {}
  constexpr const std::optional<int64_t>& start() const { return start_; }
  constexpr const std::optional<int64_t>& stop() const { return stop_; }
  constexpr const std::optional<int64_t>& step() const { return step_; }

 private:
  std::optional<int64_t> start_, stop_, step_;
};

// One entry of an index list.
class TensorIndex {
 public:
  enum class Kind : uint8_t { none, ellipsis, integer, boolean, slice, tensor };
  TensorIndex(NoneType) : kind_(Kind::none) {}
  TensorIndex(EllipsisType) : kind_(Kind::ellipsis) {}
  template <class T>
    requires(std::integral<T> && !std::same_as<T, bool>)
  TensorIndex(T v) : kind_(Kind::integer), integer_(int64_t(v)) {}
  TensorIndex(bool b) : kind_(Kind::boolean), integer_(b) {}
  TensorIndex(Slice s) : kind_(Kind::slice), slice_(s) {}
  TensorIndex(Tensor t) : kind_(Kind::tensor), tensor_(std::move(t)) {}

  Kind kind() const { return kind_; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_ellipsis() const { return kind_ == Kind::ellipsis; }
  bool is_integer() const { return kind_ == Kind::integer; }
  bool is_boolean() const { return kind_ == Kind::boolean; }
  bool is_slice() const { return kind_ == Kind::slice; }
  bool is_tensor() const { return kind_ == Kind::tensor; }
  int64_t integer() const { return integer_; }
  bool boolean() const { return integer_ != 0; }
  const Slice& slice() const { return slice_; }
  const Tensor& tensor() const { return tensor_; }

 private:
  Kind kind_;
  int64_t integer_ = 0;
  Slice slice_;
  Tensor tensor_;
};

}  // namespace ember::indexing
