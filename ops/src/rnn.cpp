// Front of the recurrent family: validation, the canonical 2-D row views the cell kernels take
// (kernels/rnn.h), and the whole-layer loops (Note [rnn layout] in ember/ops/rnn.h), written
// once for both devices over the GEMM and cell kernels.
#include "ember/ops/rnn.h"

#include "ember/ops/elementwise.h"
#include "kernels/linalg.h"
#include "kernels/rnn.h"

namespace ember::ops {

namespace {

// An input the kernels read: 2-D with unit column stride (any row stride, 0 included).
Tensor as_input(const Tensor& t) {
  if (t.sizes()[1] <= 1 || t.strides()[1] == 1) return t;
  return contiguous(t);
}

void check_2d(const char* op, const Tensor& t, const char* what, int64_t N, int64_t cols,
              const Tensor& like) {
  detail::check_defined(op, t, what);
  detail::check_same_device(op, like, t);
  EMBER_CHECK(t.dim() == 2 && t.sizes()[0] == N && t.sizes()[1] == cols, ShapeError, "[", op,
              "] expects ", what, " of shape [", N, ", ", cols, "], got ", t.sizes());
  EMBER_CHECK(t.dtype() == like.dtype(), DTypeError, "[", op, "] ", what, " has dtype ",
              t.dtype(), " but the others have ", like.dtype());
}

// Shape [N, H*k] of a gate tensor: H from its columns.
int64_t units(const char* op, const Tensor& t, int64_t k, const char* what) {
  detail::check_defined(op, t, what);
  EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] expects floating-point ", what,
              ", got ", t.dtype());
  EMBER_CHECK(t.dim() == 2 && t.sizes()[1] % k == 0, ShapeError, "[", op, "] expects ", what,
              " of shape [N, ", k, "*H], got ", t.sizes());
  return t.sizes()[1] / k;
}

Tensor fresh(int64_t N, int64_t cols, const Tensor& like) {
  return detail::make_tensor({N, cols}, like.dtype(), like.device());
}

// Row r of a contiguous [..., R, N, K] buffer seen as [P*R, N, K]: the [N, K] block at index
// `block` (a plane-major row number).
Tensor block(const Tensor& t, int64_t index) {
  const int64_t K = t.sizes()[t.dim() - 1], N = t.sizes()[t.dim() - 2];
  return detail::make_view(t, {N, K}, {K, 1}, t.storage_offset() + index * N * K);
}

Tensor t2(const Tensor& m) {
  return detail::make_view(m, {m.sizes()[1], m.sizes()[0]}, {m.strides()[1], m.strides()[0]},
                           m.storage_offset());
}

Tensor rows2(const Tensor& t, int64_t rows) {  // contiguous t as [rows, last]
  const int64_t K = t.sizes()[t.dim() - 1];
  return detail::make_view(t, {rows, K}, {K, 1}, t.storage_offset());
}

}  // namespace

LstmCellForward lstm_cell_forward(const Tensor& gx, const Tensor& gh, const Tensor& c_prev) {
  const char* op = "lstm_cell";
  const int64_t H = units(op, gx, 4, "gx"), N = gx.sizes()[0];
  if (gh.defined()) check_2d(op, gh, "gh", N, 4 * H, gx);
  check_2d(op, c_prev, "c_prev", N, H, gx);
  LstmCellForward f;
  f.hc = fresh(N, 2 * H, gx);
  f.h = detail::make_view(f.hc, {N, H}, {2 * H, 1}, 0);
  f.c = detail::make_view(f.hc, {N, H}, {2 * H, 1}, H);
  f.gates = fresh(N, 4 * H, gx);
  EMBER_DISPATCH_KERNEL(gx.device(), lstm_cell_fwd_kernel, as_input(gx),
                        gh.defined() ? as_input(gh) : gh, as_input(c_prev), f.h, f.c, f.gates);
  return f;
}

LstmCellBackward lstm_cell_backward(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                                    const Tensor& c_prev, const Tensor& c) {
  const char* op = "lstm_cell_backward";
  const int64_t H = units(op, gates, 4, "gates"), N = gates.sizes()[0];
  check_2d(op, dh, "dh", N, H, gates);
  check_2d(op, dc, "dc", N, H, gates);
  check_2d(op, c_prev, "c_prev", N, H, gates);
  check_2d(op, c, "c", N, H, gates);
  LstmCellBackward b{fresh(N, 4 * H, gates), fresh(N, H, gates)};
  EMBER_DISPATCH_KERNEL(gates.device(), lstm_cell_bwd_kernel, as_input(dh), as_input(dc),
                        as_input(gates), as_input(c_prev), as_input(c), b.dgates, b.dc_prev,
                        false);
  return b;
}

GruCellForward gru_cell_forward(const Tensor& gx, const Tensor& gh, const Tensor& h_prev) {
  const char* op = "gru_cell";
  const int64_t H = units(op, gx, 3, "gx"), N = gx.sizes()[0];
  check_2d(op, gh, "gh", N, 3 * H, gx);
  check_2d(op, h_prev, "h_prev", N, H, gx);
  GruCellForward f{fresh(N, H, gx), fresh(N, 4 * H, gx)};
  EMBER_DISPATCH_KERNEL(gx.device(), gru_cell_fwd_kernel, as_input(gx), as_input(gh),
                        as_input(h_prev), f.h, f.ws);
  return f;
}

GruCellBackward gru_cell_backward(const Tensor& dh, const Tensor& ws, const Tensor& h_prev) {
  const char* op = "gru_cell_backward";
  const int64_t H = units(op, ws, 4, "ws"), N = ws.sizes()[0];
  check_2d(op, dh, "dh", N, H, ws);
  check_2d(op, h_prev, "h_prev", N, H, ws);
  GruCellBackward b{fresh(N, 3 * H, ws), fresh(N, 3 * H, ws), fresh(N, H, ws)};
  EMBER_DISPATCH_KERNEL(ws.device(), gru_cell_bwd_kernel, as_input(dh), as_input(ws),
                        as_input(h_prev), b.dgx, b.dgh, b.dh_prev, false);
  return b;
}

// ---- whole layers ----

namespace {

struct LayerGeom {
  int64_t T, N, I, H, G, planes;
};

LayerGeom check_layer(RnnMode mode, const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                      const Tensor& b_ih, const Tensor& b_hh, const Tensor& h0,
                      const Tensor& c0) {
  const bool lstm = mode == RnnMode::lstm;
  const char* op = lstm ? "lstm" : "gru";
  detail::check_defined(op, x);
  detail::check_defined(op, w_ih, "weight_ih");
  detail::check_defined(op, w_hh, "weight_hh");
  EMBER_CHECK(is_floating(x.dtype()), DTypeError, "[", op, "] expects a floating-point input, got ",
              x.dtype());
  EMBER_CHECK(x.dim() == 3, ShapeError, "[", op, "] expects a 3-D input [T, N, I], got ", x.sizes());
  LayerGeom g{x.sizes()[0], x.sizes()[1], x.sizes()[2], 0, lstm ? 4 : 3, lstm ? 2 : 1};
  EMBER_CHECK(w_hh.dim() == 2 && w_hh.sizes()[0] == g.G * w_hh.sizes()[1], ShapeError, "[", op,
              "] expects weight_hh of shape [", g.G, "*H, H], got ", w_hh.sizes());
  g.H = w_hh.sizes()[1];
  EMBER_CHECK(g.T > 0 && g.H > 0, ShapeError, "[", op, "] expects a non-empty sequence and hidden size, got input ",
              x.sizes(), " and weight_hh ", w_hh.sizes());
  check_2d(op, w_ih, "weight_ih", g.G * g.H, g.I, x);
  check_2d(op, w_hh, "weight_hh", g.G * g.H, g.H, x);
  EMBER_CHECK(b_ih.defined() == b_hh.defined(), ValueError, "[", op,
              "] expects both biases or neither");
  for (const Tensor* b : {&b_ih, &b_hh}) {
    if (!b->defined()) continue;
    detail::check_same_device(op, x, *b);
    EMBER_CHECK(b->dim() == 1 && b->sizes()[0] == g.G * g.H && b->dtype() == x.dtype(), ShapeError,
                "[", op, "] expects biases of shape [", g.G * g.H, "] and dtype ", x.dtype(),
                ", got ", b->sizes(), " ", b->dtype());
  }
  if (h0.defined()) check_2d(op, h0, "h0", g.N, g.H, x);
  if (lstm && c0.defined()) check_2d(op, c0, "c0", g.N, g.H, x);
  return g;
}

// Row indices in hc for step t (Note [rnn layout]).
struct StepRows {
  int64_t t, prev, out;
};
StepRows step_rows(int64_t s, int64_t T, bool reverse) {
  const int64_t t = reverse ? T - 1 - s : s;
  return {t, reverse ? t + 1 : t, reverse ? t : t + 1};
}

}  // namespace

RnnLayerForward rnn_layer_forward(RnnMode mode, const Tensor& x, const Tensor& w_ih,
                                  const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh,
                                  const Tensor& h0, const Tensor& c0, bool reverse) {
  const bool lstm = mode == RnnMode::lstm;
  const LayerGeom g = check_layer(mode, x, w_ih, w_hh, b_ih, b_hh, h0, c0);
  const auto [T, N, I, H, G, P] = g;
  const int64_t R = T + 1;  // rows per plane of hc
  const Device dev = x.device();
  const Tensor X = contiguous(x);
  Tensor gx = detail::make_tensor({T, N, G * H}, x.dtype(), dev);
  // The input projection of every step in one GEMM; the LSTM folds both biases into it.
  Tensor bias = b_ih;
  if (lstm && b_ih.defined()) bias = binary(BinaryOp::add, b_ih, b_hh);
  if (bias.defined())
    EMBER_DISPATCH_KERNEL(dev, gemm_bias_kernel, rows2(X, T * N), t2(w_ih), bias, rows2(gx, T * N));
  else
    EMBER_DISPATCH_KERNEL(dev, gemm_kernel, rows2(X, T * N), t2(w_ih), rows2(gx, T * N), false);

  RnnLayerForward f{detail::make_tensor({P, R, N, H}, x.dtype(), dev),
                    detail::make_tensor({T, N, 4 * H}, x.dtype(), dev)};
  const int64_t init = reverse ? T : 0;
  if (h0.defined()) copy_(block(f.hc, init), h0);
  else fill_(block(f.hc, init), 0);
  if (lstm) {
    if (c0.defined()) copy_(block(f.hc, R + init), c0);
    else fill_(block(f.hc, R + init), 0);
  }
  const Tensor Wt = t2(w_hh);
  Tensor gh = lstm ? Tensor() : detail::make_tensor({N, G * H}, x.dtype(), dev);
  for (int64_t s = 0; s < T; ++s) {
    const StepRows r = step_rows(s, T, reverse);
    const Tensor hprev = block(f.hc, r.prev), gxt = block(gx, r.t);
    if (lstm) {
      EMBER_DISPATCH_KERNEL(dev, gemm_kernel, hprev, Wt, gxt, true);
      EMBER_DISPATCH_KERNEL(dev, lstm_cell_fwd_kernel, gxt, Tensor(), block(f.hc, R + r.prev),
                            block(f.hc, r.out), block(f.hc, R + r.out), block(f.ws, r.t));
    } else {
      if (b_hh.defined()) EMBER_DISPATCH_KERNEL(dev, gemm_bias_kernel, hprev, Wt, b_hh, gh);
      else EMBER_DISPATCH_KERNEL(dev, gemm_kernel, hprev, Wt, gh, false);
      EMBER_DISPATCH_KERNEL(dev, gru_cell_fwd_kernel, gxt, gh, hprev, block(f.hc, r.out),
                            block(f.ws, r.t));
    }
  }
  return f;
}

RnnLayerBackward rnn_layer_backward(RnnMode mode, const Tensor& dhc, const Tensor& x,
                                    const Tensor& w_ih, const Tensor& w_hh, bool has_bias,
                                    const Tensor& hc, const Tensor& ws, bool reverse,
                                    std::array<bool, 7> needs) {
  const bool lstm = mode == RnnMode::lstm;
  const char* op = lstm ? "lstm_backward" : "gru_backward";
  const LayerGeom g = check_layer(mode, x, w_ih, w_hh, Tensor(), Tensor(), Tensor(), Tensor());
  const auto [T, N, I, H, G, P] = g;
  const int64_t R = T + 1;
  const Device dev = x.device();
  EMBER_CHECK(dhc.sizes() == hc.sizes() && hc.sizes() == Shape({P, R, N, H}), ShapeError, "[", op,
              "] gradient ", dhc.sizes(), " and states ", hc.sizes(), " do not match [", P, ", ",
              R, ", ", N, ", ", H, "]");
  // A working copy of the state gradients: each step adds the recurrent gradient into the row
  // of its previous state, which already holds that state's direct gradient.
  Tensor dH = detail::make_tensor(hc.sizes(), x.dtype(), dev);
  copy_(dH, dhc.dtype() == x.dtype() ? dhc : to(dhc, dev, x.dtype()));
  Tensor dG = detail::make_tensor({T, N, G * H}, x.dtype(), dev);
  Tensor dGh = lstm ? dG : detail::make_tensor({T, N, G * H}, x.dtype(), dev);
  for (int64_t s = T - 1; s >= 0; --s) {
    const StepRows r = step_rows(s, T, reverse);
    const Tensor dgt = block(dG, r.t), dght = block(dGh, r.t);
    if (lstm)
      EMBER_DISPATCH_KERNEL(dev, lstm_cell_bwd_kernel, block(dH, r.out), block(dH, R + r.out),
                            block(ws, r.t), block(hc, R + r.prev), block(hc, R + r.out), dgt,
                            block(dH, R + r.prev), true);
    else
      EMBER_DISPATCH_KERNEL(dev, gru_cell_bwd_kernel, block(dH, r.out), block(ws, r.t),
                            block(hc, r.prev), dgt, dght, block(dH, r.prev), true);
    if (s > 0 || needs[5]) EMBER_DISPATCH_KERNEL(dev, gemm_kernel, dght, w_hh, block(dH, r.prev), true);
  }
  RnnLayerBackward b;
  const int64_t init = reverse ? T : 0;
  if (needs[5]) b.dh0 = block(dH, init);
  if (lstm && needs[6]) b.dc0 = block(dH, R + init);
  const Tensor dG2 = rows2(dG, T * N), dGh2 = rows2(dGh, T * N);
  if (needs[0]) {
    b.dx = detail::make_tensor({T, N, I}, x.dtype(), dev);
    EMBER_DISPATCH_KERNEL(dev, gemm_kernel, dG2, w_ih, rows2(b.dx, T * N), false);
  }
  const bool need_b = has_bias && (needs[3] || needs[4]);
  if (needs[1] || need_b) {
    const Tensor X2 = rows2(contiguous(x), T * N);
    b.dw_ih = detail::make_tensor(w_ih.sizes(), x.dtype(), dev);
    if (has_bias) {
      b.db_ih = detail::make_tensor({G * H}, x.dtype(), dev);
      EMBER_DISPATCH_KERNEL(dev, gemm_bgrad_kernel, t2(dG2), X2, b.dw_ih, b.db_ih);
    } else {
      EMBER_DISPATCH_KERNEL(dev, gemm_kernel, t2(dG2), X2, b.dw_ih, false);
    }
  }
  if (needs[2] || need_b) {
    // The previous hidden states of all steps: the T rows of plane 0 other than the last
    // state (forward: rows 0..T-1; reverse: rows 1..T).
    const Tensor Hp = detail::make_view(hc, {T * N, H}, {H, 1}, hc.storage_offset() + (reverse ? N * H : 0));
    b.dw_hh = detail::make_tensor(w_hh.sizes(), x.dtype(), dev);
    if (has_bias && !lstm) {
      b.db_hh = detail::make_tensor({G * H}, x.dtype(), dev);
      EMBER_DISPATCH_KERNEL(dev, gemm_bgrad_kernel, t2(dGh2), Hp, b.dw_hh, b.db_hh);
    } else {
      EMBER_DISPATCH_KERNEL(dev, gemm_kernel, t2(dGh2), Hp, b.dw_hh, false);
    }
  }
  if (lstm && has_bias) b.db_hh = b.db_ih;  // both biases enter as one sum
  return b;
}

}  // namespace ember::ops
