// Normalization layers: BatchNorm1d/2d, GroupNorm, RMSNorm (LayerNorm lives in layers.h).
// Each calls the fused op of the same name (ember::batch_norm, group_norm, rms_norm) and
// initializes as PyTorch: weight ones, bias zeros, running_mean zeros, running_var ones.
//
//   nn::BatchNorm2d bn1{64};                       // PyTorch: nn.BatchNorm2d(64)
//   nn::BatchNorm2d bn2{64, {.momentum = 0.01}};   // nn.BatchNorm2d(64, momentum=0.01)
//   nn::BatchNorm1d bn3{32, {.momentum = std::nullopt}};  // cumulative moving average
//
// Invariants:
// - Buffers are registered under PyTorch's names (running_mean, running_var,
//   num_batches_tracked, an i64 scalar), so state_dict() keys match a PyTorch model's.
// - BatchNorm uses batch statistics in training mode (is_training()) or when it tracks no
//   running statistics, and updates the running statistics in place (no gradient, version
//   bumped) only in training mode; in eval mode it is an elementwise affine of the running
//   statistics (PyTorch's F.batch_norm with training = false).
// - forward is const like the other layers': the buffers are tensor handles, updated in place.
#pragma once

#include <optional>
#include <string>

#include "ember/nn/module.h"

namespace ember::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // Running statistics: r = (1 - momentum) * r + momentum * batch; nullopt = the cumulative
  // average over the batches seen (momentum 1 / num_batches_tracked), as PyTorch's None.
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

// The shared body of BatchNorm1d/2d (PyTorch's _BatchNorm); the subclasses check the input's
// rank.
class BatchNormBase : public Module {
 public:
  BatchNormBase(int64_t num_features, const BatchNormOptions& options);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_running_stats();
  void reset_parameters();
  std::string extra_repr() const override;

  int64_t num_features;
  BatchNormOptions options;
  Tensor weight, bias;                                         // [C] when affine
  Tensor running_mean, running_var, num_batches_tracked;       // when track_running_stats

 protected:
  virtual void check_input_dim(const Tensor& x) const = 0;
};

// Input [N, C] or [N, C, L].
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNormBase(num_features, options) {}
  std::string type_name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

// Input [N, C, H, W].
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {})
      : BatchNormBase(num_features, options) {}
  std::string type_name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

// Normalizes [N, C, *] over each of num_groups groups of C / num_groups channels; weight and
// bias [C] per channel.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;

  int64_t num_groups, num_channels;
  double eps;
  Tensor weight, bias;
};

// x * rsqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight; eps nullopt =
// the machine epsilon of x's dtype (PyTorch 2.4's torch.nn.RMSNorm).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  // nn::RMSNorm(768): the last dim.
  explicit RMSNorm(int64_t normalized_size, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(Shape{normalized_size}, eps, elementwise_affine) {}
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return call(x, [&](const Tensor& in) { return forward(in); }); }
  void reset_parameters();
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;

  Shape normalized_shape;
  std::optional<double> eps;
  Tensor weight;
};

}  // namespace ember::nn
