// Differentiable recurrent ops: the fused LSTM/GRU cell pointwise ops and whole LSTM/GRU
// layers (one direction), forward and VJP side by side (math and layout: ember/ops/rnn.h).
//
// Multi-output ops record ONE node whose output packs the results, and hand out views of it:
// lstm_cell_pointwise -> hc [N, 2H] (h = columns [0, H), c = [H, 2H)); a layer -> hc
// [P, T+1, N, H] (Note [rnn layout]). The views' VJPs scatter into a zero gradient of the
// packed shape, and the engine sums them, so the node's VJP sees one dense gradient.
//
// A layer is one node, not T cell nodes: per-step nodes would take per-step slices of the
// input projection, and each slice's VJP would allocate a zero gradient of the whole
// projection (T^2 work). The layer's VJP instead runs the steps in reverse with the fused
// backward kernel and does the weight gradients as one GEMM over all steps.
//
// Saved for backward: the activated gates (LSTM i, f, g, o; GRU r, z, n and W_hn h + b_hn)
// and the states; tanh(c) is recomputed. Double backward throws NotImplementedError.
#include <utility>

#include "ember/ops/rnn.h"
#include "fused_util.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::no_double_backward;
using autograd::record;
using autograd::save;

std::pair<Tensor, Tensor> lstm_cell_pointwise(const Tensor& gx, const Tensor& gh,
                                              const Tensor& c_prev) {
  ops::LstmCellForward f = ops::lstm_cell_forward(gx, gh, c_prev);
  const int64_t H = f.h.sizes()[1];
  Tensor hc = record("lstm_cell", f.hc, {gx, gh, c_prev},
                     [gates = f.gates, cp = save(c_prev), H, has_gh = gh.defined()](
                         const Tensor& g, const Tensor& y) -> TensorList {
                       const Tensor& cpv = cp;
                       ops::LstmCellBackward b = ops::lstm_cell_backward(
                           narrow(g, 1, 0, H), narrow(g, 1, H, H), gates, cpv,
                           narrow(y.detach(), 1, H, H));
                       const char* name = "lstm_cell_backward";
                       Tensor dgates = no_double_backward(name, b.dgates, {g});
                       return {dgates, has_gh ? dgates : Tensor(),
                               no_double_backward(name, b.dc_prev, {g})};
                     });
  return {narrow(hc, 1, 0, H), narrow(hc, 1, H, H)};
}

Tensor gru_cell_pointwise(const Tensor& gx, const Tensor& gh, const Tensor& h_prev) {
  ops::GruCellForward f = ops::gru_cell_forward(gx, gh, h_prev);
  return record("gru_cell", f.h, {gx, gh, h_prev},
                [ws = f.ws, hp = save(h_prev)](const Tensor& g) -> TensorList {
                  ops::GruCellBackward b = ops::gru_cell_backward(g, ws, hp);
                  const char* name = "gru_cell_backward";
                  return {no_double_backward(name, b.dgx, {g}), no_double_backward(name, b.dgh, {g}),
                          no_double_backward(name, b.dh_prev, {g})};
                });
}

namespace {

RnnLayerOutput rnn_layer(ops::RnnMode mode, const Tensor& x, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                         const Tensor& h0, const Tensor& c0, bool reverse) {
  const bool lstm = mode == ops::RnnMode::lstm;
  ops::RnnLayerForward f = ops::rnn_layer_forward(mode, x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse);
  const int64_t R = f.hc.sizes()[1];  // T + 1 rows
  Tensor hc = record(lstm ? "lstm_layer" : "gru_layer", f.hc, {x, w_ih, w_hh, b_ih, b_hh, h0, c0},
                     [mode, ws = f.ws, x_ = save(x), wi = save(w_ih), wh = save(w_hh),
                      has_bias = b_ih.defined(), reverse](const Tensor& g, const Tensor& y) -> TensorList {
                       std::array<bool, 7> needs{};
                       for (size_t i = 0; i < needs.size(); ++i) needs[i] = needs_input_grad(i);
                       ops::RnnLayerBackward b = ops::rnn_layer_backward(
                           mode, g, x_, wi, wh, has_bias, y.detach(), ws, reverse, needs);
                       const char* name = mode == ops::RnnMode::lstm ? "lstm_layer_backward"
                                                                     : "gru_layer_backward";
                       TensorList out;
                       for (Tensor* t : {&b.dx, &b.dw_ih, &b.dw_hh, &b.db_ih, &b.db_hh, &b.dh0, &b.dc0})
                         out.push_back(no_double_backward(name, *t, {g}));
                       return out;
                     });
  EMBER_TRACE(hc, lstm ? "lstm_layer" : "gru_layer", {x, w_ih, w_hh, b_ih, b_hh, h0, c0}, {{"reverse", reverse}});
  // Views (Note [rnn layout]). The rows are counted from the end where they are the last ones
  // (-1, not T), so an exported graph does not bake in the sequence length.
  const Tensor hidden = select(hc, 0, 0);
  RnnLayerOutput out;
  out.output = reverse ? slice(hidden, 0, 0, -1) : slice(hidden, 0, 1, R);
  out.h_n = select(hidden, 0, reverse ? 0 : -1);
  if (lstm) out.c_n = select(select(hc, 0, 1), 0, reverse ? 0 : -1);
  return out;
}

}  // namespace

RnnLayerOutput lstm_layer(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                          const Tensor& b_ih, const Tensor& b_hh, const Tensor& h0,
                          const Tensor& c0, bool reverse) {
  return rnn_layer(ops::RnnMode::lstm, x, w_ih, w_hh, b_ih, b_hh, h0, c0, reverse);
}

RnnLayerOutput gru_layer(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                         const Tensor& b_ih, const Tensor& b_hh, const Tensor& h0, bool reverse) {
  return rnn_layer(ops::RnnMode::gru, x, w_ih, w_hh, b_ih, b_hh, h0, Tensor(), reverse);
}

}  // namespace ember
