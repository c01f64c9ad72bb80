// ZeroRedundancyOptimizer (ember/distributed/zero.h): flat layout, reduce_scatter, local
// AdamW on the slice, all_gather.
#include "ember/distributed/zero.h"

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

double ZeroRedundancyOptimizer::lr() const { return local_->lr(); }
void ZeroRedundancyOptimizer::set_lr(double lr) { local_->set_lr(lr); }

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const char* name : {"exp_avg", "exp_avg_sq", "master"}) {
    const Tensor t = local_->state(0, name);
    if (t.defined()) bytes += t.numel() * int64_t(t.element_size());
  }
  return bytes;
}

}  // namespace ember::distributed
