// CPU-only build: no NVTX (ProfilerOptions::emit_nvtx is ignored).
#include <string_view>

#include "ember/profiler.h"

namespace ember::profiler {
bool nvtx_available() { return false; }

namespace detail {
void nvtx_push(std::string_view) {}
void nvtx_pop() {}
}  // namespace detail
}  // namespace ember::profiler
