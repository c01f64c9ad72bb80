// The autocast policy table and the casting helper (Note [autocast] in autocast_policy.h).
#include "autocast_policy.h"

#include <array>

#include "ember/error.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"

namespace ember::autograd {

namespace {

using enum AutocastOp;
using enum CastPolicy;

// THE policy (docs/amp.md shows this table to users; keep them in step).
constexpr PolicyRow kPolicyTable[] = {
    // Low precision: GEMM-bound ops, where f16/bf16 doubles throughput (tensor cores) and the
    // kernels accumulate in f32 anyway.
    {matmul, "matmul", lower_precision},
    {linear, "linear", lower_precision},
    {conv2d, "conv2d", lower_precision},
    {scaled_dot_product_attention, "scaled_dot_product_attention", lower_precision},
    // Its logits GEMM is the step's largest; the fused loss pass computes in f32 from 16-bit
    // logits itself (Note [fused classifier memory]), so no f32 copy is made.
    {linear_cross_entropy, "linear_cross_entropy", lower_precision},
    // f32: exponentials, logs and long reductions, whose range (f16 overflows at 65504) or
    // accumulated rounding (bf16 keeps 8 bits) would cost accuracy.
    {softmax, "softmax", fp32},
    {log_softmax, "log_softmax", fp32},
    {cross_entropy, "cross_entropy", fp32},
    {layer_norm, "layer_norm", fp32},
    // The norm in f32 (the row applies to weight and bias only: x + delta promotes), and y
    // written in the low dtype when the sum is f32 (ember/functions.h): its consumers are GEMMs.
    {residual_layer_norm, "residual_layer_norm", fp32},
    // As layer_norm (PyTorch lists group_norm as f32; rms_norm takes layer_norm's row here).
    {group_norm, "group_norm", fp32},
    {rms_norm, "rms_norm", fp32},
    {sum, "sum", fp32},
    {mean, "mean", fp32},
    {exp, "exp", fp32},
    {log, "log", fp32},
    {norm, "norm", fp32},
    // Promote: elementwise binary ops compute in the widest input dtype by type promotion
    // (no hook needed; listed so the table is the whole policy).
    {add, "add", promote},
    {sub, "sub", promote},
    {mul, "mul", promote},
    {div, "div", promote},
    {pow, "pow", promote},
    {maximum, "maximum", promote},
    {minimum, "minimum", promote},
    {where, "where", promote},
};

constexpr bool table_is_indexed() {
  if (std::size(kPolicyTable) != size_t(AutocastOp::count_)) return false;
  for (size_t i = 0; i < std::size(kPolicyTable); ++i)
    if (size_t(kPolicyTable[i].op) != i) return false;
  return true;
}
static_assert(table_is_indexed(), "kPolicyTable must list every AutocastOp once, in enum order");

// Whether autocast casts `t` to `target` (see the invariants in autocast_policy.h).
bool needs_cast(const Tensor& t, DeviceType device_type, CastPolicy policy, DType target) {
  if (!t.defined() || t.device().type != device_type || t.dtype() == target) return false;
  const DType d = t.dtype();
  if (policy == fp32) return d == DType::f16 || d == DType::bf16;
  return d == DType::f32 || d == DType::f16 || d == DType::bf16;
}

Tensor cast(const Tensor& t, DType target, bool cacheable_dtype) {
  // Only parameters are cached: an activation is a fresh tensor each step, so caching it would
  // only hold memory. Under NoGradGuard a cast records no node; caching that cast would hand a
  // graph-less tensor to a later forward that records, so those casts are not cached.
  const bool cache = cacheable_dtype && t.is_leaf() && t.requires_grad() && GradMode::is_enabled();
  if (cache) {
    Tensor hit = autocast::cache_lookup(t, target);
    if (hit.defined()) return hit;
  }
  Tensor out = ember::to(t, t.device(), target);
  if (cache) autocast::cache_insert(t, target, out);
  return out;
}

}  // namespace

std::span<const PolicyRow> autocast_policy_table() { return kPolicyTable; }

CastPolicy autocast_policy(AutocastOp op) { return kPolicyTable[size_t(op)].policy; }

std::optional<std::array<Tensor, 3>> autocast_inputs(AutocastOp op, const Tensor& a, const Tensor& b,
                                                    const Tensor& c) {
  const CastPolicy policy = autocast_policy(op);
  if (policy == promote || !a.defined()) return std::nullopt;
  // The first input decides the device type (mixed devices fail in the op itself).
  const DeviceType device_type = a.device().type;
  if (!autocast::is_enabled(device_type)) return std::nullopt;
  const DType low = autocast::get_dtype(device_type);
  const DType target = policy == lower_precision ? low : DType::f32;
  const bool na = needs_cast(a, device_type, policy, target);
  const bool nb = needs_cast(b, device_type, policy, target);
  const bool nc = needs_cast(c, device_type, policy, target);
  if (!na && !nb && !nc) return std::nullopt;
  const bool cacheable = policy == lower_precision;
  return std::array<Tensor, 3>{na ? cast(a, target, cacheable) : a, nb ? cast(b, target, cacheable) : b,
                               nc ? cast(c, target, cacheable) : c};
}

}  // namespace ember::autograd
