// ZeroRedundancyOptimizer: W ranks on their slices of the batch with sharded AdamW state must
// train as one process with plain AdamW on the whole batch, with 1/W of the state per rank.
#include <functional>

#include "dist_util.h"

using namespace ember;
using namespace ember::test;

TEST(Zero, MatchesPlainAdamWWithShardedState) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  constexpr int64_t kPerRank = 5;
  const int64_t rows = kPerRank * world();
  manual_seed(21);
  Mlp ref;
  ref.to(DType::f64);
  optim::AdamW ref_opt(ref.parameters(), {.lr = 1e-2, .weight_decay = 0.05});
  manual_seed(21 + uint64_t(my_rank()));  // replaced by rank 0's weights
  Mlp net;
  net.to(DType::f64);
  distributed::ZeroRedundancyOptimizer opt(net.parameters(), {.lr = 1e-2, .weight_decay = 0.05});
  EXPECT_EQ(max_param_diff(net, ref), 0.0);
  // Note [ZeRO flat parameters]: the module's parameters now live in one flat buffer.
  EXPECT_EQ(net.fc1.weight.storage(), net.fc3.bias.storage());
  for (int s = 0; s < 6; ++s) {
    Generator gen(500 + uint64_t(s));
    Tensor x = randn({rows, 8}, DType::f64, &gen);
    Tensor y = randint(0, 4, {rows}, DType::i64, &gen);
    ref_opt.zero_grad();
    cross_entropy(ref.forward(x), y).backward();
    ref_opt.step();
    opt.zero_grad();
    cross_entropy(net.forward(x.narrow(0, my_rank() * kPerRank, kPerRank)),
                  y.narrow(0, my_rank() * kPerRank, kPerRank)).backward();
    opt.step();
  }
  const double diff = max_param_diff(net, ref);
  const int64_t n = net.num_parameters();
  const int64_t plain_bytes = 2 * n * 8;  // exp_avg + exp_avg_sq, f64
  std::printf("ZeRO-1 vs AdamW (%d ranks): max parameter difference %.3g; optimizer state %lld "
              "bytes per rank vs %lld\n",
              world(), diff, (long long)opt.state_bytes(), (long long)plain_bytes);
  EXPECT_LT(diff, 1e-12);
  EXPECT_EQ(opt.numel(), n);
  EXPECT_EQ(opt.shard_numel(), (n + world() - 1) / world());
  EXPECT_EQ(opt.state_bytes(), 2 * opt.shard_numel() * 8);
  EXPECT_LE(opt.state_bytes(), plain_bytes / world() + 16);
  EXPECT_EQ(opt.local_optimizer().state_step(0), 6);
}

TEST(Zero, RejectsMixedParameters) {
  Tensor a = zeros({3}).requires_grad_(), b = zeros({3}, DType::f64).requires_grad_();
  const std::string msg = message_of<ValueError>([&] { distributed::ZeroRedundancyOptimizer z({a, b}); });
  EXPECT_NE(msg.find("share one dtype and device"), std::string::npos) << msg;
}

namespace {
// 63 parameters: at two ranks the flat vector is padded by one element, the last shard's.
struct Odd : nn::Module {
  nn::Linear fc1{8, 5}, fc2{5, 3};
  Odd() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};

void train(Odd& net, const std::function<void()>& zero_grad, const std::function<void()>& step, int from,
           int to, bool sharded) {
  constexpr int64_t kPerRank = 4;
  for (int s = from; s < to; ++s) {
    Generator gen(700 + uint64_t(s));
    const int64_t rows = kPerRank * world();
    Tensor x = randn({rows, 8}, DType::f64, &gen);
    Tensor y = randint(0, 3, {rows}, DType::i64, &gen);
    zero_grad();
    if (sharded) {
      cross_entropy(net.forward(x.narrow(0, my_rank() * kPerRank, kPerRank)),
                    y.narrow(0, my_rank() * kPerRank, kPerRank)).backward();
    } else {
      cross_entropy(net.forward(x), y).backward();
    }
    step();
  }
}
}  // namespace

// The padded last shard, the state dict (AdamW's layout, gathered from every rank) and a
// resume from it: ZeRO trained 3 steps, saved, rebuilt and trained 3 more equals plain AdamW
// trained 6 steps; the state dict equals AdamW's at the same step; and each loads the other's.
TEST(Zero, PaddedShardStateDictAndResumeEqualPlainAdamW) {
  // With amsgrad the state carries a third buffer, max_exp_avg_sq, gathered and sharded alike.
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad" : "plain");
    const optim::AdamWOptions options{.lr = 2e-2, .weight_decay = 0.1, .amsgrad = amsgrad};
    manual_seed(31);
    Odd ref;
    ref.to(DType::f64);
    optim::AdamW ref_opt(ref.parameters(), options);
    manual_seed(31);
    Odd net;
    net.to(DType::f64);
    auto zero = std::make_unique<distributed::ZeroRedundancyOptimizer>(net.parameters(), options);
    ASSERT_EQ(zero->numel(), 63);
    if (world() > 1) {
      EXPECT_GT(zero->shard_numel() * world(), zero->numel()) << "the last shard is padded";
    }
    train(ref, [&] { ref_opt.zero_grad(); }, [&] { ref_opt.step(); }, 0, 3, false);
    train(net, [&] { zero->zero_grad(); }, [&] { zero->step(); }, 0, 3, true);
    EXPECT_LT(max_param_diff(net, ref), 1e-12);
    // The state dict: AdamW's keys and values, on every rank.
    const StateDict zsd = zero->state_dict();
    const StateDict rsd = ref_opt.state_dict();
    EXPECT_EQ(zsd.keys(), rsd.keys());
    for (const auto& [key, value] : rsd) {
      ASSERT_TRUE(zsd.contains(key)) << key;
      EXPECT_EQ(zsd.at(key).sizes(), value.sizes()) << key;
      EXPECT_LT(max_abs_diff(zsd.at(key), value), 1e-12) << key;
    }
    // Resume: a new module from the saved weights and a new ZeRO from the saved state.
    const StateDict weights = net.state_dict();
    zero.reset();
    manual_seed(99);
    Odd resumed;
    resumed.to(DType::f64);
    resumed.load_state_dict(weights);
    distributed::ZeroRedundancyOptimizer zero2(resumed.parameters(), options);
    zero2.load_state_dict(zsd);
    EXPECT_EQ(zero2.local_optimizer().state_step(0), 3);
    train(ref, [&] { ref_opt.zero_grad(); }, [&] { ref_opt.step(); }, 3, 6, false);
    train(resumed, [&] { zero2.zero_grad(); }, [&] { zero2.step(); }, 3, 6, true);
    EXPECT_LT(max_param_diff(resumed, ref), 1e-12);
    // Plain AdamW takes ZeRO's state dict, and the other way round.
    manual_seed(5);
    Odd plain;
    plain.to(DType::f64);
    optim::AdamW plain_opt(plain.parameters(), options);
    EXPECT_NO_THROW(plain_opt.load_state_dict(zero2.state_dict()));
    EXPECT_EQ(plain_opt.state_step(0), 6);
    EXPECT_LT(max_abs_diff(plain_opt.state(2, "exp_avg_sq"), ref_opt.state(2, "exp_avg_sq")), 1e-12);
    // A mismatched state dict is refused before anything changes.
    StateDict bad = ref_opt.state_dict();
    bad.set_int("state.1.step", 5);
    const std::string msg = message_of<ValueError>([&] { zero2.load_state_dict(bad); });
    EXPECT_NE(msg.find("one step count"), std::string::npos) << msg;
    EXPECT_EQ(zero2.local_optimizer().state_step(0), 6);
  }
}
