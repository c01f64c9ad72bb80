// Undefined tensors (Tensor(), or p.grad() after zero_grad()) passed to any public op or Tensor
// method throw ember::ValueError, never crash (issue 20; Note [undefined tensors] in
// core/include/ember/tensor.h: the one check is in Tensor's impl accessor). The table
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

#define ROW(name, ...) Case{name, [] { (void)(__VA_ARGS__); }, false}
// The op reads its argument's structure (sizes(), dtype(), ...) before its own checks, so the
// accessor's message names the accessor ("[sizes] called on an undefined tensor") or the inner op
// it reaches first ("[linear]" inside gelu_mlp): accepted, still an ember::ValueError, no crash.
#define ROWX(name, ...) Case{name, [] { (void)(__VA_ARGS__); }, true}

std::vector<Case> function_cases() {
  return {
      // ---- elementwise ----
      ROWX("add", add(U(), A())), ROWX("add", add(A(), U())),
      ROWX("sub", sub(U(), A())), ROWX("sub", sub(A(), U())),
      ROWX("mul", mul(U(), A())), ROWX("mul", mul(A(), U())),
      ROWX("div", div(U(), A())), ROWX("div", div(A(), U())),
      ROWX("pow", pow(U(), A())), ROWX("pow", pow(A(), U())), ROW("pow", pow(U(), 2.0)),
      ROW("maximum", maximum(U(), A())), ROW("maximum", maximum(A(), U())),
      ROW("minimum", minimum(U(), A())), ROW("minimum", minimum(A(), U())),
      ROW("neg", neg(U())), ROW("exp", exp(U())), ROW("log", log(U())), ROW("sqrt", sqrt(U())),
      ROW("rsqrt", rsqrt(U())), ROW("reciprocal", reciprocal(U())), ROW("abs", abs(U())),
      ROW("sign", sign(U())), ROW("tanh", tanh(U())), ROW("sigmoid", sigmoid(U())),
      ROW("relu", relu(U())), ROW("gelu", gelu(U())), ROW("silu", silu(U())),
      ROW("clamp", clamp(U(), 0.0, 1.0)),
      ROW("where", where(U(), A(), A())), ROWX("where", where(M(), U(), A())),
      ROWX("where", where(M(), A(), U())), ROWX("where", where(M(), U(), 1.0)),
      ROWX("where", where(M(), 1.0, U())), ROW("where", where(U(), A(), 1.0)),
      ROW("masked_fill", masked_fill(U(), M(), 1.0)), ROWX("masked_fill", masked_fill(A(), U(), 1.0)),
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
      ROWX("sum_to", sum_to(U(), {2})),
      // ---- reductions ----
      ROWX("sum", sum(U())), ROWX("mean", mean(U())), ROW("amax", amax(U())), ROW("amin", amin(U())),
      ROWX("max", max(U(), 0)), ROWX("min", min(U(), 0)), ROW("argmax", argmax(U())), ROW("argmin", argmin(U())),
      ROW("var", var(U())), ROW("std", ember::std(U())), ROW("norm", norm(U())),
      // ---- linear algebra ----
      ROW("matmul", matmul(U(), A())), ROW("matmul", matmul(A(), U())),
      ROW("linear", linear(U(), A())), ROW("linear", linear(A(), U())),
      ROWX("gelu_mlp", gelu_mlp(U(), A(), Tensor(), A(), Tensor())),
      ROWX("gelu_mlp", gelu_mlp(A(), U(), Tensor(), A(), Tensor())),
      ROWX("gelu_mlp", gelu_mlp(A(), A(), Tensor(), U(), Tensor())),
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
      ROW("backward", U().backward()), ROWX("register_hook", U().register_hook(nullptr)),
      ROWX("retain_grad", U().retain_grad()),
      ROW("view", U().view({4})), ROW("reshape", U().reshape({4})), ROW("permute", U().permute({0})),
      ROW("transpose", U().transpose(0, 1)), ROWX("t", U().t()), ROW("narrow", U().narrow(0, 0, 1)),
      ROW("slice", U().slice(0, 0, 1)), ROW("select", U().select(0, 0)), ROW("expand", U().expand({2})),
      ROWX("expand", A().expand_as(U())), ROW("squeeze", U().squeeze()), ROW("squeeze", U().squeeze(0)),
      ROW("unsqueeze", U().unsqueeze(0)), ROW("flatten", U().flatten()), ROW("contiguous", U().contiguous()),
      ROWX("to", U().to(DType::f64)), ROWX("to", U().to(Device::cpu())), ROWX("to", U().cpu()),
      ROW("clone", U().clone()), ROW("pin_memory", U().pin_memory()),
      ROW("copy_", U().copy_(A())), ROWX("copy_", A().copy_(U())), ROW("fill_", U().fill_(1)),
      ROWX("zero_", U().zero_()),
      ROWX("add", U().add(A())), ROWX("add", A().add(U())), ROWX("sub", U().sub(A())), ROWX("sub", A().sub(U())),
      ROWX("mul", U().mul(A())), ROWX("mul", A().mul(U())), ROWX("div", U().div(A())), ROWX("div", A().div(U())),
      ROWX("add", U().add(1)), ROWX("sub", U().sub(1)), ROWX("mul", U().mul(2)), ROWX("div", U().div(2)),
      ROWX("pow", U().pow(A())), ROWX("pow", A().pow(U())), ROW("pow", U().pow(2)),
      ROW("maximum", U().maximum(A())), ROW("minimum", A().minimum(U())),
      ROW("add_", U().add_(A())), ROWX("add", A().add_(U())), ROW("sub_", U().sub_(A())),
      ROW("mul_", U().mul_(A())), ROW("div_", U().div_(A())), ROWX("add_", U().add_(1)),
      ROWX("sub_", U().sub_(1)), ROWX("mul_", U().mul_(2)), ROWX("div_", U().div_(2)), ROW("pow_", U().pow_(2)),
      ROW("neg", U().neg()), ROW("neg_", U().neg_()), ROW("exp", U().exp()), ROW("exp_", U().exp_()),
      ROW("log", U().log()), ROW("sqrt", U().sqrt()), ROW("rsqrt", U().rsqrt()), ROW("abs", U().abs()),
      ROW("tanh", U().tanh()), ROW("sigmoid", U().sigmoid()), ROW("relu", U().relu()),
      ROW("relu_", U().relu_()), ROW("silu", U().silu()), ROW("gelu", U().gelu()),
      ROW("clamp", U().clamp(0, 1)), ROW("clamp", U().clamp_min(0)), ROW("clamp", U().clamp_max(1)),
      ROW("clamp_", U().clamp_(0, 1)),
      ROW("eq", U().eq(A())), ROW("eq", A().eq(U())), ROWX("ne", U().ne(1)), ROW("lt", U().lt(A())),
      ROWX("le", U().le(1)), ROW("gt", A().gt(U())), ROWX("ge", U().ge(1)),
      ROW("masked_fill", U().masked_fill(M(), 1)), ROWX("masked_fill", A().masked_fill(U(), 1)),
      ROW("masked_fill_", U().masked_fill_(M(), 1)),
      ROWX("sum", U().sum()), ROWX("mean", U().mean()), ROWX("max", U().max()), ROWX("min", U().min()),
      ROWX("max", U().max(0)), ROWX("min", U().min(0)), ROW("argmax", U().argmax()),
      ROW("argmax", U().argmax(0)), ROW("argmin", U().argmin(0)), ROW("var", U().var()),
      ROW("std", U().std()), ROW("norm", U().norm()),
      ROW("matmul", U().matmul(A())), ROW("matmul", A().matmul(U())), ROW("softmax", U().softmax(0)),
      ROW("log_softmax", U().log_softmax(0)), ROW("tril", U().tril()), ROW("triu", U().triu()),
      ROW("index_select", U().index_select(0, I())), ROW("index_select", A().index_select(0, U())),
      ROW("gather", U().gather(0, I())), ROW("scatter_add", U().scatter_add(0, I(), A())),
      ROW("split", U().split(1)), ROW("chunk", U().chunk(2)),
      ROW("neg", -U()), ROWX("add", U() + A()), ROWX("add", A() + U()), ROWX("mul", U() * 2.0),
      ROWX("sub", 1.0 - U()), ROWX("div", 1.0 / U()),
  };
}

#undef ROW
#undef ROWX

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
  Tensor y = x.clone().requires_grad_();
  y.sum().backward(Tensor());  // an undefined gradient argument means "ones" for a scalar
  EXPECT_TRUE(test::all_close(y.grad(), ones({2, 2})));
  EXPECT_FALSE(Tensor().defined());  // defined() itself never throws
  EXPECT_FALSE(Tensor().is_same(A()));
}
