// ProcessGroup: collectives over the ranks of a job, PyTorch's torch.distributed shape.
//
//   auto pg = distributed::default_group(Device::cpu());    // MPI (CPU tensors)
//   pg->all_reduce(t, distributed::ReduceOp::avg);           // blocking
//   auto work = pg->all_reduce(t, ReduceOp::sum, /*async_op=*/true);  ...; work->wait();
//
// Invariants:
// - Every rank calls the same collectives in the same order (MPI/NCCL semantics). A group runs
//   its collectives strictly in the order they were issued on this rank (MPI: one worker
//   thread owns the communicator; NCCL: one communication stream).
// - Collectives are in place on contiguous tensors of a supported dtype on the group's device
//   kind: MPI takes CPU tensors, NCCL CUDA tensors on its own device. Anything else throws
//   before any communication starts, naming the collective, the rank and the tensor.
// - Reductions (all_reduce, reduce_scatter) support f32, f64, f16, bf16, i64, i32; broadcast
//   and all_gather move bytes and take every dtype. avg on integers truncates (as NCCL).
//   MPI reduces f16/bf16 through f32 (one rounding at the end).
// - An async collective returns a Work at once; the tensors must not be touched until
//   wait() returns. MPI: wait() blocks the host until the collective finished, rethrows its
//   failure as DistributedError, and fails after the group's timeout instead of hanging.
//   NCCL: wait() is stream-ordered (as PyTorch's): work queued on the caller's current stream
//   afterwards runs after the collective, and the host goes on at once; it rethrows a failure
//   NCCL already reported, and a collective that fails or hangs later ends the job after the
//   timeout (Note [distributed failures] in init.h).
// - Every failing MPI/NCCL call becomes a DistributedError naming the call and the rank.
// - Subgroups (split(), new_group() and DeviceMesh in mesh.h): a group made by split() has its
//   own communicator (MPI_Comm_split; its own worker thread), so collectives on different
//   groups never match each other; rank() and size() are within the group, global_ranks()
//   maps them to the world. Errors of a subgroup's collectives name it ("[all_gather] rank 1
//   of group 'dp'"). The default groups are named "world".
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ember/error.h"
#include "ember/tensor.h"

namespace ember::distributed {

// A failed or timed-out collective, a failed MPI/NCCL call, an inconsistency between ranks.
class DistributedError : public Error {
  using Error::Error;
};

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);  // "sum", ...

// The handle of one (possibly asynchronous) collective.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective finished (for NCCL: until the caller's current stream is
  // ordered after it, the host does not wait for the GPU); rethrows its failure. Idempotent.
  virtual void wait() = 0;
  // True once the collective finished (successfully or not) on the host or the device;
  // never blocks.
  virtual bool is_completed() = 0;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "mpi", "nccl", or "local" (a world of one process: every collective is the identity).
  virtual const char* backend() const = 0;
  // The device kind this group communicates (CPU for mpi/local, CUDA(i) for nccl).
  virtual Device device() const = 0;
  // "world" for the default groups, the name given to split() otherwise.
  const std::string& name() const { return name_; }
  // The world rank of each rank of this group, in group-rank order.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  // Collective over this group: the ranks that pass the same color >= 0 form one new group,
  // ranked by (key, rank in this group); a rank that passes a negative color takes part and
  // gets nullptr (MPI_Comm_split / ncclCommSplit semantics). The new group has this group's
  // timeout. Throws DistributedError where the backend cannot make subgroups.
  std::shared_ptr<ProcessGroup> split(int color, int key, const std::string& name);
  // "[op] rank R" or "[op] rank R of group 'name'": how every error message about this group
  // starts.
  std::string where(const char* op) const;
  // How long wait() waits before failing with DistributedError.
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // tensor <- op over every rank's tensor.
  WorkPtr all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum, bool async_op = false);
  // tensor <- root's tensor.
  WorkPtr broadcast(const Tensor& tensor, int root = 0, bool async_op = false);
  // output (numel = size() * input.numel(), same dtype) <- the inputs of ranks 0, 1, ...
  // back to back (torch.distributed.all_gather_into_tensor).
  WorkPtr all_gather(const Tensor& output, const Tensor& input, bool async_op = false);
  // output (numel = input.numel() / size()) <- chunk rank() of op over every rank's input
  // (torch.distributed.reduce_scatter_tensor).
  WorkPtr reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::sum,
                         bool async_op = false);
  // Returns when every rank has entered the barrier.
  void barrier();

 protected:
  ProcessGroup(int rank, int size);
  // Backends: start the collective (checks are done); return its Work.
  virtual WorkPtr do_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(const Tensor& tensor, int root) = 0;
  virtual WorkPtr do_all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  virtual void do_barrier() = 0;
  // The backend's half of split(), called on every rank of this group with the outcome the
  // base class worked out from an all_gather of every rank's (color, key): a rank with
  // color >= 0 becomes rank new_rank of new_size in the new group; one with a negative color
  // takes part in the backend's collective (MPI_Comm_split's MPI_UNDEFINED) and gets nullptr.
  virtual std::shared_ptr<ProcessGroup> do_split(int color, int key, int new_rank, int new_size) = 0;

 private:
  void check_tensor(const char* op, const Tensor& t, const char* what, bool reduction) const;
  WorkPtr finish(WorkPtr work, bool async_op);

  int rank_ = 0;
  int size_ = 1;
  std::string name_ = "world";
  std::vector<int> global_ranks_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
};

namespace detail {
// A Work that is already complete (the local group's, a failed validation's).
WorkPtr completed_work();
}  // namespace detail

}  // namespace ember::distributed
