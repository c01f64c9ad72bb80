// Private helpers shared by the autograd op files.
#pragma once

#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "ember/ops/elementwise.h"

namespace ember::autograd {

// Runs an in-place op on `self`. Without gradient recording, `in_place()` writes into self's
// memory. With it, the out-of-place result is computed (recording its node), written into
// self, and self takes over the result's history, so later uses differentiate through it.
// out_of_place(self_alias) computes the result from the alias it is given.
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
    // The recorded op sees an alias of self (same storage and history, another handle): if
    // its VJP saved self itself, self -> grad_fn -> saved self would be a reference cycle.
    Tensor alias = ember::detail::make_view(self, self.sizes(), self.strides(), self.storage_offset());
    alias.impl()->is_view = self.impl()->is_view;
    if (self.requires_grad()) {
      AutogradMeta& meta = alias.impl()->autograd_meta();
      meta.requires_grad = self.impl()->autograd->requires_grad;
      meta.grad_fn = self.grad_fn();
    }
    Tensor result = out_of_place(alias);
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
Tensor fused_backward(ops::BinaryOp op, const Tensor& grad, const Tensor& saved, ops::UnaryParams params = {});

}  // namespace ember::autograd
