// nn::LSTM / GRU / LSTMCell / GRUCell against PyTorch (tests/fixtures/rnn_reference.txt from
// make_rnn_fixtures.py): each case loads PyTorch's state dict by name (so parameter names,
// shapes and gate order must match), runs forward, and compares the outputs, final states
// and the gradient of every parameter, the input and the initial states.
#include <cmath>

#include <ember/nn.h>

#include "support/test_support.h"

namespace ember::test {
namespace {

const char* kRef = "rnn_reference.txt";

Tensor fx(const std::string& name, Device dev) {
  return load_fixture(kRef, name).tensor(DType::f64).to(dev);
}

void load_state(nn::Module& m, const std::string& prefix, Device dev) {
  StateDict state;
  for (const auto& [name, t] : m.state_dict())
    state.insert(name, load_fixture(kRef, prefix + ".state." + name).tensor(DType::f64));
  m.to(DType::f64);
  m.to(dev);
  m.load_state_dict(state);
}

// The loss of make_rnn_fixtures.py's case() and the comparisons after backward.
void check_case(nn::Module& m, const std::string& p, Device dev, const Tensor& x, const Tensor& out,
                const Tensor& hn, const Tensor& cn, const Tensor& h0, const Tensor& c0) {
  EXPECT_TRUE(all_close(out, fx(p + ".out", dev), 1e-9, 1e-11)) << p << " output";
  EXPECT_TRUE(all_close(hn, fx(p + ".hn", dev), 1e-9, 1e-11)) << p << " h_n";
  Tensor loss = (out * fx(p + ".w_out", dev)).sum() + (hn * fx(p + ".w_h", dev)).sum();
  if (cn.defined()) {
    EXPECT_TRUE(all_close(cn, fx(p + ".cn", dev), 1e-9, 1e-11)) << p << " c_n";
    loss = loss + (cn * fx(p + ".w_c", dev)).sum();
  }
  loss.backward();
  for (const auto& [name, param] : m.named_parameters())
    EXPECT_TRUE(all_close(param.grad(), fx(p + ".grad." + name, dev), 1e-8, 1e-10)) << p << " " << name;
  EXPECT_TRUE(all_close(x.grad(), fx(p + ".dx", dev), 1e-8, 1e-10)) << p << " dx";
  if (h0.defined()) EXPECT_TRUE(all_close(h0.grad(), fx(p + ".dh0", dev), 1e-8, 1e-10)) << p << " dh0";
  if (c0.defined()) EXPECT_TRUE(all_close(c0.grad(), fx(p + ".dc0", dev), 1e-8, 1e-10)) << p << " dc0";
}

struct Config {
  const char* name;
  nn::RNNOptions options;
  bool with_state;
};
// make_rnn_fixtures.py's cases a-d.
const Config kConfigs[] = {
    {"a", {.num_layers = 2, .batch_first = true, .bidirectional = true}, false},
    {"b", {.num_layers = 2, .bidirectional = true}, true},
    {"c", {.num_layers = 2}, true},
    {"d", {.bias = false, .batch_first = true}, true},
};

class RnnTest : public ::testing::TestWithParam<Device> {};

TEST_P(RnnTest, LstmMatchesPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (const Config& c : kConfigs) {
    const std::string p = std::string("lstm.") + c.name;
    nn::LSTM lstm(3, 4, c.options);
    load_state(lstm, p, dev);
    Tensor x = fx(p + ".x", dev).requires_grad_(true);
    Tensor h0, c0;
    if (c.with_state) {
      h0 = fx(p + ".h0", dev).requires_grad_(true);
      c0 = fx(p + ".c0", dev).requires_grad_(true);
    }
    // PyTorch's spelling, lstm(x, (h0, c0)), as a brace list.
    auto [out, state] = c.with_state ? lstm(x, {h0, c0}) : lstm(x);
    auto [hn, cn] = state;
    check_case(lstm, p, dev, x, out, hn, cn, h0, c0);
  }
}

TEST_P(RnnTest, GruMatchesPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (const Config& c : kConfigs) {
    const std::string p = std::string("gru.") + c.name;
    nn::GRU gru(3, 4, c.options);
    load_state(gru, p, dev);
    Tensor x = fx(p + ".x", dev).requires_grad_(true);
    Tensor h0 = c.with_state ? fx(p + ".h0", dev).requires_grad_(true) : Tensor();
    auto [out, hn] = gru(x, h0);
    check_case(gru, p, dev, x, out, hn, Tensor(), h0, Tensor());
  }
}

TEST_P(RnnTest, CellsMatchPyTorch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  {
    nn::LSTMCell cell(3, 4);
    load_state(cell, "lstmcell", dev);
    Tensor x = fx("lstmcell.x", dev).requires_grad_(true);
    Tensor h0 = fx("lstmcell.h0", dev).requires_grad_(true), c0 = fx("lstmcell.c0", dev).requires_grad_(true);
    auto [h, c] = cell(x, {h0, c0});
    check_case(cell, "lstmcell", dev, x, h, h, c, h0, c0);
  }
  {
    nn::GRUCell cell(3, 4);
    load_state(cell, "grucell", dev);
    Tensor x = fx("grucell.x", dev).requires_grad_(true);
    Tensor h0 = fx("grucell.h0", dev).requires_grad_(true);
    Tensor h = cell(x, h0);
    check_case(cell, "grucell", dev, x, h, h, Tensor(), h0, Tensor());
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, RnnTest, ::testing::ValuesIn(test_devices()), device_label);

TEST(Rnn, ParameterNamesShapesAndInitFollowPyTorch) {
  nn::LSTM lstm(5, 8, {.num_layers = 2, .bidirectional = true});
  const std::vector<std::string> want = {
      "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
      "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
      "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
      "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse"};
  auto named = lstm.named_parameters();
  ASSERT_EQ(named.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(named[i].first, want[i]);
  EXPECT_EQ(named[0].second.sizes(), Shape({32, 5}));
  EXPECT_EQ(named[8].second.sizes(), Shape({32, 16}));  // layer 1 reads both directions
  const double bound = 1.0 / std::sqrt(8.0);
  for (const auto& [name, p] : named) {
    EXPECT_LE(p.abs().max().item<double>(), bound) << name;
    EXPECT_GT(p.abs().max().item<double>(), 0.5 * bound) << name;
  }
  nn::GRU gru(5, 8, {.bias = false});
  EXPECT_EQ(gru.named_parameters().size(), 2u);
  EXPECT_EQ(gru.named_parameters()[1].second.sizes(), Shape({24, 8}));
  EXPECT_EQ(lstm.repr(), "LSTM(5, 8, num_layers=2, bidirectional=True)");
}

TEST(Rnn, ErrorsNameTheLayer) {
  nn::LSTM lstm(3, 4);
  EXPECT_NE(message_of<ShapeError>([&] { lstm(zeros({2, 2, 5})); }).find("[LSTM] input.size(-1)"),
            std::string::npos);
  EXPECT_NE(message_of<ShapeError>([&] {
              lstm(zeros({2, 2, 3}), std::tuple{zeros({1, 3, 4}), zeros({1, 3, 4})});
            }).find("[LSTM] expected hidden[0]"),
            std::string::npos);
  EXPECT_THROW(nn::LSTM(3, 4, {.proj_size = 2}), NotImplementedError);
  nn::GRU gru(3, 4);
  EXPECT_THROW(gru(zeros({2, 3, 3, 3})), ShapeError);
}

TEST(Rnn, DropoutOnlyBetweenLayersAndOnlyInTraining) {
  manual_seed(3);
  // One layer: dropout never applies (PyTorch: only between layers), so train == eval.
  nn::LSTM one(3, 4, {.dropout = 0.9});
  Tensor x = randn({5, 2, 3});
  Tensor a = std::get<0>(one(x));
  one.eval();
  EXPECT_TRUE(all_close(std::get<0>(one(x)), a, 0, 0));
  // Two layers: training output differs from eval output; eval is deterministic.
  nn::LSTM two(3, 4, {.num_layers = 2, .dropout = 0.9});
  Tensor t1 = std::get<0>(two(x));
  two.eval();
  Tensor e1 = std::get<0>(two(x)), e2 = std::get<0>(two(x));
  EXPECT_TRUE(all_close(e1, e2, 0, 0));
  EXPECT_FALSE(all_close(t1, e1, 1e-3, 1e-4));
}

TEST(Rnn, CudaMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  for (DType dt : {DType::f32, DType::f64}) {
    manual_seed(5);
    nn::LSTM cpu_lstm(6, 16, {.num_layers = 2, .batch_first = true, .bidirectional = true});
    nn::LSTM gpu_lstm(6, 16, {.num_layers = 2, .batch_first = true, .bidirectional = true});
    cpu_lstm.to(dt);
    gpu_lstm.to(dt);
    gpu_lstm.load_state_dict(cpu_lstm.state_dict());
    gpu_lstm.to(Device::cuda(0));
    Tensor x = randn({3, 7, 6}, dt);
    Tensor xc = x.clone().requires_grad_(true), xg = x.to(Device::cuda(0)).requires_grad_(true);
    auto [oc, sc] = cpu_lstm(xc);
    auto [og, sg] = gpu_lstm(xg);
    Tensor w = randn(oc.sizes(), dt);
    (oc * w).sum().backward();
    (og * w.to(Device::cuda(0))).sum().backward();
    EXPECT_TRUE(close_to_cpu(og, oc, cuda_rtol(dt)));
    EXPECT_TRUE(close_to_cpu(std::get<1>(sg), std::get<1>(sc), cuda_rtol(dt)));
    EXPECT_TRUE(close_to_cpu(xg.grad(), xc.grad(), 10 * cuda_rtol(dt)));
    auto pc = cpu_lstm.named_parameters(), pg = gpu_lstm.named_parameters();
    for (size_t i = 0; i < pc.size(); ++i)
      EXPECT_TRUE(close_to_cpu(pg[i].second.grad(), pc[i].second.grad(), 10 * cuda_rtol(dt))) << pc[i].first;
    manual_seed(6);
    nn::GRU cpu_gru(6, 16, {.num_layers = 2, .bidirectional = true});
    nn::GRU gpu_gru(6, 16, {.num_layers = 2, .bidirectional = true});
    cpu_gru.to(dt);
    gpu_gru.to(dt);
    gpu_gru.load_state_dict(cpu_gru.state_dict());
    gpu_gru.to(Device::cuda(0));
    Tensor y = randn({7, 3, 6}, dt);
    Tensor yc = y.clone().requires_grad_(true), yg = y.to(Device::cuda(0)).requires_grad_(true);
    auto [gc, hc] = cpu_gru(yc);
    auto [gg, hg] = gpu_gru(yg);
    (gc * gc).sum().backward();
    (gg * gg).sum().backward();
    EXPECT_TRUE(close_to_cpu(gg, gc, cuda_rtol(dt)));
    EXPECT_TRUE(close_to_cpu(hg, hc, cuda_rtol(dt)));
    EXPECT_TRUE(close_to_cpu(yg.grad(), yc.grad(), 10 * cuda_rtol(dt)));
  }
}

// The fused cell kernels in 16-bit storage compute in f32 and round once: equal to the f32
// result on the same (rounded) inputs, up to the output rounding.
TEST(Rnn, CellKernels16BitMatchF32) {
  manual_seed(8);
  for (DType dt : {DType::f16, DType::bf16}) {
    const double tol = dt == DType::f16 ? 2e-3 : 1.6e-2;
    Tensor gx = randn({3, 20}).to(dt), gh = randn({3, 20}).to(dt), c = randn({3, 5}).to(dt);
    auto [h, cn] = lstm_cell_pointwise(gx, gh, c);
    auto [h32, c32] = lstm_cell_pointwise(gx.to(DType::f32), gh.to(DType::f32), c.to(DType::f32));
    EXPECT_EQ(h.dtype(), dt);
    EXPECT_TRUE(all_close(h.to(DType::f32), h32, tol, tol));
    EXPECT_TRUE(all_close(cn.to(DType::f32), c32, tol, tol));
    Tensor gx3 = randn({3, 15}).to(dt), gh3 = randn({3, 15}).to(dt);
    EXPECT_TRUE(all_close(gru_cell_pointwise(gx3, gh3, c).to(DType::f32),
                          gru_cell_pointwise(gx3.to(DType::f32), gh3.to(DType::f32), c.to(DType::f32)), tol, tol));
  }
}

// The CUDA cell kernels (forward and backward) against the CPU ones, every dtype, with a
// strided gx and a broadcast gh.
TEST(Rnn, CellKernelsCudaMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device cuda = Device::cuda(0);
  manual_seed(9);
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(str(dt));
    const int64_t N = 37, H = 45;
    Tensor gx = randn({4 * H, N}).to(dt), gh = randn({1, 4 * H}).to(dt), c = randn({N, H}).to(dt);
    Tensor w = randn({N, H}).to(dt);
    // detach(): on the CPU to(dev) returns the tensor itself, which must stay a plain input
    // for the CUDA run that follows.
    auto run = [&](Device dev) {
      Tensor a = gx.to(dev).detach().requires_grad_(true), b = gh.to(dev).detach().requires_grad_(true),
             cc = c.to(dev).detach().requires_grad_(true);
      auto [h, cn] = lstm_cell_pointwise(a.transpose(0, 1), b.expand({N, 4 * H}), cc);
      Tensor loss = (h * w.to(dev)).sum() + (cn * cn).sum();
      auto g = autograd::grad({loss}, {a, b, cc});
      return TensorList{h.contiguous(), cn.contiguous(), g[0], g[1], g[2]};
    };
    TensorList cpu = run(Device::cpu()), gpu = run(cuda);
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_TRUE(close_to_cpu(gpu[i], cpu[i], (i < 2 ? 1 : 4) * cuda_rtol(dt))) << i;
    Tensor g3 = randn({N, 3 * H}).to(dt), h3 = randn({N, 3 * H}).to(dt);
    auto run_gru = [&](Device dev) {
      Tensor a = g3.to(dev).detach().requires_grad_(true), b = h3.to(dev).detach().requires_grad_(true),
             p = c.to(dev).detach().requires_grad_(true);
      Tensor h = gru_cell_pointwise(a, b, p);
      auto g = autograd::grad({(h * w.to(dev)).sum()}, {a, b, p});
      return TensorList{h, g[0], g[1], g[2]};
    };
    TensorList gc = run_gru(Device::cpu()), gg = run_gru(cuda);
    for (size_t i = 0; i < gc.size(); ++i)
      EXPECT_TRUE(close_to_cpu(gg[i], gc[i], (i < 1 ? 1 : 4) * cuda_rtol(dt))) << i;
  }
}

}  // namespace
}  // namespace ember::test
