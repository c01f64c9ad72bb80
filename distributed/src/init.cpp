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
#include <vector>

#include <unistd.h>  // gethostname

#include "backends.h"
#include "ember/cuda.h"
#include "ember/factory.h"

namespace ember::distributed {

namespace {

struct Environment {
  bool initialized = false;
  int rank = 0, size = 1, local_rank = 0;
  int cuda_device = -1;       // Note [device choice]; -1 with the reason in cuda_error
  std::string cuda_error;     // why this rank has no CUDA device
  std::string no_nccl_group;  // why there is no NCCL group (when cuda_group is null)
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

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

// Note [device choice]: every rank's RankGpu, gathered over the CPU group (a collective: every
// rank calls it once, in init()). Each rank's record is a fixed-size block of bytes:
// "host\ndevice\nuuid\npci_bus_id", zero-padded.
std::vector<detail::RankGpu> gather_gpus(ProcessGroup& group, const detail::RankGpu& mine) {
  constexpr int64_t kRecord = 512;
  std::string record = str(mine.host.substr(0, 255), "\n", mine.device, "\n", mine.uuid.substr(0, 100), "\n",
                           mine.pci_bus_id.substr(0, 100));
  Tensor in = zeros({kRecord}, DType::u8), out = zeros({kRecord * group.size()}, DType::u8);
  std::memcpy(in.data_ptr(), record.data(), record.size());
  group.all_gather(out, in);
  std::vector<detail::RankGpu> all(size_t(group.size()));
  const char* bytes = static_cast<const char*>(out.data_ptr());
  for (int r = 0; r < group.size(); ++r) {
    const char* b = bytes + r * kRecord;
    const std::string text(b, strnlen(b, size_t(kRecord)));
    std::vector<std::string> fields;
    size_t from = 0;
    for (size_t nl; (nl = text.find('\n', from)) != std::string::npos; from = nl + 1) fields.push_back(text.substr(from, nl - from));
    fields.push_back(text.substr(from));
    EMBER_CHECK(fields.size() == 4, distributed::DistributedError, "[distributed.init] rank ", r,
                " sent a malformed device record (is every rank running the same program?)");
    all[size_t(r)] = {fields[0], std::atoi(fields[1].c_str()), fields[2], fields[3]};
  }
  return all;
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

  // Note [device choice]. A rank without a device of its own is not an error yet: the job may
  // train on the CPU. It becomes one where a CUDA device is asked for.
  detail::RankGpu mine;
  mine.host = host_name();
  try {
    mine.device = detail::cuda_device_for_rank(rank, local_rank, cuda::is_available() ? cuda::device_count() : 0).index;
  } catch (const DistributedError& err) {
    e.cuda_error = str(err.what(), cuda::runtime_version_number() == 0 ? " (this build of ember has no CUDA)" : "");
  }
  if (mine.device >= 0) {
    try {
      const detail::CudaDeviceIdentity id = detail::cuda_device_identity(mine.device);
      mine.uuid = id.uuid;
      mine.pci_bus_id = id.pci_bus_id;
    } catch (const Error& err) {
      e.cuda_error = str("[distributed.local_device] rank ", rank, " cannot identify its GPU cuda:", mine.device, ": ",
                         err.what());
      mine.device = -1;
    }
  }
  // Collective: every rank gathers, with or without a device.
  const std::vector<detail::RankGpu> gpus = size > 1 ? gather_gpus(*e.cpu_group, mine) : std::vector{mine};
  if (mine.device >= 0) {
    try {
      detail::check_own_gpu(rank, gpus);
      e.cuda_device = mine.device;
    } catch (const DistributedError& err) {
      e.cuda_error = err.what();
    }
  }
  const bool want_nccl = options.nccl && detail::nccl_built();
  bool nccl_here = want_nccl && e.cuda_device >= 0;
  e.no_nccl_group = !want_nccl ? (detail::nccl_built() ? std::string("InitOptions::nccl was false")
                                                       : std::string("this build of ember has no NCCL (a CUDA "
                                                                     "build finds it under the CUDA toolkit or NCCL_ROOT)"))
                    : !nccl_here ? e.cuda_error
                                 : std::string();
  if (want_nccl && size > 1) {
    // Creating the communicator is collective: every rank must agree to, or none may.
    Tensor ok = full({1}, nccl_here ? 1 : 0, DType::i32);
    e.cpu_group->all_reduce(ok, ReduceOp::min);
    if (nccl_here && ok.item<int32_t>() == 0) {
      nccl_here = false;
      e.no_nccl_group = "another rank has no CUDA device of its own (none visible, or one it would share "
                        "with another rank: see that rank's error), so no rank has an NCCL group";
    }
  }
  if (nccl_here) {
    // Only now, and only here, a context on the rank's GPU (Note [device choice]).
    detail::select_cuda_device(e.cuda_device);
    e.cuda_group = detail::make_nccl_group(
        rank, size, e.cuda_device,
        [&](void* data, size_t n) {
          if (size > 1) detail::mpi_broadcast_bytes(data, n, 0);
        },
        options.timeout);
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

Device local_device(DeviceType type) {
  const Environment& e = checked_env("local_device");
  if (type == DeviceType::CPU) return Device::cpu();
  if (e.cuda_device < 0) throw DistributedError(e.cuda_error);
  return Device::cuda(e.cuda_device);
}

namespace detail {
Device cuda_device_for_rank(int rank, int local_rank, int device_count) {
  EMBER_CHECK(device_count > 0, distributed::DistributedError, "[distributed.local_device] rank ", rank, " sees no CUDA device");
  return Device::cuda(local_rank % device_count);
}

void check_own_gpu(int rank, const std::vector<RankGpu>& ranks) {
  const RankGpu& me = ranks.at(size_t(rank));
  if (me.device < 0) return;
  auto same_gpu = [&](const RankGpu& other) {
    if (other.device < 0) return false;
    // A UUID names one physical GPU everywhere; a PCI bus id only within one host.
    if (!me.uuid.empty() && !other.uuid.empty()) return me.uuid == other.uuid;
    return !me.pci_bus_id.empty() && me.host == other.host && me.pci_bus_id == other.pci_bus_id;
  };
  std::vector<int> sharing;
  for (size_t r = 0; r < ranks.size(); ++r)
    if (int(r) != rank && same_gpu(ranks[r])) sharing.push_back(int(r));
  if (sharing.empty()) return;
  std::string others = sharing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < sharing.size(); ++i)
    others += str(i == 0 ? "" : i + 1 == sharing.size() ? " and " : ", ", sharing[i]);
  std::string which = str("cuda:", me.device, " as it sees them");
  if (!me.uuid.empty()) which += ", " + me.uuid;
  if (!me.pci_bus_id.empty()) which += ", PCI " + me.pci_bus_id;
  throw DistributedError(str(
      "[distributed.local_device] rank ", rank, " (host ", me.host, ") would share its GPU (", which, ") with ",
      others, ": each rank needs a GPU of its own (ranks on one GPU split its memory, and NCCL refuses "
      "them). Start at most as many ranks per node as it has GPUs (mpirun --map-by ppr:<GPUs per node>:node), "
      "give each rank its own GPU (CUDA_VISIBLE_DEVICES), or keep the tensors on the CPU"));
}
}  // namespace detail

std::shared_ptr<ProcessGroup> default_group(Device device) {
  const Environment& e = checked_env("default_group");
  if (device.is_cpu()) return e.cpu_group;
  if (e.cuda_group && e.cuda_group->device() == device) return e.cuda_group;
  // One process needs no communication: the local group serves any device.
  if (e.size == 1) return detail::make_local_group(device);
  throw DistributedError(str(
      "[distributed.default_group] rank ", e.rank, " has no process group for ", device,
      e.cuda_group ? str(": its NCCL group is on ", e.cuda_group->device(),
                         ", this rank's device (distributed::local_device(DeviceType::CUDA))")
                   : str(": ", e.no_nccl_group)));
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
