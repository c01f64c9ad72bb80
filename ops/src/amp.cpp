// Front of the amp family: validates, makes gradients contiguous (a non-contiguous gradient is
// unscaled in a contiguous copy and written back) and dispatches. Gradients are modified in
// place, so their versions are bumped.
#include "ember/ops/amp.h"

#include "ember/ops/elementwise.h"
#include "kernels/amp.h"

namespace ember::ops {

namespace {

void check_flag(const char* op, const Tensor& t, const char* what, DType dtype) {
  detail::check_defined(op, t, what);
  EMBER_CHECK(t.numel() == 1 && t.dtype() == dtype && t.is_contiguous(), ValueError, "[", op,
              "] ", what, " must be a one-element ", dtype, " tensor, got ", t.dtype(),
              " of shape ", t.sizes());
}

}  // namespace

void amp_unscale_and_check_(const TensorList& grads, const Tensor& found_inf,
                            const Tensor& inv_scale) {
  const char* op = "amp_unscale_and_check";
  check_flag(op, found_inf, "found_inf", DType::f32);
  check_flag(op, inv_scale, "inv_scale", DType::f32);
  detail::check_same_device(op, found_inf, inv_scale);
  TensorList work;
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (original, contiguous copy)
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || g.numel() == 0) continue;
    EMBER_CHECK(is_floating(g.dtype()), DTypeError, "[", op, "] gradient ", int64_t(i),
                " must be floating-point, got ", g.dtype());
    detail::check_same_device(op, g, found_inf);
    if (g.is_contiguous()) {
      work.push_back(g);
    } else {
      Tensor c = contiguous(g);
      write_back.emplace_back(g, c);
      work.push_back(c);
    }
  }
  if (work.empty()) return;
  EMBER_DISPATCH_KERNEL(found_inf.device(), amp_unscale_and_check_kernel, work, found_inf,
                        inv_scale);
  for (const auto& [orig, copy] : write_back) copy_(orig, copy);
  for (const Tensor& g : grads)
    if (g.defined()) g.bump_version();
  found_inf.bump_version();
}

void amp_update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                       double growth_factor, double backoff_factor, int64_t growth_interval) {
  const char* op = "amp_update_scale";
  check_flag(op, scale, "scale", DType::f32);
  check_flag(op, growth_tracker, "growth_tracker", DType::i32);
  check_flag(op, found_inf, "found_inf", DType::f32);
  detail::check_same_device(op, scale, growth_tracker);
  detail::check_same_device(op, scale, found_inf);
  EMBER_CHECK(growth_interval >= 1, ValueError, "[", op, "] growth_interval must be >= 1, got ",
              growth_interval);
  EMBER_DISPATCH_KERNEL(scale.device(), amp_update_scale_kernel, scale, growth_tracker, found_inf,
                        growth_factor, backoff_factor, growth_interval);
  scale.bump_version();
  growth_tracker.bump_version();
}

}  // namespace ember::ops
