#include "ember/nn/functional.h"

#include "ember/factory.h"

namespace ember::nn::functional {

Tensor gelu(const Tensor& x, const std::string& approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh", ValueError,
              "[gelu] approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  return ember::gelu(x, approximate == "tanh");
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return ember::flatten(x, start_dim, end_dim);
}

static Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return loss.sum();
    case Reduction::mean: return loss.mean();
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  EMBER_CHECK(input.sizes() == target.sizes(), ShapeError, "[mse_loss] input shape ",
              input.sizes(), " and target shape ", target.sizes(), " differ");
  Tensor diff = input - target;
  return reduce(diff * diff, reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                Reduction reduction) {
  EMBER_CHECK(log_probs.dim() == 2 && target.dim() == 1 && target.size(0) == log_probs.size(0),
              ShapeError, "[nll_loss] expects log_probs [N, C] and target [N], got ",
              log_probs.sizes(), " and ", target.sizes());
  EMBER_CHECK(!target.is_floating_point(), DTypeError,
              "[nll_loss] target must hold integer classes, got ", target.dtype());
  Tensor keep = target.ne(scalar_tensor(ignore_index, target.dtype()));
  // Ignored rows gather class 0 (always in range) and are then masked out.
  Tensor safe_target = where(keep, target, Scalar(0)).to(DType::i64);
  Tensor picked = -log_probs.gather(1, safe_target.unsqueeze(1)).squeeze(1);
  Tensor loss = where(keep, picked, Scalar(0.0));
  if (reduction == Reduction::mean) return loss.sum() / keep.to(loss.dtype()).sum();
  return reduce(loss, reduction);
}

}  // namespace ember::nn::functional
