#include "ember/storage.h"

#include <cstdlib>
#include <new>

#include "ember/cuda.h"
#include "ember/error.h"

namespace ember {

namespace {
// 64-byte aligned host memory: a cache line, and enough for any SIMD load Eigen issues.
class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) & ~size_t(63);
    void* p = std::aligned_alloc(64, rounded);
    EMBER_CHECK(p != nullptr, OutOfMemoryError, "[allocate] cannot allocate ", uint64_t(nbytes),
                " bytes of host memory");
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }
};
}  // namespace

Allocator* allocator_for(Device device) {
  static CpuAllocator cpu;
  if (device.is_cpu()) return &cpu;
  return cuda::detail::allocator(device.index);
}

Storage::Storage(size_t nbytes, Device device)
    : nbytes_(nbytes), device_(device), allocator_(allocator_for(device)) {
  data_ = allocator_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_) allocator_->deallocate(data_, nbytes_);
  else if (deleter_) deleter_(data_);
}

}  // namespace ember
