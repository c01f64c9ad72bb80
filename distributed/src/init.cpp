// The distributed environment (ember/distributed/init.h): the launcher's environment, MPI's
// lifetime, the default groups and Note [distributed failures]'s abort path.
//
// Invariant: the environment is one heap object that is never destroyed except by finalize():
// a group's destructor joins its worker thread, which a failed job (a rank blocked in MPI)
// must never do at static destruction.
#include "ember/distributed/init.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "backends.h"
#include "ember/cuda.h"

namespace ember::distributed {

namespace {

struct Environment {
  bool initialized = false;
  int rank = 0, size = 1, local_rank = 0;
  int cuda_device = -1;
  bool mpi = false;
  std::shared_ptr<ProcessGroup> cpu_group, cuda_group;
};

Environment& env() {
  static Environment* e = new Environment();  // never destroyed (see the invariant above)
  return *e;
}
std::mutex& env_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}

// The integer value of environment variable `name`, or `fallback` when it is unset.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  int out = 0;
  const char* end = v + std::strlen(v);
  auto [p, ec] = std::from_chars(v, end, out);
  EMBER_CHECK(ec == std::errc() && p == end && out >= 0, ValueError, "[distributed.init] ",
              name, "='", v, "' is not a non-negative integer");
  return out;
}

void on_terminate() {
  std::string why = "std::terminate called";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      why = std::string("uncaught exception: ") + x.what();
    } catch (...) {
      why = "uncaught exception of unknown type";
    }
  }
  abort(why, 1);
}

const Environment& checked_env(const char* what) {
  const Environment& e = env();
  EMBER_CHECK(e.initialized, distributed::DistributedError, "[distributed.", what,
              "] distributed::init() has not been called");
  return e;
}

}  // namespace

void init(const InitOptions& options) {
  std::lock_guard lock(env_mutex());
  Environment& e = env();
  if (e.initialized) return;
  // mpirun's variables first, then the torchrun-style ones.
  const bool mpirun = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  const int size = mpirun ? env_int("OMPI_COMM_WORLD_SIZE", 1) : env_int("WORLD_SIZE", 1);
  const int rank = mpirun ? env_int("OMPI_COMM_WORLD_RANK", 0) : env_int("RANK", 0);
  const int local_rank = mpirun ? env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0) : env_int("LOCAL_RANK", 0);
  EMBER_CHECK(size >= 1 && rank < size, ValueError, "[distributed.init] rank ", rank,
              " is not below the world size ", size);
  const bool use_mpi = size > 1 || (mpirun && detail::mpi_built());
  if (use_mpi) {
    EMBER_CHECK(detail::mpi_built(), distributed::DistributedError, "[distributed.init] a world of ", size,
                " processes needs MPI, which this build of ember does not have (install "
                "libopenmpi-dev and openmpi-bin, then reconfigure)");
    int mpi_rank = 0, mpi_size = 1;
    detail::mpi_init(mpi_rank, mpi_size);
    EMBER_CHECK(mpi_rank == rank && mpi_size == size, distributed::DistributedError,
                "[distributed.init] the environment says rank ", rank, " of ", size,
                " but MPI says rank ", mpi_rank, " of ", mpi_size,
                "; launch the processes with mpirun (e.g. mpirun -np ", size, " ...)");
    if (options.abort_on_uncaught_exception) std::set_terminate(on_terminate);
  }
  e.rank = rank;
  e.size = size;
  e.local_rank = local_rank;
  e.mpi = use_mpi;
  e.cpu_group = use_mpi ? detail::make_mpi_group(rank, size) : detail::make_local_group(Device::cpu());
  e.cpu_group->set_timeout(options.timeout);
  if (cuda::is_available()) {
    e.cuda_device = local_rank % cuda::device_count();
    detail::select_cuda_device(e.cuda_device);
    if (options.nccl && detail::nccl_built()) {
      e.cuda_group = detail::make_nccl_group(rank, size, e.cuda_device, [&](void* data, size_t n) {
        if (size > 1) detail::mpi_broadcast_bytes(data, n, 0);
      });
      e.cuda_group->set_timeout(options.timeout);
    }
  }
  e.initialized = true;
}

void finalize() {
  std::lock_guard lock(env_mutex());
  Environment& e = env();
  if (!e.initialized) return;
  e.cuda_group.reset();
  e.cpu_group.reset();
  if (e.mpi) detail::mpi_finalize();
  e = Environment();
}

bool is_initialized() { return env().initialized; }
int rank() { return checked_env("rank").rank; }
int world_size() { return checked_env("world_size").size; }
int local_rank() { return checked_env("local_rank").local_rank; }
bool is_main_process() { return rank() == 0; }

std::shared_ptr<ProcessGroup> default_group(Device device) {
  const Environment& e = checked_env("default_group");
  if (device.is_cpu()) return e.cpu_group;
  if (e.cuda_group && e.cuda_group->device() == device) return e.cuda_group;
  // One process needs no communication: the local group serves any device.
  if (e.size == 1) return detail::make_local_group(device);
  throw DistributedError(str(
      "[distributed.default_group] rank ", e.rank, " has no process group for ", device,
      !detail::nccl_built() ? ": this build of ember has no NCCL (a CUDA build finds it under the "
                              "CUDA toolkit or NCCL_ROOT)"
      : e.cuda_group ? str(": its NCCL group is on ", e.cuda_group->device(),
                           " (device local_rank % device_count)")
                     : std::string(": no CUDA device was visible at init()")));
}

bool mpi_available() { return detail::mpi_built(); }
bool nccl_available() { return detail::nccl_built(); }

void abort(const std::string& reason, int code) noexcept {
  const Environment& e = env();
  std::fprintf(stderr, "[distributed] rank %d of %d: %s; aborting all ranks\n", e.rank, e.size,
               reason.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  detail::mpi_abort(code);
  std::_Exit(code);
}

}  // namespace ember::distributed
