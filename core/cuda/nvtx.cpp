// NVTX ranges for the profiler (ProfilerOptions::emit_nvtx): nvtx3 is header-only and loads
// the tool's injection library at run time, so this costs nothing unless Nsight is attached.
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "ember/profiler.h"

namespace ember::profiler {
bool nvtx_available() { return true; }

namespace detail {
void nvtx_push(std::string_view name) {
  char buf[128];  // names are views (not NUL-terminated): copy, truncating very long ones
  const size_t n = std::min(name.size(), sizeof buf - 1);
  std::memcpy(buf, name.data(), n);
  buf[n] = '\0';
  nvtxRangePushA(buf);
}
void nvtx_pop() { nvtxRangePop(); }
}  // namespace detail
}  // namespace ember::profiler
