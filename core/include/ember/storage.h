// Storage: one allocation on one device, shared by every view of it (PyTorch c10's split of
// storage from views). It also carries the version counter that all views share, so autograd
// can detect that a tensor saved for backward was modified in place through any view.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ember/device.h"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
};

// The allocator for a device: 64-byte aligned host memory for the CPU, the CUDA allocator
// (core/cuda) for a GPU. Throws DeviceError for CUDA in a build or on a machine without it.
Allocator* allocator_for(Device device);
// Returns the large host blocks the CPU allocator keeps for reuse to the system (it keeps up
// to 1 GiB of freed blocks so that a training step does not page-fault on fresh memory).
void release_cached_host_memory();

// The CPU allocator's counters (torch.cuda.memory_stats's two main ones, for host memory):
// bytes of CPU tensor storage (and of the workspaces ops take from the same allocator) live
// now, and the most live at once since the start or the last reset_peak_cpu_memory_stats().
// Counted at request sizes, with or without the block cache; one process-wide pair.
struct CpuMemoryStats {
  int64_t allocated_bytes = 0;
  int64_t peak_allocated_bytes = 0;
};
CpuMemoryStats cpu_memory_stats();
// Sets the peak to what is live now: the peak of a stretch of code (one training step).
void reset_peak_cpu_memory_stats();

namespace detail {
// Blocks for the small fixed-size objects every op creates and destroys (a tensor's impl and
// its storage header, each with its shared_ptr control block). A freed block goes to a free
// list of the freeing thread for its size class (64-byte steps up to 4 KiB; the same lists as
// small CPU tensor data) and the next allocation of that class takes it back, instead of a
// malloc/free pair: glibc's malloc and free were about a quarter of a 1-element op's
// instructions. A thread that is exiting and sanitizer builds (so use-after-free stays
// visible) bypass the lists; sizes above 4 KiB go to operator new/delete.
void* small_object_alloc(size_t nbytes);
void small_object_free(void* p, size_t nbytes) noexcept;

// The std allocator over those blocks: std::allocate_shared<T>(SmallObjectAllocator<T>{}).
template <class T>
struct SmallObjectAllocator {
  using value_type = T;
  SmallObjectAllocator() = default;
  template <class U>
  SmallObjectAllocator(const SmallObjectAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(small_object_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { small_object_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const SmallObjectAllocator<U>&) const noexcept { return true; }
};
static_assert(alignof(std::max_align_t) >= 16, "small-object blocks are 16-byte aligned");
}  // namespace detail

class Storage {
 public:
  // Allocates nbytes on `device`.
  Storage(size_t nbytes, Device device);
  // Wraps memory owned elsewhere; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }

  // Note [released storage]: release_memory() frees the allocation but keeps this Storage
  // (its size, its version counter, every view of it); reading a tensor of it throws until
  // reallocate() gives it fresh memory of the same size (contents undefined). fully_shard's
  // unsharded parameters live in such storage (PyTorch's storage.resize_(0)): between uses
  // their memory is freed while autograd's saved handles stay valid, and the next gather
  // writes into the same tensors. Only storage this class allocated can be released.
  void release_memory();
  void reallocate();
  bool is_released() const { return released_; }

 private:
  bool released_ = false;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  uint32_t version_ = 0;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
};

}  // namespace ember
