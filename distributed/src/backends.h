// The seam between the device-agnostic distributed code (src/) and its backends, chosen by
// distributed/CMakeLists.txt without #ifdef: mpi/ or mpi_stub/ (MPI found or not), nccl/ or
// nccl_stub/ (CUDA build with NCCL found or not). The stubs throw DistributedError saying what
// the build lacks; mpi_built()/nccl_built() let callers avoid that.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "ember/distributed/process_group.h"

namespace ember::distributed::detail {

// ---- MPI ----
bool mpi_built();
// MPI_Init_thread (MPI_THREAD_MULTIPLE wanted, MPI_THREAD_SERIALIZED needed) and
// MPI_ERRORS_RETURN on MPI_COMM_WORLD; returns MPI's rank and size.
void mpi_init(int& rank, int& size);
bool mpi_running();  // initialized and not finalized
void mpi_finalize();
// MPI_Abort, only where MPI allows it from any thread: abort() may run on a watchdog thread
// while another thread is inside MPI, which MPI_THREAD_SERIALIZED forbids. Below
// MPI_THREAD_MULTIPLE (or when MPI is not running) it does nothing and the caller ends the
// process with std::_Exit; mpirun then sees a rank exit without MPI_Finalize and ends the
// others.
void mpi_abort(int code) noexcept;
// Blocking MPI_Bcast of raw bytes over MPI_COMM_WORLD (the NCCL unique id).
void mpi_broadcast_bytes(void* data, size_t nbytes, int root);
// A group over a duplicate of MPI_COMM_WORLD, its collectives run by one worker thread.
std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size);

// ---- NCCL (and the CUDA device choice that goes with it) ----
bool nccl_built();
// Makes `device` current for this thread and leaves it so (cudaSetDevice: init()'s deliberate
// switch, see nccl_backend.cpp); a no-op without NCCL.
void select_cuda_device(int device);
// Who CUDA device `device` (an index this process sees) is, for Note [device choice]: its
// UUID ("GPU-...", "" when the driver gives none) and PCI bus id ("0000:3b:00.0"). Creates no
// CUDA context. Without NCCL both are "" (the choice then goes unchecked: such a build has no
// GPU collectives, so ranks sharing a GPU are slow, not wrong).
struct CudaDeviceIdentity {
  std::string uuid, pci_bus_id;
};
CudaDeviceIdentity cuda_device_identity(int device);
// broadcast_id(data, nbytes) copies rank 0's bytes to every rank (MPI, or nothing at size 1).
// Creating the communicator fails with DistributedError after `timeout` (a rank that died or
// never calls this), which is also the group's timeout.
std::shared_ptr<ProcessGroup> make_nccl_group(
    int rank, int size, int device, const std::function<void(void*, size_t)>& broadcast_id,
    std::chrono::milliseconds timeout);

// ---- always available ----
// A world of one process on `device`: collectives are the identity (copies for all_gather and
// reduce_scatter).
std::shared_ptr<ProcessGroup> make_local_group(Device device);

}  // namespace ember::distributed::detail
