#include "ember/nn/rnn.h"

#include <cmath>
#include <string_view>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

void check_positive(const char* layer, const char* what, int64_t v) {
  EMBER_CHECK(v > 0, ValueError, "[", layer, "] ", what, " must be positive, got ", v);
}

void uniform_all(std::initializer_list<Tensor*> ts, int64_t hidden_size) {
  const double bound = 1.0 / std::sqrt(double(hidden_size));
  for (Tensor* t : ts)
    if (t->defined()) init::uniform_(*t, -bound, bound);
}

// Sizes of a state argument of `layer`: [L*D, N, H] batched, [L*D, H] unbatched.
void check_state(const char* layer, const char* what, const Tensor& s, bool batched,
                 int64_t layers, int64_t N, int64_t H) {
  if (!s.defined()) return;
  const Shape want = batched ? Shape{layers, N, H} : Shape{layers, H};
  EMBER_CHECK(s.sizes() == want, ShapeError, "[", layer, "] expected ", what, " of size ", want,
              ", got ", s.sizes());
}

}  // namespace

// ---- RNNBase ----

RNNBase::RNNBase(const char* mode, int64_t gates, int64_t input_size, int64_t hidden_size,
                 RNNOptions options)
    : input_size(input_size), hidden_size(hidden_size), options(options), mode_(mode) {
  check_positive(mode, "input_size", input_size);
  check_positive(mode, "hidden_size", hidden_size);
  check_positive(mode, "num_layers", options.num_layers);
  EMBER_CHECK(options.dropout >= 0 && options.dropout <= 1, ValueError, "[", mode,
              "] dropout should be a number in range [0, 1], got ", options.dropout);
  if (options.proj_size != 0)
    throw NotImplementedError(str("[", mode, "] proj_size > 0 is not implemented"));
  const int64_t D = options.bidirectional ? 2 : 1, H = hidden_size;
  for (int64_t k = 0; k < options.num_layers; ++k) {
    for (int64_t d = 0; d < D; ++d) {
      const std::string sfx = str("_l", k, d == 1 ? "_reverse" : "");
      const int64_t in = k == 0 ? input_size : H * D;
      std::array<Tensor, 4> p;
      p[0] = register_parameter("weight_ih" + sfx, empty({gates * H, in}));
      p[1] = register_parameter("weight_hh" + sfx, empty({gates * H, H}));
      if (options.bias) {
        p[2] = register_parameter("bias_ih" + sfx, empty({gates * H}));
        p[3] = register_parameter("bias_hh" + sfx, empty({gates * H}));
      }
      params_.push_back(p);
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  for (auto& p : params_) uniform_all({&p[0], &p[1], &p[2], &p[3]}, hidden_size);
}

std::array<Tensor, 4> RNNBase::layer_parameters(int64_t k, int64_t d) const {
  const int64_t D = options.bidirectional ? 2 : 1;
  EMBER_CHECK(k >= 0 && k < options.num_layers && d >= 0 && d < D, IndexError, "[", mode_,
              "] no layer ", k, " direction ", d);
  return params_[size_t(k * D + d)];
}

std::string RNNBase::extra_repr() const {
  std::string s = str(input_size, ", ", hidden_size);
  if (options.num_layers != 1) s += str(", num_layers=", options.num_layers);
  if (!options.bias) s += ", bias=False";
  if (options.batch_first) s += ", batch_first=True";
  if (options.dropout != 0) s += str(", dropout=", options.dropout);
  if (options.bidirectional) s += ", bidirectional=True";
  return s;
}

std::tuple<Tensor, Tensor, Tensor> RNNBase::run(const Tensor& input, const Tensor& h0,
                                                const Tensor& c0) const {
  ember::detail::check_defined(mode_, input);
  const bool lstm = std::string_view(mode_) == "LSTM";
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3, ShapeError, "[", mode_,
              "] expects a 2-D (unbatched) or 3-D (batched) input, got ", input.sizes());
  EMBER_CHECK(input.size(-1) == input_size, ShapeError, "[", mode_,
              "] input.size(-1) must be equal to input_size. Expected ", input_size, ", got ",
              input.size(-1));
  const bool batched = input.dim() == 3;
  // Time-major [T, N, I] inside (unbatched: N = 1).
  Tensor x = batched ? (options.batch_first ? input.transpose(0, 1) : input) : input.unsqueeze(1);
  const int64_t D = options.bidirectional ? 2 : 1, L = options.num_layers, N = x.size(1),
                H = hidden_size;
  check_state(mode_, "hidden[0]", h0, batched, L * D, N, H);
  check_state(mode_, "hidden[1]", c0, batched, L * D, N, H);
  auto state = [&](const Tensor& s, int64_t i) {
    if (!s.defined()) return Tensor();
    return batched ? s.select(0, i) : s.select(0, i).unsqueeze(0);
  };
  std::vector<Tensor> hn, cn;
  for (int64_t k = 0; k < L; ++k) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < D; ++d) {
      const auto& p = params_[size_t(k * D + d)];
      const int64_t i = k * D + d;
      RnnLayerOutput r = lstm ? lstm_layer(x, p[0], p[1], p[2], p[3], state(h0, i), state(c0, i), d == 1)
                              : gru_layer(x, p[0], p[1], p[2], p[3], state(h0, i), d == 1);
      outs.push_back(r.output);
      hn.push_back(r.h_n);
      if (lstm) cn.push_back(r.c_n);
    }
    x = D == 1 ? outs[0] : cat(outs, 2);
    if (k + 1 < L && options.dropout > 0 && is_training()) x = dropout(x, options.dropout, true);
  }
  Tensor out = batched ? (options.batch_first ? x.transpose(0, 1) : x) : x.squeeze(1);
  Tensor h = stack(hn, 0), c = lstm ? stack(cn, 0) : Tensor();
  if (!batched) {
    h = h.squeeze(1);
    if (lstm) c = c.squeeze(1);
  }
  return {out, h, c};
}

// ---- LSTM / GRU ----

LSTM::LSTM(int64_t input_size, int64_t hidden_size, LSTMOptions options)
    : RNNBase("LSTM", 4, input_size, hidden_size, options) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, const LSTMState& hx) const {
  Tensor h0, c0;
  if (hx) std::tie(h0, c0) = *hx;
  EMBER_CHECK(h0.defined() == c0.defined(), ValueError,
              "[LSTM] expects both h_0 and c_0 or neither");
  auto [out, h, c] = run(input, h0, c0);
  return {out, {h, c}};
}

GRU::GRU(int64_t input_size, int64_t hidden_size, GRUOptions options)
    : RNNBase("GRU", 3, input_size, hidden_size, options) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const Tensor& hx) const {
  auto [out, h, c] = run(input, hx, Tensor());
  return {out, h};
}

// ---- cells ----

namespace {
// The input as [N, I] and whether it was unbatched.
std::pair<Tensor, bool> cell_input(const char* layer, const Tensor& x, int64_t input_size) {
  ember::detail::check_defined(layer, x);
  EMBER_CHECK(x.dim() == 1 || x.dim() == 2, ShapeError, "[", layer,
              "] expects a 1-D (unbatched) or 2-D (batched) input, got ", x.sizes());
  EMBER_CHECK(x.size(-1) == input_size, ShapeError, "[", layer,
              "] input has inconsistent input_size: got ", x.size(-1), " expected ", input_size);
  return {x.dim() == 1 ? x.unsqueeze(0) : x, x.dim() == 1};
}
Tensor cell_state(const char* layer, const Tensor& s, bool unbatched, int64_t N, int64_t H,
                  const Tensor& like) {
  if (!s.defined()) return zeros({N, H}, TensorOptions(like.dtype()).device(like.device()));
  const Tensor t = unbatched ? s.unsqueeze(0) : s;
  EMBER_CHECK(t.sizes() == Shape({N, H}), ShapeError, "[", layer, "] expected a state of size ",
              Shape({N, H}), ", got ", s.sizes());
  return t;
}
}  // namespace

LSTMCell::LSTMCell(int64_t input_size, int64_t hidden_size, bool with_bias)
    : input_size(input_size), hidden_size(hidden_size) {
  check_positive("LSTMCell", "input_size", input_size);
  check_positive("LSTMCell", "hidden_size", hidden_size);
  weight_ih = register_parameter("weight_ih", empty({4 * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({4 * hidden_size, hidden_size}));
  if (with_bias) {
    bias_ih = register_parameter("bias_ih", empty({4 * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({4 * hidden_size}));
  }
  reset_parameters();
}

void LSTMCell::reset_parameters() {
  uniform_all({&weight_ih, &weight_hh, &bias_ih, &bias_hh}, hidden_size);
}

std::string LSTMCell::extra_repr() const {
  return str(input_size, ", ", hidden_size, bias_ih.defined() ? "" : ", bias=False");
}

std::tuple<Tensor, Tensor> LSTMCell::forward(
    const Tensor& input, const LSTMState& hx) const {
  auto [x, unbatched] = cell_input("LSTMCell", input, input_size);
  Tensor h0, c0;
  if (hx) std::tie(h0, c0) = *hx;
  const int64_t N = x.size(0);
  h0 = cell_state("LSTMCell", h0, unbatched, N, hidden_size, x);
  c0 = cell_state("LSTMCell", c0, unbatched, N, hidden_size, x);
  auto [h, c] = lstm_cell_pointwise(linear(x, weight_ih, bias_ih), linear(h0, weight_hh, bias_hh), c0);
  if (unbatched) return {h.squeeze(0), c.squeeze(0)};
  return {h, c};
}

GRUCell::GRUCell(int64_t input_size, int64_t hidden_size, bool with_bias)
    : input_size(input_size), hidden_size(hidden_size) {
  check_positive("GRUCell", "input_size", input_size);
  check_positive("GRUCell", "hidden_size", hidden_size);
  weight_ih = register_parameter("weight_ih", empty({3 * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({3 * hidden_size, hidden_size}));
  if (with_bias) {
    bias_ih = register_parameter("bias_ih", empty({3 * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({3 * hidden_size}));
  }
  reset_parameters();
}

void GRUCell::reset_parameters() {
  uniform_all({&weight_ih, &weight_hh, &bias_ih, &bias_hh}, hidden_size);
}

std::string GRUCell::extra_repr() const {
  return str(input_size, ", ", hidden_size, bias_ih.defined() ? "" : ", bias=False");
}

Tensor GRUCell::forward(const Tensor& input, const Tensor& hx) const {
  auto [x, unbatched] = cell_input("GRUCell", input, input_size);
  const Tensor h0 = cell_state("GRUCell", hx, unbatched, x.size(0), hidden_size, x);
  Tensor h = gru_cell_pointwise(linear(x, weight_ih, bias_ih), linear(h0, weight_hh, bias_hh), h0);
  return unbatched ? h.squeeze(0) : h;
}

}  // namespace ember::nn
