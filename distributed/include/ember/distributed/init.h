// The distributed environment: which rank this process is, how many there are, and the
// default process groups.
//
//   mpirun -np 2 build/bin/app          # or one process without a launcher: world size 1
//   int main() {
//     distributed::init();               // reads the launcher's environment, starts MPI/NCCL
//     return distributed::abort_on_error([&] { ...train...; distributed::finalize(); return 0; });
//   }
//
// Invariants:
// - The rank, world size and local rank (among the ranks of its node) come from the
//   launcher's environment: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun), else RANK /
//   WORLD_SIZE / LOCAL_RANK (torchrun's names).
//   Without either, the process is a world of one and needs no MPI at all.
// - With more than one process, MPI is initialized (MPI_Init_thread, MPI_THREAD_MULTIPLE
//   preferred, MPI_THREAD_SERIALIZED required) and its view must agree with the environment.
//   MPI is the bootstrap of NCCL too (rank 0 creates the unique id and broadcasts it).
// - Note [device choice]: distributed owns the choice of a rank's GPU, and everything uses it
//   (the examples' models, the NCCL group): local_device(DeviceType::CUDA) is
//   cuda:(local_rank() % the number of devices this rank sees). That serves both usual
//   launches: every rank sees all of its node's GPUs (local rank i takes the i-th), or the
//   launcher gives each rank its own (CUDA_VISIBLE_DEVICES=$LOCAL_RANK: each takes the only
//   one it sees). init() all-gathers every rank's host name and its GPU's UUID and PCI bus id
//   over the CPU group, and two ranks that would share one physical GPU is an error naming
//   them (they would split its memory, and NCCL refuses them), raised by local_device() and
//   default_group(Device::cuda()) only, so that a job that trains on the CPU still runs
//   there. Those queries create no CUDA context. When init() creates the NCCL group
//   (InitOptions::nccl, a build with NCCL, every rank with a GPU of its own) it makes that
//   device current, as torch.cuda.set_device(local_rank); otherwise it leaves the current
//   device alone, so a CPU job (nccl = false) puts no context on any GPU.
// - default_group(Device::cpu()) is the MPI group (or the local group of a world of one);
//   default_group(Device::cuda(i)) is the NCCL group (throws without NCCL or on another device).
//
// Note [distributed failures]: a rank that fails must not leave the others blocked in a
// collective forever.
// - MPI runs with MPI_ERRORS_RETURN and every return code is checked (DistributedError).
// - init() installs a std::terminate handler: an uncaught exception on any rank prints
//   "[distributed] rank R: ..." and calls MPI_Abort, which makes mpirun stop every rank with a
//   non-zero status (below MPI_THREAD_MULTIPLE, where MPI_Abort is not safe from any thread,
//   the rank ends with std::_Exit and mpirun stops the others the same way). abort_on_error(fn) does the same for an exception leaving fn, so a program
//   whose main catches errors (to print them) still brings the job down.
// - A rank that dies (a signal, exit without finalize) is noticed by mpirun, which kills the
//   other ranks: the job ends with a non-zero status (tests/distributed checks it within 60 s).
// - NCCL: creating the communicator fails with DistributedError after the timeout (a rank
//   that died or never arrives). Work::wait() is stream-ordered (the host does not wait for
//   the GPU); a watchdog thread per group ends the whole job (abort() below) when NCCL reports
//   an asynchronous error or a collective has not finished within the group's timeout of its
//   launch: the caller may be blocked in a CUDA synchronization behind it, where no exception
//   can reach (Note [NCCL watchdog] in distributed/nccl/nccl_backend.cpp).
// - finalize() is for the success path only: MPI_Finalize may wait for the other ranks, so an
//   error path calls abort() instead.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ember/distributed/process_group.h"

namespace ember::distributed {

struct InitOptions {
  // Create the NCCL group on this rank's device (Note [device choice]) when every rank has
  // one and this build has NCCL (otherwise default_group(Device::cuda()) of a world of more
  // than one throws, saying why). A job that trains on the CPU passes false: no communicator,
  // and init() makes no GPU current (no CUDA context).
  bool nccl = true;
  // Collectives (and creating the NCCL communicator) that take longer fail instead of hanging.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // Install the std::terminate handler of Note [distributed failures].
  bool abort_on_uncaught_exception = true;
};

// Starts the environment (idempotent: a second call is a no-op).
void init(const InitOptions& options = {});
// Destroys the groups and finalizes MPI. Call it on every rank, only on success.
void finalize();
bool is_initialized();

// These throw DistributedError before init().
int rank();
int world_size();
int local_rank();
bool is_main_process();  // rank() == 0

// The device of kind `type` this rank computes on (Note [device choice]): the CPU, or
// cuda:(local_rank() % devices seen). Throws DistributedError before init(), when no CUDA
// device is visible, or when another rank would share this rank's GPU.
//   const Device dev = distributed::local_device(DeviceType::CUDA);  model.to(dev);
Device local_device(DeviceType type = DeviceType::CUDA);

// The default group for tensors on `device` (see the invariants above).
std::shared_ptr<ProcessGroup> default_group(Device device = Device::cpu());

// What this build has (independent of init()).
bool mpi_available();
bool nccl_available();

// Prints "[distributed] rank R: <reason>; aborting all ranks" to stderr and ends the whole
// job (MPI_Abort when MPI runs with MPI_THREAD_MULTIPLE, else std::_Exit(code), which mpirun
// turns into the end of the job). Safe from any thread. Never returns.
[[noreturn]] void abort(const std::string& reason, int code = 1) noexcept;

namespace detail {
// Note [device choice], as pure functions so that they are tested without GPUs.
// The GPU a rank takes among the `device_count` it sees: cuda:(local_rank % device_count).
// Throws DistributedError when it sees none.
Device cuda_device_for_rank(int rank, int local_rank, int device_count);
// What init() gathers from every rank: its host name and the GPU it chose (device -1: none;
// uuid "GPU-..." and pci_bus_id "0000:3b:00.0", "" when unknown).
struct RankGpu {
  std::string host;
  int device = -1;
  std::string uuid, pci_bus_id;
};
// Throws DistributedError naming the ranks when another rank of `ranks` (indexed by rank) chose
// the same physical GPU as `rank`: the same UUID, or, where either lacks one, the same PCI bus
// id on the same host. Ranks of other GPUs, other hosts, or without a GPU never clash.
void check_own_gpu(int rank, const std::vector<RankGpu>& ranks);
}  // namespace detail

// Runs fn(); an exception leaving it aborts the job (after printing its message) instead of
// leaving the other ranks waiting in a collective. Returns fn's result.
template <class F>
auto abort_on_error(F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    abort(std::string("uncaught exception: ") + e.what());
  } catch (...) {
    abort("uncaught exception of unknown type");
  }
}

}  // namespace ember::distributed
