// Gradients of the recurrent ops: gradcheck (f64 central differences of the forward) of the
// fused LSTM/GRU cell pointwise ops, on strided and broadcast inputs, and of whole small
// LSTM/GRU modules (2 layers, bidirectional, batch_first) with respect to the input, the
// initial states and every weight; double backward throws.
#include <ember/nn.h>

#include "support/test_support.h"

using namespace ember;
using autograd::gradcheck;
using ember::test::all_close;

namespace {

Tensor req(Tensor t) { return t.requires_grad_(true); }

TEST(RnnGrad, LstmCellPointwiseGradcheck) {
  manual_seed(1);
  const int64_t N = 3, H = 4;
  // gx strided (a transposed buffer), gh broadcast over the batch, c_prev contiguous.
  Tensor gx = req(randn({4 * H, N}, DType::f64));
  Tensor gh = req(randn({1, 4 * H}, DType::f64));
  Tensor c = req(randn({N, H}, DType::f64));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    auto [h, cn] = lstm_cell_pointwise(in[0].transpose(0, 1), in[1].expand({N, 4 * H}), in[2]);
    return cat({h.flatten(), (cn * 0.7).flatten()});
  }, {gx, gh, c}));
  // gh absent (gx holds the whole pre-activation).
  Tensor g2 = req(randn({N, 4 * H}, DType::f64));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    auto [h, cn] = lstm_cell_pointwise(in[0], Tensor(), in[1]);
    return cat({h.flatten(), cn.flatten()});
  }, {g2, c}));
}

TEST(RnnGrad, LstmCellPointwiseMatchesComposite) {
  manual_seed(2);
  const int64_t N = 5, H = 7;
  Tensor gx = randn({N, 4 * H}, DType::f64), gh = randn({N, 4 * H}, DType::f64),
         c = randn({N, H}, DType::f64);
  auto [h, cn] = lstm_cell_pointwise(gx, gh, c);
  auto g = (gx + gh).chunk(4, 1);
  Tensor c_ref = sigmoid(g[1]) * c + sigmoid(g[0]) * tanh(g[2]);
  EXPECT_TRUE(all_close(cn, c_ref, 1e-14, 1e-14));
  EXPECT_TRUE(all_close(h, sigmoid(g[3]) * tanh(c_ref), 1e-14, 1e-14));
}

TEST(RnnGrad, GruCellPointwiseGradcheckAndComposite) {
  manual_seed(3);
  const int64_t N = 3, H = 4;
  Tensor gx = req(randn({3 * H, N}, DType::f64));
  Tensor gh = req(randn({N, 3 * H}, DType::f64));
  Tensor h = req(randn({1, H}, DType::f64));
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    return gru_cell_pointwise(in[0].transpose(0, 1), in[1], in[2].expand({N, H}));
  }, {gx, gh, h}));
  NoGradGuard ng;
  Tensor x = gx.transpose(0, 1);
  auto a = x.chunk(3, 1), b = gh.chunk(3, 1);
  Tensor r = sigmoid(a[0] + b[0]), z = sigmoid(a[1] + b[1]), n = tanh(a[2] + r * b[2]);
  EXPECT_TRUE(all_close(gru_cell_pointwise(x, gh, h.expand({N, H})), (1 - z) * n + z * h, 1e-14, 1e-14));
}

TEST(RnnGrad, WholeLstmGradcheck) {
  manual_seed(4);
  nn::LSTM lstm(2, 3, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  lstm.to(DType::f64);
  TensorList inputs = {req(randn({2, 3, 2}, DType::f64)), req(randn({4, 2, 3}, DType::f64)),
                       req(randn({4, 2, 3}, DType::f64))};
  for (const Tensor& p : lstm.parameters()) inputs.push_back(p);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    auto [out, st] = lstm(in[0], std::tuple{in[1], in[2]});
    return cat({out.flatten(), std::get<0>(st).flatten(), std::get<1>(st).flatten()});
  }, inputs));
}

TEST(RnnGrad, WholeGruGradcheck) {
  manual_seed(5);
  nn::GRU gru(2, 3, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  gru.to(DType::f64);
  TensorList inputs = {req(randn({2, 3, 2}, DType::f64)), req(randn({4, 2, 3}, DType::f64))};
  for (const Tensor& p : gru.parameters()) inputs.push_back(p);
  EXPECT_TRUE(gradcheck([&](const TensorList& in) {
    auto [out, h] = gru(in[0], in[1]);
    return cat({out.flatten(), h.flatten()});
  }, inputs));
}

TEST(RnnGrad, DoubleBackwardThrows) {
  Tensor gx = req(randn({2, 8}, DType::f64)), c = req(randn({2, 2}, DType::f64));
  auto [h, cn] = lstm_cell_pointwise(gx, Tensor(), c);
  auto g = autograd::grad({(h * h).sum()}, {gx}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  EXPECT_THROW(g[0].sum().backward(), NotImplementedError);
}

}  // namespace
