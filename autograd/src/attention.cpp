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
  return record("scaled_dot_product_attention", f.out, {q, k, v},
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
}

Tensor scaled_dot_product_attention_packed(const Tensor& qkv, int64_t n_head, bool causal,
                                           std::optional<double> scale) {
  if (autocast::any_enabled()) [[unlikely]]
    if (auto c = autograd::autocast_inputs(autograd::AutocastOp::scaled_dot_product_attention, qkv))
      return scaled_dot_product_attention_packed((*c)[0], n_head, causal, scale);
  ops::AttentionForward f = ops::scaled_dot_product_attention_packed_forward(qkv, n_head, causal, scale);
  return record("scaled_dot_product_attention_packed", f.out, {qkv},
                [qkv = save(qkv), lse = f.lse, n_head, causal,
                 scale](const Tensor& g, const Tensor& out) -> TensorList {
                  const Tensor& x = qkv;
                  Tensor dqkv = ops::scaled_dot_product_attention_packed_backward(
                      g, x, out.detach(), lse, n_head, causal, scale);
                  return {no_double_backward("scaled_dot_product_attention_packed_backward", dqkv,
                                             {g, x})};
                });
}

}  // namespace ember
