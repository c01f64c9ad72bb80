// ONNX export (ember/io/onnx.h): each model is exported at one batch size (and sequence
// length), then ONNX Runtime (npm onnxruntime-node) runs the file at others, and its outputs
// must match ember's own forward there (f32, 1e-5 relative). Every exported file has passed
// ONNX's checker and strict shape inference inside export_onnx. The refusals name the op.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "ember/ember.h"
#include "support/onnx_runtime.h"
#include "support/test_support.h"

namespace {

using namespace ember;
namespace fs = std::filesystem;

#define EMBER_SKIP_WITHOUT_ONNX()                                                          \
  do {                                                                                      \
    if (!io::onnx_export_available()) GTEST_SKIP() << "this build has no ONNX export";      \
  } while (0)
#define EMBER_SKIP_WITHOUT_ORT()                                                \
  do {                                                                          \
    EMBER_SKIP_WITHOUT_ONNX();                                                  \
    if (std::string why = test::onnxruntime_missing(); !why.empty()) GTEST_SKIP() << why; \
  } while (0)

fs::path model_path(const std::string& name) {
  return fs::temp_directory_path() / ("ember-onnx-" + std::to_string(::getpid()) + "-" + name + ".onnx");
}

// Exports forward at `example`, then runs ONNX Runtime on each of `others` and compares every
// output with ember's forward on it.
void expect_runtime_matches(nn::Module& model, const io::OnnxForward& forward, const TensorList& example,
                            const std::vector<TensorList>& others, const io::OnnxExportOptions& options,
                            const std::string& name) {
  const fs::path path = model_path(name);
  io::export_onnx(model, forward, example, path.string(), options);
  model.eval();
  for (const TensorList& inputs : others) {
    std::vector<std::pair<std::string, Tensor>> feeds;
    for (size_t i = 0; i < inputs.size(); ++i)
      feeds.emplace_back(options.input_names.empty() ? (inputs.size() == 1 ? "input" : "input_" + std::to_string(i))
                                                     : options.input_names[i],
                         inputs[i]);
    const test::OnnxRun run = test::run_onnxruntime(path.string(), feeds);
    TensorList expected;
    {
      NoGradGuard no_grad;
      expected = forward(inputs);
    }
    ASSERT_EQ(run.outputs.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k) {
      SCOPED_TRACE(str("output ", uint64_t(k), " at input shape ", inputs[0].sizes()));
      ASSERT_EQ(run.outputs[k].sizes(), expected[k].sizes());
      EXPECT_TRUE(test::all_close(run.outputs[k], expected[k].cpu(), 1e-5, 1e-6))
          << "max |diff| " << (run.outputs[k] - expected[k].cpu()).abs().max().item<double>();
    }
  }
  fs::remove(path);
}

// Linear layers and the activations between them, two outputs.
struct Mlp : nn::Module {
  nn::Linear fc1{12, 16}, fc2{16, 16}, fc3{16, 16}, head{16, 5};
  nn::LayerNorm norm{16};
  nn::Dropout dropout{0.5};
  Mlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_module("fc3", fc3);
    register_module("head", head);
    register_module("norm", norm);
    register_module("dropout", dropout);
  }
  TensorList both(const Tensor& x) {
    Tensor h = relu(fc1(x.flatten(1)));
    h = norm(gelu(fc2(h)) + silu(h) * 0.5);
    h = dropout(tanh(fc3(h)) + sigmoid(h) - gelu(h, true) / 3.0);
    Tensor logits = head(leaky_relu(h, 0.1).pow(2.0) + elu(h) + softplus(h * 4.0, 1.0, 2.0));
    return {log_softmax(logits, 1), softmax(logits, -1).mean({1}, true)};
  }
};

TEST(OnnxExport, MlpMatchesOnnxRuntimeAtOtherBatchSizes) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(1);
  Mlp net;
  const io::OnnxExportOptions options{.input_names = {"x"},
                                      .output_names = {"log_probs", "mean_prob"},
                                      .dynamic_axes = {{"x", {{0, "batch"}}}}};
  expect_runtime_matches(
      net, [&](const TensorList& in) { return net.both(in[0]); }, {randn({2, 3, 4})},
      {{randn({5, 3, 4})}, {randn({1, 3, 4})}}, options, "mlp");
}

// Convolutions, pools and normalizations.
struct Cnn : nn::Module {
  nn::Conv2d conv1{3, 8, 3, {.padding = 1}};
  nn::BatchNorm2d bn{8};
  nn::Conv2d conv2{8, 8, 3, {.stride = 2, .padding = 2, .dilation = 2, .groups = 2}};
  nn::GroupNorm gn{2, 8};
  nn::MaxPool2d pool{2};
  nn::AvgPool2d avg{3, 1, 1, false, false};
  nn::AdaptiveAvgPool2d to2x2{2};
  nn::RMSNorm rms{{8, 2, 2}};
  nn::Linear fc{32, 4};
  Cnn() {
    register_module("conv1", conv1);
    register_module("bn", bn);
    register_module("conv2", conv2);
    register_module("gn", gn);
    register_module("avg", avg);
    register_module("to2x2", to2x2);
    register_module("rms", rms);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = pool(relu(bn(conv1(x))));            // [B, 8, 6, 6]
    h = gn(conv2(h)) + avg(h).slice(2, 0, 3).slice(3, 0, 3);  // [B, 8, 3, 3]
    h = cat({h, h.slice(3, 0, 1)}, 3);              // [B, 8, 3, 4]
    h = to2x2(cat({h, h.slice(2, 1, 2)}, 2));       // [B, 8, 4, 4] -> [B, 8, 2, 2]
    h = rms(h) + adaptive_avg_pool2d(h, 1);
    return fc(h.flatten(1));
  }
};

TEST(OnnxExport, CnnMatchesOnnxRuntimeAtOtherBatchSizes) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(2);
  Cnn net;
  {  // running statistics that are not the initial 0 / 1
    NoGradGuard no_grad;
    net.train();
    for (int i = 0; i < 3; ++i) net(randn({6, 3, 12, 12}) * 2.0 + 0.5);
  }
  const io::OnnxExportOptions options{.dynamic_axes = {{"input", {{0, "batch"}}}}};
  expect_runtime_matches(
      net, [&](const TensorList& in) { return TensorList{net(in[0])}; }, {randn({2, 3, 12, 12})},
      {{randn({3, 3, 12, 12})}, {randn({1, 3, 12, 12})}}, options, "cnn");
  EXPECT_FALSE(net.is_training());  // expect_runtime_matches left it in eval
}

// Token ids -> embeddings -> a hand-written attention block: dynamic batch and sequence.
struct TinyAttention : nn::Module {
  static constexpr int64_t kHeads = 2, kDim = 16;
  nn::Embedding tok{50, kDim};
  Tensor pos;
  nn::RMSNorm norm{kDim};
  nn::Linear qkv{kDim, 3 * kDim}, proj{kDim, kDim}, head{kDim, 7};
  TinyAttention() {
    register_module("tok", tok);
    pos = register_parameter("pos", randn({32, kDim}) * 0.1);
    register_module("norm", norm);
    register_module("qkv", qkv);
    register_module("proj", proj);
    register_module("head", head);
  }
  Tensor forward(const Tensor& ids) override {
    const int64_t B = ids.size(0), T = ids.size(1), D = kDim / kHeads;
    Tensor x = tok(ids) + pos.slice(0, 0, T);
    TensorList parts = qkv(norm(x)).chunk(3, -1);
    auto heads = [&](const Tensor& t) { return t.view({B, T, kHeads, D}).transpose(1, 2); };
    Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    Tensor att = softmax(q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(double(D))), -1);
    Tensor y = att.matmul(v).transpose(1, 2).reshape({B, T, kDim});
    x = x + proj(y);
    return head(x.mean({1}));
  }
};

TEST(OnnxExport, EmbeddingAttentionMatchesOnnxRuntimeAtOtherBatchAndLength) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(3);
  TinyAttention net;
  const io::OnnxExportOptions options{.input_names = {"ids"},
                                      .output_names = {"logits"},
                                      .dynamic_axes = {{"ids", {{0, "batch"}, {1, "sequence"}}}}};
  expect_runtime_matches(
      net, [&](const TensorList& in) { return TensorList{net(in[0])}; }, {randint(0, 50, {2, 5})},
      {{randint(0, 50, {3, 9})}, {randint(0, 50, {1, 1})}}, options, "attention");
}

// GPT-2's forward (logits): fused attention over the packed qkv, gelu_mlp, the residual adds
// fused into layer norms, positions from arange over the sequence, the tied lm_head.
TEST(OnnxExport, Gpt2LogitsMatchOnnxRuntimeAtOtherBatchAndLength) {
  EMBER_SKIP_WITHOUT_ORT();
  Generator gen(6);
  nn::GPT gpt({.n_layer = 2, .n_head = 2, .n_embd = 32, .block_size = 16, .vocab_size = 61, .padded_vocab_size = 64},
              &gen);
  const io::OnnxExportOptions options{.input_names = {"ids"},
                                      .output_names = {"logits"},
                                      .dynamic_axes = {{"ids", {{0, "batch"}, {1, "sequence"}}}}};
  expect_runtime_matches(
      gpt, [&](const TensorList& in) { return TensorList{gpt(in[0])}; }, {randint(0, 61, {2, 5}, DType::i64, &gen)},
      {{randint(0, 61, {3, 11}, DType::i64, &gen)}, {randint(0, 61, {1, 16}, DType::i64, &gen)}}, options, "gpt2");
}

// LSTM (two layers, bidirectional, batch_first, given initial states) and GRU: ONNX's LSTM and
// GRU ops with the gates reordered, at other batch sizes and sequence lengths.
struct Recurrent : nn::Module {
  nn::LSTM lstm{6, 8, {.num_layers = 2, .batch_first = true, .bidirectional = true}};
  nn::GRU gru{16, 5};
  Recurrent() {
    register_module("lstm", lstm);
    register_module("gru", gru);
  }
  TensorList forward3(const TensorList& in) {
    auto [out, hc] = lstm(in[0], std::make_tuple(in[1], in[2]));
    auto [y, h] = gru(out.transpose(0, 1));  // time-major, zero initial state
    return {y, std::get<0>(hc), std::get<1>(hc), h};
  }
};

TEST(OnnxExport, LstmAndGruMatchOnnxRuntimeAtOtherBatchAndLength) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(7);
  Recurrent net;
  const io::OnnxExportOptions options{
      .input_names = {"x", "h0", "c0"},
      .output_names = {"y", "h_n", "c_n", "gru_h"},
      .dynamic_axes = {{"x", {{0, "batch"}, {1, "time"}}}, {"h0", {{1, "batch"}}}, {"c0", {{1, "batch"}}}}};
  auto inputs = [](int64_t n, int64_t t) { return TensorList{randn({n, t, 6}), randn({4, n, 8}), randn({4, n, 8})}; };
  expect_runtime_matches(
      net, [&](const TensorList& in) { return net.forward3(in); }, inputs(2, 3), {inputs(3, 7), inputs(1, 1)}, options,
      "rnn");
}

// Conv1d, ConvTranspose2d (stride, padding, output_padding, groups, dilation), unbatched too.
struct Deconv : nn::Module {
  nn::Conv1d conv1d{4, 6, 3, {.stride = 2, .padding = 1}};
  nn::ConvTranspose2d up{3, 4, 3, {.stride = 2, .padding = 1, .output_padding = 1}};
  nn::ConvTranspose2d grouped{4, 4, {2, 3}, {.stride = {1, 2}, .groups = 2, .bias = false, .dilation = 2}};
  Deconv() {
    register_module("conv1d", conv1d);
    register_module("up", up);
    register_module("grouped", grouped);
  }
  TensorList two(const TensorList& in) { return {conv1d(in[0]), grouped(relu(up(in[1])))}; }
};

TEST(OnnxExport, Conv1dAndConvTranspose2dMatchOnnxRuntime) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(8);
  Deconv net;
  const io::OnnxExportOptions options{
      .dynamic_axes = {{"input_0", {{0, "batch"}, {2, "length"}}}, {"input_1", {{0, "batch"}}}}};
  expect_runtime_matches(
      net, [&](const TensorList& in) { return net.two(in); }, {randn({2, 4, 9}), randn({2, 3, 5, 6})},
      {{randn({3, 4, 12}), randn({1, 3, 5, 6})}}, options, "deconv");
}

// MultiheadAttention with a key padding mask and a float attn_mask, the weights returned too,
// and a TransformerEncoderLayer (norm_first, gelu) with a bool mask.
struct Attention : nn::Module {
  nn::MultiheadAttention mha{16, 4, {.batch_first = true}};
  nn::TransformerEncoderLayer layer{16, 2, {.dim_feedforward = 24, .activation = "gelu", .batch_first = true, .norm_first = true}};
  Attention() {
    register_module("mha", mha);
    register_module("layer", layer);
  }
  TensorList run(const TensorList& in) {  // x [N, L, 16], padding [N, L] bool, attn_mask [L, L] float
    auto [y, w] = mha(in[0], in[0], in[0], in[1], true, in[2]);
    return {layer(y, in[2].lt(-1.0)), w};
  }
};

TEST(OnnxExport, MultiheadAttentionAndEncoderLayerMatchOnnxRuntime) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(9);
  Attention net;
  // No row may be fully masked (softmax of all -inf is NaN on both sides).
  auto inputs = [](int64_t n, int64_t l) {
    Tensor pad = zeros({n, l}, DType::b8);
    if (l > 2) pad = arange(l).ge(l - 1).unsqueeze(0).expand({n, l}).contiguous();
    return TensorList{randn({n, l, 16}), pad, randn({l, l}).mul(2.0).clamp(-3.0, 0.0)};
  };
  const io::OnnxExportOptions options{.input_names = {"x", "padding", "mask"},
                                      .output_names = {"y", "weights"},
                                      .dynamic_axes = {{"x", {{0, "batch"}}}, {"padding", {{0, "batch"}}}}};
  expect_runtime_matches(
      net, [&](const TensorList& in) { return net.run(in); }, inputs(2, 5), {inputs(3, 5), inputs(1, 5)}, options,
      "mha");
}

// Llama's forward: RMSNorm, rotary embeddings from its cached tables, grouped-query attention
// (k and v heads repeated), SwiGLU, an untied lm_head.
TEST(OnnxExport, LlamaLogitsMatchOnnxRuntimeAtOtherBatchAndLength) {
  EMBER_SKIP_WITHOUT_ORT();
  Generator gen(10);
  nn::Llama llama({.n_layer = 2, .n_head = 4, .n_kv_head = 2, .n_embd = 32, .intermediate_size = 48,
                   .block_size = 16, .vocab_size = 61, .padded_vocab_size = 64},
                  &gen);
  const io::OnnxExportOptions options{.input_names = {"ids"},
                                      .output_names = {"logits"},
                                      .dynamic_axes = {{"ids", {{0, "batch"}, {1, "sequence"}}}}};
  expect_runtime_matches(
      llama, [&](const TensorList& in) { return TensorList{llama(in[0])}; }, {randint(0, 61, {2, 5}, DType::i64, &gen)},
      {{randint(0, 61, {3, 11}, DType::i64, &gen)}, {randint(0, 61, {1, 16}, DType::i64, &gen)}}, options, "llama");
}

TEST(OnnxExport, NamesInputsOutputsAndDynamicAxes) {
  EMBER_SKIP_WITHOUT_ORT();
  manual_seed(4);
  Mlp net;
  const fs::path path = model_path("names");
  io::export_onnx(net, [&](const TensorList& in) { return net.both(in[0]); }, {randn({2, 3, 4})}, path.string(),
                  {.input_names = {"x"}, .output_names = {"a", "b"}, .dynamic_axes = {{"x", {{0, "n"}}}}});
  const test::OnnxRun run = test::run_onnxruntime(path.string(), {{"x", randn({4, 3, 4})}});
  EXPECT_EQ(run.input_names, std::vector<std::string>({"x"}));
  EXPECT_EQ(run.output_names, std::vector<std::string>({"a", "b"}));
  EXPECT_EQ(run.outputs[0].sizes(), Shape({4, 5}));
  EXPECT_EQ(run.outputs[1].sizes(), Shape({4, 1}));
  // Without dynamic axes the batch is fixed: ONNX Runtime refuses another.
  io::export_onnx(net, [&](const TensorList& in) { return net.both(in[0]); }, {randn({2, 3, 4})}, path.string(),
                  {.input_names = {"x"}});
  EXPECT_NO_THROW(test::run_onnxruntime(path.string(), {{"x", randn({2, 3, 4})}}));
  EXPECT_THROW(test::run_onnxruntime(path.string(), {{"x", randn({3, 3, 4})}}), std::runtime_error);
  fs::remove(path);
}

// ---- refusals: each names the op (no ORT needed) ----

struct Lambda : nn::Module {
  std::function<Tensor(const Tensor&)> fn;
  nn::Linear fc{4, 4};
  explicit Lambda(std::function<Tensor(const Tensor&)> f) : fn(std::move(f)) { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override { return fn(fc(x)); }
};

// [B, F] tensors side by side as [B, F, n].
Tensor stack_columns(const TensorList& ts) {
  TensorList cols;
  for (const Tensor& t : ts) cols.push_back(t.unsqueeze(-1));
  return cat(cols, -1);
}

std::string export_error(std::function<Tensor(const Tensor&)> fn, Tensor example = Tensor(),
                         io::OnnxExportOptions options = {.dynamic_axes = {{"input", {{0, "batch"}}}}}) {
  Lambda m(std::move(fn));
  if (!example.defined()) example = randn({2, 4});
  const fs::path path = model_path("refused");
  fs::remove(path);
  std::string message = test::message_of<ValueError>([&] { io::export_onnx(m, example, path.string(), options); });
  EXPECT_FALSE(fs::exists(path)) << "a refused export wrote its file";
  return message;
}

// Every elementwise, comparison and logic op with an ONNX form, in one graph (each output a
// column of the result, so a wrong mapping shows as a mismatch in its own column).
TEST(OnnxExport, ElementwiseComparisonAndLogicOpsMatchOnnxRuntime) {
  EMBER_SKIP_WITHOUT_ORT();
  Lambda m([](const Tensor& h) {
    const Tensor a = h.abs() + 0.5, t = h * 3.0;
    const TensorList unary = {h.abs(), sign(h), sin(h), cos(h), floor(t), ceil(t), reciprocal(a), rsqrt(a),
                              square(h), exp(h), log(a), -h, sqrt(a), maximum(h, t), minimum(h, t),
                              hardswish(t), hardsigmoid(t), mish(t), h.clamp(-0.5, 0.25), h.clamp_min(0.1),
                              h.clamp_max(-0.1), h.pow(t.abs().add(1.0)), where(h.gt(0.0), h, t)};
    const Tensor p = h.gt(0.0), q = t.lt(0.5);
    const TensorList logic = {h.eq(floor(h)), h.ne(t), h.lt(0.2), h.le(0.2), h.ge(-0.1), logical_and(p, q),
                              logical_or(p, q), logical_xor(p, q), logical_not(p)};
    Tensor out = stack_columns(unary);
    for (const Tensor& b : logic) out = cat({out, b.to(DType::f32).unsqueeze(-1)}, -1);
    return out;
  });
  manual_seed(12);
  expect_runtime_matches(
      m, [&](const TensorList& in) { return TensorList{m(in[0])}; }, {randn({2, 4})}, {{randn({5, 4})}, {randn({1, 4})}},
      {.dynamic_axes = {{"input", {{0, "batch"}}}}}, "elementwise");
}

TEST(OnnxExport, AnOpWithoutExportIsNamed) {
  EMBER_SKIP_WITHOUT_ONNX();
  const std::string m = export_error([](const Tensor& h) { return cumsum(h, 1); });
  EXPECT_NE(m.find("[export_onnx] 'cumsum'"), std::string::npos) << m;
  EXPECT_NE(m.find("has no ONNX export"), std::string::npos) << m;
}

TEST(OnnxExport, AnOpTheOutputsDoNotNeedIsLeftOut) {
  EMBER_SKIP_WITHOUT_ONNX();
  Lambda m([](const Tensor& h) {
    Tensor unused = cumsum(h, 1);
    return relu(h);
  });
  const fs::path path = model_path("dead");
  EXPECT_NO_THROW(io::export_onnx(m, randn({2, 4}), path.string()));
  EXPECT_TRUE(fs::exists(path));
  fs::remove(path);
}

TEST(OnnxExport, ATensorComputedByAnUntracedOpIsRefused) {
  EMBER_SKIP_WITHOUT_ONNX();
  // argmax is not traced: the mask made from it differs between the two traces.
  const std::string m = export_error([](const Tensor& h) { return h.masked_fill(h.argmax(1, true).eq(0), 0.0); });
  EXPECT_NE(m.find("'eq'"), std::string::npos) << m;
  EXPECT_NE(m.find("no exported op produced"), std::string::npos) << m;
}

TEST(OnnxExport, AConstantIsWrittenOnce) {
  EMBER_SKIP_WITHOUT_ORT();
  // A fixed mask built inside forward is a constant (the same in both traces).
  Lambda m([](const Tensor& h) { return h.masked_fill(tensor<double>({1, 0, 0, 1}).to(DType::b8), -1.0) * 2.0; });
  manual_seed(5);
  expect_runtime_matches(
      m, [&](const TensorList& in) { return TensorList{m(in[0])}; }, {randn({2, 4})}, {{randn({6, 4})}},
      {.dynamic_axes = {{"input", {{0, "batch"}}}}}, "constant");
}

TEST(OnnxExport, AnAttributeThatFollowsADynamicAxisIsRefused) {
  EMBER_SKIP_WITHOUT_ONNX();
  const std::string m = export_error([](const Tensor& h) { return h.select(0, h.size(0) - 1); });
  EXPECT_NE(m.find("'select'"), std::string::npos) << m;
  EXPECT_NE(m.find("attribute 'index'"), std::string::npos) << m;
  // The same forward exports with a fixed batch.
  Lambda ok([](const Tensor& h) { return h.select(0, h.size(0) - 1); });
  const fs::path path = model_path("fixed");
  EXPECT_NO_THROW(io::export_onnx(ok, randn({2, 4}), path.string()));
  fs::remove(path);
}

TEST(OnnxExport, ControlFlowOnSizesIsRefused) {
  EMBER_SKIP_WITHOUT_ONNX();
  const std::string m = export_error([](const Tensor& h) { return h.size(0) > 2 ? relu(h) : tanh(h); });
  EXPECT_NE(m.find("depend on the input's values or sizes"), std::string::npos) << m;
}

TEST(OnnxExport, InPlaceChangesAfterAnOpAreRefused) {
  EMBER_SKIP_WITHOUT_ONNX();
  // fill_ is not traced: relu's input changed under it after linear produced it.
  const std::string m = export_error([](const Tensor& h) {
    Tensor y = h * 1.0;
    Tensor z = relu(y);
    y.detach().fill_(3.0);
    return z + y;
  });
  EXPECT_NE(m.find("modified in place"), std::string::npos) << m;
}

TEST(OnnxExport, BadOptionsAreRefused) {
  EMBER_SKIP_WITHOUT_ONNX();
  auto identity = [](const Tensor& h) { return h; };
  EXPECT_NE(export_error(identity, Tensor(), {.opset_version = 18}).find("opset_version 18"), std::string::npos);
  EXPECT_NE(export_error(identity, Tensor(), {.dynamic_axes = {{"input", {{2, "b"}}}}}).find("dynamic axis 2"),
            std::string::npos);
  EXPECT_NE(export_error(identity, Tensor(), {.dynamic_axes = {{"nope", {{0, "b"}}}}}).find("'nope'"),
            std::string::npos);
  EXPECT_NE(export_error(identity, Tensor(), {.input_names = {"a", "b"}}).find("2 input names for 1 input"),
            std::string::npos);
}

TEST(OnnxExport, TheModulesModeIsRestored) {
  EMBER_SKIP_WITHOUT_ONNX();
  Cnn net;
  net.train();
  net.fc.eval();
  const fs::path path = model_path("mode");
  io::export_onnx(net, randn({2, 3, 12, 12}), path.string());
  EXPECT_TRUE(net.is_training());
  EXPECT_TRUE(net.bn.is_training());
  EXPECT_FALSE(net.fc.is_training());
  fs::remove(path);
}

}  // namespace
