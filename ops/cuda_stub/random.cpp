#include "kernels/random.h"

namespace ember::ops::cuda {
void uniform_kernel(const Tensor&, Generator::State, double, double) { EMBER_NO_CUDA("rand"); }
void normal_kernel(const Tensor&, Generator::State, double, double) { EMBER_NO_CUDA("randn"); }
void randint_kernel(const Tensor&, Generator::State, int64_t, int64_t) { EMBER_NO_CUDA("randint"); }
}  // namespace ember::ops::cuda
