// The user-facing view of CUDA device memory: statistics of the caching allocator
// (PyTorch's torch.cuda.memory_* names), empty_cache, a human-readable summary, and
// record_stream. Defined in core/cuda/caching_allocator.cpp (CUDA builds) or
// core/cuda_stub/runtime.cpp (CPU-only builds, where every statistic is zero, the summary
// says there is no CUDA, and nothing throws).
//
// `device = -1` means the thread's current device. In a CUDA build on a machine without a
// device the statistics are zero as well; a device index past the visible ones throws
// DeviceError.
#pragma once

#include <cstdint>
#include <string>

#include "ember/storage.h"

namespace ember {
class Tensor;
}

namespace ember::cuda {

// A snapshot of one device's caching allocator. Byte counts are of rounded block sizes
// (multiples of 512 B) except `requested_bytes`, which sums the sizes callers asked for.
struct MemoryStats {
  int64_t allocated_bytes = 0;       // held by live tensors
  int64_t peak_allocated_bytes = 0;  // since start or reset_peak_memory_stats
  int64_t reserved_bytes = 0;        // obtained from cudaMalloc (allocated + cached)
  int64_t peak_reserved_bytes = 0;
  int64_t requested_bytes = 0;       // allocated_bytes before rounding
  int64_t active_blocks = 0;         // live allocations
  int64_t segments = 0;              // cudaMalloc'ed regions currently held
  int64_t num_allocs = 0;            // allocate() calls served (cumulative)
  int64_t num_frees = 0;
  int64_t num_segment_allocs = 0;    // cudaMalloc calls that succeeded (cumulative)
  int64_t num_segment_frees = 0;     // cudaFree calls
  int64_t num_alloc_retries = 0;     // cudaMalloc failures answered by freeing the cache
  int64_t num_ooms = 0;              // OutOfMemoryError thrown
};

MemoryStats memory_stats(int device = -1);
int64_t memory_allocated(int device = -1);
int64_t max_memory_allocated(int device = -1);
int64_t memory_reserved(int device = -1);
int64_t max_memory_reserved(int device = -1);
// Peaks restart from the current values.
void reset_peak_memory_stats(int device = -1);
// Returns every cached segment that holds no live block to the driver, on every device
// (tensors still alive keep theirs). Waits for the device first. Does nothing while a CUDA
// graph is being captured, and nothing in a CPU-only build.
void empty_cache();
// A compact, human-readable table of the statistics above (torch.cuda.memory_summary).
std::string memory_summary(int device = -1);

// Tells the allocator that `tensor`'s memory is used by work queued on `stream` (a
// cudaStream_t passed as an opaque handle), so that when the tensor is freed its block is
// not reused before that work has finished. Needed whenever a tensor allocated on one
// stream is read or written on another. A tensor whose memory did not come from the caching
// allocator (from_blob-style storage) is ignored. Throws DeviceError for a CPU tensor.
// With a cuda::Stream s (ember/cuda_stream.h): record_stream(t, s.handle()).
void record_stream(const Tensor& tensor, void* stream);

// Page-locked host memory (Tensor::pin_memory) comes from a cache of its own (Note [caching
// host allocator] in ember/caching_host_allocator.h): a pinned block is reused once the
// asynchronous copies that read or wrote it have completed, so a steady DataLoader makes no
// cudaHostAlloc or cudaFreeHost calls after its first batches (PyTorch's
// torch.cuda.host_memory_stats and host_empty_cache).
struct HostMemoryStats {
  int64_t allocated_bytes = 0;  // in live pinned blocks (sizes rounded to powers of two)
  int64_t reserved_bytes = 0;   // obtained from cudaHostAlloc and not given back
  int64_t active_blocks = 0;    // live pinned allocations
  int64_t num_allocs = 0;       // pinned allocations served (cumulative)
  int64_t num_frees = 0;
  int64_t num_host_allocs = 0;  // cudaHostAlloc calls (cumulative)
  int64_t num_host_frees = 0;   // cudaFreeHost calls
};
HostMemoryStats host_memory_stats();
// Gives every cached pinned block that no copy still uses back to the system. Never waits
// for the device; does nothing while a CUDA graph is being captured or without CUDA.
void host_empty_cache();

namespace detail {
// cudaMalloc/cudaFree with no caching at all, for benchmarks and debugging. Throws
// DeviceError without CUDA.
Allocator* uncached_allocator(int device);
}  // namespace detail

}  // namespace ember::cuda
