// The losses of torch.nn.functional and torch.nn under PyTorch's names, arguments and
// reductions (none, mean, sum; kl_div also batchmean, which every other loss rejects).
// cross_entropy and nll_loss are ember:: ops (ember/functions.h; cross_entropy fused for
// integer targets); the rest are composites of differentiable elementwise ops and reductions.
// Regression losses need input and target of one shape (PyTorch only warns when they
// broadcast; here a mismatch is a ShapeError, as mse_loss always was). Class weights and
// pos_weight are constants, as in PyTorch; the modules register them as buffers so that
// to(device) moves them.
#pragma once

#include <string>

#include "ember/functions.h"
#include "ember/nn/module.h"

namespace ember::nn::functional {

using ember::binary_cross_entropy;  // -weight (t log x + (1 - t) log(1 - x)), logs >= -100
using ember::cross_entropy;
using ember::CrossEntropyOptions;
using ember::nll_loss;
using ember::NLLLossOptions;
using ember::Reduction;

// (input - target)^2.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// |input - target|.
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// 0.5 d^2 / beta where d = |input - target| < beta, else d - 0.5 beta (beta = 0: l1_loss).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);
// 0.5 d^2 where d < delta, else delta (d - 0.5 delta): smooth_l1_loss(beta = delta) * delta.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);
// binary_cross_entropy(sigmoid(x), t) in the stable form (1 - t) x + lw log(1 + exp(-x)) with
// lw = 1 + (pos_weight - 1) t; pos_weight broadcasts along the last dim (one per class).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const Tensor& weight = Tensor(), Reduction reduction = Reduction::mean,
                                        const Tensor& pos_weight = Tensor());
// The options form, as cross_entropy's, fields in PyTorch's argument order:
// binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::sum, .pos_weight = pw}).
struct BCEWithLogitsOptions {
  Tensor weight = Tensor();
  Reduction reduction = Reduction::mean;
  Tensor pos_weight = Tensor();
};
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const BCEWithLogitsOptions& options) {
  return binary_cross_entropy_with_logits(input, target, options.weight, options.reduction, options.pos_weight);
}
struct BCEOptions {
  Tensor weight = Tensor();
  Reduction reduction = Reduction::mean;
};
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BCEOptions& options) {
  return ember::binary_cross_entropy(input, target, options.weight, options.reduction);
}
// Pointwise target (log target - input) for log-probabilities `input`; log_target: the target
// is given as log-probabilities too. Reduction::batchmean (the sum over input.size(0)) is the
// one that gives the mathematical KL divergence; mean averages over every element (PyTorch's
// default, kept for compatibility).
Tensor kl_div(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
              bool log_target = false);
// The older positional form of nll_loss (ember::nll_loss takes NLLLossOptions).
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                Reduction reduction = Reduction::mean);

}  // namespace ember::nn::functional

namespace ember::nn {

// The loss modules: forward(input, target), also callable as loss(input, target).
// (`using Module::forward` keeps Module's one-argument forward visible: Note [calling a module].)
#define EMBER_LOSS_MODULE_COMMON(Name)                                             \
  using Module::forward;                                                           \
  Tensor operator()(const Tensor& input, const Tensor& target) const {             \
    return forward(input, target);                                                 \
  }                                                                                \
  std::string type_name() const override { return #Name; }                        \
  std::string extra_repr() const override;

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(MSELoss)
  Reduction reduction;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(L1Loss)
  Reduction reduction;
};

class SmoothL1Loss : public Module {
 public:
  explicit SmoothL1Loss(Reduction reduction = Reduction::mean, double beta = 1.0)
      : reduction(reduction), beta(beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(SmoothL1Loss)
  Reduction reduction;
  double beta;
};

class HuberLoss : public Module {
 public:
  explicit HuberLoss(Reduction reduction = Reduction::mean, double delta = 1.0)
      : reduction(reduction), delta(delta) {}
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(HuberLoss)
  Reduction reduction;
  double delta;
};

class BCELoss : public Module {
 public:
  explicit BCELoss(Tensor weight = Tensor(), Reduction reduction = Reduction::mean);
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(BCELoss)
  Tensor weight;  // a buffer when defined
  Reduction reduction;
};

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = Tensor(), Reduction reduction = Reduction::mean,
                             Tensor pos_weight = Tensor());
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(BCEWithLogitsLoss)
  Tensor weight, pos_weight;  // buffers when defined
  Reduction reduction;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(NLLLossOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(NLLLoss)
  NLLLossOptions options;  // options.weight is a buffer when defined
};

class KLDivLoss : public Module {
 public:
  explicit KLDivLoss(Reduction reduction = Reduction::mean, bool log_target = false)
      : reduction(reduction), log_target(log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(KLDivLoss)
  Reduction reduction;
  bool log_target;
};

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {});
  Tensor forward(const Tensor& input, const Tensor& target) const;
  EMBER_LOSS_MODULE_COMMON(CrossEntropyLoss)
  CrossEntropyOptions options;  // options.weight is a buffer when defined
};

#undef EMBER_LOSS_MODULE_COMMON

}  // namespace ember::nn
