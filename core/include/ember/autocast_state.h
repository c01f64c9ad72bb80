// The thread-local autocast state (Note [autocast]): whether autocast is on for each device
// type, the low-precision dtype for each device type, the nesting depth of autocast guards,
// and the weight-cast cache. It lives in core because it is read by the differentiable ops
// (autograd/, through autograd/src/autocast_policy.h) and set by the user-facing guard
// (amp/include/ember/amp/autocast.h); kernels never see it.
//
// Invariants:
// - any_enabled() == (enabled(CPU) || enabled(CUDA)) at all times in a thread: it is the one
//   thread-local bool every differentiable op reads, so autocast costs one load when off.
// - The cache only holds casts of leaf tensors that require grad (parameters), made while
//   autocast was on; an entry is valid only while its source's version equals the version
//   recorded at cast time (an in-place update invalidates it). clear_cache() drops every
//   entry; the guard calls it when the outermost guard exits.
// - Entries hold a handle to the source tensor, so a source address is never reused by
//   another tensor while its entry exists.
#pragma once

#include <cstdint>

#include "ember/device.h"
#include "ember/dtype.h"
#include "ember/macros.h"
#include "ember/tensor.h"

namespace ember::autocast {

namespace detail {
// True when autocast is on for some device type in this thread. constinit so that reading it
// from another translation unit is a plain TLS load (no initialization wrapper call).
EMBER_HOT_TLS extern thread_local constinit bool any_enabled_flag;
}  // namespace detail

// The fast check at the top of every differentiable op.
inline bool any_enabled() { return detail::any_enabled_flag; }

bool is_enabled(DeviceType device_type);
void set_enabled(DeviceType device_type, bool enabled);
// The low-precision dtype for a device type (default: bf16 on CPU, f16 on CUDA, as PyTorch).
DType get_dtype(DeviceType device_type);
// Throws DTypeError unless dtype is f16 or bf16.
void set_dtype(DeviceType device_type, DType dtype);

// Nesting depth of autocast guards in this thread; each returns the new depth.
int increment_nesting();
int decrement_nesting();
int nesting();

// ---- the weight-cast cache ----
struct CacheStats {
  int64_t hits = 0;    // lookups answered from the cache
  int64_t misses = 0;  // lookups that found nothing valid (the caller then casts and inserts)
  int64_t size = 0;    // entries held now
};
// The cached cast of `src` to `dtype`, or an undefined Tensor when there is none valid (none
// made, or `src` was updated in place since). Counts a hit or a miss.
Tensor cache_lookup(const Tensor& src, DType dtype);
// Records `cast` as src's cast to `dtype` at src's current version (replacing an old entry).
void cache_insert(const Tensor& src, DType dtype, const Tensor& cast);
void clear_cache();
CacheStats cache_stats();
void reset_cache_stats();  // zeroes hits and misses (not the entries)

}  // namespace ember::autocast
