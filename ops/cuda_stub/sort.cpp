#include "kernels/sort.h"

namespace ember::ops::cuda {
void sort_kernel(const Tensor&, const Tensor&, const Tensor&, bool) { EMBER_NO_CUDA("sort"); }
void topk_kernel(const Tensor&, const Tensor&, const Tensor&, bool) { EMBER_NO_CUDA("topk"); }
void scan_kernel(ScanOp op, const Tensor&, const Tensor&) {
  throw NotImplementedError(str("[", op_name(op), "] has no CUDA implementation in this build"));
}
}  // namespace ember::ops::cuda
