// ZeroRedundancyOptimizer (ember/distributed/zero.h): flat layout, reduce_scatter, local
// AdamW on the slice, all_gather.
#include "ember/distributed/zero.h"

#include <iterator>

#include "ember/distributed/init.h"
#include "ember/factory.h"
#include "ember/grad_mode.h"

namespace ember::distributed {

namespace {
constexpr const char* kOp = "[ZeroRedundancyOptimizer]";
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params,
                                                 optim::AdamWOptions options,
                                                 std::shared_ptr<ProcessGroup> group)
    : params_(std::move(params)) {
  EMBER_CHECK(!params_.empty(), ValueError, kOp, " got an empty parameter list");
  const DType dtype = params_[0].dtype();
  const Device device = params_[0].device();
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    EMBER_CHECK(p.defined() && p.is_leaf() && p.is_floating_point(), ValueError, kOp, " parameter ",
                i, " must be a floating-point leaf tensor");
    EMBER_CHECK(p.dtype() == dtype && p.device() == device, ValueError, kOp,
                " all parameters must share one dtype and device: parameter 0 is ", dtype, " on ",
                device, ", parameter ", i, " is ", p.dtype(), " on ", p.device());
    numel_ += p.numel();
  }
  group_ = group ? std::move(group) : default_group(device);
  const int world = group_->size();
  shard_ = (numel_ + world - 1) / world;
  const TensorOptions opts = TensorOptions(dtype).device(device);
  flat_grad_ = zeros({shard_ * world}, opts);
  flat_param_ = zeros({shard_ * world}, opts);

  // Note [ZeRO flat parameters]: every parameter becomes a view of flat_param_ (set_data keeps
  // its identity, so the module and the caller's handles see it), and this rank's slice is a
  // leaf view of the same storage. The local AdamW then updates the parameters in place and
  // all_gather fills the other ranks' slices in place: no parameter copy exists.
  NoGradGuard no_grad;
  int64_t off = 0;
  for (const Tensor& p : params_) {
    Tensor c = p.contiguous();
    if (world > 1) group_->broadcast(c, 0);
    Tensor slot = flat_param_.narrow(0, off, p.numel()).view(p.sizes());
    slot.copy_(c);
    Tensor(p).set_data(slot);
    off += p.numel();
  }
  shard_param_ = flat_param_.narrow(0, shard_offset(), shard_).detach().requires_grad_(true);
  local_ = std::make_unique<optim::AdamW>(std::vector<Tensor>{shard_param_}, options);
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() = default;

void ZeroRedundancyOptimizer::step() {
  NoGradGuard no_grad;
  // (1) average the gradients; this rank keeps its slice.
  int64_t off = 0;
  for (const Tensor& p : params_) {
    Tensor slot = flat_grad_.narrow(0, off, p.numel()).view(p.sizes());
    if (p.grad().defined()) slot.copy_(p.grad());
    else slot.zero_();
    off += p.numel();
  }
  Tensor shard_grad = empty({shard_}, TensorOptions(flat_grad_.dtype()).device(flat_grad_.device()));
  group_->reduce_scatter(shard_grad, flat_grad_, ReduceOp::avg);
  shard_param_.set_grad(shard_grad);
  // (2) AdamW on the slice.
  local_->step();
  // (3) every rank's updated slice into the parameters (views of flat_param_, whose slice
  // rank() already holds this rank's update: an in-place all_gather).
  group_->all_gather(flat_param_, flat_param_.narrow(0, shard_offset(), shard_));
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : params_) {
    if (!p.grad().defined()) continue;
    Tensor handle = p;
    if (set_to_none) handle.set_grad(Tensor());
    else handle.mutable_grad().zero_();
  }
}

namespace {
// The per-parameter buffers AdamW keeps, in its state dict's names (max_exp_avg_sq with amsgrad,
// master with master weights; the others always).
constexpr const char* kBuffers[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "master"};
}  // namespace

StateDict ZeroRedundancyOptimizer::state_dict() const {
  NoGradGuard no_grad;
  const StateDict local = local_->state_dict();  // "state.0.*" over this rank's slice
  const int world = group_->size();
  StateDict out;
  if (local.contains("state.0.step")) {
    const int64_t step = local.integer("state.0.step");
    std::vector<Tensor> full(std::size(kBuffers));
    for (size_t b = 0; b < std::size(kBuffers); ++b) {
      const Tensor* shard = local.find(str("state.0.", kBuffers[b]));
      if (shard == nullptr) continue;
      full[b] = empty({shard_ * world}, TensorOptions(shard->dtype()).device(shard->device()));
      group_->all_gather(full[b], shard->contiguous());
    }
    int64_t off = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& p = params_[i];
      out.set_int(str("state.", i, ".step"), step);
      for (size_t b = 0; b < full.size(); ++b)
        if (full[b].defined())
          out.insert(str("state.", i, ".", kBuffers[b]), full[b].narrow(0, off, p.numel()).view(p.sizes()).clone());
      off += p.numel();
    }
  }
  std::vector<int64_t> ids(params_.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  out.insert("param_groups.0.params", tensor(ids, Shape{int64_t(ids.size())}));
  for (const auto& [key, value] : local)
    if (key.rfind("param_groups.0.", 0) == 0 && key != "param_groups.0.params") out.insert(key, value);
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& in) {
  NoGradGuard no_grad;
  const std::string op = str(kOp, ".load_state_dict");
  EMBER_CHECK(!in.contains("param_groups.1.params"), ValueError, op,
              " the state dict has several parameter groups; ZeRO keeps one");
  const Tensor& ids = in.at("param_groups.0.params");
  EMBER_CHECK(ids.numel() == int64_t(params_.size()), ValueError, op, " the state dict has ", ids.numel(),
              " parameters but this optimizer has ", params_.size());
  // Every parameter has state or none has (ZeRO steps them together), with one step count.
  const bool any = in.contains("state.0.step");
  int64_t step = 0;
  if (any) step = in.integer("state.0.step");
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = str("state.", i, ".");
    EMBER_CHECK(in.contains(prefix + "step") == any, ValueError, op, " parameter ", i,
                any ? " has no state while parameter 0 has" : " has state while parameter 0 has none");
    if (!any) continue;
    EMBER_CHECK(in.integer(prefix + "step") == step, ValueError, op, " parameter ", i, " is at step ",
                in.integer(prefix + "step"), " but parameter 0 at step ", step,
                "; ZeRO needs one step count for all parameters");
    for (const char* b : kBuffers) {
      const Tensor* t = in.find(prefix + b);
      if (t == nullptr) continue;
      EMBER_CHECK(t->sizes() == params_[i].sizes(), ShapeError, op, " state '", b, "' of parameter ", i,
                  " has shape ", t->sizes(), " but the parameter has ", params_[i].sizes());
    }
  }
  // This rank's slice of each buffer, laid out like the flat parameters (zero padding at the end).
  StateDict local;
  const int world = group_->size();
  if (any) {
    local.set_int("state.0.step", step);
    for (const char* b : kBuffers) {
      if (!in.contains(str("state.0.", b))) continue;
      const Tensor& first = in.at(str("state.0.", b));
      Tensor flat = zeros({shard_ * world}, TensorOptions(first.dtype()).device(flat_param_.device()));
      int64_t off = 0;
      for (size_t i = 0; i < params_.size(); ++i) {
        const Tensor* t = in.find(str("state.", i, ".", b));
        EMBER_CHECK(t != nullptr, ValueError, op, " parameter ", i, " lacks '", b, "' while parameter 0 has it");
        flat.narrow(0, off, params_[i].numel()).copy_(t->reshape({-1}));
        off += params_[i].numel();
      }
      local.insert(str("state.0.", b), flat.narrow(0, shard_offset(), shard_).clone());
    }
  }
  local.insert("param_groups.0.params", tensor(std::vector<int64_t>{0}, Shape{1}));
  for (const auto& [key, value] : in)
    if (key.rfind("param_groups.0.", 0) == 0 && key != "param_groups.0.params") local.insert(key, value);
  local_->load_state_dict(local);
}

double ZeroRedundancyOptimizer::lr() const { return local_->lr(); }
void ZeroRedundancyOptimizer::set_lr(double lr) { local_->set_lr(lr); }

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const char* name : kBuffers) {
    const Tensor t = local_->state(0, name);
    if (t.defined()) bytes += t.numel() * int64_t(t.element_size());
  }
  return bytes;
}

}  // namespace ember::distributed
