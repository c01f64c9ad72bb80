// The thread-local autocast state (see core/include/ember/autocast_state.h for invariants).
#include "ember/autocast_state.h"

#include <vector>

#include "ember/error.h"

namespace ember::autocast {

namespace detail {
EMBER_HOT_TLS thread_local constinit bool any_enabled_flag = false;
}  // namespace detail

namespace {

constexpr int kDeviceTypes = 2;  // CPU, CUDA

struct CacheEntry {
  Tensor src;  // keeps the source alive, so its impl address is not reused while cached
  DType dtype;
  uint32_t version;
  Tensor cast;
};

struct State {
  bool enabled[kDeviceTypes] = {false, false};
  DType dtype[kDeviceTypes] = {DType::bf16, DType::f16};
  int depth = 0;
  // A parameter count per step is small (tens to hundreds), so a linear scan beats hashing.
  std::vector<CacheEntry> cache;
  int64_t hits = 0, misses = 0;
};

State& state() {
  thread_local State s;
  return s;
}

int index_of(DeviceType t) { return t == DeviceType::CUDA ? 1 : 0; }

}  // namespace

bool is_enabled(DeviceType device_type) { return state().enabled[index_of(device_type)]; }

void set_enabled(DeviceType device_type, bool enabled) {
  State& s = state();
  s.enabled[index_of(device_type)] = enabled;
  detail::any_enabled_flag = s.enabled[0] || s.enabled[1];
}

DType get_dtype(DeviceType device_type) { return state().dtype[index_of(device_type)]; }

void set_dtype(DeviceType device_type, DType dtype) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16, DTypeError,
              "[autocast] the low-precision dtype must be bf16 or f16, got ", dtype);
  state().dtype[index_of(device_type)] = dtype;
}

int increment_nesting() { return ++state().depth; }
int decrement_nesting() { return --state().depth; }
int nesting() { return state().depth; }

Tensor cache_lookup(const Tensor& src, DType dtype) {
  State& s = state();
  for (const CacheEntry& e : s.cache) {
    if (e.src.is_same(src) && e.dtype == dtype && e.version == src.version()) {
      ++s.hits;
      return e.cast;
    }
  }
  ++s.misses;
  return Tensor();
}

void cache_insert(const Tensor& src, DType dtype, const Tensor& cast) {
  State& s = state();
  for (CacheEntry& e : s.cache) {
    if (e.src.is_same(src) && e.dtype == dtype) {  // a stale entry (older version)
      e.version = src.version();
      e.cast = cast;
      return;
    }
  }
  s.cache.push_back({src, dtype, src.version(), cast});
}

void clear_cache() { state().cache.clear(); }

CacheStats cache_stats() {
  const State& s = state();
  return {s.hits, s.misses, int64_t(s.cache.size())};
}

void reset_cache_stats() {
  State& s = state();
  s.hits = s.misses = 0;
}

}  // namespace ember::autocast
