// Front of the fused SwiGLU: validation and contiguous outputs. Inputs are read in place
// through their strides (gate and up are often the two halves of one fused projection).
#include "ember/ops/swiglu.h"

#include "ember/ops/elementwise.h"
#include "kernels/swiglu.h"

namespace ember::ops {

namespace {

void check_pair(const char* op, const Tensor& gate, const Tensor& up) {
  detail::check_defined(op, gate, "gate");
  detail::check_defined(op, up, "up");
  detail::check_same_device(op, gate, up);
  EMBER_CHECK(gate.sizes() == up.sizes(), ShapeError, "[", op, "] gate of shape ", gate.sizes(),
              " and up of shape ", up.sizes(), " must have the same shape");
  EMBER_CHECK(is_floating(gate.dtype()), DTypeError, "[", op,
              "] expects floating-point gate and up, got ", gate.dtype());
  EMBER_CHECK(gate.dtype() == up.dtype(), DTypeError, "[", op, "] gate has dtype ", gate.dtype(),
              " but up has dtype ", up.dtype(), " (cast one of them first)");
}

}  // namespace

Tensor swiglu_forward(const Tensor& gate, const Tensor& up) {
  check_pair("swiglu", gate, up);
  Tensor out = detail::make_tensor(gate.sizes(), gate.dtype(), gate.device());
  if (out.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(gate.device(), swiglu_fwd_kernel, gate, up, out);
  return out;
}

SwigluBackward swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                               std::array<bool, 2> needs) {
  const char* op = "swiglu_backward";
  check_pair(op, gate, up);
  detail::check_defined(op, grad, "gradient");
  detail::check_same_device(op, grad, gate);
  EMBER_CHECK(grad.sizes() == gate.sizes(), ShapeError, "[", op, "] gradient of shape ",
              grad.sizes(), " does not match the input shape ", gate.sizes());
  SwigluBackward out;
  if (!needs[0] && !needs[1]) return out;
  const Tensor g = grad.dtype() == gate.dtype() ? grad : to(grad, grad.device(), gate.dtype());
  if (needs[0]) out.dgate = detail::make_tensor(gate.sizes(), gate.dtype(), gate.device());
  if (needs[1]) out.dup = detail::make_tensor(gate.sizes(), gate.dtype(), gate.device());
  if (gate.numel() == 0) return out;
  EMBER_DISPATCH_KERNEL(gate.device(), swiglu_bwd_kernel, g, gate, up, out.dgate, out.dup);
  return out;
}

}  // namespace ember::ops
