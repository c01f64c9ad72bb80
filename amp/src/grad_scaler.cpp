// GradScaler: torch.cuda.amp.GradScaler (PyTorch 1.13) step for step. The device-side work
// is two ops (ops::amp_unscale_and_check_, ops::amp_update_scale_); this file is bookkeeping.
// The one host synchronization of a step is step()'s read of the found_inf flag(s), and it is
// gone with an optimizer that skips on the device (Optimizer::can_skip_on_device).
#include "ember/amp/grad_scaler.h"

#include <cmath>
#include <map>

#include "ember/factory.h"
#include "ember/grad_mode.h"
#include "ember/ops/amp.h"
#include "ember/ops/elementwise.h"

namespace ember::amp {

namespace {

void validate(const GradScalerOptions& o, const char* where) {
  EMBER_CHECK(o.init_scale > 0 && std::isfinite(o.init_scale), ValueError, "[GradScaler", where,
              "] init_scale must be a positive finite number, got ", o.init_scale);
  EMBER_CHECK(o.growth_factor > 1.0, ValueError, "[GradScaler", where,
              "] growth_factor should be > 1, got ", o.growth_factor);
  EMBER_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1.0, ValueError, "[GradScaler", where,
              "] backoff_factor should be in (0, 1), got ", o.backoff_factor);
  EMBER_CHECK(o.growth_interval >= 1 && o.growth_interval <= INT32_MAX, ValueError, "[GradScaler",
              where, "] growth_interval should be a positive 32-bit integer, got ",
              o.growth_interval);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), pending_scale_(options.init_scale) {
  validate(options_, "");
}

void GradScaler::lazy_init(Device device) {
  if (scale_.defined()) return;
  scale_ = full({1}, pending_scale_, TensorOptions(DType::f32).device(device));
  growth_tracker_ = full({1}, pending_tracker_, TensorOptions(DType::i32).device(device));
}

void GradScaler::check_initialized(const char* where) const {
  EMBER_CHECK(scale_.defined(), ValueError, "[GradScaler.", where,
              "] no scale yet: call scale(loss) first (this scaler has not scaled a loss)");
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  detail::check_defined("GradScaler.scale", loss, "loss");
  EMBER_CHECK(is_floating(loss.dtype()), DTypeError, "[GradScaler.scale] loss must be floating-point, got ",
              loss.dtype());
  lazy_init(loss.device());
  Tensor s = scale_;
  if (s.device() != loss.device()) s = s.to(loss.device(), true);
  // A [1] scale would broadcast a 0-dim loss to [1]; keep the loss's shape.
  return loss * s.reshape({});
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled) return;
  check_initialized("unscale_");
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(st.stage != Stage::unscaled, ValueError,
              "[GradScaler.unscale_] unscale_() has already been called on this optimizer since "
              "the last update()");
  EMBER_CHECK(st.stage != Stage::stepped, ValueError,
              "[GradScaler.unscale_] unscale_() is being called after step()");
  NoGradGuard no_grad;
  // PyTorch forms the inverse in f64 and rounds once: scale.double().reciprocal().float().
  const Tensor inv_scale =
      ops::unary(ops::UnaryOp::reciprocal, scale_.to(DType::f64)).to(DType::f32);
  // Gradients grouped by device (usually one group): one fused pass per device.
  std::map<std::pair<int, int>, TensorList> by_device;
  std::vector<Device> devices;
  for (const Tensor& p : optimizer.parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Device d = g.device();
    auto key = std::make_pair(int(d.type), int(d.index));
    if (!by_device.count(key)) devices.push_back(d);
    by_device[key].push_back(g);
  }
  st.found_inf.clear();
  for (const Device& d : devices) {
    Tensor found = zeros({1}, TensorOptions(DType::f32).device(d));
    const Tensor inv = d == inv_scale.device() ? inv_scale : inv_scale.to(d, true);
    ops::amp_unscale_and_check_(by_device[{int(d.type), int(d.index)}], found, inv);
    st.found_inf.push_back(found);
  }
  st.stage = Stage::unscaled;
}

bool GradScaler::step(optim::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  check_initialized("step");
  {
    PerOptimizer& st = per_optimizer_[&optimizer];
    EMBER_CHECK(st.stage != Stage::stepped, ValueError,
                "[GradScaler.step] step() has already been called since the last update()");
    if (st.stage == Stage::ready) unscale_(optimizer);
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  EMBER_CHECK(!st.found_inf.empty(), ValueError,
              "[GradScaler.step] no inf checks were recorded for this optimizer (no parameter has "
              "a gradient)");
  // An optimizer that reads the flag on the device skips by itself: no host read, so the
  // whole step can be captured in a CUDA graph (Note [capturable optimizer step]).
  if (optimizer.can_skip_on_device() && st.found_inf.size() == 1) {
    optimizer.step_unless_found_inf(st.found_inf[0]);
    st.stage = Stage::stepped;
    return true;
  }
  // The step-skip decision: one host read per device (one in the usual single-device case).
  double found = 0;
  for (const Tensor& f : st.found_inf) found += f.item<double>();
  const bool take = found == 0;
  if (take) optimizer.step();
  st.stage = Stage::stepped;
  return take;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  check_initialized("update");
  NoGradGuard no_grad;
  Tensor combined;
  for (const auto& [opt, st] : per_optimizer_)
    for (const Tensor& f : st.found_inf) {
      const Tensor here = f.device() == scale_.device() ? f : f.to(scale_.device(), true);
      combined = combined.defined() ? ops::binary(ops::BinaryOp::add, combined, here) : here;
    }
  EMBER_CHECK(combined.defined(), ValueError,
              "[GradScaler.update] no inf checks were recorded prior to update()");
  ops::amp_update_scale_(scale_, growth_tracker_, combined, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
  per_optimizer_.clear();
}

void GradScaler::update(double new_scale) {
  if (!options_.enabled) return;
  check_initialized("update");
  EMBER_CHECK(std::isfinite(new_scale) && new_scale > 0, ValueError,
              "[GradScaler.update] new_scale must be a positive finite number, got ", new_scale);
  scale_.fill_(new_scale);
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  return scale_.defined() ? scale_.item<double>() : pending_scale_;
}

int64_t GradScaler::growth_tracker() const {
  if (!options_.enabled) return 0;
  return growth_tracker_.defined() ? growth_tracker_.item<int64_t>() : pending_tracker_;
}

StateDict GradScaler::state_dict() const {
  StateDict out;
  if (!options_.enabled) return out;
  out.set_scalar("scale", get_scale());
  out.set_scalar("growth_factor", options_.growth_factor);
  out.set_scalar("backoff_factor", options_.backoff_factor);
  out.set_int("growth_interval", options_.growth_interval);
  out.set_int("growth_tracker", growth_tracker());
  return out;
}

void GradScaler::load_state_dict(const StateDict& in) {
  if (!options_.enabled) return;
  EMBER_CHECK(!in.empty(), ValueError,
              "[GradScaler.load_state_dict] the state dict is empty: it was saved by a disabled "
              "GradScaler");
  for (const char* k : {"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker"})
    EMBER_CHECK(in.contains(k), ValueError, "[GradScaler.load_state_dict] missing key '", k, "'");
  GradScalerOptions o = options_;
  o.init_scale = in.scalar("scale");
  o.growth_factor = in.scalar("growth_factor");
  o.backoff_factor = in.scalar("backoff_factor");
  o.growth_interval = in.integer("growth_interval");
  validate(o, ".load_state_dict");
  const int64_t tracker = in.integer("growth_tracker");
  EMBER_CHECK(tracker >= 0 && tracker < o.growth_interval, ValueError,
              "[GradScaler.load_state_dict] growth_tracker ", tracker, " is outside [0, ",
              o.growth_interval, ")");
  options_.growth_factor = o.growth_factor;
  options_.backoff_factor = o.backoff_factor;
  options_.growth_interval = o.growth_interval;
  pending_scale_ = o.init_scale;
  pending_tracker_ = tracker;
  if (scale_.defined()) {
    scale_.fill_(o.init_scale);
    growth_tracker_.fill_(tracker);
  }
}

}  // namespace ember::amp
