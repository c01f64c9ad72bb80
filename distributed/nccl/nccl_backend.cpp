// The NCCL backend: the process group for CUDA tensors (CUDA builds with NCCL only; this
// folder and core/cuda are the CUDA-specific code outside ops/cuda).
//
// Invariants:
// - One non-blocking communicator (ncclConfig_t::blocking = 0) per group, on the group's
//   device. A non-blocking communicator never blocks the calling thread inside NCCL: every
//   call may answer ncclInProgress, and settle() polls ncclCommGetAsyncError until it is done,
//   failing after the group's timeout. So ncclCommInitRankConfig of a job where a rank died
//   (or never arrives) fails with a DistributedError instead of blocking forever.
// - Note [NCCL comm lock]: a communicator is not thread-safe, and a non-blocking one runs each
//   call on a thread of NCCL's whose job it keeps on the communicator; depending on the NCCL
//   version the next poll or call that finds it done joins and frees that job. So every NCCL
//   call on a group's communicator once it is shared (each enqueue, each poll, a split of it,
//   finalize, destroy; its creation runs before anything else can reach it) holds
//   Comm::mu: the issuing thread, Work::wait() on any thread, and the watchdog, which only
//   try_locks (it skips a poll while the communicator is busy rather than delay a collective).
//   The lock is never held across a sleep. Comm::comm is null once the group destroyed it
//   (under mu), which a Work that outlives its group sees.
// - The communication stream comes from core's stream pool (cuda::Stream, non-blocking) and
//   is never destroyed (Note [stream lifetime] in core/cuda/stream.cpp): collective tensors
//   are record_stream()ed on it, so the caching allocator records events on it whenever they
//   are freed, which may be after the group is gone.
// - Each collective makes the communication stream wait for the caller's current stream (its
//   tensors are ready), runs there, records a completion event, and record_stream()s its
//   tensors on the communication stream (their blocks are not reused before it finished,
//   whatever the caller does with them).
// - Work::wait() is stream-ordered, as PyTorch's ProcessGroupNCCL: it makes the caller's
//   current stream wait for the completion event and returns at once; the host never waits
//   for the GPU (DDP's last gradient hook returns while the reduction runs, so the optimizer's
//   launches are queued meanwhile). It rethrows a failure already known (an asynchronous NCCL
//   error); failures found later are the watchdog's.
// - Note [NCCL watchdog]: one thread per group polls the in-flight collectives (every
//   kWatchdogPoll). When NCCL reports an asynchronous error, or a collective has not finished
//   within the group's timeout of its launch, it ends the whole job through
//   distributed::abort() (as PyTorch's default TORCH_NCCL_ASYNC_ERROR_HANDLING). An exception
//   could not do: the caller's thread may be blocked in a CUDA synchronization (.item(), a
//   copy) behind the stuck collective, where nothing can reach it, and after an aborted
//   collective the results it reads would be garbage. The clock starts at the host's launch,
//   as PyTorch's: time the collective waits behind this rank's own queued work counts too,
//   which the default timeout (minutes) dwarfs. At process exit (exit() without finalize())
//   an atexit hook stops every watchdog before the CUDA runtime and NCCL tear down, so a
//   query failing during teardown cannot turn a successful job into an aborted one.
// - Collectives cannot be captured in a CUDA graph (the watchdog cannot query an event
//   recorded in a capture): launching one while the caller's stream captures throws.
// - avg is NCCL's ncclAvg; broadcast and all_gather move bytes (any dtype).
// - The calling thread's current device is restored by cuda::detail::DeviceGuard after every
//   call; select_cuda_device() is the one deliberate switch (see there).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "../src/backends.h"
#include "ember/cuda/caching_allocator.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "ember/cuda_stream.h"
#include "ember/distributed/init.h"
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

// The one place ember makes a device current without restoring the previous one, on purpose:
// init() gives this rank its own GPU when it creates the NCCL group, as
// torch.cuda.set_device(local_rank) does in a PyTorch script. Every CUDA call that uses the
// current device (the first one creates the process's context there, pinned host memory,
// streams and events made with device -1) then lands on the rank's GPU instead of GPU 0, where
// N ranks would each create a context and crowd one card.
void select_cuda_device(int device) { EMBER_CUDA_CHECK(cudaSetDevice(device)); }

// Note [device choice]. cudaGetDeviceProperties and cudaDeviceGetPCIBusId query the driver
// without creating a context, so a job that trains on the CPU may call this on a GPU machine
// (an exclusive-process GPU another job holds included).
CudaDeviceIdentity cuda_device_identity(int device) {
  CudaDeviceIdentity id;
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (std::any_of(std::begin(prop.uuid.bytes), std::end(prop.uuid.bytes), [](char b) { return b != 0; })) {
    // nvidia-smi's spelling: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
    static const char* hex = "0123456789abcdef";
    id.uuid = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) id.uuid += '-';
      const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
      id.uuid += hex[b >> 4];
      id.uuid += hex[b & 15];
    }
  }
  char bus[32] = {};
  EMBER_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, int(sizeof bus), device));
  id.pci_bus_id = bus;
  return id;
}

namespace {

using cuda::detail::DeviceGuard;
using Clock = std::chrono::steady_clock;

constexpr auto kWatchdogPoll = std::chrono::milliseconds(50);
// settle(): NCCL's thread for one collective typically finishes within tens of microseconds,
// so a wait first spins (yielding the core) for this long, and only then sleeps between polls.
constexpr auto kSettleSpin = std::chrono::microseconds(200);
constexpr auto kSettleSleep = std::chrono::microseconds(50);

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

double seconds(std::chrono::milliseconds t) { return double(t.count()) / 1000.0; }

// The communicator, shared with in-flight Works and the watchdog (Note [NCCL comm lock]).
struct Comm {
  std::mutex mu;
  ncclComm_t comm = nullptr;  // guarded by mu; null before init and once destroyed
  int rank = 0;
  // Set once a call failed or NCCL reported an asynchronous error: later calls refuse at once
  // instead of queueing on a communicator in an unknown state.
  std::atomic<bool> failed{false};

  void check_usable(const char* op) const {
    EMBER_CHECK(!failed, distributed::DistributedError, "[", op, "] rank ", rank,
                ": the NCCL communicator failed earlier (see the first error); it cannot be used again");
  }

  // NCCL's asynchronous state: ncclSuccess, ncclInProgress, or the error that broke the
  // communicator (a remote rank that exited, a network failure...). mu held, comm not null.
  ncclResult_t async_state_locked() const {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    return rc != ncclSuccess ? rc : state;
  }

  // Makes the non-blocking NCCL call `call()` (which reads `comm`) under mu and waits until
  // it is done (settle).
  template <class F>
  void run(const char* what, std::chrono::milliseconds timeout, F&& call) {
    ncclResult_t rc;
    {
      std::lock_guard lock(mu);
      rc = call();
    }
    settle(rc, what, timeout);
  }

  // ncclCommSplit of this communicator (the parent), to completion; returns the child (null for
  // NCCL_SPLIT_NOCOLOR). Note [ncclCommSplit completes on the parent]: on a non-blocking parent
  // NCCL answers ncclSuccess at once, runs the split as a job of the parent's (whose async state
  // is ncclInProgress meanwhile: any other call on it is refused), and its thread stores the
  // child's handle when the job ends. So the parent is polled even after ncclSuccess (the poll
  // that finds the job done joins that thread), and the handle is read only then. Its slot is
  // on the heap and leaked if the split fails or times out: NCCL's thread may still write it.
  ncclComm_t split(int color, int key, ncclConfig_t* config, std::chrono::milliseconds timeout) {
    auto slot = std::make_unique<ncclComm_t>(nullptr);
    try {
      ncclResult_t rc;
      {
        std::lock_guard lock(mu);
        rc = ncclCommSplit(comm, color, key, slot.get(), config);
      }
      settle(rc == ncclSuccess ? ncclInProgress : rc, "ncclCommSplit", timeout);
    } catch (...) {
      (void)slot.release();
      throw;
    }
    return *slot;
  }

  // Waits until the non-blocking call `call`, which answered `rc`, is done (Invariants).
  // Throws DistributedError when it failed or is not done within `timeout`; the communicator
  // is then unusable (`failed`). Polls under mu, spins and sleeps without it.
  void settle(ncclResult_t rc, const char* call, std::chrono::milliseconds timeout) {
    const auto start = Clock::now();
    while (rc == ncclInProgress) {
      const auto waited = Clock::now() - start;
      if (waited > timeout) {
        failed = true;
        throw DistributedError(str("[nccl] ", call, " on rank ", rank, " did not complete within ",
                                   seconds(timeout), " s (another rank died, is stuck, or did not "
                                   "make the same NCCL calls in the same order)"));
      }
      if (waited < kSettleSpin) std::this_thread::yield();
      else std::this_thread::sleep_for(kSettleSleep);
      std::lock_guard lock(mu);
      rc = async_state_locked();
    }
    if (rc != ncclSuccess) {
      failed = true;
      throw_nccl_error(call, rc, rank, __FILE__, __LINE__);
    }
  }
};

// A completion event, shared by a Work and the watchdog (whichever lets go last destroys it;
// cudaEventDestroy of a pending event is legal: its resources go when it completes).
using SharedEvent = std::shared_ptr<CUevent_st>;
SharedEvent make_event() {
  cudaEvent_t e = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return SharedEvent(e, [](cudaEvent_t ev) { (void)cudaEventDestroy(ev); });
}

class Watchdog;

// The live watchdogs, for the atexit hook (Note [NCCL watchdog]). Never destroyed: a group
// held by a static object may be destroyed after the hook, during static destruction.
struct LiveWatchdogs {
  std::mutex mu;  // serializes stop() between the hook and the watchdogs' destructors
  std::vector<Watchdog*> all;
};
LiveWatchdogs& live_watchdogs() {
  static auto* live = new LiveWatchdogs();
  return *live;
}
// Set by the hook before it stops the watchdogs: from then on a failure a watchdog finds
// (a query failing as the runtime unloads) means "stop", not "abort the job". Not under
// LiveWatchdogs::mu: the hook holds that while it joins the watchdogs, which read this.
std::atomic<bool> g_exiting{false};
void stop_watchdogs_at_exit();

// Note [NCCL watchdog] (file top). All collectives of a group run in issue order on one stream,
// so the entries complete in order and the oldest one is the first to time out: a scan stops at
// the first unfinished entry.
class Watchdog {
 public:
  Watchdog(std::shared_ptr<Comm> comm, int device) : comm_(std::move(comm)), device_(device) {
    // Registered after this process's CUDA runtime and NCCL started (the group made its
    // communicator first), so that exit() runs the hook before their teardown.
    static const bool hooked = std::atexit(stop_watchdogs_at_exit) == 0;
    (void)hooked;  // without the hook only exit without finalize() loses its protection
    LiveWatchdogs& live = live_watchdogs();
    std::lock_guard lock(live.mu);
    thread_ = std::thread([this] { run(); });
    live.all.push_back(this);
  }
  ~Watchdog() {
    LiveWatchdogs& live = live_watchdogs();
    std::lock_guard lock(live.mu);
    if (auto it = std::find(live.all.begin(), live.all.end(), this); it != live.all.end()) live.all.erase(it);
    stop();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(SharedEvent done, const char* op, std::chrono::milliseconds timeout) {
    std::lock_guard lock(mu_);
    pending_.push_back({std::move(done), op, Clock::now(), timeout});
  }

  // Ends the thread (idempotent; LiveWatchdogs::mu held, so that the hook and the destructor
  // never join it together).
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Entry {
    SharedEvent done;
    const char* op;
    Clock::time_point launched;
    std::chrono::milliseconds timeout;
  };

  void run() {
    std::string failure;
    try {
      // This thread's own current device, for the whole of its life: queries go to the group's.
      DeviceGuard guard(device_);
      std::unique_lock lock(mu_);
      while (!stop_ && failure.empty()) {
        cv_.wait_for(lock, kWatchdogPoll, [&] { return stop_; });
        if (!stop_ && !g_exiting) failure = check();
      }
    } catch (const std::exception& e) {
      failure = str("[nccl] rank ", comm_->rank, ": the watchdog of the NCCL group failed: ", e.what());
    }
    // A failure found while the process exits is the teardown's, not the job's.
    if (!failure.empty() && !g_exiting) distributed::abort(failure);  // never returns
  }

  // Drops finished entries; the reason to end the job, or "" (mu_ held).
  std::string check() {
    while (!pending_.empty()) {
      const cudaError_t q = cudaEventQuery(pending_.front().done.get());
      if (q == cudaErrorCudartUnloading) {
        // The process is exiting (main returned without finalize()): nothing left to watch.
        stop_ = true;
        return "";
      }
      if (!cuda::detail::query_completed(q)) break;
      pending_.pop_front();
    }
    if (pending_.empty()) return "";
    const Entry& oldest = pending_.front();
    ncclResult_t state = ncclInProgress;
    {
      // Note [NCCL comm lock]: skip this poll while another thread uses the communicator.
      std::unique_lock lock(comm_->mu, std::try_to_lock);
      if (lock.owns_lock() && comm_->comm != nullptr) state = comm_->async_state_locked();
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      comm_->failed = true;
      const char* last = ncclGetLastError(nullptr);
      return str("[", oldest.op, "] rank ", comm_->rank, ": NCCL reported an asynchronous error: ",
                 ncclGetErrorString(state), last != nullptr && *last != '\0' ? str(" (", last, ")") : std::string());
    }
    if (Clock::now() - oldest.launched > oldest.timeout)
      return str("[", oldest.op, "] rank ", comm_->rank, ": the NCCL collective did not finish within ",
                 seconds(oldest.timeout), " s of its launch (another rank failed, or did not issue the same "
                 "collectives in the same order)");
    return "";
  }

  std::shared_ptr<Comm> comm_;
  int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> pending_;
  bool stop_ = false;
  std::thread thread_;
};

void stop_watchdogs_at_exit() {
  g_exiting = true;
  LiveWatchdogs& live = live_watchdogs();
  std::lock_guard lock(live.mu);
  for (Watchdog* w : live.all) w->stop();
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Comm> comm, SharedEvent done, int device, TensorList keep, const char* op)
      : comm_(std::move(comm)), done_(std::move(done)), device_(device), keep_(std::move(keep)), op_(op) {}
  ~NcclWork() override {
    if (waited_) return;
    // Order the caller's stream after the collective anyway, so that its tensors are not read
    // early (best effort: a destructor cannot report a failure).
    try {
      DeviceGuard guard(device_);
      (void)cudaStreamWaitEvent(cuda::detail::current_stream_handle(device_), done_.get(), 0);
    } catch (...) {
    }
  }
  void wait() override {
    if (waited_) return;
    comm_->check_usable(op_);
    {
      // A Work may outlive its group: once the group destroyed the communicator (after
      // flushing it, so the collective is complete), only the stream ordering is left to do.
      std::lock_guard lock(comm_->mu);
      if (comm_->comm != nullptr) {
        const ncclResult_t state = comm_->async_state_locked();
        if (state != ncclSuccess && state != ncclInProgress) {
          comm_->failed = true;
          throw DistributedError(str("[", op_, "] rank ", comm_->rank, ": NCCL reported an asynchronous error: ",
                                     ncclGetErrorString(state)));
        }
      }
    }
    // The guard matters: the legacy default stream (handle 0) means the *current* device's.
    DeviceGuard guard(device_);
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(cuda::detail::current_stream_handle(device_), done_.get(), 0));
    waited_ = true;
    keep_.clear();  // safe: launch() record_stream()ed them on the communication stream
  }
  bool is_completed() override {
    DeviceGuard guard(device_);
    return cuda::detail::query_completed(cudaEventQuery(done_.get()));
  }

 private:
  std::shared_ptr<Comm> comm_;
  SharedEvent done_;
  int device_;
  TensorList keep_;
  const char* op_;
  bool waited_ = false;
};

// Rank 0's new unique id, broadcast to every rank.
ncclUniqueId unique_id(int rank, const std::function<void(void*, size_t)>& broadcast_id) {
  ncclUniqueId id{};
  if (rank == 0) EMBER_NCCL_CHECK(ncclGetUniqueId(&id), rank);
  broadcast_id(&id, sizeof id);
  return id;
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(int rank, int size, int device, const std::function<void(void*, size_t)>& broadcast_id,
                   std::chrono::milliseconds timeout)
      : NcclProcessGroup(rank, size, device, timeout, "ncclCommInitRankConfig",
                         [&](ncclComm_t* comm, ncclConfig_t* config) {
                           return ncclCommInitRankConfig(comm, size, unique_id(rank, broadcast_id), rank, config);
                         }) {}
  // A subgroup: ncclCommSplit of `parent`, completed on the parent (Comm::split); the child's
  // own state is then polled as any new communicator's.
  NcclProcessGroup(const std::shared_ptr<Comm>& parent, int color, int key, int rank, int size, int device,
                   std::chrono::milliseconds timeout)
      : NcclProcessGroup(rank, size, device, timeout, "ncclCommSplit", [&](ncclComm_t* comm, ncclConfig_t* config) {
          *comm = parent->split(color, key, config, timeout);
          return *comm != nullptr ? ncclInProgress : ncclInternalError;  // null only if NCCL broke its contract
        }) {}

  // make(&comm, &config), the NCCL call named `call`, starts the non-blocking creation of the
  // communicator: `comm` is set when it returns, usable once settle() finds it done.
  template <class Make>
  NcclProcessGroup(int rank, int size, int device, std::chrono::milliseconds timeout, const char* call, Make&& make)
      : ProcessGroup(rank, size),
        device_(device),
        comm_(std::make_shared<Comm>()),
        stream_(cuda::StreamOptions{.device = device, .non_blocking = true}) {
    set_timeout(timeout);
    comm_->rank = rank;
    DeviceGuard guard(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    try {
      // Without Comm::mu: nothing else can reach this communicator yet, and a split's make
      // waits on its parent (Comm::split), which must not hold a lock across its sleeps.
      ncclComm_t made = nullptr;
      const ncclResult_t rc = make(&made, &config);
      {
        std::lock_guard lock(comm_->mu);
        comm_->comm = made;
      }
      comm_->settle(rc, call, timeout);
      watchdog_ = std::make_unique<Watchdog>(comm_, device_);
    } catch (...) {
      // Nothing else holds the communicator yet; abort frees what a half-made one holds.
      std::lock_guard lock(comm_->mu);
      if (comm_->comm != nullptr) (void)ncclCommAbort(comm_->comm);
      comm_->comm = nullptr;
      throw;
    }
  }
  ~NcclProcessGroup() override {
    // Best effort (a destructor cannot report a failure). The watchdog goes first: nothing
    // may watch the communicator while it is destroyed. The stream stays (Invariants).
    watchdog_.reset();
    try {
      DeviceGuard guard(device_);
      bool clean = !comm_->failed;
      if (clean) {
        // ncclCommFinalize flushes the issued collectives (non-blocking: settle waits).
        try {
          comm_->run("ncclCommFinalize", timeout(), [&] { return ncclCommFinalize(comm_->comm); });
        } catch (...) {
          clean = false;
        }
      }
      std::lock_guard lock(comm_->mu);
      if (clean) (void)ncclCommDestroy(comm_->comm);
      else (void)ncclCommAbort(comm_->comm);
      comm_->comm = nullptr;  // what a Work that outlives the group sees (NcclWork::wait)
    } catch (...) {
    }
  }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device::cuda(device_); }

 protected:
  WorkPtr do_all_reduce(const Tensor& t, ReduceOp op) override {
    return launch("all_reduce", {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op), c, s);
    });
  }
  WorkPtr do_broadcast(const Tensor& t, int root) override {
    return launch("broadcast", {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()) * t.element_size(), ncclUint8, root, c, s);
    });
  }
  WorkPtr do_all_gather(const Tensor& output, const Tensor& input) override {
    return launch("all_gather", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), size_t(input.numel()) * input.element_size(),
                           ncclUint8, c, s);
    });
  }
  WorkPtr do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    return launch("reduce_scatter", {output, input}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(input.data_ptr(), output.data_ptr(), size_t(output.numel()), nccl_type(input.dtype()),
                               nccl_op(op), c, s);
    });
  }
  // The host waits here (a barrier's purpose). A peer that never arrives is the watchdog's.
  void do_barrier() override {
    if (!barrier_buffer_.defined()) barrier_buffer_ = zeros({1}, Device::cuda(device_));
    do_all_reduce(barrier_buffer_, ReduceOp::sum)->wait();
    stream_.synchronize();
  }
  // ncclCommSplit: collective over this group's ranks, as MPI_Comm_split. Every rank makes
  // the call (a negative color as NCCL_SPLIT_NOCOLOR, which makes no communicator and whose
  // completion is polled on this group's). NCCL queues it behind this group's collectives.
  std::shared_ptr<ProcessGroup> do_split(int color, int key, int new_rank, int new_size) override {
    comm_->check_usable("split");
    DeviceGuard guard(device_);
    if (color >= 0)
      return std::make_shared<NcclProcessGroup>(comm_, color, key, new_rank, new_size, device_, timeout());
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    (void)comm_->split(NCCL_SPLIT_NOCOLOR, key, &config, timeout());
    return nullptr;
  }

 private:
  // enqueue(comm, stream) makes the NCCL call and returns its result.
  template <class F>
  WorkPtr launch(const char* op, TensorList keep, F&& enqueue) {
    comm_->check_usable(op);
    DeviceGuard guard(device_);
    const cudaStream_t caller = cuda::detail::current_stream_handle(device_);
    const cudaStream_t stream = stream_.handle();
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    EMBER_CUDA_CHECK(cudaStreamIsCapturing(caller, &capture));
    EMBER_CHECK(capture == cudaStreamCaptureStatusNone, distributed::DistributedError, "[", op, "] rank ", rank(),
                ": NCCL collectives cannot be captured in a CUDA graph (their completion is watched from "
                "outside it); run the collective outside the capture");
    {
      cudaEvent_t ready = nullptr;
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
      const cudaError_t recorded = cudaEventRecord(ready, caller);
      const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(stream, ready, 0) : recorded;
      (void)cudaEventDestroy(ready);  // legal while pending: the wait above already holds it
      EMBER_CUDA_CHECK(waited);
    }
    SharedEvent done = make_event();
    // A non-blocking communicator may answer before the kernel is on the stream (ncclInProgress):
    // the event must come after it.
    comm_->run(op, timeout(), [&] { return enqueue(comm_->comm, stream); });
    for (const Tensor& t : keep) cuda::detail::record_stream(t, stream);
    EMBER_CUDA_CHECK(cudaEventRecord(done.get(), stream));
    watchdog_->watch(done, op, timeout());
    return std::make_shared<NcclWork>(comm_, std::move(done), device_, std::move(keep), op);
  }

  int device_;
  std::shared_ptr<Comm> comm_;
  cuda::Stream stream_;  // from core's pool, never destroyed (Invariants)
  std::unique_ptr<Watchdog> watchdog_;
  Tensor barrier_buffer_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(int rank, int size, int device,
                                              const std::function<void(void*, size_t)>& broadcast_id,
                                              std::chrono::milliseconds timeout) {
  return std::make_shared<NcclProcessGroup>(rank, size, device, broadcast_id, timeout);
}

}  // namespace ember::distributed::detail
