// The composite losses (nn/include/ember/nn/loss.h) and the loss modules.
#include "ember/nn/loss.h"

#include <optional>

#include "ember/factory.h"

namespace ember::nn {

namespace functional {

namespace {

Tensor reduce(const char* op, const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return loss.sum();
    case Reduction::mean: return loss.mean();
    case Reduction::batchmean: break;
  }
  throw ValueError(str("[", op, "] reduction batchmean is only accepted by kl_div"));
}

// input and target of one shape, both floating point (a regression or probability target).
void check_pair(const char* op, const Tensor& input, const Tensor& target) {
  ember::detail::check_defined(op, input);
  ember::detail::check_defined(op, target, "target");
  EMBER_CHECK(input.is_floating_point(), DTypeError, "[", op, "] input must be floating point, got ",
              input.dtype());
  EMBER_CHECK(target.is_floating_point(), DTypeError, "[", op, "] target must be floating point, got ",
              target.dtype());
  EMBER_CHECK(input.sizes() == target.sizes(), ShapeError, "[", op, "] input shape ", input.sizes(),
              " and target shape ", target.sizes(), " differ");
}

// loss * w for a w that must broadcast to loss's shape (not the other way round).
Tensor weighted(const char* op, const char* what, const Tensor& loss, const Tensor& w) {
  if (!w.defined()) return loss;
  EMBER_CHECK(broadcast_shapes(w.sizes(), loss.sizes(), op) == loss.sizes(), ShapeError, "[", op, "] ", what,
              " of shape ", w.sizes(), " does not broadcast to the input shape ", loss.sizes());
  return loss * w.detach();
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("mse_loss", input, target);
  Tensor diff = input - target;
  return reduce("mse_loss", diff * diff, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_pair("l1_loss", input, target);
  return reduce("l1_loss", abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  check_pair("smooth_l1_loss", input, target);
  EMBER_CHECK(beta >= 0, ValueError, "[smooth_l1_loss] beta must be non-negative, got ", beta);
  if (beta == 0) return reduce("smooth_l1_loss", abs(input - target), reduction);
  Tensor d = abs(input - target);
  Tensor loss = where(lt(d, scalar_tensor(beta, d.dtype())), d * d * (0.5 / beta), d - 0.5 * beta);
  return reduce("smooth_l1_loss", loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  check_pair("huber_loss", input, target);
  EMBER_CHECK(delta > 0, ValueError, "[huber_loss] delta must be positive, got ", delta);
  Tensor d = abs(input - target);
  Tensor loss = where(lt(d, scalar_tensor(delta, d.dtype())), d * d * 0.5, (d - 0.5 * delta) * delta);
  return reduce("huber_loss", loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        Reduction reduction, const Tensor& pos_weight) {
  const char* op = "binary_cross_entropy_with_logits";
  check_pair(op, input, target);
  // log(1 + exp(-x)) = m + log(exp(-m) + exp(-x - m)), m = max(-x, 0): no exp overflows.
  // (The gradient through m cancels, so relu's choice at 0 does not matter.)
  Tensor m = relu(neg(input));
  Tensor log1p_exp = m + log(exp(neg(m)) + exp(neg(input) - m));
  Tensor loss;
  if (pos_weight.defined()) {
    Tensor log_weight = weighted(op, "pos_weight", target, pos_weight - 1.0) + 1.0;
    loss = (1.0 - target) * input + log_weight * log1p_exp;
  } else {
    loss = (1.0 - target) * input + log1p_exp;
  }
  return reduce(op, weighted(op, "weight", loss, weight), reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction, bool log_target) {
  const char* op = "kl_div";
  check_pair(op, input, target);
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    // xlogy(t, t) - t x: 0 where t == 0 (log of 1 there keeps the gradient finite), NaN for t < 0.
    Tensor zero = eq(target, scalar_tensor(0.0, target.dtype()));
    Tensor xlogx = target * log(where(zero, Scalar(1.0), target));
    loss = xlogx - target * input;
  }
  if (reduction == Reduction::batchmean)
    return input.dim() == 0 ? loss.sum() : loss.sum() / double(input.size(0));
  return reduce(op, loss, reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index, Reduction reduction) {
  return ember::nll_loss(log_probs, target, {.ignore_index = ignore_index, .reduction = reduction});
}

}  // namespace functional

// ---- modules ----

namespace {
std::string reduction_repr(Reduction r) {
  switch (r) {
    case Reduction::none: return "reduction=none";
    case Reduction::mean: return "reduction=mean";
    case Reduction::sum: return "reduction=sum";
    case Reduction::batchmean: return "reduction=batchmean";
  }
  return {};
}
}  // namespace

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) const {
  return functional::mse_loss(input, target, reduction);
}
std::string MSELoss::extra_repr() const { return reduction_repr(reduction); }

Tensor L1Loss::forward(const Tensor& input, const Tensor& target) const {
  return functional::l1_loss(input, target, reduction);
}
std::string L1Loss::extra_repr() const { return reduction_repr(reduction); }

Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) const {
  return functional::smooth_l1_loss(input, target, reduction, beta);
}
std::string SmoothL1Loss::extra_repr() const { return str(reduction_repr(reduction), ", beta=", beta); }

Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) const {
  return functional::huber_loss(input, target, reduction, delta);
}
std::string HuberLoss::extra_repr() const { return str(reduction_repr(reduction), ", delta=", delta); }

BCELoss::BCELoss(Tensor w, Reduction reduction) : reduction(reduction) {
  if (w.defined()) weight = register_buffer("weight", std::move(w));
}
Tensor BCELoss::forward(const Tensor& input, const Tensor& target) const {
  return functional::binary_cross_entropy(input, target, weight, reduction);
}
std::string BCELoss::extra_repr() const { return reduction_repr(reduction); }

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor w, Reduction reduction, Tensor pw) : reduction(reduction) {
  if (w.defined()) weight = register_buffer("weight", std::move(w));
  if (pw.defined()) pos_weight = register_buffer("pos_weight", std::move(pw));
}
Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) const {
  return functional::binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
}
std::string BCEWithLogitsLoss::extra_repr() const { return reduction_repr(reduction); }

NLLLoss::NLLLoss(NLLLossOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
}
Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) const {
  return ember::nll_loss(input, target, options);
}
std::string NLLLoss::extra_repr() const {
  return str("ignore_index=", options.ignore_index, ", ", reduction_repr(options.reduction));
}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) const {
  return functional::kl_div(input, target, reduction, log_target);
}
std::string KLDivLoss::extra_repr() const {
  return str(reduction_repr(reduction), ", log_target=", log_target ? "True" : "False");
}

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyOptions o) : options(std::move(o)) {
  if (options.weight.defined()) options.weight = register_buffer("weight", options.weight);
}
Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) const {
  return ember::cross_entropy(input, target, options);
}
std::string CrossEntropyLoss::extra_repr() const {
  return str("ignore_index=", options.ignore_index, ", ", reduction_repr(options.reduction),
             ", label_smoothing=", options.label_smoothing);
}

}  // namespace ember::nn
