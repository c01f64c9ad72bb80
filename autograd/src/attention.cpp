// Differentiable scaled dot-product attention: one fused forward kernel (output and per-row
// logsumexp) and one fused backward kernel (dq, dk, dv from the saved inputs, output and
// logsumexp), ops/include/ember/ops/attention.h. Under autocast it runs in the low-precision
// dtype (the policy table's lower_precision row): its work is GEMMs, and the kernels keep the
// softmax statistics and accumulators in f32.
//
// scaled_dot_product_attention_packed takes GPT's qkv projection [B, T, 3C] whole: the kernels
// read q, k, v as strided views of it and write y [B, T, C] and the single gradient dqkv
// [B, T, 3C] directly, so neither the head split (select + transpose + contiguous, and three
// zero-filled select backwards) nor the head merge (transpose + contiguous) is materialized.
// It shares scaled_dot_product_attention's autocast row: the same kernels, the same reasons.
//
// The attn_mask / dropout_p form (PyTorch's signature) runs the same kernels with
// ops::AttentionExtras (Note [attention masks and dropout]). Dropout reserves its counters from
// q's device's default generator at the forward and the backward regenerates the mask from
// that state (nothing of size Tq x Tk is saved), so manual_seed reproduces it. The gradient
// of a floating mask that requires grad is not implemented: the VJP throws if it is needed.
//
// Double backward is not implemented: the gradients are recorded with a VJP that throws, so
// differentiating them fails loudly instead of silently giving zeros.
#include "autocast_policy.h"
#include "ember/ops/attention.h"
#include "ember/autograd/function.h"
#include "ember/functions.h"
#include "fused_util.h"

namespace ember {

using autograd::no_double_backward;
using autograd::record;
using autograd::save;

namespace {

constexpr const char* kBackward = "scaled_dot_product_attention_backward";

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal, std::optional<double> scale) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::scaled_dot_product_attention,
                                           q, k, v))
      return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], causal, scale);
  ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, causal, scale);
  Tensor result = record("scaled_dot_product_attention", f.out, {q, k, v},
                         [q = save(q), k = save(k), v = save(v), lse = f.lse, causal,
                          scale](const Tensor& g, const Tensor& out) -> TensorList {
                           const Tensor& qv = q;
                           const Tensor& kv = k;
                           const Tensor& vv = v;
                           ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(
                               g, qv, kv, vv, out.detach(), lse, causal, scale);
                           return {no_double_backward(kBackward, b.dq, {g, qv, kv, vv}),
                                   no_double_backward(kBackward, b.dk, {g, qv, kv, vv}),
                                   no_double_backward(kBackward, b.dv, {g, qv, kv})};
                         });
  EMBER_TRACE(result, "scaled_dot_product_attention", {q, k, v}, {{"causal", causal}, {"scale", scale.value_or(0.0)}});
  return result;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  if (!attn_mask.defined() && dropout_p == 0)
    return scaled_dot_product_attention(q, k, v, is_causal, scale);
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::scaled_dot_product_attention,
                                           q, k, v))
      return scaled_dot_product_attention((*c)[0], (*c)[1], (*c)[2], attn_mask, dropout_p,
                                          is_causal, scale);
  ops::AttentionExtras ex{attn_mask, dropout_p, {}};
  // Reserved only for well-formed operands: a malformed call throws in the forward below.
  if (dropout_p > 0 && dropout_p < 1 && q.defined() && k.defined() && q.dim() == 4 && k.dim() == 4)
    ex.rng = default_generator(q.device())
                 .reserve(ops::attention_dropout_counters(q.sizes()[0], q.sizes()[1],
                                                          q.sizes()[2], k.sizes()[2]));
  ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, ex, is_causal, scale);
  // A floating mask is an input so that one requiring grad reaches the VJP (which refuses it).
  const Tensor float_mask =
      attn_mask.defined() && is_floating(attn_mask.dtype()) ? attn_mask : Tensor();
  Tensor result = record("scaled_dot_product_attention", f.out, {q, k, v, float_mask},
                         [q = save(q), k = save(k), v = save(v), mask = save(attn_mask), lse = f.lse,
                          dropout_p, rng = ex.rng, is_causal,
                          scale](const Tensor& g, const Tensor& out) -> TensorList {
                           if (autograd::needs_input_grad(3))
                             throw NotImplementedError(
                                 "[scaled_dot_product_attention] the gradient of a floating attn_mask "
                                 "is not implemented; pass a mask that does not require grad "
                                 "(attn_mask.detach())");
                           const Tensor& qv = q;
                           const Tensor& kv = k;
                           const Tensor& vv = v;
                           const ops::AttentionExtras bex{mask, dropout_p, rng};
                           ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(
                               g, qv, kv, vv, out.detach(), lse, bex, is_causal, scale);
                           return {no_double_backward(kBackward, b.dq, {g, qv, kv, vv}),
                                   no_double_backward(kBackward, b.dk, {g, qv, kv, vv}),
                                   no_double_backward(kBackward, b.dv, {g, qv, kv}), Tensor()};
                         });
  EMBER_TRACE(result, "scaled_dot_product_attention", {q, k, v, attn_mask}, {{"causal", is_causal}, {"scale", scale.value_or(0.0)}, {"dropout_p", dropout_p}});
  return result;
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head, bool causal,
                                           std::optional<double> scale) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::scaled_dot_product_attention, qkv))
      return scaled_dot_product_attention_packed((*c)[0], n_head, causal, scale);
  ops::AttentionForward f = ops::scaled_dot_product_attention_packed_forward(qkv, n_head, causal, scale);
  Tensor result = record("scaled_dot_product_attention_packed", f.out, {qkv},
                         [qkv = save(qkv), lse = f.lse, n_head, causal,
                          scale](const Tensor& g, const Tensor& out) -> TensorList {
                           const Tensor& x = qkv;
                           Tensor dqkv = ops::scaled_dot_product_attention_packed_backward(
                               g, x, out.detach(), lse, n_head, causal, scale);
                           return {no_double_backward("scaled_dot_product_attention_packed_backward", dqkv,
                                                      {g, x})};
                         });
  EMBER_TRACE(result, "scaled_dot_product_attention_packed", {qkv}, {{"n_head", n_head}, {"causal", causal}, {"scale", scale.value_or(0.0)}});
  return result;
}

}  // namespace ember
