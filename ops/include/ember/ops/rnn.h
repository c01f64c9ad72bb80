// Recurrent layers (LSTM, GRU): the autograd-oblivious front. Note [rnn layout]:
//
// Cell pointwise ops. Every tensor is 2-D [N, k*H] with a unit column stride and any row
// stride (so time step t of a [T, N, k*H] buffer is used in place); one dtype, one device.
// Gate order is PyTorch's: LSTM (i, f, g, o), GRU (r, z, n).
//   LSTM: gates = gx + gh; i, f, o = sigmoid, g = tanh; c = f*c_prev + i*g; h = o*tanh(c).
//         The activated gates [N, 4H] are saved for backward; tanh(c) is recomputed there.
//   GRU:  r = sigmoid(gx_r + gh_r), z = sigmoid(gx_z + gh_z), n = tanh(gx_n + r*gh_n),
//         h = (1-z)*n + z*h_prev, where gx = W_ih x + b_ih and gh = W_hh h_prev + b_hh, as
//         PyTorch (b_hn inside the r product). Saved: ws [N, 4H] = (r, z, n, gh_n).
// 16-bit storage computes in f32 and rounds once on store.
//
// Layer ops: one direction of one layer over a whole sequence, time-major. The input
// projection of all T steps is one GEMM ([T*N, I] @ W_ih^T + bias); each step is one GEMM
// (h_prev @ W_hh^T, accumulated onto the step's slice of that projection for the LSTM) and one
// fused pointwise kernel. The states live in one buffer `hc` so that the outputs are views:
//   LSTM hc [2, T+1, N, H] (hc[0] hidden, hc[1] cell), GRU hc [1, T+1, N, H].
//   Forward direction: row 0 is the initial state, row t+1 the state after step t.
//   Reverse direction: row T is the initial state, row t the state after step t.
// So output = hc[0, 1:T+1] (forward) or hc[0, 0:T] (reverse), and the previous hidden states
// of all steps are the other T rows: one contiguous [T*N, H] block, which makes dW_hh one GEMM.
// Backward runs the steps in reverse (one pointwise kernel and one GEMM each) and then does
// dx, dW_ih, dW_hh and the biases as one GEMM each over all steps.
#pragma once

#include <array>

#include "ember/tensor.h"

namespace ember::ops {

struct LstmCellForward {
  Tensor hc;     // [N, 2H]: h in columns [0, H), c in [H, 2H) (one buffer for one autograd node)
  Tensor h, c;   // [N, H] views of hc
  Tensor gates;  // [N, 4H] activated (i, f, g, o), for backward
};
// gh may be undefined (gx already holds the sum).
LstmCellForward lstm_cell_forward(const Tensor& gx, const Tensor& gh, const Tensor& c_prev);
struct LstmCellBackward {
  Tensor dgates;  // [N, 4H]: the gradient of gx and of gh alike
  Tensor dc_prev; // [N, H]
};
LstmCellBackward lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                                    const Tensor& c_prev, const Tensor& c);

struct GruCellForward {
  Tensor h;   // [N, H], contiguous
  Tensor ws;  // [N, 4H]: r, z, n, gh_n
};
GruCellForward gru_cell_forward(const Tensor& gx, const Tensor& gh, const Tensor& h_prev);
struct GruCellBackward {
  Tensor dgx, dgh;  // [N, 3H]
  Tensor dh_prev;   // [N, H]: the direct part dh * z (the W_hh path is in dgh)
};
GruCellBackward gru_cell_backward(const Tensor& dh, const Tensor& ws, const Tensor& h_prev);

// ---- whole layers (Note [rnn layout] above) ----
enum class RnnMode : uint8_t { lstm, gru };
struct RnnLayerForward {
  Tensor hc;  // [2 (LSTM) or 1 (GRU), T+1, N, H]
  Tensor ws;  // [T, N, 4H] saved activations
};
// x [T, N, I] (any strides), w_ih [G*H, I], w_hh [G*H, H] (G = 4 LSTM, 3 GRU), biases [G*H]
// or undefined, h0 (and c0 for the LSTM) [N, H] or undefined (zeros).
RnnLayerForward rnn_layer_forward(RnnMode mode, const Tensor& x, const Tensor& w_ih,
                                  const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                  const Tensor& h0, const Tensor& c0, bool reverse);
struct RnnLayerBackward {
  Tensor dx, dh0, dc0, dw_ih, dw_hh, db_ih, db_hh;  // undefined where not needed
};
// dhc: the gradient of hc (any strides). needs: x, w_ih, w_hh, b_ih, b_hh, h0, c0.
RnnLayerBackward rnn_layer_backward(RnnMode mode, const Tensor& dhc, const Tensor& x,
                                    const Tensor& w_ih, const Tensor& w_hh, bool has_bias,
                                    const Tensor& hc, const Tensor& ws, bool reverse,
                                    std::array<bool, 7> needs);

}  // namespace ember::ops
