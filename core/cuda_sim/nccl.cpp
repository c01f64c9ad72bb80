// NCCL in the CUDA simulation (issue 39): a world of one, so ember's NCCL backend
// (distributed/nccl) runs its real code path in CI: communicator set-up with a config, the
// non-blocking polling, the collectives on the group's stream (through detail::submit, so a
// collective inside a graph capture is recorded and replayed like a kernel), finalize and
// destroy. It checks ember's use of NCCL (arguments, dtypes, counts, stream order), not NCCL.
//
// Invariants:
// - A communicator has exactly one rank: nranks != 1 is refused (ncclInvalidUsage, with the
//   reason in ncclGetLastError), so a multi-rank test over NCCL skips or fails in simulation
//   instead of passing on a pretend peer.
// - Every collective of one rank is a copy (sum, prod, min, max and avg of one value are that
//   value); when the buffers are the same (in place) nothing moves.
// - Arguments are checked as NCCL checks them: a null or destroyed communicator, a bad dtype or
//   reduction, a null buffer with a nonzero count, a broadcast root other than 0.
// - ncclCommSplit of a non-blocking communicator behaves as NCCL's (2.18 on; the first GPU run
//   of the split found ember relying on more): it answers ncclSuccess with *newcomm null, the
//   parent's async state stays ncclInProgress for one more poll, any other call on the parent
//   meanwhile is refused (ncclInvalidUsage), and the poll of the parent that finds the split
//   done stores the child's handle in *newcomm. A blocking parent splits at once.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "ember/cuda_sim/simt.h"

struct ncclComm {
  int device = 0;
  bool blocking = true;  // ncclConfig_t::blocking (1 without a config)
  bool finalized = false;
  // A split in flight (non-blocking parent): delivered into *split_slot by the second poll.
  bool split_pending = false;
  int split_polls_left = 0;
  ncclComm* split_child = nullptr;  // null for NCCL_SPLIT_NOCOLOR
  ncclComm_t* split_slot = nullptr;
};

namespace {

std::mutex g_mu;
std::set<const ncclComm*> g_live;  // communicators created and not yet destroyed
thread_local std::string t_last_error;

ncclResult_t fail(ncclResult_t code, std::string why) {
  t_last_error = "NCCL simulation: " + std::move(why);
  return code;
}

bool live(const ncclComm* comm) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_live.count(comm) != 0;
}

// What NCCL checks before any call on a communicator.
ncclResult_t usable(const std::string& name, const ncclComm* comm) {
  if (comm == nullptr || !live(comm)) return fail(ncclInvalidArgument, name + ": invalid communicator");
  if (comm->finalized) return fail(ncclInvalidUsage, name + ": communicator already finalized");
  if (comm->split_pending)
    return fail(ncclInvalidUsage, name + ": Attempt to use communicator before the previous operation returned ncclSuccess");
  return ncclSuccess;
}

bool blocking(const ncclConfig_t* config) { return config == nullptr || config->blocking != 0; }

ncclComm* make_comm(int device, const ncclConfig_t* config) {
  auto* c = new ncclComm{};
  c->device = device;
  c->blocking = blocking(config);
  std::lock_guard<std::mutex> lock(g_mu);
  g_live.insert(c);
  return c;
}

size_t element_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// The checks every collective makes, then the one-rank result: `bytes` copied from send to
// recv in stream order.
ncclResult_t collective(const char* name, const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclComm_t comm, cudaStream_t stream) {
  if (const ncclResult_t rc = usable(name, comm); rc != ncclSuccess) return rc;
  const size_t size = element_size(type);
  if (size == 0) return fail(ncclInvalidArgument, std::string(name) + ": invalid data type " + std::to_string(int(type)));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return fail(ncclInvalidArgument, std::string(name) + ": null buffer with count " + std::to_string(count));
  if (count == 0 || send == recv) return ncclSuccess;
  const size_t bytes = count * size;
  ember::cuda::sim::detail::submit(stream, [send, recv, bytes] { std::memmove(recv, send, bytes); });
  return ncclSuccess;
}

bool valid_op(ncclRedOp_t op) { return op == ncclSum || op == ncclProd || op == ncclMin || op == ncclMax || op == ncclAvg; }

}  // namespace

extern "C" {

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: null id");
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, "ember-sim", 9);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "ncclCommInitRankConfig: null comm");
  *comm = nullptr;
  if (nranks != 1)
    return fail(ncclInvalidUsage, "the simulation is a world of one rank, asked for " + std::to_string(nranks));
  if (rank != 0) return fail(ncclInvalidArgument, "rank " + std::to_string(rank) + " in a world of 1");
  const ncclConfig_t initialized = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr && config->magic != initialized.magic)
    return fail(ncclInvalidArgument, "config not initialized with NCCL_CONFIG_INITIALIZER");
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return fail(ncclUnhandledCudaError, "cudaGetDevice failed");
  *comm = make_comm(device, config);
  return ncclSuccess;
}

// A world of one splits into itself (any color) or nothing (NCCL_SPLIT_NOCOLOR).
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  (void)key;
  if (const ncclResult_t rc = usable("ncclCommSplit", comm); rc != ncclSuccess) return rc;
  if (newcomm == nullptr) return fail(ncclInvalidArgument, "ncclCommSplit: null newcomm");
  *newcomm = nullptr;
  const ncclConfig_t initialized = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr && config->magic != initialized.magic)
    return fail(ncclInvalidArgument, "ncclCommSplit: config not initialized with NCCL_CONFIG_INITIALIZER");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: negative color " + std::to_string(color));
  ncclComm* child = color == NCCL_SPLIT_NOCOLOR ? nullptr : make_comm(comm->device, config);
  if (comm->blocking) {
    *newcomm = child;
    return ncclSuccess;
  }
  comm->split_pending = true;
  comm->split_polls_left = 1;
  comm->split_child = child;
  comm->split_slot = newcomm;
  return ncclSuccess;  // as NCCL: the split runs on, the parent's async state says when it is done
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr || !live(comm) || state == nullptr)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: invalid communicator");
  *state = ncclSuccess;  // every other call completed before it returned
  if (comm->split_pending) {
    if (comm->split_polls_left-- > 0) {
      *state = ncclInProgress;
    } else {
      *comm->split_slot = comm->split_child;
      comm->split_pending = false;
      comm->split_child = nullptr;
      comm->split_slot = nullptr;
    }
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (const ncclResult_t rc = usable("ncclCommFinalize", comm); rc != ncclSuccess) return rc;
  comm->finalized = true;
  return ncclSuccess;
}

static ncclResult_t release(const char* name, ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying a null communicator is a no-op
  ncclComm* undelivered = nullptr;  // a split in flight dies with its parent
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_live.erase(comm) == 0) return fail(ncclInvalidArgument, std::string(name) + ": invalid communicator");
    undelivered = comm->split_child;
    if (undelivered != nullptr) g_live.erase(undelivered);
  }
  delete undelivered;
  delete comm;
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) { return release("ncclCommDestroy", comm); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return release("ncclCommAbort", comm); }

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!valid_op(op)) return fail(ncclInvalidArgument, "ncclAllReduce: invalid reduction " + std::to_string(int(op)));
  return collective("ncclAllReduce", send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  if (root != 0) return fail(ncclInvalidArgument, "ncclBroadcast: root " + std::to_string(root) + " in a world of 1");
  return collective("ncclBroadcast", send, recv, count, type, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
  return collective("ncclAllGather", send, recv, send_count, type, comm, stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  if (!valid_op(op)) return fail(ncclInvalidArgument, "ncclReduceScatter: invalid reduction " + std::to_string(int(op)));
  return collective("ncclReduceScatter", send, recv, recv_count, type, comm, stream);
}

}  // extern "C"
