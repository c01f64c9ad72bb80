// Note [master weights] (optim/optimizer.h): pure-bf16 parameters with an f32 master copy in
// Adam/AdamW. A bf16 MLP trained through masters reaches the f32 run's loss band; without
// masters, updates below half a bf16 ulp are lost (the documented contrast); the masters are
// part of the state dict and round-trip bit-exactly; f32 parameters ignore the option.
#include <cmath>

#include "ember/optim.h"
#include "support/test_support.h"

using namespace ember;

namespace {

struct Mlp {
  nn::Linear fc1{8, 32}, fc2{32, 1};
  Tensor forward(const Tensor& x) const { return fc2(relu(fc1(x))); }
  std::vector<Tensor> parameters() { return {fc1.weight, fc1.bias, fc2.weight, fc2.bias}; }
  void to(DType d) { fc1.to(d); fc2.to(d); }
};

// Full-batch regression onto a fixed random teacher; returns the final f32 loss.
double train(DType dtype, bool master_weights, double* initial_loss) {
  manual_seed(11);
  const Tensor x = randn({256, 8});
  const Tensor y = tanh(x.matmul(randn({8, 4}))).matmul(randn({4, 1}));
  manual_seed(12);
  Mlp net;
  net.to(dtype);
  optim::AdamW opt(net.parameters(), {.lr = 3e-3, .weight_decay = 0.0, .master_weights = master_weights});
  const Tensor xd = x.to(dtype), yd = y.to(dtype);
  auto f32_loss = [&] {
    NoGradGuard no_grad;
    return nn::functional::mse_loss(net.forward(xd).to(DType::f32), y).item<double>();
  };
  *initial_loss = f32_loss();
  for (int step = 0; step < 400; ++step) {
    opt.zero_grad();
    nn::functional::mse_loss(net.forward(xd), yd).backward();
    opt.step();
  }
  for (const Tensor& p : net.parameters()) EXPECT_EQ(p.dtype(), dtype);
  return f32_loss();
}

TEST(MasterWeights, Bf16MlpTrainsIntoTheF32Band) {
  double init32 = 0, init16 = 0, init_nm = 0;
  const double f32 = train(DType::f32, false, &init32);
  const double bf16 = train(DType::bf16, true, &init16);
  const double no_master = train(DType::bf16, false, &init_nm);
  // Sanity: the task is learnable and the f32 run learned it.
  ASSERT_LT(f32, 0.1 * init32);
  // The f32 band: bf16 forward/backward costs a little, but the masters keep every update.
  EXPECT_LT(bf16, 0.1 * init16);
  EXPECT_LT(bf16, 1.5 * f32 + 2e-3) << "f32 " << f32 << " bf16+master " << bf16;
  // Reported, not asserted: at this lr (updates above half a bf16 ulp of most weights) plain
  // bf16 also trains; the case where it cannot is TinyUpdatesAreLostWithoutMasters.
  std::printf("final loss: f32 %.5f  bf16+master %.5f  bf16 without master %.5f\n", f32, bf16,
              no_master);
}

// The contrast: an Adam step moves a parameter by about lr. With lr = 1e-4 and w = 1 (bf16 ulp
// 2^-7 there), each step is far below half an ulp: plain bf16 rounds every update away, while
// the master accumulates them (50 steps -> about -5e-3, which rounds to 1 - 2^-8 ... in bf16
// the next value below 1 is 1 - 2^-8).
TEST(MasterWeights, TinyUpdatesAreLostWithoutMasters) {
  for (bool master : {false, true}) {
    Tensor w = ones({4}, DType::bf16).requires_grad_(true);
    optim::Adam opt({w}, {.lr = 1e-4, .master_weights = master});
    for (int t = 0; t < 50; ++t) {
      w.set_grad(ones({4}, DType::bf16));
      opt.step();
    }
    if (!master) {
      EXPECT_TRUE(test::all_close(w.detach(), std::vector<double>{1, 1, 1, 1}, 0, 0));
      EXPECT_FALSE(opt.state(0, "master").defined());
    } else {
      const Tensor m = opt.state(0, "master");
      ASSERT_TRUE(m.defined());
      EXPECT_EQ(m.dtype(), DType::f32);
      EXPECT_TRUE(test::all_close(m, std::vector<double>{1 - 50e-4, 1 - 50e-4, 1 - 50e-4, 1 - 50e-4},
                                  1e-4, 0));
      // The parameter is the master rounded to bf16: 0.995 -> 0.99609375 (1 - 2^-8).
      EXPECT_TRUE(test::all_close(w.detach(), m.to(DType::bf16), 0, 0));
      EXPECT_TRUE(test::all_close(w.detach(), std::vector<double>{0.99609375, 0.99609375,
                                                                  0.99609375, 0.99609375}, 0, 0));
    }
  }
}

TEST(MasterWeights, StateDictRoundTripsBitExactly) {
  auto make = [] {
    manual_seed(3);
    return std::vector<Tensor>{randn({5, 3}, DType::bf16).requires_grad_(true),
                               randn({7}, DType::f16).requires_grad_(true),
                               randn({2}, DType::f32).requires_grad_(true)};
  };
  auto set_grads = [](const std::vector<Tensor>& ps, int s) {
    for (size_t i = 0; i < ps.size(); ++i) {
      Generator gen(uint64_t(100 + 7 * s + int(i)));
      Tensor h = ps[i];
      h.set_grad(randn(ps[i].sizes(), TensorOptions(ps[i].dtype()), &gen));
    }
  };
  std::vector<Tensor> a = make();
  optim::AdamW opt_a(a, {.lr = 1e-2, .master_weights = true});
  for (int s = 0; s < 3; ++s) { set_grads(a, s); opt_a.step(); }
  const StateDict sd = opt_a.state_dict();
  ASSERT_TRUE(sd.contains("state.0.master"));
  ASSERT_TRUE(sd.contains("state.1.master"));
  EXPECT_FALSE(sd.contains("state.2.master"));  // f32 parameters have no master
  EXPECT_EQ(sd.at("state.0.master").dtype(), DType::f32);
  EXPECT_EQ(sd.scalar("param_groups.0.master_weights"), 1.0);
  // A second optimizer over copies of the parameters, loaded from the state dict.
  std::vector<Tensor> b;
  for (const Tensor& p : a) b.push_back(p.detach().clone().requires_grad_(true));
  optim::AdamW opt_b(b, {.lr = 0.5});
  opt_b.load_state_dict(sd);
  EXPECT_TRUE(opt_b.options().master_weights);
  for (size_t i = 0; i < 2; ++i)
    EXPECT_TRUE(test::all_close(opt_b.state(i, "master"), opt_a.state(i, "master"), 0, 0));
  EXPECT_FALSE(opt_b.state(0, "master").is_same(opt_a.state(0, "master")));  // copied in
  for (int s = 3; s < 6; ++s) {
    set_grads(a, s); opt_a.step();
    set_grads(b, s); opt_b.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(test::all_close(b[i].detach(), a[i].detach(), 0, 0)) << "parameter " << i;
    if (i < 2) {
      EXPECT_TRUE(test::all_close(opt_b.state(i, "master"), opt_a.state(i, "master"), 0, 0));
    }
  }
  // A master for an f32 parameter is refused.
  StateDict bad = sd;
  bad.set("state.2.master", zeros({2}));
  EXPECT_NE(test::message_of<ValueError>([&] { opt_b.load_state_dict(bad); }).find("master"),
            std::string::npos);
}

}  // namespace
