// DistributedDataParallel: data-parallel training of one module replicated on every rank,
// torch.nn.parallel.DistributedDataParallel's design.
//
//   Net net; net.to(dev);
//   distributed::DistributedDataParallel ddp(net);          // broadcasts rank 0's weights
//   optim::AdamW opt(net.parameters());
//   for (auto& [x, y] : loader) {                            // this rank's part of the batch
//     Tensor loss = cross_entropy(ddp.forward([&] { return net.forward(x); }), y);
//     opt.zero_grad();
//     loss.backward();      // gradients are averaged over the ranks when backward returns
//     opt.step();
//   }
//
// Invariants:
// - Construction checks that every rank has the same parameters and buffers (names, dtypes,
//   shapes, in order; DistributedError naming the first difference on every rank) and copies
//   rank 0's values to all ranks.
// - Gradients are reduced in buckets of about bucket_cap_mb, filled in reverse registration
//   order (roughly the order backward produces them). A post-accumulate-grad hook on every
//   parameter copies its gradient into its bucket; a full bucket starts its all-reduce (avg)
//   asynchronously while backward goes on. Buckets start strictly in index order, so every
//   rank issues the same collectives in the same order.
// - The hook that completes the last bucket waits for all of them and writes the averaged
//   gradients back into .grad(): when backward() returns, .grad() holds the average over the
//   ranks of each rank's gradient (engine-independent: no end-of-backward callback needed).
//   On CUDA (NCCL) that wait is stream-ordered: the copies into .grad() and everything the
//   caller queues next (the optimizer step) run after the reductions on the current stream,
//   but the host does not wait for them, so backward() returns while they run; NCCL failures
//   surface at the next wait or through the group's watchdog (Note [distributed failures]).
//   On the CPU (MPI) the host waits.
// - Inside a no_sync() scope gradients only accumulate locally; the first backward after it
//   reduces the accumulated gradients.
// - A parameter without a gradient keeps its bucket from completing. With
//   find_unused_parameters, forward() walks the autograd graph of its output and treats every
//   parameter it cannot reach as ready with a zero gradient; a parameter unused on every rank
//   keeps an undefined gradient (so optimizers skip it). Without the option, the next
//   forward() or finish_gradient_synchronization() throws naming the parameters that got no
//   gradient.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/distributed/process_group.h"
#include "ember/nn/module.h"

namespace ember::distributed {

// Fields in torch.nn.parallel.DistributedDataParallel's argument order
// (tests/fixtures/make_options_order.py).
struct DDPOptions {
  // Copy rank 0's buffers (e.g. running statistics) to every rank at each forward().
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
};

class DistributedDataParallel {
 public:
  // group: default_group(device of the module's parameters) when null.
  explicit DistributedDataParallel(nn::Module& module, DDPOptions options = {},
                                   std::shared_ptr<ProcessGroup> group = nullptr);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  const nn::Module& module() const { return *module_; }
  ProcessGroup& process_group() { return *group_; }
  const DDPOptions& options() const { return options_; }

  // Runs fn() (the module's forward, the loss...) as DDP's forward: checks that the previous
  // backward finished its reduction, broadcasts buffers, and with find_unused_parameters
  // marks the parameters the output cannot reach.
  template <class F>
  Tensor forward(F&& fn) {
    pre_forward();
    Tensor out = fn();
    prepare_for_backward({out});
    return out;
  }
  // The parts of forward() for callers that run the module themselves.
  void pre_forward();
  void prepare_for_backward(const TensorList& outputs);

  // Waits for the reduction of the last backward (a no-op when it already finished, as it
  // does when every parameter got a gradient); throws when a bucket never completed.
  void finish_gradient_synchronization();

  // RAII: gradients accumulate locally, without communication, in its scope.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  // Introspection (tests, logs): the parameter indices (registration order) of each bucket.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  int64_t num_reductions() const;  // buckets reduced so far

  struct State;  // shared with the parameter hooks (which outlive nothing: they hold a weak_ptr)

 private:
  nn::Module* module_;
  DDPOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<State> state_;
};

}  // namespace ember::distributed
