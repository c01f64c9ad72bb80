// NCCL stub for builds without CUDA or without NCCL: default_group(Device::cuda()) of a world
// of more than one process throws, saying what the build lacks.
#include "../src/backends.h"

namespace ember::distributed::detail {

bool nccl_built() { return false; }
void select_cuda_device(int) {}
CudaDeviceIdentity cuda_device_identity(int) { return {}; }
std::shared_ptr<ProcessGroup> make_nccl_group(int, int, int, const std::function<void(void*, size_t)>&,
                                              std::chrono::milliseconds) {
  throw DistributedError(
      "[distributed] the NCCL process group needs a CUDA build of ember with NCCL (found under the "
      "CUDA toolkit or NCCL_ROOT); this build has none");
}

}  // namespace ember::distributed::detail
