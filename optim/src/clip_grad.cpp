// clip_grad_norm_: PyTorch's torch.nn.utils.clip_grad_norm_ written with ember ops, so it
// runs on any device without a host synchronization: the clip coefficient stays a 0-dim
// device tensor and every gradient is multiplied by it (1 when no clipping is due).
//
// Two paths, as PyTorch 2's foreach and per-tensor ones: when every gradient is on one device
// (the usual case) the total norm is one ops::foreach_norm and the scaling one
// ops::foreach_mul_ (on CUDA a handful of launches for any number of parameters, instead of
// two or three per parameter); otherwise, and for norm_type 0 (whose PyTorch meaning, the
// number of non-zero per-tensor norms, is not a norm of all elements), PyTorch 1.13's
// per-tensor composite. The two agree up to the rounding of the summation order, except that
// the foreach norm does not round a 16-bit gradient's own norm to 16 bits first.
#include "ember/optim/clip_grad.h"

#include <cmath>
#include <limits>

#include "ember/factory.h"
#include "ember/functions.h"
#include "ember/grad_mode.h"
#include "ember/ops/foreach.h"

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    EMBER_CHECK(p.defined(), ValueError, "[clip_grad_norm_] a parameter is an undefined tensor");
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  EMBER_CHECK(!std::isnan(max_norm) && !std::isnan(norm_type), ValueError,
              "[clip_grad_norm_] max_norm and norm_type must not be NaN");
  if (grads.empty()) return scalar_tensor(0.0, DType::f32);
  const Device device = grads[0].device();
  DType norm_dtype = DType::f32;
  for (const Tensor& g : grads) {
    EMBER_CHECK(g.is_floating_point(), DTypeError,
                "[clip_grad_norm_] gradients must be floating-point, got ", g.dtype());
    if (g.dtype() == DType::f64) norm_dtype = DType::f64;
  }
  bool one_device = true;
  for (const Tensor& g : grads) one_device &= g.device() == device;
  const bool foreach = one_device && norm_type != 0;
  Tensor total;
  if (foreach) {
    total = ops::foreach_norm(grads, norm_type);
  } else {
    const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
    std::vector<Tensor> norms;
    norms.reserve(grads.size());
    for (const Tensor& g : grads) {
      // Each gradient's norm in its own dtype's compute precision, gathered on the first
      // gradient's device in one dtype (PyTorch: norm(g).to(device)).
      Tensor n = inf_norm ? amax(abs(g)) : norm(g, norm_type);
      norms.push_back(n.to(device, norm_dtype));
    }
    Tensor all = stack(norms);
    total = inf_norm ? amax(all) : norm(all, norm_type);
  }
  if (error_if_nonfinite) {
    const double t = total.item<double>();
    EMBER_CHECK(std::isfinite(t), ValueError, "[clip_grad_norm_] the total norm of order ",
                norm_type, " of the gradients is non-finite (", t,
                "), so it cannot be clipped; pass error_if_nonfinite = false to scale anyway");
  }
  Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  if (foreach) {
    ops::foreach_mul_(grads, coef);
    return total;
  }
  for (Tensor g : grads) g.mul_(g.device() == device ? coef : coef.to(g.device()));
  return total;
}

}  // namespace ember::optim
