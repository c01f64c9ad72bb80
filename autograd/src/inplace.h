// Private helpers shared by the autograd op files.
#pragma once

#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "ember/ops/elementwise.h"

namespace ember::autograd {

// Runs an in-place op on `self`. Without gradient recording, `in_place()` writes into self's
// memory. With it, the out-of-place result is computed (recording its node), written into
// self, and self takes over the result's history, so later uses differentiate through it.
// A leaf that requires grad cannot be modified in place (its .grad would be meaningless),
// nor can a view while recording (its base would not see the new history).
template <class OutOfPlace, class InPlace>
Tensor& apply_inplace(const char* op, Tensor& self, bool other_requires_grad, OutOfPlace out_of_place,
                      InPlace in_place) {
  ember::detail::check_defined(op, self);
  if (GradMode::is_enabled() && (self.requires_grad() || other_requires_grad)) {
    EMBER_CHECK(!(self.is_leaf() && self.requires_grad()), AutogradError, "[", op,
                "] a leaf tensor that requires grad cannot be modified in place; do it under "
                "NoGradGuard (as optimizers do) or on a clone()");
    EMBER_CHECK(!self.impl()->is_view, AutogradError, "[", op,
                "] in-place modification of a view while recording gradients is not supported; "
                "use the out-of-place op");
    Tensor result = out_of_place();
    ops::copy_(self, result);
    self.bump_version();
    self.impl()->autograd_meta().grad_fn = result.grad_fn();
    return self;
  }
  in_place();
  self.bump_version();
  return self;
}

// The gradient op of a fused kernel (relu_backward, ...): computes it with one kernel and,
// if double backward reaches it, says so instead of returning a wrong answer.
Tensor fused_backward(ops::BinaryOp op, const Tensor& grad, const Tensor& saved);

}  // namespace ember::autograd
