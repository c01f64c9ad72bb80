// DistributedDataParallel: W ranks on their slices of a global batch must train exactly as one
// process on the whole batch (the reference, trained locally on every rank); no_sync
// accumulation, unused parameters, and inconsistent models.
#include "dist_util.h"

using namespace ember;
using namespace ember::test;
using distributed::DistributedDataParallel;

namespace {

constexpr int64_t kPerRank = 6;

// Global batch `step` (identical on every rank: seeded), of kPerRank * world() rows.
std::pair<Tensor, Tensor> global_batch(int step, int64_t rows, DType dtype) {
  Generator gen(1000 + uint64_t(step));
  Tensor x = randn({rows, 8}, dtype, &gen);
  Tensor y = randint(0, 4, {rows}, DType::i64, &gen);
  return {x, y};
}

Tensor loss_of(Mlp& m, const Tensor& x, const Tensor& y) { return cross_entropy(m.forward(x), y); }

// One process on the whole batch vs DDP on this rank's rows, `steps` optimizer steps.
template <class MakeOpt>
double ddp_vs_single(DType dtype, double bucket_cap_mb, int steps, MakeOpt make_opt,
                     size_t* num_buckets = nullptr) {
  const int64_t rows = kPerRank * world();
  manual_seed(100);
  Mlp ref;
  ref.to(dtype);
  auto ref_opt = make_opt(ref.parameters());
  manual_seed(100 + uint64_t(my_rank()));  // DDP must replace these weights by rank 0's
  Mlp net;
  net.to(dtype);
  DistributedDataParallel ddp(net, {.bucket_cap_mb = bucket_cap_mb});
  if (num_buckets) *num_buckets = ddp.bucket_assignment().size();
  auto opt = make_opt(net.parameters());
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = global_batch(s, rows, dtype);
    Tensor ref_loss = loss_of(ref, x, y);
    ref_opt->zero_grad();
    ref_loss.backward();
    ref_opt->step();

    Tensor xl = x.narrow(0, my_rank() * kPerRank, kPerRank), yl = y.narrow(0, my_rank() * kPerRank, kPerRank);
    Tensor out = ddp.forward([&] { return net.forward(xl); });
    Tensor loss = cross_entropy(out, yl);
    opt->zero_grad();
    loss.backward();
    opt->step();
  }
  EXPECT_EQ(ddp.num_reductions(), int64_t(steps) * int64_t(ddp.bucket_assignment().size()));
  return max_param_diff(net, ref);
}

}  // namespace

TEST(DDP, SgdMatchesSingleProcessOnTheFullBatch) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  const double diff = ddp_vs_single(DType::f32, 25.0, 5, [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  });
  RecordProperty("max_param_diff", std::to_string(diff));
  EXPECT_LT(diff, 1e-6);
}

TEST(DDP, AdamWWithSmallBucketsMatchesSingleProcess) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  size_t buckets = 0;
  // 0.0002 MB = 210 bytes: a bucket closes once it holds that much, here after each weight
  // (bias first, reverse order): three buckets.
  const double diff = ddp_vs_single(DType::f64, 0.0002, 6, [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-2});
  }, &buckets);
  std::printf("DDP vs single process (AdamW, f64, %d ranks, %zu buckets): max parameter difference %.3g\n",
              world(), buckets, diff);
  EXPECT_EQ(buckets, size_t(3));
  EXPECT_LT(diff, 1e-12);
}

// A world of one (a program run with --ddp but without mpirun) trains exactly as without DDP:
// the averaging over one rank and the bucket copies must leave every bit as it was.
TEST(DDP, WorldOfOneTrainsBitForBitAsWithoutDdp) {
  if (world() != 1) GTEST_SKIP() << "a world of one: runs in the single-process run (Distributed.single)";
  const double diff = ddp_vs_single(DType::f32, 0.0002, 4, [](std::vector<Tensor> p) {
    return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-2});
  });
  EXPECT_EQ(diff, 0.0);
}

TEST(DDP, BucketsFollowReverseRegistrationOrder) {
  Mlp net;
  DistributedDataParallel ddp(net, {.bucket_cap_mb = 1e-6});  // 1 byte: one parameter each
  const auto buckets = ddp.bucket_assignment();
  ASSERT_EQ(buckets.size(), net.parameters().size());
  for (size_t b = 0; b < buckets.size(); ++b) EXPECT_EQ(buckets[b], std::vector<size_t>{buckets.size() - 1 - b});
  DistributedDataParallel one(net);
  EXPECT_EQ(one.bucket_assignment().size(), 1u);
  EXPECT_EQ(one.bucket_assignment()[0].front(), net.parameters().size() - 1);
}

TEST(DDP, NoSyncAccumulatesLocallyThenEqualsTheLargerBatch) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  const int64_t rows = kPerRank * world();
  manual_seed(5);
  Mlp net;
  net.to(DType::f64);
  manual_seed(5);
  Mlp ref;
  ref.to(DType::f64);
  DistributedDataParallel ddp(net);
  // Micro-batch m of rank r: rows of global batch m (two global batches in all).
  auto [x0, y0] = global_batch(0, rows, DType::f64);
  auto [x1, y1] = global_batch(1, rows, DType::f64);
  auto mine = [&](const Tensor& t) { return t.narrow(0, my_rank() * kPerRank, kPerRank); };
  {
    auto guard = ddp.no_sync();
    loss_of(net, mine(x0), mine(y0)).backward();
  }
  // Inside no_sync nothing was communicated: the gradient is this rank's own.
  loss_of(ref, mine(x0), mine(y0)).backward();
  EXPECT_LT(max_abs_diff(net.fc1.weight.grad(), ref.fc1.weight.grad()), 1e-14);
  EXPECT_EQ(ddp.num_reductions(), 0);
  loss_of(net, mine(x1), mine(y1)).backward();  // synchronizes the sum of both micro-batches
  EXPECT_EQ(ddp.num_reductions(), 1);
  // Reference: the mean over ranks of (micro 0 + micro 1) = the full batches' mean losses summed.
  ref.zero_grad();
  loss_of(ref, x0, y0).add(loss_of(ref, x1, y1)).backward();
  for (size_t i = 0; i < ref.parameters().size(); ++i)
    EXPECT_LT(max_abs_diff(net.parameters()[i].grad(), ref.parameters()[i].grad()), 1e-12) << i;
}

namespace {
// fc_odd takes part only on odd ranks; fc_never on none.
struct Branchy : nn::Module {
  nn::Linear fc1{8, 8}, fc_odd{8, 8}, fc_never{8, 8}, fc2{8, 4};
  Branchy() {
    register_module("fc1", fc1);
    register_module("fc_odd", fc_odd);
    register_module("fc_never", fc_never);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x, bool odd) {
    Tensor h = relu(fc1(x));
    if (odd) h = h + relu(fc_odd(h));
    return fc2(h);
  }
};
}  // namespace

TEST(DDP, FindUnusedParametersAveragesWhatEachRankUsed) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  const int64_t rows = kPerRank * world();
  manual_seed(9);
  Branchy net;
  net.to(DType::f64);
  DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.0005, .find_unused_parameters = true});
  auto [x, y] = global_batch(3, rows, DType::f64);
  for (int iter = 0; iter < 2; ++iter) {  // the second iteration must not see stale state
    net.zero_grad();
    Tensor xl = x.narrow(0, my_rank() * kPerRank, kPerRank), yl = y.narrow(0, my_rank() * kPerRank, kPerRank);
    Tensor out = ddp.forward([&] { return net.forward(xl, my_rank() % 2 == 1); });
    cross_entropy(out, yl).backward();
    ddp.finish_gradient_synchronization();  // a no-op: everything was reduced in backward
    // Reference: each rank's gradient computed here, averaged (a rank not using fc_odd adds 0).
    manual_seed(9);
    Branchy ref;
    ref.to(DType::f64);
    std::vector<Tensor> sum = {zeros_like(ref.fc1.weight), zeros_like(ref.fc_odd.weight),
                               zeros_like(ref.fc2.weight), zeros_like(ref.fc2.bias)};
    bool any_odd = false;
    for (int r = 0; r < world(); ++r) {
      ref.zero_grad();
      cross_entropy(ref.forward(x.narrow(0, r * kPerRank, kPerRank), r % 2 == 1),
                    y.narrow(0, r * kPerRank, kPerRank)).backward();
      any_odd = any_odd || r % 2 == 1;
      const Tensor* ps[] = {&ref.fc1.weight, &ref.fc_odd.weight, &ref.fc2.weight, &ref.fc2.bias};
      for (size_t k = 0; k < 4; ++k)
        if (ps[k]->grad().defined()) sum[k] = sum[k] + ps[k]->grad();
    }
    EXPECT_LT(max_abs_diff(net.fc1.weight.grad(), sum[0] / double(world())), 1e-12);
    EXPECT_LT(max_abs_diff(net.fc2.weight.grad(), sum[2] / double(world())), 1e-12);
    EXPECT_LT(max_abs_diff(net.fc2.bias.grad(), sum[3] / double(world())), 1e-12);
    if (any_odd) {
      ASSERT_TRUE(net.fc_odd.weight.grad().defined());
      EXPECT_LT(max_abs_diff(net.fc_odd.weight.grad(), sum[1] / double(world())), 1e-12);
    } else {
      EXPECT_FALSE(net.fc_odd.weight.grad().defined());  // unused on every rank: left alone
    }
    EXPECT_FALSE(net.fc_never.weight.grad().defined());
  }
}

TEST(DDP, UnusedParameterWithoutTheOptionIsAClearError) {
  manual_seed(9);
  Branchy net;
  DistributedDataParallel ddp(net);
  Tensor x = randn({4, 8});
  Tensor out = ddp.forward([&] { return net.forward(x, false); });
  out.sum().backward();  // fc_odd and fc_never get no gradient: their buckets never complete
  const std::string msg = message_of<distributed::DistributedError>([&] { ddp.finish_gradient_synchronization(); });
  EXPECT_NE(msg.find("fc_never.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("fc1.weight"), std::string::npos) << msg;
  // The state was reset: a full forward/backward now reduces normally.
  Mlp other;
  DistributedDataParallel ok(other);
  ok.forward([&] { return other.forward(x); }).sum().backward();
  EXPECT_NO_THROW(ok.finish_gradient_synchronization());
  EXPECT_EQ(ok.num_reductions(), 1);
}

TEST(DDP, MismatchedParameterShapesFailOnEveryRank) {
  EMBER_SKIP_UNLESS_SEVERAL_RANKS();
  struct Odd : nn::Module {
    nn::Linear fc;
    explicit Odd(int64_t out) : fc(4, out) { register_module("fc", fc); }
  };
  Odd net(3 + (my_rank() == 1 ? 1 : 0));
  const std::string msg = message_of<distributed::DistributedError>([&] { DistributedDataParallel ddp(net); });
  EXPECT_NE(msg.find("the ranks' modules differ"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parameter 'fc.weight' f32 [3, 4] on rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parameter 'fc.weight' f32 [4, 4] on rank 1"), std::string::npos) << msg;
}

TEST(DDP, HooksOutliveTheWrapperHarmlessly) {
  Mlp net;
  { DistributedDataParallel ddp(net); }
  Tensor x = randn({3, 8});
  net.forward(x).sum().backward();  // the hooks find no DDP and do nothing
  EXPECT_TRUE(net.fc1.weight.grad().defined());
}

TEST(DDP, NcclStepOnOneCard) {
  EMBER_NCCL_DEVICE_OR_SKIP(dev);
  const int64_t rows = kPerRank * world();
  manual_seed(100);
  Mlp ref;
  manual_seed(100);
  Mlp net;
  net.to(dev);
  DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.0005});
  EXPECT_STREQ(ddp.process_group().backend(), "nccl");
  optim::SGD ref_opt(ref.parameters(), {.lr = 0.1}), opt(net.parameters(), {.lr = 0.1});
  for (int s = 0; s < 3; ++s) {
    auto [x, y] = global_batch(s, rows, DType::f32);
    ref_opt.zero_grad();
    loss_of(ref, x, y).backward();
    ref_opt.step();
    Tensor xl = x.narrow(0, my_rank() * kPerRank, kPerRank).to(dev), yl = y.narrow(0, my_rank() * kPerRank, kPerRank).to(dev);
    opt.zero_grad();
    cross_entropy(ddp.forward([&] { return net.forward(xl); }), yl).backward();
    opt.step();
  }
  auto pn = net.parameters(), pr = ref.parameters();
  for (size_t i = 0; i < pn.size(); ++i) EXPECT_LT(max_abs_diff(pn[i].cpu(), pr[i]), 1e-4) << i;
}
