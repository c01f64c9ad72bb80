// MPI stub for builds without MPI (find_package(MPI) failed): a world of one process works
// (init() never calls these), anything that needs MPI throws saying how to get it.
#include "../src/backends.h"

namespace ember::distributed::detail {

namespace {
[[noreturn]] void no_mpi(const char* what) {
  throw DistributedError(str("[distributed] ", what,
                             " needs MPI, which this build of ember does not have (install "
                             "libopenmpi-dev and openmpi-bin, then reconfigure)"));
}
}  // namespace

bool mpi_built() { return false; }
void mpi_init(int&, int&) { no_mpi("a world of more than one process"); }
bool mpi_running() { return false; }
void mpi_finalize() {}
void mpi_abort(int) noexcept {}
void mpi_broadcast_bytes(void*, size_t, int) { no_mpi("broadcasting the NCCL id"); }
std::shared_ptr<ProcessGroup> make_mpi_group(int, int) { no_mpi("the MPI process group"); }

}  // namespace ember::distributed::detail
