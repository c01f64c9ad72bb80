// Return-code checks for MPI. Only distributed/mpi includes this header (it pulls in mpi.h).
// MPI runs with MPI_ERRORS_RETURN (Note [distributed failures] in ember/distributed/init.h), so
// every call returns its error, and EMBER_MPI_CHECK turns it into a DistributedError naming the
// call, the rank and MPI's own description.
#pragma once

#include <mpi.h>

#include "ember/distributed/process_group.h"

namespace ember::distributed::detail {
[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line);
}  // namespace ember::distributed::detail

#define EMBER_MPI_CHECK(expr)                                                          \
  do {                                                                                 \
    const int ember_mpi_rc_ = (expr);                                                  \
    if (ember_mpi_rc_ != MPI_SUCCESS) [[unlikely]]                                     \
      ::ember::distributed::detail::throw_mpi_error(#expr, ember_mpi_rc_, __FILE__, __LINE__); \
  } while (0)
