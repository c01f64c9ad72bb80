// ZeroRedundancyOptimizer: W ranks on their slices of the batch with sharded AdamW state must
// train as one process with plain AdamW on the whole batch, with 1/W of the state per rank.
#include "dist_util.h"

using namespace ember;
using namespace ember::test;

TEST(Zero, MatchesPlainAdamWWithShardedState) {
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
