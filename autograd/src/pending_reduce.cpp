// TEMPORARY: placeholders until the reduce family lands (delete this file then).
#include "ember/functions.h"
namespace ember {
Tensor sum(const Tensor&, const Shape&, bool) { throw NotImplementedError("pending"); }
Tensor mean(const Tensor&, const Shape&, bool) { throw NotImplementedError("pending"); }
Tensor amax(const Tensor&, const Shape&, bool) { throw NotImplementedError("pending"); }
Tensor amin(const Tensor&, const Shape&, bool) { throw NotImplementedError("pending"); }
ValuesIndices max(const Tensor&, int64_t, bool) { throw NotImplementedError("pending"); }
ValuesIndices min(const Tensor&, int64_t, bool) { throw NotImplementedError("pending"); }
Tensor argmax(const Tensor&, std::optional<int64_t>, bool) { throw NotImplementedError("pending"); }
Tensor argmin(const Tensor&, std::optional<int64_t>, bool) { throw NotImplementedError("pending"); }
Tensor var(const Tensor&, const Shape&, int64_t, bool) { throw NotImplementedError("pending"); }
Tensor std(const Tensor&, const Shape&, int64_t, bool) { throw NotImplementedError("pending"); }
Tensor norm(const Tensor&, double, const Shape&, bool) { throw NotImplementedError("pending"); }
}
