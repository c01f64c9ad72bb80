// Differentiable fused classifier: linear + cross-entropy in one op (Note [fused classifier
// memory] in ember/ops/classifier.h). The forward keeps dlogits = softmax - onehot (in the
// logits buffer itself) only when a gradient will be asked for; the VJP is two GEMMs whose
// small results are scaled by grad / count.
//
// Under autocast x and weight are cast to the low-precision dtype (the policy table's
// lower_precision row): the GEMM runs on tensor cores and the loss pass reads the 16-bit
// logits in f32 math, so cross_entropy's f32 cast of the logits is not needed.
//
// Double backward is not implemented: the gradients are recorded with a VJP that throws (as
// attention's are), so differentiating them fails loudly instead of silently giving zeros.
#include "autocast_policy.h"
#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "ember/ops/classifier.h"
#include "fused_util.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::no_double_backward;
using autograd::record;
using autograd::save;
using autograd::to_ops;

Tensor linear_cross_entropy(const Tensor& x, const Tensor& weight, const Tensor& target,
                            const LinearCrossEntropyOptions& options) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::linear_cross_entropy, x, weight))
      return linear_cross_entropy((*c)[0], (*c)[1], target, options);
  const ops::LinearCrossEntropyParams p{options.ignore_index, options.num_classes,
                                        to_ops(options.reduction, "linear_cross_entropy")};
  // The same condition under which record() keeps a node: otherwise dlogits would be made
  // and dropped at once.
  const bool keep = GradMode::is_enabled() && ((x.defined() && x.requires_grad()) ||
                                               (weight.defined() && weight.requires_grad()));
  ops::LinearCrossEntropyForward f = ops::linear_cross_entropy_forward(x, weight, target, p, keep);
  return record("linear_cross_entropy", f.loss, {x, weight},
                [x = save(x), w = save(weight), d = f.dlogits, gf = f.grad_factor](const Tensor& g) -> TensorList {
                  const Tensor& xv = x;
                  const Tensor& wv = w;
                  ops::LinearCrossEntropyBackward b = ops::linear_cross_entropy_backward(
                      g, xv, wv, d, gf, {needs_input_grad(0), needs_input_grad(1)});
                  const char* name = "linear_cross_entropy_backward";
                  return {no_double_backward(name, b.dx, {g, xv, wv}),
                          no_double_backward(name, b.dweight, {g, xv, wv})};
                });
}

}  // namespace ember
