// Option checks for the example and benchmark programs, with messages a user can act on.
// CLI11 2.1's own PositiveNumber answers `--eval-every 0` with "Value 0 not in range 0.000000
// to 179769313486231570814527423731704356798070567525844996598917476803157260780028538760589..."
// (its range is [0, DBL_MAX] with the bound printed in full) and lets NaN through (NaN <= 0 is
// false). These keep its names in the help text (INT:POSITIVE) and say what the option needs.
#pragma once

#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

namespace ember::examples {

namespace detail {
// The number text reads as, or NaN when it is not one number (checks run on the text before
// CLI11 converts it, so "abc" is refused here, with this check's message).
inline double number_of(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0' ? v : NAN;
}
inline CLI::Validator number_check(bool (*ok)(double), const char* need, const char* name) {
  return CLI::Validator(
      [ok, need](const std::string& text) -> std::string {
        return ok(number_of(text)) ? std::string() : std::string("must be ") + need + ", not " + text;
      },
      name);
}
}  // namespace detail

inline const CLI::Validator PositiveNumber =
    detail::number_check([](double v) { return v > 0; }, "a positive number", "POSITIVE");
inline const CLI::Validator NonNegativeNumber =
    detail::number_check([](double v) { return v >= 0; }, "zero or a positive number", "NONNEGATIVE");
// For rates and scales: also refuses inf.
inline const CLI::Validator FinitePositiveNumber =
    detail::number_check([](double v) { return std::isfinite(v) && v > 0; }, "a finite positive number",
                         "POSITIVE");

}  // namespace ember::examples
