// Return-code checks for NCCL. Only distributed/nccl includes this header (it pulls in nccl.h).
// EMBER_NCCL_CHECK turns a failing call into a DistributedError naming the call, the rank, and
// NCCL's description and last error message.
#pragma once

#include <nccl.h>

#include "ember/distributed/process_group.h"

namespace ember::distributed::detail {
[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t code, int rank, const char* file,
                                   int line);
}  // namespace ember::distributed::detail

// `rank` must name the caller's rank (an int in scope at the call site).
#define EMBER_NCCL_CHECK(expr, rank)                                                           \
  do {                                                                                         \
    const ncclResult_t ember_nccl_rc_ = (expr);                                                \
    if (ember_nccl_rc_ != ncclSuccess && ember_nccl_rc_ != ncclInProgress) [[unlikely]]        \
      ::ember::distributed::detail::throw_nccl_error(#expr, ember_nccl_rc_, (rank), __FILE__, __LINE__); \
  } while (0)
