// Front of the foreach family: validates a list, drops tensors with no elements, gives the
// drivers contiguous operands, and composes the norm orders the drivers do not compute in one
// pass (kernels/foreach.h) from per-tensor norms.
#include "ember/ops/foreach.h"

#include <cmath>
#include <limits>

#include "ember/ops/elementwise.h"
#include "ember/ops/index.h"
#include "ember/ops/reduce.h"
#include "kernels/foreach.h"

namespace ember::ops {

namespace {

// Checks the list; returns its device and whether any tensor is f64.
Device check_list(const char* op, const TensorList& tensors, bool& any_f64) {
  EMBER_CHECK(!tensors.empty(), ValueError, "[", op, "] expects at least one tensor");
  any_f64 = false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_defined(op, t, "tensor");
    EMBER_CHECK(is_floating(t.dtype()), DTypeError, "[", op, "] tensor ", int64_t(i),
                " must be floating-point, got ", t.dtype());
    EMBER_CHECK(t.device() == tensors[0].device(), DeviceError, "[", op,
                "] all tensors must be on one device, got ", tensors[0].device(), " and ",
                t.device(), " (tensor ", int64_t(i), ")");
    any_f64 |= t.dtype() == DType::f64;
  }
  return tensors[0].device();
}

// A 0-dim tensor as a [1] view (to cat per-tensor results).
Tensor as_1d(const Tensor& t) { return detail::make_view(t, {1}, {1}, t.storage_offset()); }

}  // namespace

Tensor foreach_norm(const std::vector<Tensor>& tensors, double ord) {
  const char* op = "foreach_norm";
  EMBER_CHECK(!std::isnan(ord), ValueError, "[", op, "] ord must not be NaN");
  bool any_f64 = false;
  const Device device = check_list(op, tensors, any_f64);
  const DType out_dtype = any_f64 ? DType::f64 : DType::f32;
  if (kernel_norm_order(ord)) {
    TensorList kept;
    for (const Tensor& t : tensors)
      if (t.numel() > 0) kept.push_back(contiguous(t));
    Tensor out = detail::make_tensor({}, out_dtype, device);
    EMBER_DISPATCH_KERNEL(device, foreach_norm_kernel, kept, ord, out);
    return out;
  }
  // Other orders: each tensor's norm in the result dtype (a 16-bit tensor is widened first,
  // so its norm is not rounded to 16 bits), then the norm of the norms; for ord = 0 (counts
  // of non-zeros) their sum.
  TensorList norms;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    Tensor w = to(t, device, out_dtype);  // t itself when already out_dtype
    norms.push_back(as_1d(reduce(ReduceOp::norm, w, {}, false, {.p = ord})));
  }
  if (norms.empty()) {
    Tensor out = detail::make_tensor({}, out_dtype, device);
    fill_(out, ord < 0 ? std::numeric_limits<double>::infinity() : 0.0);
    return out;
  }
  Tensor all = cat(norms, 0);
  return ord == 0 ? reduce(ReduceOp::sum, all, {}, false) : reduce(ReduceOp::norm, all, {}, false, {.p = ord});
}

void foreach_mul_(const std::vector<Tensor>& tensors, const Tensor& scalar) {
  const char* op = "foreach_mul_";
  detail::check_defined(op, scalar, "scalar");
  EMBER_CHECK(scalar.dim() == 0 && is_floating(scalar.dtype()), ValueError, "[", op,
              "] the scalar must be a 0-dim floating-point tensor, got ", scalar.dtype(), " of shape ",
              scalar.sizes());
  if (tensors.empty()) return;
  bool any_f64 = false;
  const Device device = check_list(op, tensors, any_f64);
  EMBER_CHECK(scalar.device() == device || scalar.is_cpu(), DeviceError, "[", op,
              "] the scalar must be on the tensors' device (", device, ") or the CPU, got ",
              scalar.device());
  for (const Tensor& t : tensors) detail::check_no_internal_overlap(op, t);
  // A CPU scalar for device tensors is read here, as mul_ reads a CPU scalar operand.
  const bool on_host = scalar.device() != device;
  const double value = on_host ? scalar.item<double>() : 0.0;
  TensorList flat;
  for (const Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    if (t.is_contiguous()) flat.push_back(t);
    else binary_out(BinaryOp::mul, t, scalar, t);  // rare (gradients are contiguous)
  }
  if (!flat.empty())
    EMBER_DISPATCH_KERNEL(device, foreach_mul_kernel, flat, on_host ? Tensor() : scalar, value);
  for (const Tensor& t : tensors) t.bump_version();
}

}  // namespace ember::ops
