// ember's exception family. Every message begins with the op name in brackets and names the
// offending shapes, dtypes or devices: "[matmul] shapes [2, 3] and [4, 5] cannot be multiplied".
// Messages are built with ember::str(...), which formats shapes, dtypes and devices itself so
// that this header stays light (no <sstream>).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace ember {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ShapeError : public Error { using Error::Error; };
class DTypeError : public Error { using Error::Error; };
class DeviceError : public Error { using Error::Error; };
class IndexError : public Error { using Error::Error; };
class ValueError : public Error { using Error::Error; };
class IOError : public Error { using Error::Error; };
class OutOfMemoryError : public Error { using Error::Error; };
class AutogradError : public Error { using Error::Error; };
class NotImplementedError : public Error { using Error::Error; };

namespace detail {
inline void str_append(std::string& s, std::string_view v) { s.append(v); }
inline void str_append(std::string& s, const char* v) { s.append(v); }
inline void str_append(std::string& s, char v) { s.push_back(v); }
inline void str_append(std::string& s, bool v) { s.append(v ? "true" : "false"); }
void str_append(std::string& s, double v);
template <class T>
  requires std::is_integral_v<T>
inline void str_append(std::string& s, T v) { s.append(std::to_string(v)); }
// Types with their own formatting (Shape, DType, Device, Tensor) provide
// `void str_append(std::string&, const T&)` in namespace ember, found by ADL.
}  // namespace detail

template <class... Args>
std::string str(const Args&... args) {
  std::string s;
  using detail::str_append;
  (str_append(s, args), ...);
  return s;
}

}  // namespace ember

// EMBER_CHECK(cond, ErrorType, "[op] message parts", ...): throws ErrorType(str(parts...)).
#define EMBER_CHECK(cond, ErrorType, ...)                \
  do {                                                   \
    if (!(cond)) [[unlikely]] {                          \
      throw ::ember::ErrorType(::ember::str(__VA_ARGS__)); \
    }                                                    \
  } while (0)
