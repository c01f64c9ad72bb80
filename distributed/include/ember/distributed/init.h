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
// - The rank, world size and local rank come from the launcher's environment:
//   OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun), else RANK / WORLD_SIZE / LOCAL_RANK.
//   Without either, the process is a world of one and needs no MPI at all.
// - With more than one process, MPI is initialized (MPI_Init_thread, MPI_THREAD_MULTIPLE
//   preferred, MPI_THREAD_SERIALIZED required) and its view must agree with the environment.
//   MPI is the bootstrap of NCCL too (rank 0 creates the unique id and broadcasts it).
// - When a CUDA device is visible, init() makes device local_rank() % device_count() current
//   and, when this build has NCCL, creates the NCCL group of that device.
// - default_group(Device::cpu()) is the MPI group (or the local group of a world of one);
//   default_group(Device::cuda(i)) is the NCCL group (throws without NCCL or on another device).
//
// Note [distributed failures]: a rank that fails must not leave the others blocked in a
// collective forever.
// - MPI runs with MPI_ERRORS_RETURN and every return code is checked (DistributedError).
// - init() installs a std::terminate handler: an uncaught exception on any rank prints
//   "[distributed] rank R: ..." and calls MPI_Abort, which makes mpirun stop every rank with a
//   non-zero status. abort_on_error(fn) does the same for an exception leaving fn, so a program
//   whose main catches errors (to print them) still brings the job down.
// - A rank that dies (a signal, exit without finalize) is noticed by mpirun, which kills the
//   other ranks: the job ends with a non-zero status (tests/distributed checks it within 60 s).
// - NCCL: Work::wait() polls the stream and ncclCommGetAsyncError; on an asynchronous error or
//   after the group's timeout it aborts the communicator and throws DistributedError.
// - finalize() is for the success path only: MPI_Finalize may wait for the other ranks, so an
//   error path calls abort() instead.
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "ember/distributed/process_group.h"

namespace ember::distributed {

struct InitOptions {
  // Create the NCCL group for the current device when a CUDA device is visible and this
  // build has NCCL (otherwise default_group(Device::cuda()) throws).
  bool nccl = true;
  // Collectives that take longer fail with DistributedError instead of hanging.
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

// The default group for tensors on `device` (see the invariants above).
std::shared_ptr<ProcessGroup> default_group(Device device = Device::cpu());

// What this build has (independent of init()).
bool mpi_available();
bool nccl_available();

// Prints "[distributed] rank R: <reason>; aborting all ranks" to stderr and ends the whole
// job (MPI_Abort when MPI is running, std::_Exit(code) otherwise). Never returns.
[[noreturn]] void abort(const std::string& reason, int code = 1) noexcept;

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
