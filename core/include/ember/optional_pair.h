// OptionalPair<T>: an optional (height, width) pair of an options struct, set the ways a porter
// writes PyTorch's `size=(8, 11)`, `size=8` or `size=None`:
//
//   F::interpolate(x, {.size = {8, 11}});       // a plain brace list
//   F::interpolate(x, {.scale_factor = 2.0});   // one number for both
//   nn::MaxPool2d(3, {2, 1});                    // a positional stride
//
// std::optional<std::array<T, 2>> refuses the first spelling: `{8, 11}` is two constructor
// arguments, and optional has no two-argument constructor, so only `{{8, 11}}` compiled.
// Reading is std::optional's (has_value(), *, ->, value_or).
#pragma once

#include <array>
#include <optional>

namespace ember {

template <class T>
class OptionalPair : public std::optional<std::array<T, 2>> {
  using Base = std::optional<std::array<T, 2>>;

 public:
  OptionalPair() = default;
  OptionalPair(std::nullopt_t) {}
  // Non-template, so a brace list is checked for narrowing: {.size = {1.5, 2}} does not compile.
  OptionalPair(T first, T second) : Base(std::array<T, 2>{first, second}) {}
  OptionalPair(T both) : Base(std::array<T, 2>{both, both}) {}
  OptionalPair(const std::array<T, 2>& pair) : Base(pair) {}
};

}  // namespace ember
