// Front of the fused optimizer family: validates the lists, casts gradients to the
// parameters' dtype, gives the drivers contiguous operands and forms the per-tensor
// bias-corrected scalars in double. Tensors with no elements are dropped here, so the drivers
// never see one. Parameters are updated in place; their version is bumped, as any in-place op
// does, so a graph that saved one of them notices.
#include "ember/ops/optim.h"

#include <cmath>

#include "ember/ops/elementwise.h"
#include "kernels/optim.h"

namespace ember::ops {

namespace {

// The operands of one fused call after validation.
struct Prepared {
  TensorList params, grads;
  std::vector<TensorList> states;  // one list per state kind, aligned with params
  std::vector<size_t> index;       // position of each kept tensor in the caller's lists
  // Non-contiguous parameters are updated in a contiguous copy and written back.
  std::vector<std::pair<Tensor, Tensor>> write_back;  // (original, contiguous copy)
};

Prepared prepare(const char* op, const TensorList& params, const TensorList& grads,
                 const std::vector<const TensorList*>& states) {
  EMBER_CHECK(grads.size() == params.size(), ValueError, "[", op, "] got ", params.size(),
              " parameters but ", grads.size(), " gradients");
  for (const TensorList* s : states)
    EMBER_CHECK(s->size() == params.size(), ValueError, "[", op, "] got ", params.size(),
                " parameters but ", s->size(), " state tensors");
  Prepared out;
  out.states.resize(states.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    detail::check_defined(op, p, "parameter");
    detail::check_defined(op, grads[i], "gradient");
    EMBER_CHECK(is_floating(p.dtype()), DTypeError, "[", op, "] parameter ", int64_t(i),
                " must be floating-point, got ", p.dtype());
    EMBER_CHECK(p.device() == params[0].device(), DeviceError, "[", op,
                "] all parameters must be on one device, got ", params[0].device(), " and ",
                p.device(), " (parameter ", int64_t(i), ")");
    detail::check_same_device(op, p, grads[i]);
    EMBER_CHECK(grads[i].sizes() == p.sizes(), ShapeError, "[", op, "] gradient of shape ",
                grads[i].sizes(), " does not match parameter ", int64_t(i), " of shape ", p.sizes());
    const DType sdt = optim_state_dtype(p.dtype());
    for (const TensorList* s : states) {
      const Tensor& t = (*s)[i];
      detail::check_defined(op, t, "state tensor");
      detail::check_same_device(op, p, t);
      EMBER_CHECK(t.sizes() == p.sizes() && t.dtype() == sdt && t.is_contiguous(), ValueError,
                  "[", op, "] state tensor of parameter ", int64_t(i), " must be contiguous ", sdt,
                  " of shape ", p.sizes(), ", got ", t.dtype(), " of shape ", t.sizes());
    }
    if (p.numel() == 0) continue;
    Tensor g = grads[i];
    if (g.dtype() != p.dtype()) g = to(g, g.device(), p.dtype());
    Tensor pc = p;
    if (!p.is_contiguous()) {
      pc = contiguous(p);
      out.write_back.emplace_back(p, pc);
    }
    out.params.push_back(pc);
    out.grads.push_back(contiguous(g));
    for (size_t k = 0; k < states.size(); ++k) out.states[k].push_back((*states[k])[i]);
    out.index.push_back(i);
  }
  return out;
}

void finish(const TensorList& params, const Prepared& prep) {
  for (const auto& [orig, copy] : prep.write_back) copy_(orig, copy);
  for (const Tensor& p : params) p.bump_version();
}

}  // namespace

namespace {
// The state lists of an Adam step: m, v and, with amsgrad, vmax (given exactly then).
std::vector<const TensorList*> adam_states(const char* op, const TensorList& exp_avgs,
                                           const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                                           const AdamStepParams& p) {
  EMBER_CHECK(p.amsgrad || max_exp_avg_sqs.empty(), ValueError, "[", op,
              "] max_exp_avg_sqs given but amsgrad is off");
  if (!p.amsgrad) return {&exp_avgs, &exp_avg_sqs};
  return {&exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs};
}
const TensorList& adam_vmax(const Prepared& prep) {
  static const TensorList none;
  return prep.states.size() > 2 ? prep.states[2] : none;
}
}  // namespace

void adam_step_(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                const TensorList& exp_avg_sqs, const std::vector<int64_t>& steps,
                const AdamStepParams& p, const TensorList& max_exp_avg_sqs) {
  const char* op = p.decoupled_weight_decay ? "adamw_step" : "adam_step";
  EMBER_CHECK(steps.size() == params.size(), ValueError, "[", op, "] got ", params.size(),
              " parameters but ", steps.size(), " step counts");
  Prepared prep = prepare(op, params, grads, adam_states(op, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, p));
  if (prep.params.empty()) return;
  std::vector<AdamTensorScalars> scalars;
  scalars.reserve(prep.params.size());
  for (size_t i : prep.index) {
    EMBER_CHECK(steps[i] >= 1, ValueError, "[", op, "] step counts start at 1, got ", steps[i]);
    scalars.push_back(adam_tensor_scalars(p.lr, double(steps[i]), p.beta1, p.beta2));
  }
  EMBER_DISPATCH_KERNEL(prep.params[0].device(), adam_step_kernel, prep.params, prep.grads,
                        prep.states[0], prep.states[1], adam_vmax(prep), scalars, p);
  finish(params, prep);
}

// Note [capturable optimizer step]
// A CUDA graph replays kernels with the arguments they were captured with, so an update whose
// learning rate and bias corrections are host numbers would repeat step 1's values forever.
// adam_step_scheduled_ passes pointers instead: the kernel reads lr and each parameter's step
// count from device memory, forms adam_tensor_scalars there, and the driver then advances the
// counts in a second launch (stream-ordered after every block has read them). An lr
// scheduler writes the new lr into the lr tensor between replays. GradScaler's found_inf flag
// is read by the kernel too, so a skipped step needs no host decision: that one host read
// per step is what kept GradScaler::step out of a graph.
void adam_step_scheduled_(const TensorList& params, const TensorList& grads,
                          const TensorList& exp_avgs, const TensorList& exp_avg_sqs,
                          const Tensor& lr, const Tensor& steps, const Tensor& found_inf,
                          const AdamStepParams& p, const TensorList& max_exp_avg_sqs) {
  const char* op = p.decoupled_weight_decay ? "adamw_step" : "adam_step";
  EMBER_CHECK(!params.empty(), ValueError, "[", op, "] no parameters");
  const Device device = params[0].device();
  auto check_scalar_tensor = [&](const Tensor& t, const char* what, DType dtype, int64_t n) {
    detail::check_defined(op, t, what);
    EMBER_CHECK(t.device() == device && t.dtype() == dtype && t.dim() == 1 && t.sizes()[0] == n &&
                    t.is_contiguous(),
                ValueError, "[", op, "] ", what, " must be a contiguous ", dtype, " [", n, "] tensor on ",
                device, ", got ", t.dtype(), " ", t.sizes(), " on ", t.device());
  };
  check_scalar_tensor(lr, "lr", DType::f64, 1);
  check_scalar_tensor(steps, "steps", DType::f64, int64_t(params.size()));
  if (found_inf.defined()) check_scalar_tensor(found_inf, "found_inf", DType::f32, 1);
  Prepared prep = prepare(op, params, grads, adam_states(op, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, p));
  // Every step count advances (even of an empty parameter), so the kernel runs even when no
  // parameter has elements; the drivers handle an empty list.
  EMBER_DISPATCH_KERNEL(device, adam_step_scheduled_kernel, prep.params, prep.grads, prep.states[0],
                        prep.states[1], adam_vmax(prep), lr, steps, prep.index, found_inf, p);
  finish(params, prep);
  steps.bump_version();
}

void sgd_step_(const TensorList& params, const TensorList& grads,
               const TensorList& momentum_buffers, const std::vector<uint8_t>& first,
               const SgdStepParams& p) {
  const bool has_momentum = p.momentum != 0;
  EMBER_CHECK(has_momentum || momentum_buffers.empty(), ValueError,
              "[sgd_step] momentum buffers given but momentum is 0");
  EMBER_CHECK(!has_momentum || first.size() == params.size(), ValueError, "[sgd_step] got ",
              params.size(), " parameters but ", first.size(), " first-step flags");
  std::vector<const TensorList*> states;
  if (has_momentum) states.push_back(&momentum_buffers);
  Prepared prep = prepare("sgd_step", params, grads, states);
  if (prep.params.empty()) return;
  std::vector<uint8_t> kept_first;
  if (has_momentum)
    for (size_t i : prep.index) kept_first.push_back(first[i]);
  const TensorList no_buffers;
  EMBER_DISPATCH_KERNEL(prep.params[0].device(), sgd_step_kernel, prep.params, prep.grads,
                        has_momentum ? prep.states[0] : no_buffers, kept_first, p);
  finish(params, prep);
}

}  // namespace ember::ops
