// TEMPORARY: placeholders until the indexing/joining family lands (delete this file then).
#include "ember/functions.h"
namespace ember {
Tensor embedding(const Tensor&, const Tensor&) { throw NotImplementedError("pending"); }
Tensor dropout(const Tensor&, double, bool) { throw NotImplementedError("pending"); }
Tensor cat(const TensorList&, int64_t) { throw NotImplementedError("pending"); }
Tensor stack(const TensorList&, int64_t) { throw NotImplementedError("pending"); }
TensorList split(const Tensor&, int64_t, int64_t) { throw NotImplementedError("pending"); }
TensorList split(const Tensor&, const std::vector<int64_t>&, int64_t) { throw NotImplementedError("pending"); }
TensorList chunk(const Tensor&, int64_t, int64_t) { throw NotImplementedError("pending"); }
Tensor index_select(const Tensor&, int64_t, const Tensor&) { throw NotImplementedError("pending"); }
Tensor gather(const Tensor&, int64_t, const Tensor&) { throw NotImplementedError("pending"); }
Tensor scatter_add(const Tensor&, int64_t, const Tensor&, const Tensor&) { throw NotImplementedError("pending"); }
Tensor tril(const Tensor&, int64_t) { throw NotImplementedError("pending"); }
Tensor triu(const Tensor&, int64_t) { throw NotImplementedError("pending"); }
}
