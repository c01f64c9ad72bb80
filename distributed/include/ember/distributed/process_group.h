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
#pragma once

#include <chrono>
#include <memory>
#include <string>

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
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  // Backends: start the collective (checks are done); return its Work.
  virtual WorkPtr do_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  virtual WorkPtr do_broadcast(const Tensor& tensor, int root) = 0;
  virtual WorkPtr do_all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  virtual void do_barrier() = 0;

 private:
  void check_tensor(const char* op, const Tensor& t, const char* what, bool reduction) const;
  WorkPtr finish(WorkPtr work, bool async_op);

  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{std::chrono::minutes(10)};
};

namespace detail {
// A Work that is already complete (the local group's, a failed validation's).
WorkPtr completed_work();
}  // namespace detail

}  // namespace ember::distributed
