#include "kernels/rnn.h"

namespace ember::ops::cuda {
void lstm_cell_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&) {
  EMBER_NO_CUDA("lstm_cell");
}
void lstm_cell_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const Tensor&, const Tensor&, const Tensor&, bool) {
  EMBER_NO_CUDA("lstm_cell_backward");
}
void gru_cell_fwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&) {
  EMBER_NO_CUDA("gru_cell");
}
void gru_cell_bwd_kernel(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, const Tensor&, bool) {
  EMBER_NO_CUDA("gru_cell_backward");
}
}  // namespace ember::ops::cuda
