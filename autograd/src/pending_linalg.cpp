// TEMPORARY: placeholders until matmul/conv land (delete this file then).
#include "ember/functions.h"
namespace ember {
Tensor matmul(const Tensor&, const Tensor&) { throw NotImplementedError("pending"); }
Tensor linear(const Tensor&, const Tensor&, const Tensor&) { throw NotImplementedError("pending"); }
Tensor conv2d(const Tensor&, const Tensor&, const Tensor&, std::array<int64_t, 2>, std::array<int64_t, 2>, std::array<int64_t, 2>, int64_t) { throw NotImplementedError("pending"); }
Tensor max_pool2d(const Tensor&, std::array<int64_t, 2>, std::array<int64_t, 2>, std::array<int64_t, 2>) { throw NotImplementedError("pending"); }
}
