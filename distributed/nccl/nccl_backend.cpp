// The NCCL backend: the process group for CUDA tensors (CUDA builds with NCCL only; this
// folder and core/cuda are the CUDA-specific code outside ops/cuda).
//
// Invariants:
// - One communicator and one non-blocking communication stream per group, on the group's
//   device. Each collective first makes the communication stream wait for the caller's current
//   stream (the tensors are ready), then records a completion event.
// - A Work keeps its tensors alive until wait(); wait() polls the completion event and
//   ncclCommGetAsyncError, and on an asynchronous error or after the timeout aborts the
//   communicator (so no later call blocks on it) and throws. Once the collective is done it
//   makes the caller's current stream wait for it. (It blocks the host until the GPU finished
//   the collective: the price of a timeout without a watchdog thread.)
// - avg is NCCL's ncclAvg; broadcast and all_gather move bytes (any dtype).
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "../src/backends.h"
#include "ember/cuda/check.h"
#include "ember/cuda/stream_handle.h"
#include "ember/factory.h"
#include "nccl_check.h"

namespace ember::distributed::detail {

void throw_nccl_error(const char* call, ncclResult_t code, int rank, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  throw DistributedError(str("[nccl] ", call, " failed on rank ", rank, ": ", ncclGetErrorString(code),
                             last != nullptr && *last != '\0' ? str(" (", last, ")") : std::string(),
                             " at ", file, ":", line));
}

bool nccl_built() { return true; }
void select_cuda_device(int device) { EMBER_CUDA_CHECK(cudaSetDevice(device)); }

namespace {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: return ncclUint8;  // u8, b8: only moved (broadcast, all_gather), never reduced
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
  }
  return ncclSum;
}

// The communicator, shared with in-flight Works so that one of them can abort it.
struct Comm {
  ncclComm_t comm = nullptr;
  std::atomic<bool> aborted{false};
  void abort() {
    if (!aborted.exchange(true)) ncclCommAbort(comm);  // best effort: we are failing anyway
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, cudaEvent_t done, int device, TensorList keep,
           const char* op, int rank, std::chrono::milliseconds timeout)
      : comm_(std::move(comm)), done_(done), device_(device), keep_(std::move(keep)), op_(op),
        rank_(rank), timeout_(timeout) {}
  ~NcclWork() override {
    if (!waited_ && !comm_->aborted) {
      // Order the caller's stream after the collective before the tensors can be reused
      // (best effort: a destructor cannot report a failure).
      try {
        cudaStreamWaitEvent(cuda::detail::current_stream_handle(device_), done_, 0);
      } catch (...) {
      }
    }
    cudaEventDestroy(done_);
  }
  void wait() override {
    if (waited_) return;
    EMBER_CHECK(!comm_->aborted, distributed::DistributedError, "[", op_, "] rank ", rank_,
                ": the NCCL communicator was aborted after an earlier failure");
    DeviceGuard guard(device_);
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) EMBER_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm_->comm, &async), rank_);
      if (async != ncclSuccess && async != ncclInProgress) {
        comm_->abort();
        throw DistributedError(str("[", op_, "] rank ", rank_, ": NCCL reported an asynchronous error: ",
                                   ncclGetErrorString(async), "; the communicator was aborted"));
      }
      if (std::chrono::steady_clock::now() - start > timeout_) {
        comm_->abort();
        throw DistributedError(str("[", op_, "] rank ", rank_, ": timed out after ",
                                   double(timeout_.count()) / 1000.0,
                                   " s (another rank failed, or did not issue the same collectives "
                                   "in the same order); the NCCL communicator was aborted"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(cuda::detail::current_stream_handle(device_), done_, 0));
    waited_ = true;
    keep_.clear();
  }
  bool is_completed() override { return waited_ || cudaEventQuery(done_) == cudaSuccess; }

 private:
  std::shared_ptr<Comm> comm_;
  cudaEvent_t done_;
  int device_;
  TensorList keep_;
  const char* op_;
  int rank_;
  std::chrono::milliseconds timeout_;
  bool waited_ = false;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int device,
                   const std::function<void(void*, size_t)>& broadcast_id)
      : ProcessGroup(rank, size), device_(device), comm_(std::make_shared<Comm>()) {
    DeviceGuard guard(device_);
    ncclUniqueId id{};
    if (rank == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id), rank);
    broadcast_id(&id, sizeof id);
    EMBER_NCCL_CHECK(ncclCommInitRank(&comm_->comm, size, id, rank), rank);
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclProcessGroup() override {
    // Best effort (a destructor cannot report a failure): on this group's device, destroy the
    // communicator (unless a failure aborted it) and the stream.
    int prev = 0;
    const bool switched = cudaGetDevice(&prev) == cudaSuccess && prev != device_ &&
                          cudaSetDevice(device_) == cudaSuccess;
    if (!comm_->aborted) ncclCommDestroy(comm_->comm);
    cudaStreamDestroy(stream_);
    if (switched) cudaSetDevice(prev);
  }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

 protected:
  WorkPtr do_all_reduce(const Tensor& t, ReduceOp op) override {
    return launch("all_reduce", {t}, [&](ncclComm_t c, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()),
                                     nccl_op(op), c, s), rank());
    });
  }
  WorkPtr do_broadcast(const Tensor& t, int root) override {
    return launch("broadcast", {t}, [&](ncclComm_t c, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()) * t.element_size(),
                                     ncclUint8, root, c, s), rank());
    });
  }
  WorkPtr do_all_gather(const Tensor& output, const Tensor& input) override {
    return launch("all_gather", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(),
                                     size_t(input.numel()) * input.element_size(), ncclUint8, c, s),
                       rank());
    });
  }
  WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    return launch("reduce_scatter", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      EMBER_NCCL_CHECK(ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()),
                                         nccl_type(input.dtype()), nccl_op(op), c, s), rank());
    });
  }
  void do_barrier() override {
    if (!barrier_buffer_.defined()) barrier_buffer_ = zeros({1}, Device::cuda(device_));
    do_all_reduce(barrier_buffer_, ReduceOp::sum)->wait();
    DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  template <class F>
  WorkPtr launch(const char* op, TensorList keep, F&& enqueue) {
    EMBER_CHECK(!comm_->aborted, distributed::DistributedError, "[", op, "] rank ", rank(),
                ": the NCCL communicator was aborted after an earlier failure");
    DeviceGuard guard(device_);
    cudaEvent_t ready = nullptr, done = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(ready, cuda::detail::current_stream_handle(device_)));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    EMBER_CUDA_CHECK(cudaEventDestroy(ready));
    enqueue(comm_->comm, stream_);
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    EMBER_CUDA_CHECK(cudaEventRecord(done, stream_));
    return std::make_shared<NcclWork>(comm_, done, device_, std::move(keep), op, rank(), timeout());
  }

  int device_;
  std::shared_ptr<Comm> comm_;
  cudaStream_t stream_ = nullptr;
  Tensor barrier_buffer_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(int rank, int size, int device,
                                              const std::function<void(void*, size_t)>& broadcast_id) {
  return std::make_shared<NcclProcessGroup>(rank, size, device, broadcast_id);
}

}  // namespace ember::distributed::detail
