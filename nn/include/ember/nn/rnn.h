// Recurrent layers with PyTorch's options, semantics and parameter names, so a PyTorch
// state_dict loads by name: LSTM, GRU (multi-layer, batch_first, bidirectional, initial
// states, dropout between layers but not after the last) and their cells.
//
//   nn::LSTM lstm(128, 256, {.num_layers = 2, .batch_first = true});
//   auto [out, state] = lstm(x);           // x [N, T, 128] -> out [N, T, 256]
//   auto [h_n, c_n] = state;               // [num_layers * num_directions, N, 256]
//
// Parameters, per layer k and direction (suffix "_reverse" for the backward one):
// weight_ih_l{k} [G*H, in], weight_hh_l{k} [G*H, H], bias_ih_l{k}, bias_hh_l{k} [G*H], G = 4
// (LSTM: i, f, g, o) or 3 (GRU: r, z, n); all initialized U(-1/sqrt(H), 1/sqrt(H)).
// Inputs: [T, N, I] ([N, T, I] with batch_first) or unbatched [T, I]; states [L*D, N, H]
// (unbatched [L*D, H]). Each layer direction is one fused op (ember::lstm_layer: one input
// GEMM for all steps, then one GEMM and one pointwise kernel per step).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;
  double dropout = 0.0;  // on the outputs of every layer but the last, in training mode
  bool bidirectional = false;
  int64_t proj_size = 0;  // LSTM projections: not implemented (> 0 throws NotImplementedError)
};
using LSTMOptions = RNNOptions;
using GRUOptions = RNNOptions;

// Shared by LSTM and GRU: options, parameters and the layer loop.
class RNNBase : public Module {
 public:
  int64_t input_size, hidden_size;
  RNNOptions options;
  void reset_parameters();
  std::string extra_repr() const override;
  // The parameters of layer k, direction d (0 forward, 1 reverse): w_ih, w_hh, b_ih, b_hh.
  std::array<Tensor, 4> layer_parameters(int64_t k, int64_t d) const;

 protected:
  RNNBase(const char* mode, int64_t gates, int64_t input_size, int64_t hidden_size,
          RNNOptions options);
  // output and {h_n, c_n} (c_n undefined for the GRU) for the given initial states.
  std::tuple<Tensor, Tensor, Tensor> run(const Tensor& input, const Tensor& h0,
                                         const Tensor& c0) const;

 private:
  const char* mode_;
  std::vector<std::array<Tensor, 4>> params_;  // [k * D + d]
};

// The (h, c) state an LSTM or LSTMCell starts from, spelled as in PyTorch: `lstm(x, {h0, c0})`,
// the {h_n, c_n} tuple an earlier call returned, or nothing (std::nullopt, the default: zeros).
// std::optional<std::tuple<Tensor, Tensor>> would refuse the brace list (two constructor arguments).
class LSTMState : public std::optional<std::tuple<Tensor, Tensor>> {
  using Base = std::optional<std::tuple<Tensor, Tensor>>;

 public:
  LSTMState() = default;
  LSTMState(std::nullopt_t) {}
  LSTMState(Tensor h, Tensor c) : Base(std::in_place, std::move(h), std::move(c)) {}
  LSTMState(std::tuple<Tensor, Tensor> hc) : Base(std::move(hc)) {}
  LSTMState(Base hc) : Base(std::move(hc)) {}
};

class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions options = {});
  // {output, {h_n, c_n}}; hx = {h_0, c_0}, zeros when absent.
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, const LSTMState& hx = std::nullopt) const;
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> operator()(
      const Tensor& input, const LSTMState& hx = std::nullopt) const {
    return forward(input, hx);
  }
  std::string type_name() const override { return "LSTM"; }
};

class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, GRUOptions options = {});
  // {output, h_n}; hx = h_0, zeros when undefined.
  std::tuple<Tensor, Tensor> forward(const Tensor& input, const Tensor& hx = Tensor()) const;
  std::tuple<Tensor, Tensor> operator()(const Tensor& input, const Tensor& hx = Tensor()) const {
    return forward(input, hx);
  }
  std::string type_name() const override { return "GRU"; }
};

// One step: input [N, I] (or [I]), states [N, H] (or [H]); parameters weight_ih [G*H, I],
// weight_hh [G*H, H], bias_ih, bias_hh [G*H]; init U(-1/sqrt(H), 1/sqrt(H)).
class LSTMCell : public Module {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // {h_1, c_1}; hx = {h_0, c_0}, zeros when absent.
  std::tuple<Tensor, Tensor> forward(
      const Tensor& input, const LSTMState& hx = std::nullopt) const;
  std::tuple<Tensor, Tensor> operator()(
      const Tensor& input, const LSTMState& hx = std::nullopt) const {
    return forward(input, hx);
  }
  void reset_parameters();
  std::string type_name() const override { return "LSTMCell"; }
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

class GRUCell : public Module {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  // h_1; hx = h_0, zeros when undefined.
  Tensor forward(const Tensor& input, const Tensor& hx = Tensor()) const;
  Tensor operator()(const Tensor& input, const Tensor& hx = Tensor()) const {
    return call(input, [&](const Tensor& in) { return forward(in, hx); });
  }
  void reset_parameters();
  std::string type_name() const override { return "GRUCell"; }
  std::string extra_repr() const override;

  int64_t input_size, hidden_size;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;
};

}  // namespace ember::nn
