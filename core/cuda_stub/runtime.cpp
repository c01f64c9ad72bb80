// CPU-only build: CUDA is a known device type with no implementation behind it.
#include <cstring>

#include "ember/cuda.h"
#include "ember/error.h"

namespace ember::cuda {

bool is_available() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return "none"; }
void synchronize(int) {}
std::string runtime_version() { return "none"; }

namespace detail {
void check_device(const char* op, Device device) {
  EMBER_CHECK(device.is_cpu(), DeviceError, "[", op, "] ", device,
              " requested but this build of ember has no CUDA support");
}
Allocator* allocator(int index) {
  check_device("allocate", Device::cuda(index));
  return nullptr;
}
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                bool) {
  check_device("copy", dst_device);
  check_device("copy", src_device);
  if (nbytes) std::memcpy(dst, src, nbytes);
}
void* host_alloc(size_t) {
  check_device("pin_memory", Device::cuda(0));
  return nullptr;
}
void host_free(void*) {}
bool is_pinned(const void*) { return false; }
}  // namespace detail
}  // namespace ember::cuda
