// Calling a user module as net(x) (Note [calling a module]), and ModuleList / ModuleDict:
// registration under PyTorch's names, access, iteration, errors.
#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

// A user's module with a non-const forward and no operator() of its own.
struct MutableNet : nn::Module {
  nn::Linear fc{3, 2};
  int calls = 0;
  MutableNet() { register_module("fc", fc); }
  Tensor forward(const Tensor& x) {
    ++calls;
    return relu(fc(x));
  }
};

// The same with a const forward.
struct ConstNet : nn::Module {
  nn::Linear fc{3, 2};
  ConstNet() { register_module("fc", fc); }
  Tensor forward(const Tensor& x) const { return fc(x) * 2.0; }
};

// Only a two-argument forward (called explicitly); net(x) must say there is none.
struct TwoArgNet : nn::Module {
  using nn::Module::forward;
  Tensor forward(const Tensor& x, const Tensor& mask) const { return x * mask; }
};

struct NoForward : nn::Module {};

TEST(ModuleCall, UserForwardIsCallableAsAFunction) {
  manual_seed(1);
  Tensor x = randn({4, 3});
  MutableNet m;
  Tensor expected = relu(linear(x, m.fc.weight, m.fc.bias));
  EXPECT_TRUE(all_close(m(x), expected, 0, 0));
  EXPECT_EQ(m.calls, 1);
  nn::Module& as_module = m;  // through the base, as a container calls it
  EXPECT_TRUE(all_close(as_module(x), expected, 0, 0));
  EXPECT_EQ(m.calls, 2);

  ConstNet c;
  const ConstNet& cref = c;
  EXPECT_TRUE(all_close(cref(x), linear(x, c.fc.weight, c.fc.bias) * 2.0, 0, 0));
  const nn::Module& cbase = c;
  EXPECT_TRUE(all_close(cbase(x), linear(x, c.fc.weight, c.fc.bias) * 2.0, 0, 0));
  nn::Module& cmut = c;  // the non-const call reaches a const forward
  EXPECT_TRUE(all_close(cmut(x), linear(x, c.fc.weight, c.fc.bias) * 2.0, 0, 0));
}

TEST(ModuleCall, InsideSequential) {
  manual_seed(2);
  Tensor x = randn({4, 3});
  auto user = std::make_shared<MutableNet>();
  auto fc = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential seq(user, fc);
  EXPECT_TRUE(all_close(seq(x), (*fc)(relu(user->fc(x))), 0, 0));
  EXPECT_EQ(user->calls, 1);
  EXPECT_EQ(seq.named_parameters()[0].first, "0.fc.weight");
  // A user module moved in by value, with a const forward.
  nn::Sequential seq2{ConstNet(), nn::ReLU()};
  const auto& inner = dynamic_cast<const ConstNet&>(seq2[0]);
  EXPECT_TRUE(all_close(seq2(x), relu(inner.fc(x) * 2.0), 0, 0));
}

TEST(ModuleCall, MissingForwardThrowsNamingTheModule) {
  NoForward n;
  Tensor x = randn({2});
  EXPECT_NE(message_of<NotImplementedError>([&] { n(x); }).find("NoForward] has no forward(const Tensor&)"),
            std::string::npos);
  TwoArgNet t;
  EXPECT_TRUE(all_close(t.forward(x, ones({2})), x, 0, 0));
  EXPECT_NE(message_of<NotImplementedError>([&] { t(x); }).find("TwoArgNet] has no forward"), std::string::npos);
  // The built-in layers are reachable through Module& too.
  nn::Linear fc(2, 3);
  nn::Module& m = fc;
  EXPECT_TRUE(all_close(m(x), fc(x), 0, 0));
}

TEST(ModuleList, RegistersIndexesAndIterates) {
  manual_seed(3);
  nn::ModuleList list;
  auto first = list.push_back(nn::Linear(3, 4));
  list.append(nn::ReLU());
  auto shared = std::make_shared<ConstNet>();
  list.push_back(shared);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(first->out_features, 4);
  EXPECT_EQ(&list[2], shared.get());
  EXPECT_EQ(&list.at<nn::Linear>(0), first.get());
  EXPECT_NE(message_of<ValueError>([&] { list.at<nn::Linear>(1); }).find("[ModuleList] module 1 is a ReLU"),
            std::string::npos);
  EXPECT_NE(message_of<IndexError>([&] { list[3]; }).find("[ModuleList] index 3"), std::string::npos);
  std::vector<std::string> names;
  for (auto& [name, p] : list.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.fc.weight", "2.fc.bias"}));
  // Iteration in order, each called through Module.
  Tensor x = randn({2, 3});
  Tensor h = x;
  int n = 0;
  for (const auto& m : list) {
    if (n++ == 2) break;
    h = (*m)(h);
  }
  EXPECT_TRUE(all_close(h, relu(first->forward(x)), 0, 0));
  nn::ModuleList built(nn::Linear(1, 1), nn::Tanh());
  EXPECT_EQ(built.size(), 2u);
  EXPECT_EQ(built.repr(), "ModuleList(\n  (0): Linear(in_features=1, out_features=1, bias=True)\n  (1): Tanh()\n)");
  // As a member of a user module: "blocks.0.weight", and the whole tree moves together.
  struct Stack : nn::Module {
    nn::ModuleList blocks;
    Stack() {
      for (int i = 0; i < 2; ++i) blocks.push_back(nn::Linear(2, 2));
      register_module("blocks", blocks);
    }
    Tensor forward(const Tensor& x) {
      Tensor y = x;
      for (const auto& b : blocks) y = (*b)(y);
      return y;
    }
  } stack;
  EXPECT_EQ(stack.named_parameters()[2].first, "blocks.1.weight");
  stack.to(DType::f64);
  EXPECT_EQ(stack.blocks.at<nn::Linear>(1).weight.dtype(), DType::f64);
  EXPECT_EQ(stack(randn({1, 2}, DType::f64)).sizes(), (Shape{1, 2}));
}

TEST(ModuleDict, KeepsInsertionOrderAndChecksKeys) {
  nn::ModuleDict dict;
  dict.insert("zeta", nn::Linear(2, 3));
  dict.insert("alpha", nn::ReLU());
  EXPECT_EQ(dict.keys(), (std::vector<std::string>{"zeta", "alpha"}));
  EXPECT_TRUE(dict.contains("alpha"));
  EXPECT_FALSE(dict.contains("beta"));
  EXPECT_EQ(dict.at<nn::Linear>("zeta").in_features, 2);
  std::vector<std::string> seen;
  for (const auto& [key, m] : dict) seen.push_back(key + ":" + m->type_name());
  EXPECT_EQ(seen, (std::vector<std::string>{"zeta:Linear", "alpha:ReLU"}));
  EXPECT_EQ(dict.named_parameters()[0].first, "zeta.weight");
  Tensor x = randn({1, 2});
  EXPECT_TRUE(all_close(dict["alpha"](dict["zeta"](x)), relu(dict.at<nn::Linear>("zeta")(x)), 0, 0));
  EXPECT_NE(message_of<IndexError>([&] { dict["beta"]; }).find("[ModuleDict] no module under the key 'beta'"),
            std::string::npos);
  EXPECT_THROW(dict.insert("zeta", nn::ReLU()), ValueError);
  EXPECT_THROW(dict.insert("a.b", nn::ReLU()), ValueError);
  EXPECT_EQ(dict.size(), 2u);
}

}  // namespace
}  // namespace ember::test
