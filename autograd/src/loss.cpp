// nll_loss, binary_cross_entropy and the forms of cross_entropy beyond the fused kernel's
// plain [N, C] integer case (autograd/src/nn.cpp), written with differentiable ops:
// - [N, C, d1, ...]: the class dim moved last and the rows flattened (one copy), then the
//   [N, C] paths; measured on 2 CPU cores, [16, 21, 64, 64] through the fused kernel this way
//   took 1/8 of the time of the log_softmax + nll composite (forward + backward).
// - class weights: the fused kernel's per-row losses times the targets' weights (4x faster
//   than the composite on [4096, 1000]); with label smoothing, plus a log_softmax composite
//   for the smoothing term;
// - probability targets: the log_softmax composite.
// Class weights are constants (PyTorch does not differentiate them either).
#include "loss.h"

#include <optional>

#include "ember/autograd/function.h"
#include "ember/grad_mode.h"
#include "ember/ops/elementwise.h"
#include "ember/ops/nn.h"

namespace ember {

namespace {

void check_not_batchmean(const char* op, Reduction r) {
  EMBER_CHECK(r != Reduction::batchmean, ValueError, "[", op, "] reduction batchmean is only accepted by kl_div");
}

int64_t class_dim(const Tensor& input) { return input.dim() == 1 ? 0 : 1; }

// input [C] with target [], or input [N, C, d...] with target [N, d...], integer target.
void check_class_target(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(input.is_floating_point(), DTypeError, "[", op, "] input must be floating point, got ",
              input.dtype());
  EMBER_CHECK(is_integral(target.dtype()) && target.dtype() != DType::b8, DTypeError, "[", op,
              "] target must hold integer class indices (i64, i32 or u8), got ", target.dtype());
  EMBER_CHECK(input.dim() >= 1, ShapeError, "[", op, "] input must be [C] or [N, C, d1, ...], got shape ",
              input.sizes());
  Shape want = input.sizes();
  want.erase(size_t(class_dim(input)));
  EMBER_CHECK(target.sizes() == want, ShapeError, "[", op, "] input of shape ", input.sizes(),
              " needs a target of shape ", want, ", got ", target.sizes());
}

// The class weights as a constant of the input's device and dtype, or undefined.
Tensor class_weight(const char* op, const Tensor& weight, const Tensor& input) {
  if (!weight.defined()) return weight;
  const int64_t classes = input.sizes()[class_dim(input)];
  EMBER_CHECK(weight.sizes() == Shape{classes}, ShapeError, "[", op, "] weight must be [C] = [", classes,
              "] for input of shape ", input.sizes(), ", got ", weight.sizes());
  EMBER_CHECK(weight.is_floating_point(), DTypeError, "[", op, "] weight must be floating point, got ",
              weight.dtype());
  ember::detail::check_same_device(op, input, weight);
  return ops::to(weight.detach(), input.device(), input.dtype());
}

// weight viewed to broadcast along the class dim of `input`: [C, 1, ...] for [N, C, d...].
Tensor along_class_dim(const Tensor& weight, const Tensor& input) {
  if (input.dim() <= 2) return weight;
  Shape s(size_t(input.dim() - 1), 1);
  s[0] = weight.sizes()[0];
  return weight.reshape(s);
}

struct Targets {
  Tensor keep;  // bool, target != ignore_index
  Tensor safe;  // i64, the target with ignored entries replaced by class 0 (always valid)
};
Targets mask_ignored(const Tensor& target, int64_t ignore_index) {
  Tensor keep = ne(target, ops::scalar_tensor(ignore_index, target.dtype(), target.device()));
  Tensor safe = where(keep, target, Scalar(0));
  return {keep, ops::to(safe, safe.device(), DType::i64)};
}

// The weight of each target, 0 where ignored: the weighted mean's denominators.
Tensor target_weights(const Tensor& weight, const Targets& t) {
  Tensor w = index_select(weight, 0, t.safe.reshape({-1})).reshape(t.safe.sizes());
  return where(t.keep, w, Scalar(0.0));
}

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  const char* op = "binary_cross_entropy";
  ember::detail::check_defined(op, input);
  ember::detail::check_defined(op, target, "target");
  EMBER_CHECK(input.is_floating_point() && target.is_floating_point(), DTypeError, "[", op,
              "] input and target must be floating point, got ", input.dtype(), " and ", target.dtype());
  EMBER_CHECK(input.sizes() == target.sizes(), ShapeError, "[", op, "] input shape ", input.sizes(),
              " and target shape ", target.sizes(), " differ");
  Tensor w;
  if (weight.defined()) {
    ember::detail::check_same_device(op, input, weight);
    w = weight.detach();
    EMBER_CHECK(broadcast_shapes(w.sizes(), input.sizes(), op) == input.sizes(), ShapeError, "[", op,
                "] weight of shape ", w.sizes(), " does not broadcast to the input shape ", input.sizes());
  }
  // The pointwise loss is one recorded op: through log's own VJP, a clamped log(0) would give
  // 0 * inf = NaN where PyTorch's formula gives a finite gradient.
  Tensor x = input.detach(), t = target.detach();
  // PyTorch refuses probabilities outside [0, 1] (and NaN); the formula would give a NaN loss
  // and huge gradients. On CUDA the check is deferred to the next synchronization (no host wait).
  ops::check_probabilities(x, "binary_cross_entropy");
  Tensor log_x, log_1mx;
  {
    NoGradGuard no_grad;
    log_x = clamp(log(x), -100.0, std::nullopt);
    log_1mx = clamp(log(1.0 - x), -100.0, std::nullopt);
  }
  Tensor pointwise;
  {
    NoGradGuard no_grad;
    pointwise = neg(t * log_x + (1.0 - t) * log_1mx);
    if (w.defined()) pointwise = pointwise * w;
  }
  Tensor loss = autograd::record(
      op, pointwise, {input, target},
      [x = autograd::save(input), t = autograd::save(target), w, log_x, log_1mx](const Tensor& g) -> TensorList {
        Tensor gw = w.defined() ? g * w : g;
        Tensor dx, dt;
        if (autograd::needs_input_grad(0)) {
          const Tensor &xv = x, &tv = t;
          dx = gw * (xv - tv) / clamp(xv * (1.0 - xv), 1e-12, std::nullopt);
        }
        if (autograd::needs_input_grad(1)) dt = gw * (log_1mx - log_x);
        return {dx, dt};
      });
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
    case Reduction::batchmean: break;
  }
  throw ValueError("[binary_cross_entropy] reduction batchmean is only accepted by kl_div");
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  const char* op = "nll_loss";
  ember::detail::check_defined(op, input);
  ember::detail::check_defined(op, target, "target");
  check_not_batchmean(op, options.reduction);
  check_class_target(op, input, target);
  const Tensor weight = class_weight(op, options.weight, input);
  const int64_t cdim = class_dim(input);
  const Targets t = mask_ignored(target, options.ignore_index);
  // Named here, as cross_entropy names its own: gather would report "[gather] index ...". On
  // CUDA the check is deferred to the next synchronization (no host wait).
  ops::check_class_targets(target, input.sizes()[cdim], options.ignore_index, "nll_loss");
  Tensor picked = squeeze(gather(input, cdim, unsqueeze(t.safe, cdim)), cdim);
  // where, not a multiplication by 0: an ignored entry's picked value may be -inf.
  Tensor tw = weight.defined() ? target_weights(weight, t) : Tensor();
  Tensor loss = where(t.keep, neg(tw.defined() ? picked * tw : picked), Scalar(0.0));
  switch (options.reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    default: break;
  }
  Tensor denom = tw.defined() ? sum(tw) : sum(ops::to(t.keep, loss.device(), loss.dtype()));
  return sum(loss) / denom;
}

namespace autograd {

namespace {
// x [N, C, d1, ...] as rows [N * d1 * ..., C] (the class dim last; a copy).
Tensor class_rows(const Tensor& x) {
  Shape perm{0};
  for (int64_t d = 2; d < x.dim(); ++d) perm.push_back(d);
  perm.push_back(1);
  return permute(x, perm).reshape({-1, x.sizes()[1]});
}
}  // namespace

Tensor cross_entropy_general(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  const char* op = "cross_entropy";
  ember::detail::check_defined(op, logits, "logits");
  ember::detail::check_defined(op, target, "target");
  check_not_batchmean(op, o.reduction);
  EMBER_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0, ValueError,
              "[cross_entropy] label_smoothing must be in [0, 1], got ", o.label_smoothing);
  EMBER_CHECK(logits.is_floating_point(), DTypeError, "[cross_entropy] logits must be floating point, got ",
              logits.dtype());
  EMBER_CHECK(logits.dim() >= 1, ShapeError, "[cross_entropy] logits must be [C] or [N, C, d1, ...], got shape ",
              logits.sizes());
  const int64_t cdim = class_dim(logits);
  const int64_t classes = logits.sizes()[cdim];
  const double ls = o.label_smoothing;
  const Tensor weight = class_weight(op, o.weight, logits);

  if (target.is_floating_point()) {
    // Class probabilities (PyTorch's cross_entropy_loss_prob_target). As in PyTorch, a float
    // target is read as probabilities when it has the logits' shape; otherwise it is a
    // class-index target of the wrong dtype.
    EMBER_CHECK(target.sizes() == logits.sizes(), DTypeError, "[cross_entropy] target must hold integer class "
                "indices (i64, i32 or u8), got ", target.dtype(), " of shape ", target.sizes(),
                "; class probabilities need the logits' shape ", logits.sizes());
    EMBER_CHECK(o.ignore_index < 0, ValueError, "[cross_entropy] ignore_index is not supported for "
                "probability targets");
    Tensor logp = log_softmax(logits, cdim);
    Tensor q = ls > 0 ? target * (1.0 - ls) + ls / double(classes) : target;
    Tensor prod = logp * q;
    if (weight.defined()) prod = prod * along_class_dim(weight, logits);
    switch (o.reduction) {
      case Reduction::none: return neg(sum(prod, {cdim}));
      case Reduction::sum: return neg(sum(prod));
      default: break;
    }
    // The mean over the N * d1 * ... positions (NaN for none, as 0 / 0).
    const double positions = double(logits.numel() / std::max<int64_t>(classes, 1));
    return neg(sum(prod)) / positions;
  }

  check_class_target(op, logits, target);
  if (logits.dim() > 2) {
    // [N, C, d...] as rows through the [N, C] paths: one copy of the logits, where the class
    // dim's stride would slow every pass of the rest.
    Tensor loss = cross_entropy(class_rows(logits), target.reshape({-1}), o);
    return o.reduction == Reduction::none ? loss.reshape(target.sizes()) : loss;
  }
  // Class weights on [N, C] (or [C]). PyTorch: loss_i = (1 - ls) w[t_i] nll_i + ls / C *
  // sum_c w_c (-log p_ic), 0 where ignored; the mean divides by the sum of the kept targets'
  // weights. w[t_i] nll_i is the fused kernel's per-row loss scaled (so is its gradient); only
  // the smoothing term needs the log-probabilities themselves.
  CrossEntropyOptions plain{.ignore_index = o.ignore_index, .reduction = Reduction::none, .label_smoothing = 0.0};
  const Targets t = mask_ignored(target, o.ignore_index);
  const Tensor tw = target_weights(weight, t);
  Tensor loss = cross_entropy(logits, target, plain) * tw;
  if (ls > 0) {
    Tensor smooth = neg(sum(log_softmax(logits, cdim) * weight, {cdim}));
    loss = loss * (1.0 - ls) + where(t.keep, smooth, Scalar(0.0)) * (ls / double(classes));
  }
  switch (o.reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    default: return sum(loss) / sum(tw);
  }
}

}  // namespace autograd
}  // namespace ember
