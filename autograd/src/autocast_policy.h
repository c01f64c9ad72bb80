// Note [autocast]: the autocast policy, applied at the top of each affected differentiable op.
// Autocast sits above autograd (DESIGN.md section 1): when the thread-local state
// (core/include/ember/autocast_state.h) has autocast on for the inputs' device type, the op
// casts its floating-point inputs with the differentiable ember::to (so the casts are nodes of
// the graph and gradients flow back in each input's own dtype) and calls itself again with the
// cast inputs, which then need no cast. Kernels never see autocast.
//
// Invariants:
// - THE policy is the one table kPolicyTable in autocast_policy.cpp (documented in docs/amp.md);
//   an op's hook names its row by AutocastOp, so the table and the hooks cannot drift apart.
// - When autocast is off everywhere the hook costs one thread-local bool load
//   (autocast::any_enabled()), nothing else.
// - Only floating-point inputs on the guard's device type are cast; f64 is never cast (as in
//   PyTorch: an explicit f64 computation is left alone); integer inputs (targets, indices) and
//   undefined inputs (an absent bias) pass through.
// - Leaf tensors that require grad (parameters) cast to the low-precision dtype go through the
//   per-guard cache, so a parameter used twice in one forward is cast once.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "ember/autocast_state.h"
#include "ember/tensor.h"

namespace ember::autograd {

enum class CastPolicy : uint8_t {
  lower_precision,  // inputs cast to the guard's f16/bf16: throughput-bound GEMM-like ops
  fp32,             // 16-bit inputs cast up to f32: ops whose range or accumulation needs it
  promote,          // no cast: type promotion gives the widest input dtype (bf16 + f32 -> f32)
};

// One row per op the policy names; the enumerator is the op's index in the table.
enum class AutocastOp : uint8_t {
  matmul, linear, conv2d, scaled_dot_product_attention, linear_cross_entropy,
  softmax, log_softmax, cross_entropy, layer_norm, residual_layer_norm, group_norm, rms_norm, sum, mean, exp, log, norm,
  add, sub, mul, div, pow, maximum, minimum, where,
  count_
};

struct PolicyRow {
  AutocastOp op;
  const char* name;
  CastPolicy policy;
};

std::span<const PolicyRow> autocast_policy_table();
CastPolicy autocast_policy(AutocastOp op);

// The inputs of `op` cast per its policy when autocast is on for their device type and some
// input needs a cast; nullopt otherwise (the op then runs as written). Call only when
// autocast::any_enabled(). Up to 3 inputs (the most any autocast op has).
std::optional<std::array<Tensor, 3>> autocast_inputs(AutocastOp op, const Tensor& a,
                                                    const Tensor& b = Tensor(),
                                                    const Tensor& c = Tensor());

}  // namespace ember::autograd
