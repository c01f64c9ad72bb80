// nn::Module: registration, recursive access, state_dict round trips and their errors,
// to(dtype/device) keeping tensor identity, train/eval, zero_grad, moves, printing.
#include <sstream>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

struct Block : nn::Module {
  nn::Linear fc;
  nn::LayerNorm norm;
  Tensor steps;
  explicit Block(int64_t d) : fc(d, d), norm({d}) {
    register_module("fc", fc);
    register_module("norm", norm);
    steps = register_buffer("steps", zeros({}, DType::i64));
  }
  Tensor forward(const Tensor& x) const { return norm(relu(fc(x))); }
};

struct Net : nn::Module {
  Block block{4};
  nn::Linear head{4, 2};
  Tensor scale;
  Net() {
    register_module("block", block);
    register_module("head", head);
    scale = register_parameter("scale", ones({2}));
  }
  Tensor forward(const Tensor& x) const { return head(block.forward(x)) * scale; }
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& items) {
  std::vector<std::string> out;
  for (const auto& [name, t] : items) out.push_back(name);
  return out;
}

TEST(Module, NamesFollowRegistrationOrderLikePyTorch) {
  Net net;
  EXPECT_EQ(names_of(net.named_parameters()),
            (std::vector<std::string>{"scale", "block.fc.weight", "block.fc.bias",
                                      "block.norm.weight", "block.norm.bias", "head.weight",
                                      "head.bias"}));
  EXPECT_EQ(names_of(net.named_parameters(/*recurse=*/false)), (std::vector<std::string>{"scale"}));
  EXPECT_EQ(names_of(net.named_buffers()), (std::vector<std::string>{"block.steps"}));
  EXPECT_EQ(net.state_dict().keys(),
            (std::vector<std::string>{"scale", "block.steps", "block.fc.weight", "block.fc.bias",
                                      "block.norm.weight", "block.norm.bias", "head.weight",
                                      "head.bias"}));  // own tensors first, then children's
  EXPECT_EQ(net.num_parameters(), 2 + 16 + 4 + 4 + 4 + 8 + 2);
  std::vector<std::string> modules;
  for (auto& [name, m] : net.named_modules()) modules.push_back(name + ":" + m->type_name());
  EXPECT_EQ(modules, (std::vector<std::string>{":Net", "block:Block", "block.fc:Linear",
                                               "block.norm:LayerNorm", "head:Linear"}));
  for (const Tensor& p : net.parameters()) EXPECT_TRUE(p.requires_grad());
}

TEST(Module, RegistrationErrorsAreClear) {
  Net net;
  EXPECT_NE(message_of<ValueError>([&] { net.register_parameter("scale", ones({1})); })
                .find("already has a parameter, buffer or submodule named 'scale'"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { net.register_buffer("a.b", ones({1})); }).find("invalid name 'a.b'"),
            std::string::npos);
  nn::Linear outside(2, 2);
  EXPECT_NE(message_of<ValueError>([&] { net.register_module("outside", outside); })
                .find("not a data member"),
            std::string::npos);
  Tensor nonleaf = ones({2}).requires_grad_() * 2;
  EXPECT_THROW(net.register_parameter("nonleaf", nonleaf), AutogradError);
}

TEST(Module, SharedWeightsAreListedOnceButSavedUnderEachName) {
  // Tie like GPT-2: the head reuses the embedding matrix as a parameter of its own.
  struct TiedProperly : nn::Module {
    nn::Embedding wte{10, 4};
    TiedProperly() {
      register_module("wte", wte);
      register_parameter("lm_head_weight", wte.weight);
    }
  } t2;
  EXPECT_EQ(t2.parameters().size(), 1u);
  EXPECT_EQ(t2.state_dict().size(), 2u);
}

TEST(Module, StateDictRoundTripAndStrictErrors) {
  manual_seed(1);
  Net a;
  manual_seed(2);
  Net b;
  Tensor x = randn({3, 4});
  EXPECT_FALSE(all_close(a.forward(x), b.forward(x)));
  b.load_state_dict(a.state_dict());
  EXPECT_TRUE(all_close(a.forward(x), b.forward(x), 0, 0));
  // The loaded values are copies: changing a afterwards does not change b.
  {
    NoGradGuard ng;
    a.head.bias.add_(1.0);
  }
  EXPECT_FALSE(all_close(a.forward(x), b.forward(x)));

  StateDict partial = a.state_dict().sub("");  // all keys
  StateDict wrong;
  for (const auto& [k, v] : a.state_dict())
    if (k != "head.bias") wrong.insert(k, v);
  wrong.insert("head.bias_typo", zeros({2}));
  const std::string msg = message_of<ValueError>([&] { b.load_state_dict(wrong); });
  EXPECT_NE(msg.find("missing keys 'head.bias'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected keys 'head.bias_typo'"), std::string::npos) << msg;
  EXPECT_NO_THROW(b.load_state_dict(wrong, /*strict=*/false));

  // A shape mismatch is an error naming the key and both shapes, and changes nothing.
  StateDict bad_shape;
  for (const auto& [k, v] : a.state_dict()) bad_shape.insert(k, k == "head.weight" ? zeros({4, 2}) : zeros_like(v));
  Tensor before = b.block.fc.weight.clone();
  const std::string shape_msg = message_of<ShapeError>([&] { b.load_state_dict(bad_shape); });
  EXPECT_NE(shape_msg.find("'head.weight': the module has shape [2, 4] but the state dict has [4, 2]"),
            std::string::npos) << shape_msg;
  EXPECT_TRUE(all_close(b.block.fc.weight, before, 0, 0));
}

TEST(Module, ToDtypeKeepsIdentityAndConvertsGradients) {
  Net net;
  Tensor handle = net.head.weight;  // as an optimizer would hold it
  net.forward(randn({2, 4})).sum().backward();
  ASSERT_TRUE(handle.grad().defined());
  net.to(DType::f64);
  EXPECT_EQ(handle.dtype(), DType::f64);
  EXPECT_TRUE(handle.requires_grad());
  EXPECT_EQ(handle.grad().dtype(), DType::f64);
  EXPECT_EQ(net.block.steps.dtype(), DType::i64);  // integer buffers keep their dtype
  for (const Tensor& p : net.parameters()) EXPECT_EQ(p.dtype(), DType::f64);
  net.zero_grad();
  Tensor loss = net.forward(randn({2, 4}, DType::f64)).sum();
  loss.backward();
  EXPECT_EQ(handle.grad().dtype(), DType::f64);
}

TEST(Module, TrainEvalAndZeroGrad) {
  Net net;
  EXPECT_TRUE(net.block.fc.is_training());
  net.eval();
  EXPECT_FALSE(net.is_training());
  EXPECT_FALSE(net.block.norm.is_training());
  net.train();
  EXPECT_TRUE(net.head.is_training());

  net.forward(randn({2, 4})).sum().backward();
  net.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : net.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0);
  }
  net.zero_grad();
  for (const Tensor& p : net.parameters()) EXPECT_FALSE(p.grad().defined());
}

// Note [Module relocation]: moving a module keeps its member submodules reachable.
TEST(Module, MovedModuleStillReachesItsMembers) {
  manual_seed(4);
  Net original;
  Tensor x = randn({2, 4});
  Tensor expected = original.forward(x);
  Net moved(std::move(original));
  EXPECT_EQ(moved.named_parameters().size(), 7u);
  EXPECT_TRUE(moved.named_parameters()[1].second.is_same(moved.block.fc.weight));
  EXPECT_TRUE(all_close(moved.forward(x), expected, 0, 0));
  moved.eval();
  EXPECT_FALSE(moved.block.norm.is_training());
}

TEST(Sequential, RunsModulesInOrderAndNamesThemByIndex) {
  manual_seed(8);
  nn::Sequential seq(nn::Linear(4, 8), nn::ReLU(), nn::Dropout(0.0), nn::Linear(8, 3));
  EXPECT_EQ(seq.size(), 4u);
  EXPECT_EQ(names_of(seq.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias"}));
  auto& fc0 = dynamic_cast<nn::Linear&>(seq[0]);
  auto& fc3 = dynamic_cast<nn::Linear&>(seq[3]);
  Tensor x = randn({5, 4});
  EXPECT_TRUE(all_close(seq(x), fc3(relu(fc0(x))), 0, 0));
  auto extra = seq.push_back(std::make_shared<nn::Linear>(3, 1));
  EXPECT_EQ(seq(x).sizes(), (Shape{5, 1}));
  EXPECT_EQ(seq.parameters().size(), 6u);
  EXPECT_THROW(seq[9], IndexError);
  // Sequential nests and moves.
  nn::Sequential outer(std::move(seq), nn::Tanh());
  EXPECT_EQ(outer(x).sizes(), (Shape{5, 1}));
  EXPECT_EQ(outer.named_parameters()[0].first, "0.0.weight");
}

TEST(Module, ReprLooksLikePyTorch) {
  nn::Sequential seq(nn::Linear(784, 512), nn::ReLU(), nn::Conv2d(1, 32, 3, {.stride = 2}));
  std::ostringstream os;
  os << seq;
  EXPECT_EQ(os.str(),
            "Sequential(\n"
            "  (0): Linear(in_features=784, out_features=512, bias=True)\n"
            "  (1): ReLU()\n"
            "  (2): Conv2d(1, 32, kernel_size=(3, 3), stride=(2, 2))\n"
            ")");
  Net net;
  const std::string r = net.repr();
  EXPECT_NE(r.find("  (block): Block(\n    (fc): Linear("), std::string::npos) << r;
}

TEST(Module, ToDeviceWithoutCudaIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  Net net;
  EXPECT_THROW(net.to(Device::cuda(0)), DeviceError);
}

// torch.nn.Module's forward hooks: pre-hooks before forward (they may replace the input),
// hooks after it (they may replace the output), in registration order, for every call through
// operator() or call().
TEST(Module, ForwardHooksRunAroundEveryCallAndMayReplaceInputAndOutput) {
  Net net;
  std::vector<std::string> events;
  Tensor seen;
  net.head.register_forward_pre_hook([&](const nn::Module& m, const Tensor&) {
    events.push_back("pre " + m.type_name());
    return Tensor();
  });
  net.head.register_forward_pre_hook([&](const nn::Module&, const Tensor&) {
    events.push_back("pre 2");
    return Tensor();
  });
  net.head.register_forward_hook([&](const nn::Module&, const Tensor& out) {
    events.push_back("post");
    seen = out;
    return Tensor();
  });
  EXPECT_TRUE(net.head.has_forward_hooks());
  EXPECT_FALSE(net.block.fc.has_forward_hooks());
  Tensor x = randn({3, 4});
  Tensor y = net.forward(x);
  EXPECT_EQ(events, (std::vector<std::string>{"pre Linear", "pre 2", "post"}));
  ASSERT_TRUE(seen.defined());
  EXPECT_TRUE(seen.allclose(net.head.forward(net.block.forward(x))));
  EXPECT_TRUE(y.allclose(seen * net.scale));
  // Replacements: the input doubled before, the output negated after; gradients flow through.
  nn::Linear lin(4, 2);
  lin.register_forward_pre_hook([](const nn::Module&, const Tensor& in) { return in * 2.0; });
  lin.register_forward_hook([](const nn::Module&, const Tensor& out) { return -out; });
  Tensor z = lin(x);
  EXPECT_TRUE(z.allclose(-lin.forward(x * 2.0)));
  z.sum().backward();
  EXPECT_TRUE(lin.bias.grad().allclose(full({2}, -3.0)));
  // A call without one input: its pre-hooks may not replace what is not there.
  events.clear();
  (void)net.head.call([&] { return net.head.forward(randn({1, 4})); });
  EXPECT_EQ(events.size(), 3u);
  EXPECT_THROW(lin.call([&] { return lin.forward(x); }), ValueError);
  // A hook's exception leaves the call.
  net.block.fc.register_forward_pre_hook([](const nn::Module&, const Tensor&) -> Tensor { throw ValueError("refused"); });
  EXPECT_THROW(net.forward(x), ValueError);
  EXPECT_THROW(net.head.register_forward_hook(nullptr), ValueError);
}

}  // namespace
}  // namespace ember::test
