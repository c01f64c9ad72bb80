// Undefined tensors (Tensor(), or p.grad() after zero_grad()) passed to any public op or Tensor
// method throw ember::ValueError, never crash (issue 20; Note [undefined tensors] in
// core/include/ember/tensor.h: the one check is in Tensor's impl accessor, and the message names
// the op the user called through Note [op scope]). The table
// walks every op of ember/functions.h with an undefined tensor in each tensor position, and
// the Tensor methods; adding an op to functions.h means adding its rows here (one line each).
// Optional tensor parameters that may legitimately be undefined (bias = Tensor()) are checked
// to keep working.
#include <functional>
#include <string>
#include <vector>

#include "support/test_support.h"

using namespace ember;

namespace {

struct Case {
  const char* op;  // the message must contain "[<op>"
  std::function<void()> call;
  bool accessor_name_ok = false;  // or name a Tensor accessor / inner op instead (ROWX)
};

Tensor U() { return Tensor(); }
Tensor A() { return arange(0, 4, 1, DType::f32).reshape({2, 2}).add(1); }  // [2, 2] f32
Tensor I() { return zeros({2}, DType::i64); }                                // index / target
Tensor M() { return zeros({2, 2}, DType::b8); }                              // bool mask
Tensor Q() { return ones({1, 1, 2, 2}); }                                     // [B, H, T, D]
Tensor P() { return full({2, 2}, 0.5); }                                      // probabilities
Tensor V() { return ones({2}); }                                              // vector
Tensor B3() { return ones({1, 2, 2}); }                                       // [B, n, m]
using Idx = std::vector<indexing::TensorIndex>;
InterpolateOptions size2() {
  InterpolateOptions o;
  o.size = std::array<int64_t, 2>{2, 2};
  return o;
}

#define ROW(name, ...) Case{name, [] { (void)(__VA_ARGS__); }, false}
// The message may name the accessor instead ("[dtype] called on an undefined tensor"): only
// data_ptr<T>(), an inline template that reads dtype() first and opens no op scope (it is not
// an op, and kernels call it on hot paths). Still an ember::ValueError, no crash.
#define ROWX(name, ...) Case{name, [] { (void)(__VA_ARGS__); }, true}
// A statement body (an lvalue argument, a module to build first).
#define ROWS(name, ...) Case{name, [] { __VA_ARGS__; }, false}

std::vector<Case> function_cases() {
  return {
      // ---- elementwise ----
      ROW("add", add(U(), A())), ROW("add", add(A(), U())),
      ROW("sub", sub(U(), A())), ROW("sub", sub(A(), U())),
      ROW("mul", mul(U(), A())), ROW("mul", mul(A(), U())),
      ROW("div", div(U(), A())), ROW("div", div(A(), U())),
      ROW("pow", pow(U(), A())), ROW("pow", pow(A(), U())), ROW("pow", pow(U(), 2.0)),
      ROW("maximum", maximum(U(), A())), ROW("maximum", maximum(A(), U())),
      ROW("minimum", minimum(U(), A())), ROW("minimum", minimum(A(), U())),
      ROW("neg", neg(U())), ROW("exp", exp(U())), ROW("log", log(U())), ROW("sqrt", sqrt(U())),
      ROW("rsqrt", rsqrt(U())), ROW("reciprocal", reciprocal(U())), ROW("abs", abs(U())),
      ROW("sign", sign(U())), ROW("tanh", tanh(U())), ROW("sigmoid", sigmoid(U())),
      ROW("relu", relu(U())), ROW("gelu", gelu(U())), ROW("silu", silu(U())),
      ROW("clamp", clamp(U(), 0.0, 1.0)),
      ROW("where", where(U(), A(), A())), ROW("where", where(M(), U(), A())),
      ROW("where", where(M(), A(), U())), ROW("where", where(M(), U(), 1.0)),
      ROW("where", where(M(), 1.0, U())), ROW("where", where(U(), A(), 1.0)),
      ROW("masked_fill", masked_fill(U(), M(), 1.0)), ROW("masked_fill", masked_fill(A(), U(), 1.0)),
      ROW("eq", eq(U(), A())), ROW("eq", eq(A(), U())), ROW("ne", ne(U(), A())), ROW("ne", ne(A(), U())),
      ROW("lt", lt(U(), A())), ROW("lt", lt(A(), U())), ROW("le", le(U(), A())), ROW("le", le(A(), U())),
      ROW("gt", gt(U(), A())), ROW("gt", gt(A(), U())), ROW("ge", ge(U(), A())), ROW("ge", ge(A(), U())),
      ROW("to", to(U(), Device::cpu(), DType::f64)),
      // ---- views and shape ----
      ROW("view", view(U(), {4})), ROW("reshape", reshape(U(), {4})), ROW("permute", permute(U(), {1, 0})),
      ROW("transpose", transpose(U(), 0, 1)), ROW("narrow", narrow(U(), 0, 0, 1)),
      ROW("slice", slice(U(), 0, 0, 1)), ROW("select", select(U(), 0, 0)),
      ROW("expand", expand(U(), {2, 2})), ROW("squeeze", squeeze(U())), ROW("unsqueeze", unsqueeze(U(), 0)),
      ROW("flatten", flatten(U())), ROW("contiguous", contiguous(U())), ROW("clone", clone(U())),
      ROW("sum_to", sum_to(U(), {2})),
      // ---- reductions ----
      ROW("sum", sum(U())), ROW("mean", mean(U())), ROW("amax", amax(U())), ROW("amin", amin(U())),
      ROW("max", max(U(), 0)), ROW("min", min(U(), 0)), ROW("argmax", argmax(U())), ROW("argmin", argmin(U())),
      ROW("var", var(U())), ROW("std", ember::std(U())), ROW("norm", norm(U())),
      // ---- linear algebra ----
      ROW("matmul", matmul(U(), A())), ROW("matmul", matmul(A(), U())),
      ROW("linear", linear(U(), A())), ROW("linear", linear(A(), U())),
      ROW("gelu_mlp", gelu_mlp(U(), A(), Tensor(), A(), Tensor())),
      ROW("gelu_mlp", gelu_mlp(A(), U(), Tensor(), A(), Tensor())),
      ROW("gelu_mlp", gelu_mlp(A(), A(), Tensor(), U(), Tensor())),
      // ---- nn ops ----
      ROW("softmax", softmax(U(), 1)), ROW("log_softmax", log_softmax(U(), 1)),
      ROW("cross_entropy", cross_entropy(U(), I())), ROW("cross_entropy", cross_entropy(A(), U())),
      ROW("linear_cross_entropy", linear_cross_entropy(U(), A(), I())),
      ROW("linear_cross_entropy", linear_cross_entropy(A(), U(), I())),
      ROW("linear_cross_entropy", linear_cross_entropy(A(), A(), U())),
      ROW("layer_norm", layer_norm(U(), {2})),
      ROW("residual_layer_norm", residual_layer_norm(U(), A(), {2})),
      ROW("residual_layer_norm", residual_layer_norm(A(), U(), {2})),
      ROW("embedding", embedding(U(), I())), ROW("embedding", embedding(A(), U())),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(U(), Q(), Q())),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(Q(), U(), Q())),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(Q(), Q(), U())),
      ROW("scaled_dot_product_attention_packed", scaled_dot_product_attention_packed(U(), 1)),
      ROW("dropout", dropout(U(), 0.5)),
      // ---- joining, indexing ----
      ROW("cat", cat({A(), U()}, 0)), ROW("stack", stack({U(), A()}, 0)),
      ROW("split", split(U(), 1, 0)), ROW("split", split(U(), std::vector<int64_t>{1, 1}, 0)),
      ROW("chunk", chunk(U(), 2, 0)),
      ROW("index_select", index_select(U(), 0, I())), ROW("index_select", index_select(A(), 0, U())),
      ROW("gather", gather(U(), 0, I().reshape({1, 2}))), ROW("gather", gather(A(), 0, U())),
      ROW("scatter_add", scatter_add(U(), 0, I().reshape({1, 2}), A())),
      ROW("scatter_add", scatter_add(A(), 0, U(), A())),
      ROW("scatter_add", scatter_add(A(), 0, I().reshape({1, 2}), U())),
      ROW("tril", tril(U())), ROW("triu", triu(U())),
      // ---- convolution and pooling ----
      ROW("conv2d", conv2d(U(), ones({1, 1, 1, 1}))), ROW("conv2d", conv2d(Q(), U())),
      ROW("max_pool2d", max_pool2d(U(), {1, 1})),
      // ---- added with issue 20's porting surface ----
      ROW("sin", sin(U())), ROW("cos", cos(U())), ROW("square", square(U())), ROW("floor", floor(U())),
      ROW("ceil", ceil(U())), ROW("trunc", trunc(U())), ROW("round", round(U())),
      ROW("leaky_relu", leaky_relu(U())), ROW("elu", elu(U())), ROW("softplus", softplus(U())),
      ROW("mish", mish(U())), ROW("hardswish", hardswish(U())), ROW("hardsigmoid", hardsigmoid(U())),
      ROW("nll_loss", nll_loss(U(), I())), ROW("nll_loss", nll_loss(A(), U())),
      ROW("binary_cross_entropy", binary_cross_entropy(U(), P())),
      ROW("binary_cross_entropy", binary_cross_entropy(P(), U())),
      ROW("batch_norm", batch_norm(U(), zeros({2}), ones({2}))),
      ROW("group_norm", group_norm(U(), 1)), ROW("rms_norm", rms_norm(U(), {2})),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(U(), Q(), Q(), Tensor())),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(Q(), U(), Q(), Tensor())),
      ROW("scaled_dot_product_attention", scaled_dot_product_attention(Q(), Q(), U(), Tensor())),
      ROW("index", index(U(), Idx{0})), ROWS("index_put_", Tensor u; index_put_(u, Idx{0}, V())),
      ROWS("index_put_", Tensor a = A(); index_put_(a, Idx{0}, U())),
      ROW("index_put", index_put(U(), Idx{0}, V())), ROW("index_put", index_put(A(), Idx{0}, U())),
      ROW("nonzero", nonzero(U())), ROW("masked_select", masked_select(U(), M())),
      ROW("masked_select", masked_select(A(), U())),
      ROW("einsum", einsum("ij,jk->ik", {U(), A()})), ROW("einsum", einsum("ij,jk->ik", {A(), U()})),
      ROW("bmm", bmm(U(), B3())), ROW("bmm", bmm(B3(), U())), ROW("one_hot", one_hot(U(), 3)),
      ROW("repeat", repeat(U(), {1, 1})), ROW("tile", tile(U(), {1, 1})), ROW("unbind", unbind(U())),
      ROW("diag", diag(U())), ROW("outer", outer(U(), V())), ROW("outer", outer(V(), U())),
      ROW("meshgrid", meshgrid({U(), V()})), ROW("meshgrid", meshgrid({V(), U()})),
      ROW("logical_and", logical_and(U(), M())), ROW("logical_and", logical_and(M(), U())),
      ROW("logical_or", logical_or(U(), M())), ROW("logical_xor", logical_xor(M(), U())),
      ROW("logical_not", logical_not(U())), ROW("bitwise_and", bitwise_and(U(), M())),
      ROW("bitwise_and", bitwise_and(M(), U())), ROW("bitwise_or", bitwise_or(U(), M())),
      ROW("bitwise_xor", bitwise_xor(M(), U())), ROW("bitwise_not", bitwise_not(U())),
      ROW("avg_pool2d", avg_pool2d(U(), {1, 1})), ROW("adaptive_avg_pool2d", adaptive_avg_pool2d(U(), {1, 1})),
      ROW("adaptive_avg_pool2d", adaptive_avg_pool2d(U(), 1)),
      ROW("adaptive_max_pool2d", adaptive_max_pool2d(U(), {1, 1})),
      ROW("adaptive_max_pool2d", adaptive_max_pool2d(U(), 1)),
      ROW("adaptive_max_pool2d", adaptive_max_pool2d_with_indices(U(), {1, 1})),
      ROW("interpolate", interpolate(U(), size2())), ROW("pad", pad(U(), {1, 1})),
      ROW("conv1d", conv1d(U(), ones({1, 1, 1}))), ROW("conv1d", conv1d(ones({1, 1, 2}), U())),
      ROW("conv_transpose2d", conv_transpose2d(U(), ones({1, 1, 1, 1}))),
      ROW("conv_transpose2d", conv_transpose2d(Q(), U())),
      ROW("lstm_cell", lstm_cell_pointwise(U(), ones({1, 8}), ones({1, 2}))),
      ROW("lstm_cell", lstm_cell_pointwise(ones({1, 8}), ones({1, 8}), U())),
      ROW("gru_cell", gru_cell_pointwise(U(), ones({1, 6}), ones({1, 2}))),
      ROW("gru_cell", gru_cell_pointwise(ones({1, 6}), U(), ones({1, 2}))),
      ROW("gru_cell", gru_cell_pointwise(ones({1, 6}), ones({1, 6}), U())),
      ROW("lstm", lstm_layer(U(), ones({8, 2}), ones({8, 2}), Tensor(), Tensor(), Tensor(), Tensor())),
      ROW("lstm", lstm_layer(ones({1, 1, 2}), U(), ones({8, 2}), Tensor(), Tensor(), Tensor(), Tensor())),
      ROW("gru", gru_layer(U(), ones({6, 2}), ones({6, 2}), Tensor(), Tensor(), Tensor())),
      ROW("gru", gru_layer(ones({1, 1, 2}), ones({6, 2}), U(), Tensor(), Tensor(), Tensor())),
      ROW("sort", sort(U())), ROW("argsort", argsort(U())), ROW("topk", topk(U(), 1)),
      ROW("cumsum", cumsum(U(), 0)), ROW("cumprod", cumprod(U(), 0)), ROW("logsumexp", logsumexp(U())),
      ROW("flip", flip(U(), {0})), ROW("roll", roll(U(), {1}, {0})), ROW("any", any(U())), ROW("all", all(U())),
      ROW("isnan", isnan(U())), ROW("isinf", isinf(U())), ROW("isfinite", isfinite(U())),
      ROW("isclose", isclose(U(), A())), ROW("isclose", isclose(A(), U())),
      ROW("allclose", allclose(U(), A())), ROW("allclose", allclose(A(), U())),
      // ---- nn::functional (losses and helpers defined in nn) ----
      ROW("mse_loss", nn::functional::mse_loss(U(), A())), ROW("mse_loss", nn::functional::mse_loss(A(), U())),
      ROW("l1_loss", nn::functional::l1_loss(U(), A())), ROW("l1_loss", nn::functional::l1_loss(A(), U())),
      ROW("smooth_l1_loss", nn::functional::smooth_l1_loss(U(), A())),
      ROW("smooth_l1_loss", nn::functional::smooth_l1_loss(A(), U())),
      ROW("huber_loss", nn::functional::huber_loss(U(), A())),
      ROW("huber_loss", nn::functional::huber_loss(A(), U())),
      ROW("binary_cross_entropy_with_logits", nn::functional::binary_cross_entropy_with_logits(U(), P())),
      ROW("binary_cross_entropy_with_logits", nn::functional::binary_cross_entropy_with_logits(A(), U())),
      ROW("kl_div", nn::functional::kl_div(U(), P())), ROW("kl_div", nn::functional::kl_div(A(), U())),
      ROW("nll_loss", nn::functional::nll_loss(U(), I(), -100)),
      ROW("gelu", nn::functional::gelu(U(), "tanh")), ROW("flatten", nn::functional::flatten(U())),
  };
}

// The Tensor methods (a default-constructed Tensor as `self`, and as a tensor argument).
std::vector<Case> method_cases() {
  return {
      ROW("dim", U().dim()), ROW("sizes", U().sizes()), ROW("sizes", U().shape()), ROW("size", U().size(0)),
      ROW("strides", U().strides()), ROW("stride", U().stride(0)), ROW("numel", U().numel()),
      ROW("dtype", U().dtype()), ROW("device", U().device()), ROW("device", U().is_cuda()),
      ROW("dtype", U().is_floating_point()), ROW("is_contiguous", U().is_contiguous()),
      ROW("storage_offset", U().storage_offset()), ROW("dtype", U().element_size()),
      ROW("data_ptr", U().data_ptr()), ROW("storage", U().storage()), ROW("item", U().item<double>()),
      ROW("item", U().item<int64_t>()), ROW("to_vector", U().to_vector<float>()),
      ROW("requires_grad", U().requires_grad()), ROW("requires_grad_", U().requires_grad_()),
      ROW("is_leaf", U().is_leaf()), ROW("grad", U().grad()), ROW("mutable_grad", U().mutable_grad()),
      ROW("set_grad", U().set_grad(A())), ROW("grad_fn", U().grad_fn()), ROW("version", U().version()),
      ROW("bump_version", U().bump_version()), ROW("detach", U().detach()), ROW("detach_", U().detach_()),
      ROW("set_data", U().set_data(A())), ROW("set_data", A().requires_grad_().set_data(U())),
      ROW("backward", U().backward()), ROW("register_hook", U().register_hook(nullptr)),
      ROW("retain_grad", U().retain_grad()),
      ROW("view", U().view({4})), ROW("reshape", U().reshape({4})), ROW("permute", U().permute({0})),
      ROW("transpose", U().transpose(0, 1)), ROW("t", U().t()), ROW("narrow", U().narrow(0, 0, 1)),
      ROW("slice", U().slice(0, 0, 1)), ROW("select", U().select(0, 0)), ROW("expand", U().expand({2})),
      ROW("expand_as", A().expand_as(U())), ROW("squeeze", U().squeeze()), ROW("squeeze", U().squeeze(0)),
      ROW("unsqueeze", U().unsqueeze(0)), ROW("flatten", U().flatten()), ROW("contiguous", U().contiguous()),
      ROW("to", U().to(DType::f64)), ROW("to", U().to(Device::cpu())), ROW("to", U().cpu()),
      ROW("clone", U().clone()), ROW("pin_memory", U().pin_memory()),
      ROW("copy_", U().copy_(A())), ROW("copy_", A().copy_(U())), ROW("fill_", U().fill_(1)),
      ROW("zero_", U().zero_()),
      ROW("add", U().add(A())), ROW("add", A().add(U())), ROW("sub", U().sub(A())), ROW("sub", A().sub(U())),
      ROW("mul", U().mul(A())), ROW("mul", A().mul(U())), ROW("div", U().div(A())), ROW("div", A().div(U())),
      ROW("add", U().add(1)), ROW("sub", U().sub(1)), ROW("mul", U().mul(2)), ROW("div", U().div(2)),
      ROW("pow", U().pow(A())), ROW("pow", A().pow(U())), ROW("pow", U().pow(2)),
      ROW("maximum", U().maximum(A())), ROW("minimum", A().minimum(U())),
      ROW("add_", U().add_(A())), ROW("add", A().add_(U())), ROW("sub_", U().sub_(A())),
      ROW("mul_", U().mul_(A())), ROW("div_", U().div_(A())), ROW("add_", U().add_(1)),
      ROW("sub_", U().sub_(1)), ROW("mul_", U().mul_(2)), ROW("div_", U().div_(2)), ROW("pow_", U().pow_(2)),
      ROW("neg", U().neg()), ROW("neg_", U().neg_()), ROW("exp", U().exp()), ROW("exp_", U().exp_()),
      ROW("log", U().log()), ROW("sqrt", U().sqrt()), ROW("rsqrt", U().rsqrt()), ROW("abs", U().abs()),
      ROW("tanh", U().tanh()), ROW("sigmoid", U().sigmoid()), ROW("relu", U().relu()),
      ROW("relu_", U().relu_()), ROW("silu", U().silu()), ROW("gelu", U().gelu()),
      ROW("clamp", U().clamp(0, 1)), ROW("clamp", U().clamp_min(0)), ROW("clamp", U().clamp_max(1)),
      ROW("clamp_", U().clamp_(0, 1)),
      ROW("eq", U().eq(A())), ROW("eq", A().eq(U())), ROW("ne", U().ne(1)), ROW("lt", U().lt(A())),
      ROW("le", U().le(1)), ROW("gt", A().gt(U())), ROW("ge", U().ge(1)),
      ROW("masked_fill", U().masked_fill(M(), 1)), ROW("masked_fill", A().masked_fill(U(), 1)),
      ROW("masked_fill_", U().masked_fill_(M(), 1)),
      ROW("sum", U().sum()), ROW("mean", U().mean()), ROW("max", U().max()), ROW("min", U().min()),
      ROW("max", U().max(0)), ROW("min", U().min(0)), ROW("argmax", U().argmax()),
      ROW("argmax", U().argmax(0)), ROW("argmin", U().argmin(0)), ROW("var", U().var()),
      ROW("std", U().std()), ROW("norm", U().norm()),
      ROW("matmul", U().matmul(A())), ROW("matmul", A().matmul(U())), ROW("softmax", U().softmax(0)),
      ROW("log_softmax", U().log_softmax(0)), ROW("tril", U().tril()), ROW("triu", U().triu()),
      ROW("index_select", U().index_select(0, I())), ROW("index_select", A().index_select(0, U())),
      ROW("gather", U().gather(0, I())), ROW("scatter_add", U().scatter_add(0, I(), A())),
      ROW("split", U().split(1)), ROW("chunk", U().chunk(2)),
      ROW("neg", -U()), ROW("add", U() + A()), ROW("add", A() + U()), ROW("mul", U() * 2.0),
      ROW("sub", 1.0 - U()), ROW("div", 1.0 / U()),
      // ---- added with issue 20's porting surface ----
      ROW("sort", U().sort()), ROW("argsort", U().argsort()), ROW("topk", U().topk(1)),
      ROW("cumsum", U().cumsum(0)), ROW("cumprod", U().cumprod(0)), ROW("logsumexp", U().logsumexp()),
      ROW("flip", U().flip({0})), ROW("roll", U().roll({1}, {0})), ROW("any", U().any()), ROW("all", U().all()),
      ROW("isnan", U().isnan()), ROW("isinf", U().isinf()), ROW("isfinite", U().isfinite()),
      ROW("isclose", U().isclose(A())), ROW("isclose", A().isclose(U())), ROW("allclose", U().allclose(A())),
      ROW("allclose", A().allclose(U())), ROW("sin", U().sin()), ROW("cos", U().cos()),
      ROW("square", U().square()), ROW("floor", U().floor()), ROW("ceil", U().ceil()),
      ROW("trunc", U().trunc()), ROW("round", U().round()),
      ROW("index", U().index({0})), ROW("select", U()[0]), ROW("index", A()[U()]), ROW("index", U()[I()]),
      ROW("index", U()[{indexing::Slice(), 0}]),
      ROWS("index_put_", Tensor u; u.index_put_({0}, V())), ROWS("index_put_", Tensor a = A(); a.index_put_({0}, U())),
      ROWS("index_put_", Tensor u; u.index_put_({0}, 1.0)),
      ROW("nonzero", U().nonzero()), ROW("masked_select", U().masked_select(M())),
      ROW("masked_select", A().masked_select(U())), ROW("bmm", U().bmm(B3())), ROW("bmm", B3().bmm(U())),
      ROW("outer", U().outer(V())), ROW("outer", V().outer(U())), ROW("repeat", U().repeat({1, 1})),
      ROW("tile", U().tile({1, 1})), ROW("unbind", U().unbind()), ROW("diag", U().diag()),
      ROW("logical_not", U().logical_not()), ROW("logical_and", U().logical_and(M())),
      ROW("logical_or", M().logical_or(U())), ROW("logical_xor", U().logical_xor(M())),
      ROW("bitwise_not", U().bitwise_not()), ROW("bitwise_and", U().bitwise_and(M())),
      ROW("bitwise_or", M().bitwise_or(U())), ROW("bitwise_xor", U().bitwise_xor(M())),
      ROW("sum", U().sum(1)), ROW("mean", U().mean(1)), ROW("var", U().var(1)), ROW("std", U().std(1)),
      ROW("to", U().half()), ROW("to", U().bfloat16()), ROW("to", U().to_float()), ROW("to", U().to_double()),
      ROW("to", U().to_long()), ROW("to", U().to_int()), ROW("to", U().to_bool()), ROW("to", U().cuda()),
      ROW("device", U().is_cpu()),
      ROW("register_post_accumulate_grad_hook", U().register_post_accumulate_grad_hook(nullptr)),
      ROW("item", U().item_double()), ROW("item", U().item_int()), ROWX("data_ptr", U().data_ptr<float>()),
      ROW("log_", U().log_()), ROW("sqrt_", U().sqrt_()), ROW("rsqrt_", U().rsqrt_()), ROW("abs_", U().abs_()),
      ROW("tanh_", U().tanh_()), ROW("sigmoid_", U().sigmoid_()), ROW("silu_", U().silu_()),
      ROW("eq", U().eq(1)), ROW("lt", U().lt(1)), ROW("gt", U().gt(1)),
      ROWS("add_", Tensor u; u += A()), ROWS("sub_", Tensor u; u -= A()), ROWS("mul_", Tensor u; u *= A()),
      ROWS("div_", Tensor u; u /= A()), ROWS("add_", Tensor u; u += 1), ROWS("sub_", Tensor u; u -= 1),
      ROWS("mul_", Tensor u; u *= 2), ROWS("div_", Tensor u; u /= 2), ROWS("add", Tensor a = A(); a += U()),
      ROW("eq", U() == A()), ROW("ne", A() != U()), ROW("lt", U() < A()), ROW("le", A() <= U()),
      ROW("gt", U() > A()), ROW("ge", A() >= U()), ROW("eq", U() == 1), ROW("ne", U() != 1), ROW("lt", U() < 1),
      ROW("le", U() <= 1), ROW("gt", U() > 1), ROW("ge", U() >= 1), ROW("eq", 1 == U()), ROW("gt", 1 < U()),
      ROW("bitwise_and", U() & M()), ROW("bitwise_or", M() | U()), ROW("bitwise_xor", U() ^ M()),
      ROW("bitwise_not", ~U()), ROW("sub", U() - A()), ROW("div", U() / A()), ROW("sub", U() - 1.0),
      ROW("div", U() / 2.0), ROW("add", 1.0 + U()), ROW("mul", 2.0 * U()), ROW("expand_as", U().expand_as(A())),
  };
}

// Each layer's forward with an undefined input: the message names the layer where its forward
// checks its input (BatchNorm1d, LSTM, MultiheadAttention, ...), else the functional op it runs.
std::vector<Case> module_cases() {
  using namespace nn;
  return {
      ROWS("linear", Linear(2, 2)(U())), ROWS("conv2d", Conv2d(1, 1, 1)(U())),
      ROWS("max_pool2d", MaxPool2d(1)(U())), ROWS("layer_norm", LayerNorm({2})(U())),
      ROWS("embedding", Embedding(4, 2)(U())), ROWS("gelu", GELU()(U())), ROWS("dropout", Dropout()(U())),
      ROWS("flatten", Flatten()(U())), ROWS("BatchNorm1d", BatchNorm1d(2)(U())),
      ROWS("BatchNorm2d", BatchNorm2d(1)(U())), ROWS("group_norm", GroupNorm(1, 2)(U())),
      ROWS("rms_norm", RMSNorm({2})(U())), ROWS("avg_pool2d", AvgPool2d(1)(U())),
      ROWS("adaptive_avg_pool2d", AdaptiveAvgPool2d(1)(U())),
      ROWS("adaptive_max_pool2d", AdaptiveMaxPool2d(1)(U())),
      ROWS("interpolate", Upsample(UpsampleOptions{.size = std::nullopt, .scale_factor = 2.0})(U())),
      ROWS("conv1d", Conv1d(1, 1, 1)(U())), ROWS("conv_transpose2d", ConvTranspose2d(1, 1, 1)(U())),
      ROWS("leaky_relu", LeakyReLU()(U())), ROWS("elu", ELU()(U())), ROWS("softplus", Softplus()(U())),
      ROWS("mish", Mish()(U())), ROWS("hardswish", Hardswish()(U())), ROWS("hardsigmoid", Hardsigmoid()(U())),
      ROWS("softmax", Softmax(1)(U())), ROWS("log_softmax", LogSoftmax(1)(U())),
      ROWS("LSTM", LSTM(2, 2)(U())), ROWS("GRU", GRU(2, 2)(U())), ROWS("LSTMCell", LSTMCell(2, 2)(U())),
      ROWS("GRUCell", GRUCell(2, 2)(U())),
      ROWS("MultiheadAttention", MultiheadAttention(2, 1)(U(), U(), U())),
      ROWS("TransformerEncoderLayer", TransformerEncoderLayer(2, 1)(U())),
      ROWS("TransformerDecoderLayer", TransformerDecoderLayer(2, 1)(U(), ones({1, 1, 2}))),
      ROWS("mse_loss", MSELoss()(U(), A())), ROWS("l1_loss", L1Loss()(U(), A())),
      ROWS("smooth_l1_loss", SmoothL1Loss()(U(), A())), ROWS("huber_loss", HuberLoss()(U(), A())),
      ROWS("binary_cross_entropy", BCELoss()(U(), P())),
      ROWS("binary_cross_entropy_with_logits", BCEWithLogitsLoss()(U(), P())),
      ROWS("nll_loss", NLLLoss()(U(), I())), ROWS("kl_div", KLDivLoss()(U(), P())),
      ROWS("cross_entropy", CrossEntropyLoss()(U(), I())),
  };
}

#undef ROW
#undef ROWX
#undef ROWS

void expect_named_error(const Case& c) {
  SCOPED_TRACE(c.op);
  try {
    c.call();
    ADD_FAILURE() << c.op << ": no exception for an undefined tensor";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    const bool named = msg.find(std::string("[") + c.op) != std::string::npos;
    EXPECT_TRUE(named || (c.accessor_name_ok && msg.rfind("[", 0) == 0))
        << c.op << ": the message should name the op: " << msg;
    EXPECT_NE(msg.find("undefined tensor"), std::string::npos) << c.op << ": " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << c.op << ": not an ember::Error: " << e.what();
  }
}

}  // namespace

TEST(UndefinedTensors, EveryOpThrowsNamingTheOp) {
  for (const Case& c : function_cases()) expect_named_error(c);
}

TEST(UndefinedTensors, EveryTensorMethodThrowsNamingIt) {
  for (const Case& c : method_cases()) expect_named_error(c);
}

TEST(UndefinedTensors, EveryLayerForwardThrowsNamingItsOp) {
  for (const Case& c : module_cases()) expect_named_error(c);
}

TEST(UndefinedTensors, GradAfterZeroGradIsUndefinedAndThrows) {
  Tensor w = ones({2}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  (w * 2).sum().backward();
  opt.zero_grad();
  ASSERT_FALSE(w.grad().defined());
  // The six crashes of issue 20 were of this kind: an op or accessor on the missing grad.
  EXPECT_NE(test::message_of<ValueError>([&] { (void)(w.grad() * 2); }).find("undefined tensor"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { (void)w.grad().sum(); }).find("undefined tensor"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { (void)w.grad().exp(); }).find("[exp]"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { (void)w.grad().numel(); }).find("[numel]"), std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { (void)w.grad().item<float>(); }).find("[item]"), std::string::npos);
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");  // printing an undefined tensor is fine
}

TEST(UndefinedTensors, OptionalTensorsMayBeUndefined) {
  // An absent bias / weight is part of these ops' contract, not an error.
  const Tensor x = A();
  EXPECT_TRUE(test::all_close(linear(x, A(), Tensor()), linear(x, A(), zeros({2}))));
  EXPECT_TRUE(test::all_close(layer_norm(x, {2}, Tensor(), Tensor()), layer_norm(x, {2}, ones({2}), zeros({2}))));
  const Tensor img = Q();
  EXPECT_TRUE(test::all_close(conv2d(img, ones({1, 1, 1, 1}), Tensor()),
                              conv2d(img, ones({1, 1, 1, 1}), zeros({1}))));
  const Tensor x4 = arange(0, 8, 1, DType::f32).reshape({2, 2, 2});  // [N, C, L]
  EXPECT_TRUE(test::all_close(batch_norm(x4, Tensor(), Tensor(), Tensor(), Tensor(), true),
                              batch_norm(x4, Tensor(), Tensor(), ones({2}), zeros({2}), true)));
  EXPECT_TRUE(test::all_close(group_norm(x4, 1, Tensor(), Tensor()), group_norm(x4, 1, ones({2}), zeros({2}))));
  EXPECT_TRUE(test::all_close(rms_norm(x, {2}, Tensor()), rms_norm(x, {2}, ones({2}))));
  const Tensor q = arange(0, 4, 1, DType::f32).reshape({1, 1, 2, 2}).mul(0.3);
  EXPECT_TRUE(test::all_close(scaled_dot_product_attention(q, q, q, Tensor()),
                              scaled_dot_product_attention(q, q, q, zeros({2, 2}))));
  EXPECT_TRUE(test::all_close(cross_entropy(x, I(), {.weight = Tensor()}), cross_entropy(x, I(), {.weight = ones({2})})));
  EXPECT_TRUE(test::all_close(nll_loss(x, I(), {.weight = Tensor()}), nll_loss(x, I(), {.weight = ones({2})})));
  EXPECT_TRUE(test::all_close(binary_cross_entropy(P(), P(), Tensor()), binary_cross_entropy(P(), P(), ones({2, 2}))));
  EXPECT_TRUE(test::all_close(nn::functional::binary_cross_entropy_with_logits(x, P(), Tensor(), Reduction::mean, Tensor()),
                              nn::functional::binary_cross_entropy_with_logits(x, P(), ones({2}), Reduction::mean, ones({2}))));
  EXPECT_TRUE(test::all_close(conv1d(ones({1, 1, 3}), ones({1, 1, 2}), Tensor()), full({1, 1, 2}, 2.0)));
  Tensor y = x.clone().requires_grad_();
  y.sum().backward(Tensor());  // an undefined gradient argument means "ones" for a scalar
  EXPECT_TRUE(test::all_close(y.grad(), ones({2, 2})));
  // lstm_cell_pointwise's gh is optional (a cell without a hidden-to-hidden term).
  const Tensor gx = arange(0, 8, 1, DType::f32).reshape({1, 8}).mul(0.1), c = full({1, 2}, 0.5);
  EXPECT_TRUE(test::all_close(lstm_cell_pointwise(gx, Tensor(), c).second, lstm_cell_pointwise(gx, zeros({1, 8}), c).second));
  // batch_norm's running statistics go together: one of them undefined is named as such.
  EXPECT_NE(test::message_of<ValueError>([&] { (void)batch_norm(x, Tensor(), ones({2})); }).find("[batch_norm]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ValueError>([&] { (void)batch_norm(x, zeros({2}), Tensor()); }).find("[batch_norm]"),
            std::string::npos);
  EXPECT_FALSE(Tensor().defined());  // defined() and is_pinned() are predicates and never throw
  EXPECT_FALSE(Tensor().is_pinned());
  EXPECT_FALSE(Tensor().is_same(A()));
}
