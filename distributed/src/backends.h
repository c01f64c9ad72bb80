// The seam between the device-agnostic distributed code (src/) and its backends, chosen by
// distributed/CMakeLists.txt without #ifdef: mpi/ or mpi_stub/ (MPI found or not), nccl/ or
// nccl_stub/ (CUDA build with NCCL found or not). The stubs throw DistributedError saying what
// the build lacks; mpi_built()/nccl_built() let callers avoid that.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "ember/distributed/process_group.h"

namespace ember::distributed::detail {

// ---- MPI ----
bool mpi_built();
// MPI_Init_thread (MPI_THREAD_MULTIPLE wanted, MPI_THREAD_SERIALIZED needed) and
// MPI_ERRORS_RETURN on MPI_COMM_WORLD; returns MPI's rank and size.
void mpi_init(int& rank, int& size);
bool mpi_running();  // initialized and not finalized
void mpi_finalize();
void mpi_abort(int code) noexcept;
// Blocking MPI_Bcast of raw bytes over MPI_COMM_WORLD (the NCCL unique id).
void mpi_broadcast_bytes(void* data, size_t nbytes, int root);
// A group over a duplicate of MPI_COMM_WORLD, its collectives run by one worker thread.
std::shared_ptr<ProcessGroup> make_mpi_group(int rank, int size);

// ---- NCCL (and the CUDA device choice that goes with it) ----
bool nccl_built();
// Makes `device` current for this thread (cudaSetDevice); a no-op without NCCL.
void select_cuda_device(int device);
// broadcast_id(data, nbytes) copies rank 0's bytes to every rank (MPI, or nothing at size 1).
std::shared_ptr<ProcessGroup> make_nccl_group(
    int rank, int size, int device, const std::function<void(void*, size_t)>& broadcast_id);

// ---- always available ----
// A world of one process on `device`: collectives are the identity (copies for all_gather and
// reduce_scatter).
std::shared_ptr<ProcessGroup> make_local_group(Device device);

}  // namespace ember::distributed::detail
