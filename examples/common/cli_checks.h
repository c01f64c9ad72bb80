// Option checks for the example and benchmark programs, with messages a user can act on.
// CLI11 2.1's own PositiveNumber answers `--eval-every 0` with "Value 0 not in range 0.000000
// to 179769313486231570814527423731704356798070567525844996598917476803157260780028538760589..."
// (its range is [0, DBL_MAX] with the bound printed in full) and lets NaN through (NaN <= 0 is
// false). These keep its names in the help text (INT:POSITIVE) and say what the option needs.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>
#include <ember/error.h>

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

// A program's last line: any exception leaving `body` (ember's, std::filesystem's, bad_alloc)
// ends it with exit code 1 and one message "program: what", never with std::terminate's SIGABRT.
template <class F>
int exit_code_of(const char* program, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: stopped by an exception of unknown type\n", program);
  }
  return 1;
}

// Makes `path`, the folder an output flag names, and checks that the program can write there,
// before any training is spent: a file in its place, a folder that cannot be made (under /proc,
// a missing permission) or written is an IOError naming the flag.
inline void prepare_output_folder(const char* program, const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto fail = [&](const std::string& why) {
    throw IOError(str("[", program, "] ", flag, " ", path, ": ", why));
  };
  if (fs::exists(path, ec) && !fs::is_directory(path, ec)) fail("exists and is not a folder");
  fs::create_directories(path, ec);
  if (ec) fail("cannot create the folder (" + ec.message() + ")");
  const std::string probe = path + "/.ember-write-probe-" + std::to_string(::getpid());
  bool writable = false;
  {
    std::ofstream f(probe, std::ios::binary | std::ios::trunc);
    writable = f.good() && (f << 'x').good();
  }
  fs::remove(probe, ec);
  if (!writable) fail("cannot write in the folder");
}

// The same for a file an output flag names (--export-onnx FILE): its folder is made and checked
// as above; a folder in the file's place is an IOError naming the flag.
inline void prepare_output_file(const char* program, const char* flag, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw IOError(str("[", program, "] ", flag, " ", path, ": is a folder, not a file"));
  const fs::path parent = fs::path(path).parent_path();
  prepare_output_folder(program, flag, parent.empty() ? "." : parent.string());
}

// A training run's folders, checked before it starts: the metrics folder (--out, else
// --checkpoint, else `fallback`), which it returns, made where this rank writes metrics, and the
// checkpoint folder, made on every rank (each may write its pieces there).
inline std::string prepare_run_folders(const char* program, const std::string& out, const std::string& checkpoint,
                                       const std::string& fallback, bool writes_metrics) {
  const std::string metrics = !out.empty() ? out : !checkpoint.empty() ? checkpoint : fallback;
  if (writes_metrics) prepare_output_folder(program, out.empty() && !checkpoint.empty() ? "--checkpoint" : "--out", metrics);
  if (!checkpoint.empty()) prepare_output_folder(program, "--checkpoint", checkpoint);
  return metrics;
}

}  // namespace ember::examples
