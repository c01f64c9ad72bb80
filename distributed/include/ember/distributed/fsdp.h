// fully_shard: fully sharded data parallelism (ZeRO-3), PyTorch FSDP2's shape. Parameters,
// gradients and optimizer state are divided over the ranks; each unit's parameters are
// gathered only while the unit computes.
//
//   model.to(dev);                                                   // first: units pin storage
//   for (auto& b : model.blocks) distributed::fully_shard(*b);       // one unit per block
//   distributed::FSDPModule fsdp = distributed::fully_shard(model);  // the root: the rest
//   optim::AdamW opt(fsdp.parameters(), {.lr = 3e-4});               // this rank's shards
//   for (...) {                                                      // this rank's batch
//     Tensor loss = fsdp.forward([&] { return model.forward(x, y); });
//     opt.zero_grad();
//     loss.backward();   // each unit's gradient is reduce-scattered as its backward ends
//     opt.step();        // on the shards; the next forward gathers the updated values
//   }
//
// Note [FSDP layout]: a unit is a module given to fully_shard with the parameters below it
// that no unit below it holds. Its parameters (one dtype, one device) are laid out back to
// back in one flat vector of numel N, padded to W * S (W ranks, S = ceil(N / W)); rank r owns
// elements [r S, (r + 1) S): the shard, a leaf in the parameters' original dtype. The
// module's own parameter tensors become views of an unsharded flat buffer of W * S elements
// in the compute dtype (MixedPrecision::param_dtype), whose memory is released between uses
// (Note [released storage] in ember/storage.h) and gathered into place again by one
// all_gather (no copies out: the views are the parameters). parameters() are per-parameter
// pieces of the shard: for each parameter, the 1-D view of its flattened elements that fall in
// this rank's range (a parameter entirely on other ranks has no piece here), leaves that share
// the shard's storage, so any elementwise optimizer (all of ember's) stepping on them equals
// the same optimizer stepping on the full parameters with the averaged gradient.
//
// Invariants (one iteration: forward, backward, step):
// - Forward: a unit's forward pre-hook gathers it (prefetching the unit after it in the
//   previous iteration's order, asynchronously) and its forward hook frees it again
//   (reshard_after_forward; the root stays gathered until its backward ends) and hangs a
//   hook on the unit's output that gathers it again before its backward (prefetching the
//   unit before it). Modules reach these hooks when they are called through operator() or
//   nn::Module::call (GPT and Llama do so for their blocks while any block has hooks).
// - Backward: when every parameter of a unit that requires grad has its gradient, the
//   gradients are copied into one flat buffer (padding zero, cast to reduce_dtype), the
//   unsharded gradients dropped, the unit freed, and one reduce_scatter (avg) started
//   asynchronously. The unit that completes the last waits for all of them and adds each
//   averaged slice into its pieces' .grad() (so gradients accumulate over backward calls as
//   plain ones do): when backward() returns, the pieces hold the gradient of the average of
//   every rank's loss. On the CPU (MPI) the host waits; on CUDA (NCCL) the wait is
//   stream-ordered.
// - Inside no_sync() nothing is reduced: the unsharded gradients accumulate locally (full
//   gradient memory, as FSDP2's set_requires_gradient_sync(false)); the first backward after
//   it reduces them.
// - Activation checkpointing composes: a unit recomputed in backward is gathered by its
//   forward pre-hook then.
// - Equality with DDP: the gathered parameters are bit-for-bit the parameters, the averages
//   are MPI's sum then one division as DDP's; with two ranks (a sum of two is commutative)
//   FSDP's losses and weights equal DDP's bit for bit, with more they agree within the
//   round-off of a different summation order.
// - Errors: a unit whose parameters do not all receive a gradient keeps the iteration from
//   completing: the next forward() throws naming them. Reading a unit's parameter outside
//   its forward and backward throws (released storage); use summon_full_params(). Moving the
//   module (to()) after fully_shard is not supported.
// - An FSDPModule refers to its module: it must not outlive it.
// - Collective: construction (fully_shard), forward/backward, summon_full_params,
//   full_state_dict, load_full_state_dict and clip_grad_norm_ are collectives: every rank
//   calls them in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/distributed/process_group.h"
#include "ember/nn/module.h"
#include "ember/optim/optimizer.h"
#include "ember/state_dict.h"

namespace ember::distributed {

// FSDP2's MixedPrecisionPolicy. Unset: the parameters' own dtype.
struct MixedPrecision {
  // The dtype the gathered (unsharded) parameters compute in; the shards stay in the
  // parameters' original dtype (f32 master weights).
  std::optional<DType> param_dtype{};
  // The dtype gradients are reduce-scattered in (default: param_dtype); the shards' gradients
  // are in the original dtype.
  std::optional<DType> reduce_dtype{};
};

struct FSDPOptions {
  // default_group(device of the module's parameters) when null.
  std::shared_ptr<ProcessGroup> group{};
  MixedPrecision mixed_precision{};
  // Free a unit's gathered parameters after its forward (and gather them again for its
  // backward): memory for one more all_gather per unit. The root never frees after forward.
  bool reshard_after_forward = true;
};

// Bytes on this rank (what bench_ddp reports).
struct FSDPMemory {
  int64_t sharded_parameters = 0;  // the shards (original dtype)
  int64_t sharded_gradients = 0;   // the shards' gradients now
  int64_t gathered_now = 0;        // unsharded parameter buffers gathered now
  int64_t gathered_peak = 0;       // the most gathered at once since construction
  int64_t largest_unit = 0;        // one unit's unsharded buffer (compute dtype)
};

namespace detail {
struct FsdpState;
struct FsdpUnitRef;
}  // namespace detail

// A handle to a group of units: what fully_shard returns (cheap to copy).
class FSDPModule {
 public:
  nn::Module& module() const;
  ProcessGroup& process_group() const;

  // Runs fn() (the model's forward and loss) as the root's forward: gathers the root unit,
  // runs fn, and prepares the backward. Throws when the previous iteration's backward did
  // not complete (naming the parameters without a gradient), or when this unit is inside
  // another (call the outermost one's forward).
  Tensor forward(const std::function<Tensor()>& fn) const;

  // This rank's pieces of every unit's parameters (Note [FSDP layout]), units in the order
  // fully_shard made them, parameters in registration order; empty pieces left out.
  std::vector<Tensor> parameters() const;
  // The same with the parameters' names relative to module().
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  // This rank's piece of `param` (a parameter of module(), as module().parameters() lists it),
  // undefined when it has no elements on this rank. For optimizer groups:
  //   for (auto& g : groups) g.params = fsdp.shards_of(g.params);
  Tensor shard_of(const Tensor& param) const;
  std::vector<Tensor> shards_of(const std::vector<Tensor>& params) const;

  // Clips the gradients of parameters() by their total norm over every rank
  // (optim::clip_grad_norm_'s definition and result); collective.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0) const;

  // Waits for the last backward's reductions (a no-op when it completed); throws when a unit's
  // parameters did not all receive a gradient.
  void finish_gradient_synchronization() const;

  // RAII: gradients accumulate unsharded and unreduced in its scope.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(const FSDPModule& fsdp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    std::shared_ptr<detail::FsdpState> state_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() const { return NoSyncGuard(*this); }

  // RAII: every unit gathered (module().state_dict(), printing, evaluation outside forward());
  // with writeback, what the module's parameters hold at the end is written back into the
  // shards (every rank must then hold the same values). Collective.
  class FullParams {
   public:
    FullParams(const FSDPModule& fsdp, bool writeback);
    ~FullParams() noexcept(false);
    FullParams(const FullParams&) = delete;
    FullParams& operator=(const FullParams&) = delete;

   private:
    std::shared_ptr<detail::FsdpState> state_;
    bool writeback_;
  };
  [[nodiscard]] FullParams summon_full_params(bool writeback = false) const {
    return FullParams(*this, writeback);
  }
  // module().state_dict() with every parameter gathered, copied (the same on every rank).
  StateDict full_state_dict() const;
  // Loads a full state dict (module().state_dict()'s layout, e.g. from a checkpoint of any
  // world size or of an unsharded run) into the shards; every rank passes the same values.
  void load_full_state_dict(const StateDict& state, bool strict = true) const;

  // Sharded checkpoints (Note [sharded state] in ember/state_dict.h): this rank's pieces under
  // "model.<parameter>", the module's buffers (rank 0) under "model.<buffer>", and with
  // `optimizer` (one built over parameters()) its state per parameter piece under
  // "optim.<parameter>.<buffer>" (exp_avg, ...; step whole) and its group options (rank 0)
  // under "optim.param_groups.<g>.<option>". No communication: each rank returns its own.
  //   io::save_sharded_checkpoint(dir, {.state = fsdp.sharded_state_dict(&opt), ...}, rank,
  //                               world, [&] { fsdp.process_group().barrier(); });
  ShardedStateDict sharded_state_dict(const optim::Optimizer* optimizer = nullptr) const;
  // Loads what any world size saved: every rank reads the saved pieces its own pieces overlap
  // (io::ShardedCheckpointReader), and the optimizer's state for its pieces (the optimizer must
  // be built as the saving run's was: the same groups and options, over parameters()). The
  // result equals the saved state exactly: a run resumed at another world size continues from
  // the same weights and optimizer state. Validates every key and shape before changing anything.
  void load_sharded_state_dict(const ShardedSource& source, optim::Optimizer* optimizer = nullptr) const;

  FSDPMemory memory() const;
  // Introspection (tests): units in creation order, as (name relative to module(), unsharded
  // elements N, shard elements S).
  struct UnitInfo {
    std::string name;
    int64_t numel = 0, shard_numel = 0;
  };
  std::vector<UnitInfo> units() const;

 private:
  friend FSDPModule fully_shard(nn::Module& module, FSDPOptions options);
  explicit FSDPModule(std::shared_ptr<detail::FsdpUnitRef> ref) : ref_(std::move(ref)) {}
  detail::FsdpState& state() const;
  std::shared_ptr<detail::FsdpUnitRef> ref_;
};

// Makes `module` a unit (Note [FSDP layout]): its parameters not held by units below it are
// sharded over the group (rank 0's values on every rank), and the units below it join this
// one's group of units. Call it on the inner modules first and the root last; collective.
// Throws for a module that is already a unit, parameters of mixed dtypes or devices in one
// unit, a group on another device kind, or a module without parameters anywhere.
FSDPModule fully_shard(nn::Module& module, FSDPOptions options = {});

}  // namespace ember::distributed
