// Reverse-mode execution of the backward graph, and the user-facing autograd utilities.
#pragma once

#include <functional>

#include "ember/tensor.h"

namespace ember::autograd {

// Accumulates d(sum of roots * grads)/d(leaf) into every leaf's .grad(). A grad may be
// undefined for a single-element root (it defaults to ones).
void backward(const TensorList& roots, const TensorList& grads = {}, bool retain_graph = false,
              bool create_graph = false);

// Gradients of outputs with respect to inputs, returned rather than accumulated into .grad().
// With allow_unused, an input that does not affect the outputs gets an undefined tensor;
// otherwise that is an error.
TensorList grad(const TensorList& outputs, const TensorList& inputs,
                const TensorList& grad_outputs = {}, bool retain_graph = false,
                bool create_graph = false, bool allow_unused = false);

// Activation checkpointing: runs fn without recording its intermediate activations and
// recomputes them in backward (the RNG and autocast states are restored, so dropout masks and
// the compute dtypes match the forward's).
Tensor checkpoint(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs);

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  // Only check the inputs that require grad; all must be f64 (finite differences need it).
};
// Compares the analytical Jacobian of fn (from backward) with central finite differences,
// input by input; returns true, or throws AutogradError describing the first mismatch
// (input, element, expected, got).
bool gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
               const GradcheckOptions& options = {});

}  // namespace ember::autograd
