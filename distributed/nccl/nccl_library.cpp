// NCCL, opened on first use (Note [vendor libraries] in ember/cuda/vendor_library.h): each
// function distributed/nccl calls, with nccl.h's signature, forwarded to the library. A call
// added without a line here fails to link (ember_distributed does not link NCCL).
#include <nccl.h>

#include <string>

#include "nccl_library.h"

namespace ember::distributed::detail {

::ember::cuda::VendorLibrary& nccl_library() {
  using ::ember::cuda::VendorLibrary;
  static VendorLibrary library(VendorLibrary::EmbersOwn{}, "NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR),
                               EMBER_NCCL_DIR);
  return library;
}

}  // namespace ember::distributed::detail

#define EMBER_NCCL(name, params, args) \
  EMBER_VENDOR_FORWARD(::ember::distributed::detail::nccl_library, name, params, args)

// clang-format off
EMBER_NCCL(ncclAllGather, (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream), (sendbuff, recvbuff, sendcount, datatype, comm, stream))
EMBER_NCCL(ncclAllReduce, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), (sendbuff, recvbuff, count, datatype, op, comm, stream))
EMBER_NCCL(ncclBroadcast, (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream), (sendbuff, recvbuff, count, datatype, root, comm, stream))
EMBER_NCCL(ncclCommAbort, (ncclComm_t comm), (comm))
EMBER_NCCL(ncclCommDestroy, (ncclComm_t comm), (comm))
EMBER_NCCL(ncclCommFinalize, (ncclComm_t comm), (comm))
EMBER_NCCL(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError), (comm, asyncError))
EMBER_NCCL(ncclCommInitRankConfig, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config), (comm, nranks, commId, rank, config))
EMBER_NCCL(ncclCommSplit, (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config), (comm, color, key, newcomm, config))
EMBER_NCCL(ncclGetErrorString, (ncclResult_t result), (result))
EMBER_NCCL(ncclGetLastError, (ncclComm_t comm), (comm))
EMBER_NCCL(ncclGetUniqueId, (ncclUniqueId* uniqueId), (uniqueId))
EMBER_NCCL(ncclReduceScatter, (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream), (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))
// clang-format on
