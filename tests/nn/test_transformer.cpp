// MultiheadAttention and the Transformer layers against PyTorch (tests/fixtures/
// transformer_reference.txt from make_transformer_fixtures.py, float64): each module is built
// in ember, loads PyTorch's state dict under PyTorch's names (strict), and its outputs,
// attention weights and the gradients of every parameter and input must match. Covers packed
// and separate (kdim/vdim) projections, sequence- and batch-first layouts, bool and float
// key padding / attention masks ([L, S] and [N * H, L, S]), need_weights both ways (the
// explicit softmax and the fused kernel), norm_first both ways, relu and gelu, eval mode with
// dropout, and the cloned TransformerEncoder stack. Runs on every device (CUDA skips here).
#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

const char* kRef = "transformer_reference.txt";
constexpr double kRtol = 1e-9, kAtol = 1e-11;

Tensor fx(const std::string& name, Device dev) { return load_fixture(kRef, name).tensor().to(dev); }
Tensor fx_bool(const std::string& name, Device dev) {
  return load_fixture(kRef, name).tensor().gt(0.5).to(dev);
}
Tensor leaf(const std::string& name, Device dev) { return fx(name, dev).requires_grad_(true); }

// Loads `prefix.state.<name>` for every entry of the module's own state dict (strict: a name
// PyTorch does not have fails to load_fixture), then moves the module to dev in f64.
void load_torch_state(nn::Module& m, const std::string& prefix, Device dev) {
  StateDict state;
  for (const auto& [name, t] : m.state_dict()) state.insert(name, fx(prefix + ".state." + name, Device::cpu()));
  m.to(dev, DType::f64);
  m.load_state_dict(state);
}

void expect_param_grads(const nn::Module& m, const std::string& prefix, Device dev) {
  for (const auto& [name, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(all_close(p.grad(), fx(prefix + ".grad." + name, dev), kRtol, kAtol)) << name;
  }
}

class TransformerTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda()) EMBER_SKIP_WITHOUT_CUDA();
  }
};

// Self-attention, sequence-first, bool key padding + float attn_mask: the explicit path
// (need_weights, averaged weights) and the fused one (a non-contiguous input too).
TEST_P(TransformerTest, MultiheadSelfAttentionMatchesPyTorch) {
  const Device dev = GetParam();
  nn::MultiheadAttention mha(8, 2);
  load_torch_state(mha, "mha_self", dev);
  const Tensor kpm = fx_bool("mha_self.kpm", dev), am = fx("mha_self.attn_mask", dev);
  {
    Tensor x = leaf("mha_self.x", dev);
    auto [out, w] = mha(x, x, x, kpm, true, am);
    EXPECT_TRUE(all_close(out, fx("mha_self.out", dev), kRtol, kAtol));
    EXPECT_TRUE(all_close(w, fx("mha_self.weights", dev), kRtol, kAtol));
    ((out * fx("mha_self.gout", dev)).sum() + (w * fx("mha_self.gw", dev)).sum()).backward();
    expect_param_grads(mha, "mha_self", dev);
    EXPECT_TRUE(all_close(x.grad(), fx("mha_self.grad.x", dev), kRtol, kAtol));
  }
  mha.zero_grad();
  {
    // [S, N, E] values stored [N, S, E]: a transposed view.
    Tensor x = fx("mha_self.x", dev).transpose(0, 1).contiguous().transpose(0, 1).requires_grad_(true);
    ASSERT_FALSE(x.is_contiguous());
    auto [out, w] = mha(x, x, x, kpm, /*need_weights=*/false, am);
    EXPECT_FALSE(w.defined());
    EXPECT_TRUE(all_close(out, fx("mha_self_nw.out", dev), kRtol, kAtol));
    (out * fx("mha_self.gout", dev)).sum().backward();
    expect_param_grads(mha, "mha_self_nw", dev);
    EXPECT_TRUE(all_close(x.grad(), fx("mha_self_nw.grad.x", dev), kRtol, kAtol));
  }
}

// Cross-attention, batch_first, kdim/vdim (q_proj_weight, k_proj_weight, v_proj_weight), a
// bool [L, S] attn_mask, per-head weights.
TEST_P(TransformerTest, MultiheadCrossAttentionKdimVdimMatchesPyTorch) {
  const Device dev = GetParam();
  nn::MultiheadAttention mha(8, 2, {.kdim = 6, .vdim = 4, .batch_first = true});
  EXPECT_FALSE(mha.in_proj_weight.defined());
  load_torch_state(mha, "mha_cross", dev);
  Tensor q = leaf("mha_cross.q", dev), k = leaf("mha_cross.k", dev), v = leaf("mha_cross.v", dev);
  const Tensor am = fx_bool("mha_cross.attn_mask", dev);
  auto [out, w] = mha(q, k, v, Tensor(), true, am, /*average_attn_weights=*/false);
  EXPECT_TRUE(all_close(out, fx("mha_cross.out", dev), kRtol, kAtol));
  ASSERT_EQ(w.sizes(), Shape({3, 2, 5, 6}));
  EXPECT_TRUE(all_close(w, fx("mha_cross.weights", dev), kRtol, kAtol));
  ((out * fx("mha_cross.gout", dev)).sum() + (w * fx("mha_cross.gw", dev)).sum()).backward();
  expect_param_grads(mha, "mha_cross", dev);
  for (const auto& [name, t] : {std::pair{"q", q}, std::pair{"k", k}, std::pair{"v", v}})
    EXPECT_TRUE(all_close(t.grad(), fx(std::string("mha_cross.grad.") + name, dev), kRtol, kAtol)) << name;
  // The fused path gives the same output.
  auto [fused, none] = mha(q, k, v, Tensor(), false, am);
  EXPECT_TRUE(all_close(fused, out, 1e-12, 1e-13));
}

// 3-D bool attn_mask [N * H, L, S] merged with a bool key padding mask, no biases.
TEST_P(TransformerTest, MultiheadAttention3dMaskAndPaddingMatchesPyTorch) {
  const Device dev = GetParam();
  nn::MultiheadAttention mha(8, 2, {.bias = false, .batch_first = true});
  EXPECT_FALSE(mha.in_proj_bias.defined());
  load_torch_state(mha, "mha_3d", dev);
  Tensor q = leaf("mha_3d.q", dev), kv = leaf("mha_3d.kv", dev);
  const Tensor am = fx_bool("mha_3d.attn_mask", dev), kpm = fx_bool("mha_3d.kpm", dev);
  Tensor out = mha(q, kv, kv, kpm, false, am).first;
  EXPECT_TRUE(all_close(out, fx("mha_3d.out", dev), kRtol, kAtol));
  (out * fx("mha_3d.gout", dev)).sum().backward();
  expect_param_grads(mha, "mha_3d", dev);
  EXPECT_TRUE(all_close(q.grad(), fx("mha_3d.grad.q", dev), kRtol, kAtol));
  EXPECT_TRUE(all_close(kv.grad(), fx("mha_3d.grad.kv", dev), kRtol, kAtol));
  // The explicit path agrees.
  EXPECT_TRUE(all_close(mha(q, kv, kv, kpm, true, am).first, out, 1e-12, 1e-13));
}

// Encoder layers: post-/pre-norm, relu/gelu, sequence-/batch-first; one built with dropout 0.1
// and run in eval mode (dropout off) against the dropout-0 reference.
TEST_P(TransformerTest, EncoderLayersMatchPyTorch) {
  const Device dev = GetParam();
  struct Case {
    const char* tag;
    bool norm_first;
    const char* act;
    bool batch_first;
    bool eval_with_dropout;
  };
  for (const Case& c : {Case{"enc_post_relu_sf", false, "relu", false, false},
                        Case{"enc_pre_gelu_bf", true, "gelu", true, true},
                        Case{"enc_post_gelu_bf", false, "gelu", true, false},
                        Case{"enc_pre_relu_sf", true, "relu", false, false}}) {
    SCOPED_TRACE(c.tag);
    const std::string t = c.tag;
    nn::TransformerEncoderLayer layer(8, 2,
                                      {.dim_feedforward = 16,
                                       .dropout = c.eval_with_dropout ? 0.1 : 0.0,
                                       .activation = c.act,
                                       .batch_first = c.batch_first,
                                       .norm_first = c.norm_first});
    load_torch_state(layer, t, dev);
    if (c.eval_with_dropout) layer.eval();
    Tensor src = leaf(t + ".src", dev);
    Tensor out = layer(src, fx(t + ".mask", dev), fx_bool(t + ".kpm", dev));
    EXPECT_TRUE(all_close(out, fx(t + ".out", dev), kRtol, kAtol));
    (out * fx(t + ".gout", dev)).sum().backward();
    expect_param_grads(layer, t, dev);
    EXPECT_TRUE(all_close(src.grad(), fx(t + ".grad.src", dev), kRtol, kAtol));
  }
}

TEST_P(TransformerTest, DecoderLayersMatchPyTorch) {
  const Device dev = GetParam();
  for (bool norm_first : {false, true}) {
    const std::string t = norm_first ? "dec_pre_gelu" : "dec_post_relu";
    SCOPED_TRACE(t);
    nn::TransformerDecoderLayer layer(
        8, 2, {.dim_feedforward = 16, .dropout = 0.0, .activation = norm_first ? "gelu" : "relu",
               .norm_first = norm_first});
    load_torch_state(layer, t, dev);
    Tensor tgt = leaf(t + ".tgt", dev), memory = leaf(t + ".memory", dev);
    // PyTorch's generate_square_subsequent_mask: float, -inf above the diagonal.
    const Tensor tgt_mask = where(fx_bool(t + ".tgt_mask_hidden", dev),
                                  -std::numeric_limits<double>::infinity(), zeros({4, 4}, DType::f64).to(dev));
    Tensor out = layer(tgt, memory, tgt_mask, fx(t + ".memory_mask", dev),
                       fx_bool(t + ".tkpm", dev), fx_bool(t + ".mkpm", dev));
    EXPECT_TRUE(all_close(out, fx(t + ".out", dev), kRtol, kAtol));
    (out * fx(t + ".gout", dev)).sum().backward();
    expect_param_grads(layer, t, dev);
    EXPECT_TRUE(all_close(tgt.grad(), fx(t + ".grad.tgt", dev), kRtol, kAtol));
    EXPECT_TRUE(all_close(memory.grad(), fx(t + ".grad.memory", dev), kRtol, kAtol));
  }
}

// The stack: PyTorch's names (layers.0..., norm.*), deep copies, a final norm.
TEST_P(TransformerTest, EncoderStackMatchesPyTorch) {
  const Device dev = GetParam();
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.0, .batch_first = true});
  nn::TransformerEncoder encoder(layer, 2, std::make_shared<nn::LayerNorm>(Shape{8}));
  load_torch_state(encoder, "encoder", dev);
  Tensor src = leaf("encoder.src", dev);
  Tensor out = encoder(src, Tensor(), fx_bool("encoder.kpm", dev));
  EXPECT_TRUE(all_close(out, fx("encoder.out", dev), kRtol, kAtol));
  (out * fx("encoder.gout", dev)).sum().backward();
  expect_param_grads(encoder, "encoder", dev);
  EXPECT_TRUE(all_close(src.grad(), fx("encoder.grad.src", dev), kRtol, kAtol));
}

INSTANTIATE_TEST_SUITE_P(Devices, TransformerTest, ::testing::ValuesIn(test_devices()), device_label);

TEST(Transformer, EncoderClonesAreDeepCopies) {
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16});
  nn::TransformerEncoder encoder(layer, 3);
  const auto names = encoder.named_parameters();
  ASSERT_EQ(names.size(), 3 * layer.named_parameters().size());
  EXPECT_EQ(names.front().first, "layers.0.self_attn.in_proj_weight");
  EXPECT_EQ(names.back().first, "layers.2.norm2.bias");
  // Equal values, separate storage: training one clone leaves the others (and the prototype).
  EXPECT_TRUE(all_close(encoder.layers[1].linear1.weight, layer.linear1.weight, 0, 0));
  {
    NoGradGuard ng;
    encoder.layers[1].linear1.weight.add_(ones({16, 8}));
  }
  EXPECT_TRUE(all_close(encoder.layers[0].linear1.weight, layer.linear1.weight, 0, 0));
  EXPECT_FALSE(all_close(encoder.layers[1].linear1.weight, layer.linear1.weight, 0, 0));
}

TEST(Transformer, MultiheadAttentionInitAndErrors) {
  manual_seed(3);
  nn::MultiheadAttention mha(16, 4);
  // xavier_uniform_ on [48, 16]: bound sqrt(6 / (16 + 48)); biases zero.
  const double bound = std::sqrt(6.0 / 64.0);
  EXPECT_LE(mha.in_proj_weight.abs().max().item<double>(), bound);
  EXPECT_GT(mha.in_proj_weight.abs().max().item<double>(), 0.9 * bound);
  EXPECT_EQ(mha.in_proj_bias.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(mha.out_proj.bias.abs().sum().item<double>(), 0.0);
  EXPECT_NE(message_of<ValueError>([] { nn::MultiheadAttention(10, 3); })
                .find("[MultiheadAttention] embed_dim (10) must be divisible by num_heads (3)"),
            std::string::npos);
  EXPECT_NE(message_of<NotImplementedError>([] {
              nn::MultiheadAttention(8, 2, {.add_bias_kv = true});
            }).find("add_bias_kv"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([] {
              nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"});
            }).find("activation should be relu or gelu"),
            std::string::npos);
  const Tensor x = randn({5, 2, 16});
  EXPECT_NE(message_of<ShapeError>([&] { mha(x, x, x, ones({2, 4}, DType::b8)); })
                .find("key_padding_mask [2, 4] should be [2, 5]"),
            std::string::npos);
}

// is_causal: the fused causal kernel and the explicit top-left mask agree with an explicit
// bool causal mask; dropout is on only in training mode and replays under the same seed.
TEST(Transformer, CausalHintAndDropoutModes) {
  manual_seed(4);
  nn::MultiheadAttention mha(8, 2, {.dropout = 0.5});
  mha.eval();
  const Tensor x = randn({6, 2, 8}, DType::f32);
  const Tensor causal = arange(6).reshape({1, 6}).gt(arange(6).reshape({6, 1}));
  const Tensor ref = mha(x, x, x, Tensor(), false, causal).first;
  EXPECT_TRUE(all_close(mha(x, x, x, Tensor(), false, causal, true, true).first, ref, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(mha(x, x, x, Tensor(), true, Tensor(), true, true).first, ref, 1e-5, 1e-6));
  const Tensor plain = mha(x, x, x, Tensor(), false).first;
  EXPECT_TRUE(all_close(plain, mha(x, x, x).first, 1e-5, 1e-6));
  mha.train();
  manual_seed(9);
  const Tensor a = mha(x, x, x, Tensor(), false).first;
  manual_seed(9);
  const Tensor b = mha(x, x, x, Tensor(), false).first;
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, plain, 1e-3, 1e-3));
}

}  // namespace
}  // namespace ember::test
