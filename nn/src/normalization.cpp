#include "ember/nn/normalization.h"

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

}  // namespace

// ---- BatchNorm ----

BatchNormBase::BatchNormBase(int64_t num_features, const BatchNormOptions& options)
    : num_features(num_features), options(options) {
  check_positive("BatchNorm", "num_features", num_features);
  if (options.momentum)
    EMBER_CHECK(*options.momentum >= 0.0 && *options.momentum <= 1.0, ValueError,
                "[BatchNorm] momentum must be in [0, 1], got ", *options.momentum);
  if (options.affine) {
    weight = register_parameter("weight", empty({num_features}));
    bias = register_parameter("bias", empty({num_features}));
  }
  if (options.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros(Shape{}, DType::i64));
  }
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats) return;
  NoGradGuard no_grad;
  running_mean.fill_(0);
  running_var.fill_(1);
  num_batches_tracked.fill_(0);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor BatchNormBase::forward(const Tensor& x) const {
  ember::detail::check_defined(type_name().c_str(), x);
  check_input_dim(x);
  double factor = options.momentum.value_or(0.0);
  const bool training = is_training();
  if (training && options.track_running_stats) {
    NoGradGuard no_grad;
    Tensor n = num_batches_tracked;  // a handle: the buffer itself is updated
    n.add_(1);
    // PyTorch's cumulative average reads the count on the host (a sync on CUDA, as there).
    if (!options.momentum) factor = 1.0 / double(n.item<int64_t>());
  }
  // Batch statistics in training mode, and always without running statistics; running
  // statistics are updated only in training mode (PyTorch's bn_training rule).
  const bool use_batch_stats = training || !running_mean.defined();
  const bool pass_running = !training || options.track_running_stats;
  return batch_norm(x, pass_running ? running_mean : Tensor(), pass_running ? running_var : Tensor(),
                    weight, bias, use_batch_stats, factor, options.eps);
}

std::string BatchNormBase::extra_repr() const {
  return str(num_features, ", eps=", options.eps, ", momentum=",
             options.momentum ? str(*options.momentum) : std::string("None"),
             ", affine=", detail::py_bool(options.affine),
             ", track_running_stats=", detail::py_bool(options.track_running_stats));
}

void BatchNorm1d::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 2 || x.dim() == 3, ShapeError, "[BatchNorm1d] expected 2D or 3D input (got ",
              x.dim(), "D input of shape ", x.sizes(), ")");
}

void BatchNorm2d::check_input_dim(const Tensor& x) const {
  EMBER_CHECK(x.dim() == 4, ShapeError, "[BatchNorm2d] expected 4D input (got ", x.dim(),
              "D input of shape ", x.sizes(), ")");
}

// ---- GroupNorm ----

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : num_groups(num_groups), num_channels(num_channels), eps(eps) {
  check_positive("GroupNorm", "num_groups", num_groups);
  check_positive("GroupNorm", "num_channels", num_channels);
  EMBER_CHECK(num_channels % num_groups == 0, ValueError, "[GroupNorm] num_channels ",
              num_channels, " must be divisible by num_groups ", num_groups);
  if (affine) {
    weight = register_parameter("weight", empty({num_channels}));
    bias = register_parameter("bias", empty({num_channels}));
  }
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor GroupNorm::forward(const Tensor& x) const {
  return group_norm(x, num_groups, weight, bias, eps);
}

std::string GroupNorm::extra_repr() const {
  return str(num_groups, ", ", num_channels, ", eps=", eps, ", affine=", detail::py_bool(weight.defined()));
}

// ---- RMSNorm ----

RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine)
    : normalized_shape(std::move(normalized_shape)), eps(eps) {
  EMBER_CHECK(!this->normalized_shape.empty(), ValueError, "[RMSNorm] normalized_shape is empty");
  for (int64_t s : this->normalized_shape) check_positive("RMSNorm", "normalized_shape size", s);
  if (elementwise_affine) weight = register_parameter("weight", empty(this->normalized_shape));
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

Tensor RMSNorm::forward(const Tensor& x) const { return rms_norm(x, normalized_shape, weight, eps); }

std::string RMSNorm::extra_repr() const {
  return str(detail::py_tuple(normalized_shape), ", eps=", eps ? str(*eps) : std::string("None"),
             ", elementwise_affine=", detail::py_bool(weight.defined()));
}

}  // namespace ember::nn
