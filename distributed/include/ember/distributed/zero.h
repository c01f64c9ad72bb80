// ZeroRedundancyOptimizer: ZeRO stage 1 around AdamW. The optimizer state is sharded over the
// ranks instead of replicated: each rank keeps exp_avg/exp_avg_sq only for its slice of the
// flattened parameters, so optimizer-state memory is divided by the world size.
//
//   distributed::ZeroRedundancyOptimizer opt(net.parameters(), {.lr = 1e-3});
//   loss.backward();   // plain backward on this rank's batch (no DDP wrapper needed)
//   opt.step();        // reduce_scatter(avg) of gradients, AdamW on the shard, all_gather
//
// Invariants:
// - The parameters (same dtype and device, f32/f64/f16/bf16) are laid out back to back in one
//   flat vector, padded to a multiple of the world size; rank r owns the contiguous slice
//   [r * shard, (r + 1) * shard). Construction copies rank 0's parameters to every rank and
//   makes each parameter a view of that vector (Tensor::set_data: handles stay valid; move the
//   model to its device before constructing the optimizer).
// - Memory per rank: parameters N + gradients N + one flat gradient buffer N + AdamW state
//   2N / world (plain AdamW: N + N + 2N).
// - step() = (1) the gradients, flattened (a missing gradient counts as zeros), are averaged
//   and scattered: each rank receives its slice; (2) a local optim::AdamW updates the slice
//   (an f32 master slice for 16-bit parameters); (3) all_gather writes every rank's updated
//   slice back into the parameters. The result equals optim::AdamW on the averaged gradient
//   (AdamW is elementwise, and every element has the same step count).
// - The gradients are left as they were (the averaged gradient lives only in the shard).
// - state_dict() is collective (every rank calls it: the shards are all-gathered) and returns
//   the whole optimizer state in optim::AdamW's layout over the same parameters
//   (state.<i>.step / exp_avg / exp_avg_sq [/ master] with each parameter's shape,
//   param_groups.0.*), the same on every rank: a ZeRO checkpoint loads into plain AdamW and
//   back, and into ZeRO over any number of ranks. load_state_dict() takes that layout on every
//   rank and keeps this rank's slice; it validates everything before changing anything.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ember/distributed/process_group.h"
#include "ember/optim/adam.h"
#include "ember/state_dict.h"

namespace ember::distributed {

class ZeroRedundancyOptimizer {
 public:
  // group: default_group(device of the parameters) when null.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, optim::AdamWOptions options = {},
                          std::shared_ptr<ProcessGroup> group = nullptr);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  void step();
  void zero_grad(bool set_to_none = true);
  // Collective: see the file comment.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  double lr() const;
  void set_lr(double lr);
  const std::vector<Tensor>& parameters() const { return params_; }

  // Elements of the flattened parameters (unpadded), and of this rank's slice.
  int64_t numel() const { return numel_; }
  int64_t shard_numel() const { return shard_; }
  int64_t shard_offset() const { return int64_t(group_->rank()) * shard_; }
  // Bytes of optimizer state on this rank (exp_avg, exp_avg_sq and an f32 master slice when
  // present); plain AdamW keeps the same per element for every element.
  int64_t state_bytes() const;
  // The local AdamW over this rank's slice (its state dict holds only the slice).
  const optim::AdamW& local_optimizer() const { return *local_; }

 private:
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t numel_ = 0, shard_ = 0;
  Tensor flat_grad_;    // [world * shard]: the flattened gradients
  Tensor flat_param_;   // [world * shard]: the parameters' storage (they are views of it)
  Tensor shard_param_;  // [shard]: this rank's slice of it, the leaf the local AdamW updates
  std::unique_ptr<optim::AdamW> local_;
};

}  // namespace ember::distributed
