#pragma once
#include "dispatch.h"
#include "ember/ops/rnn.h"

// Preconditions the front (ops/src/rnn.cpp) guarantees: every tensor is 2-D [N, k*H] (k as
// named in ember/ops/rnn.h) with a unit column stride and a row stride >= its row length;
// one dtype (floating), one device; outputs do not overlap inputs, except dc_prev/dh_prev
// with accumulate (read-modify-write of the same element by the same thread). gh may be
// undefined in lstm_cell_fwd (gx holds the sum). With accumulate, dc_prev/dh_prev += result.
#define EMBER_RNN_KERNELS                                                                    \
  void lstm_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& c_prev,       \
                            const Tensor& h, const Tensor& c, const Tensor& gates);         \
  void lstm_cell_bwd_kernel(const Tensor& dh, const Tensor& dc, const Tensor& gates,        \
                            const Tensor& c_prev, const Tensor& c, const Tensor& dgates,    \
                            const Tensor& dc_prev, bool accumulate);                         \
  void gru_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& h_prev,        \
                           const Tensor& h, const Tensor& ws);                               \
  void gru_cell_bwd_kernel(const Tensor& dh, const Tensor& ws, const Tensor& h_prev,        \
                           const Tensor& dgx, const Tensor& dgh, const Tensor& dh_prev,     \
                           bool accumulate);

EMBER_DECLARE_KERNELS(EMBER_RNN_KERNELS)
