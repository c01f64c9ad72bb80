// Differentiable SwiGLU, silu(gate) * up: one fused forward pass and one fused backward pass
// that writes both input gradients (ember/ops/swiglu.h). The gradients are recorded with a VJP
// that throws, so double backward fails loudly (as the other fused ops).
//
// Inputs of different floating dtypes are first cast (differentiably) to their promoted dtype,
// as the composite silu(gate) * up would compute. Autocast: no row; the op runs in its inputs'
// dtype (under autocast both come from lower-precision GEMMs).
#include "ember/ops/swiglu.h"
#include "fused_util.h"

namespace ember {

using autograd::needs_input_grad;
using autograd::no_double_backward;
using autograd::record;
using autograd::save;

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  const char* op = "swiglu";
  ember::detail::check_defined(op, gate, "gate");
  ember::detail::check_defined(op, up, "up");
  if (gate.dtype() != up.dtype() && is_floating(gate.dtype()) && is_floating(up.dtype())) {
    ember::detail::check_same_device(op, gate, up);
    const DType t = promote_types(gate.dtype(), up.dtype());
    return swiglu(to(gate, gate.device(), t), to(up, up.device(), t));
  }
  Tensor y = ops::swiglu_forward(gate, up);
  return record(op, y, {gate, up}, [g = save(gate), u = save(up)](const Tensor& grad) -> TensorList {
    const Tensor& gv = g;
    const Tensor& uv = u;
    ops::SwigluBackward b =
        ops::swiglu_backward(grad, gv, uv, {needs_input_grad(0), needs_input_grad(1)});
    const char* name = "swiglu_backward";
    return {no_double_backward(name, b.dgate, {grad, gv, uv}),
            no_double_backward(name, b.dup, {grad, gv})};
  });
}

}  // namespace ember
