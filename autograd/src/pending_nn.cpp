// TEMPORARY: placeholders until softmax/cross_entropy/layer_norm land (delete this file then).
#include "ember/functions.h"
namespace ember {
Tensor softmax(const Tensor&, int64_t) { throw NotImplementedError("pending"); }
Tensor log_softmax(const Tensor&, int64_t) { throw NotImplementedError("pending"); }
Tensor cross_entropy(const Tensor&, const Tensor&, const CrossEntropyOptions&) { throw NotImplementedError("pending"); }
Tensor layer_norm(const Tensor&, const Shape&, const Tensor&, const Tensor&, double) { throw NotImplementedError("pending"); }
}
