// Private to ops/: the class-index target dtypes the losses taking targets (cross_entropy,
// linear_cross_entropy) accept, visited the same way by their CPU and CUDA drivers.
#pragma once

#include <cstdint>

#include "ember/dtype.h"
#include "ember/error.h"

namespace ember::ops {

// f(T{}) with T the C++ type of target dtype t (i64, i32 or u8); any other dtype is a
// DTypeError naming `op`.
template <class F>
void visit_target(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::u8: return f(uint8_t{});
    default: throw DTypeError(str("[", op, "] unsupported target dtype ", t));
  }
}

// Throws IndexError unless target t, at position i, is a class index or ignore_index: one message
// for every loss that takes class targets (core/cuda/device_checks.cpp words a CUDA fault of kind
// target_out_of_bounds the same way).
inline void check_class_target(const char* op, int64_t t, int64_t i, int64_t classes, int64_t ignore_index) {
  EMBER_CHECK(t == ignore_index || (t >= 0 && t < classes), IndexError, "[", op, "] target ", t, " at position ", i,
              " is out of bounds for ", classes, " classes (expected 0 <= target < ", classes, ", or ignore_index ",
              ignore_index, ")");
}

}  // namespace ember::ops
