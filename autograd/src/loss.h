// Private: the composite forms of cross_entropy (autograd/src/loss.cpp) that nn.cpp's fused
// cross_entropy hands over to.
#pragma once

#include "ember/functions.h"

namespace ember::autograd {

// cross_entropy with class weights, probability targets or logits [N, C, d1, ...].
Tensor cross_entropy_general(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options);

}  // namespace ember::autograd
