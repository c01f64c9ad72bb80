// Option checks for the example and benchmark programs, with messages a user can act on.
// CLI11 2.1's own PositiveNumber answers `--eval-every 0` with "Value 0 not in range 0.000000
// to 179769313486231570814527423731704356798070567525844996598917476803157260780028538760589..."
// (its range is [0, DBL_MAX] with the bound printed in full) and lets NaN through (NaN <= 0 is
// false). These keep its names in the help text (INT:POSITIVE) and say what the option needs.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
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
// For weight decay, a final lr, a temperature: also refuses inf.
inline const CLI::Validator FiniteNonNegativeNumber =
    detail::number_check([](double v) { return std::isfinite(v) && v >= 0; }, "zero or a finite positive number",
                         "NONNEGATIVE");

// A whole number from lo to hi: `--epochs 0` reads "--epochs: must be at least 1, not 0" (with lo
// 0, `--eval-every -1` "must be zero or a positive number, not -1"), `--steps 1.5` "--steps: must
// be a whole number from 1 to 1099511627776, not 1.5". The upper bound refuses what CLI11 would
// saturate to INT64_MAX (99999999999999999999) or what would overflow the program's arithmetic
// (epochs x steps per epoch). Checked on the text, so "abc" gets this message too.
inline CLI::Validator WholeNumberIn(int64_t lo, int64_t hi) {
  const std::string range = std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, range](const std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (end == text.c_str() || *end != '\0') return "must be a whole number from " + range + ", not " + text;
        if (errno == ERANGE ? v < 0 : v < lo)
          return (lo == 0 ? std::string("must be zero or a positive number")
                          : "must be at least " + std::to_string(lo)) + ", not " + text;
        if (errno == ERANGE || v > hi) return "must be at most " + std::to_string(hi) + ", not " + text;
        return std::string();
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}
// The bound of counts (steps, sizes, intervals) that have no smaller natural one: 2^40.
inline constexpr int64_t kMaxCount = int64_t(1) << 40;

// A finite number from lo to hi: `--top-p nan` reads "--top-p: must be a number from 0 to 1, not
// nan" (CLI11's Range lets NaN through: NaN < lo and NaN > hi are both false).
inline CLI::Validator NumberIn(double lo, double hi) {
  char range[64];
  std::snprintf(range, sizeof range, "%g to %g", lo, hi);
  return CLI::Validator(
      [lo, hi, r = std::string(range)](const std::string& text) -> std::string {
        const double v = detail::number_of(text);
        return std::isfinite(v) && v >= lo && v <= hi ? std::string()
                                                      : "must be a number from " + r + ", not " + text;
      },
      std::string("FLOAT in [") + range + "]");
}

// A seed: a whole number from 0 to 2^64-1. CLI11 takes `--seed -1` as 2^64-1 and saturates
// 99999999999999999999999; both are refused here.
inline const CLI::Validator Seed = CLI::Validator(
    [](const std::string& text) -> std::string {
      char* end = nullptr;
      errno = 0;
      std::strtoull(text.c_str(), &end, 10);
      const bool ok = end != text.c_str() && *end == '\0' && errno != ERANGE &&
                      text.find('-') == std::string::npos;
      return ok ? std::string() : "must be a whole number from 0 to 18446744073709551615, not " + text;
    },
    "SEED");

// Parses the flags. Returns nothing when the program goes on; otherwise its exit code: 0 after
// --help, 2 (a usage error) for a bad flag, reported in one line "program: --flag: what it needs"
// (CLI11_PARSE prints two lines and exits with CLI11's own codes, 104 to 114). A flag missing its
// value reads "--batch-size needs a value", not "--batch-size: 1 required INT:INT in [...] missing".
inline std::optional<int> parse_flags(const char* program, CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --help-all, --version
    std::string what = e.what();
    const size_t colon = what.find(": ");
    if (e.get_name() == "ArgumentMismatch" && colon != std::string::npos &&
        what.find(" required ", colon) != std::string::npos && what.size() > 8 &&
        what.compare(what.size() - 8, 8, " missing") == 0)
      what = what.substr(0, colon) + " needs a value";
    std::fprintf(stderr, "%s: %s (see %s --help)\n", program, what.c_str(), program);
    return 2;
  }
}

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
