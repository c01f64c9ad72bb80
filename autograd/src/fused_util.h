// Private helpers of the autograd files of the fused ops (nn.cpp, classifier.cpp, attention.cpp).
#pragma once

#include <initializer_list>

#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "ember/ops/nn.h"

namespace ember::autograd {

// Records `grad` (a fused backward kernel's result, computed from `inputs`) so that
// differentiating it again throws instead of treating it as a constant.
inline Tensor no_double_backward(const char* name, const Tensor& grad,
                                 std::initializer_list<Tensor> inputs) {
  if (!grad.defined()) return grad;
  return record(name, grad, inputs, [name](const Tensor&) -> TensorList {
    throw NotImplementedError(str("[", name, "] double backward (differentiating this op's "
                                  "gradient) is not implemented"));
  });
}

inline ops::LossReduction to_ops(Reduction r, const char* op) {
  switch (r) {
    case Reduction::none: return ops::LossReduction::none;
    case Reduction::sum: return ops::LossReduction::sum;
    case Reduction::mean: return ops::LossReduction::mean;
    case Reduction::batchmean:
      throw ValueError(str("[", op, "] reduction batchmean is only accepted by kl_div"));
  }
  return ops::LossReduction::mean;
}

}  // namespace ember::autograd
