// Gradient clipping by the total norm over many parameters: torch.nn.utils.clip_grad_norm_.
// It lives in optim (not nn) because nn and optim are siblings and training loops call it
// between backward() and optimizer.step().
#pragma once

#include <vector>

#include "ember/tensor.h"

namespace ember::optim {

// The norm (p = norm_type; inf for the largest magnitude) of all gradients together, as a
// 0-dim tensor on the gradients' device (f32, or f64 when any gradient is f64); then every
// gradient is multiplied in place by min(1, max_norm / (total + 1e-6)). Parameters without
// a gradient are skipped; with none at all the result is a CPU f32 zero.
// No host synchronization happens unless error_if_nonfinite is true (then a non-finite total
// throws ValueError and nothing is scaled).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace ember::optim
