// Note [deferred device checks]: how CUDA kernels report bad values (index out of range, a
// cross-entropy target out of bounds) without the host waiting for them.
//
// A check that needs device values cannot run on the host without a synchronization, and a
// training step must never wait on the host (DESIGN.md section 8). So the kernel checks: a
// thread that meets a bad value skips it (never reads or writes out of bounds) and records it
// in a per-device DeviceFault (device memory: the first fault wins, by atomicCAS), then sets
// that device's flag in page-locked host memory mapped into the device (a plain store). The
// host looks at the flags at the next point where it waits for the device anyway: a copy to
// the host (item(), cpu(), to_vector), cuda::synchronize(), Stream/Event::synchronize(). A set
// flag makes that point copy the record back, clear it and throw IndexError with the message
// the CPU gives for the same input, naming the op. So the error surfaces a little later than
// on the CPU (at the next synchronization, typically the loss's item()), never silently.
//
// cuda::set_sync_checks(true) or EMBER_CUDA_SYNC_CHECKS=1 (the analogue of
// CUDA_LAUNCH_BLOCKING) makes every checked op wait for its kernels and raise at once, for
// debugging. While the stream is being captured into a CUDA graph nothing waits; the kernels
// still record faults on every replay, and the next synchronization after it raises them.
//
// Only code in core/cuda and ops/cuda includes this header.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef EMBER_CUDA_SIM
#include "ember/cuda_sim/simt.h"  // report()'s atomics, on the host
#endif

namespace ember::cuda {

// The two messages a fault can produce (formatted on the host, in core/cuda/device_checks.cpp).
enum class FaultKind : int {
  // "[op] index <value> is out of range for dim <a> of size <b>"
  index_out_of_range = 1,
  // "[op] target <value> at position <a> is out of bounds for <b> classes (expected
  //  0 <= target < <b>, or ignore_index <c>)"
  target_out_of_bounds = 2,
  // "[op] all elements of input should be between 0 and 1 (...)", raised as ValueError
  not_a_probability = 3,
};

// The record in device memory. `claimed` is 0 until a thread wins it.
struct DeviceFault {
  unsigned long long claimed;
  int kind;
  int pad;
  unsigned long long op;  // the op's name: a pointer to a string literal of the host program
  long long value, a, b, c;
};

// What a checking kernel receives by value: where to record, and the message's fixed parts.
struct FaultSite {
  DeviceFault* record = nullptr;    // this device's record
  unsigned int* host_flag = nullptr;  // this device's flag, page-locked and mapped
  int kind = 0;
  unsigned long long op = 0;
  long long a = 0, b = 0, c = 0;

#if defined(__CUDACC__) || defined(EMBER_CUDA_SIM)  // device code: nvcc, or the CUDA simulation
  // Called by a thread that met a bad value; any number of threads may call it.
  __device__ __forceinline__ void report(long long value) const {
    if (atomicCAS(&record->claimed, 0ull, 1ull) == 0ull) {
      record->kind = kind;
      record->op = op;
      record->value = value;
      record->a = a;
      record->b = b;
      record->c = c;
      __threadfence_system();  // the record is complete before the host can see the flag
      *reinterpret_cast<volatile unsigned int*>(host_flag) = 1u;
    }
  }
#endif
};

namespace detail {

// The site for a checking kernel launched on `device` (a string literal for `op`: the name
// is read back long after the launch). The first call on a device allocates its record: do
// not make it inside a stream capture (cuda::Graph's capture_begin prepares the record).
FaultSite fault_site(int device, FaultKind kind, const char* op, long long a = 0, long long b = 0,
                     long long c = 0);
// Allocates `device`'s record now, outside any capture (a no-op when it exists).
void prepare_fault_record(int device);
// Called after the launches of a checked op on `stream`: in synchronous-check mode (and not
// while `stream` is being captured) waits for them and raises their fault; otherwise nothing.
void after_checked_launch(cudaStream_t stream);

}  // namespace detail
}  // namespace ember::cuda
