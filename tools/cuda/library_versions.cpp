// CUDA build: library versions straight from the libraries ember opens on first use (Note
// [vendor libraries]: the ones a GPU run would load, which may differ from the headers ember
// was compiled against), or why one cannot be opened. Opening them needs no GPU.
#include <cublasLt.h>
#include <cudnn.h>

#include <string>
#include <vector>

#include "ember/error.h"
#include "library_versions.h"
#include "vendor_libraries.h"

// NCCL is optional in a CUDA build: tools/CMakeLists.txt defines EMBER_INFO_HAS_NCCL when
// ember_distributed has its NCCL backend.
#if EMBER_INFO_HAS_NCCL
#include <nccl.h>

#include "nccl_library.h"
#endif

namespace ember::tools {

namespace {
// major*10000 + minor*100 + patch (cuDNN >= 9 and NCCL >= 2.9 both encode versions so).
std::string dotted(long v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
         std::to_string(v % 100);
}

std::string not_found(const cuda::VendorLibrary& library) {
  return "not found (" + library.soname() + ")";
}

// `name` in an opened library, or nullptr where the library lacks it (an older version).
template <class F>
F function(cuda::VendorLibrary& library, const char* name) {
  try {
    return reinterpret_cast<F>(library.symbol(name));
  } catch (const DeviceError&) {
    return nullptr;
  }
}
}  // namespace

std::string cublaslt_version() {
  auto& library = ops::cuda::cublaslt_library();
  if (!library.available()) return not_found(library);
  const auto get = function<decltype(&cublasLtGetProperty)>(library, "cublasLtGetProperty");
  if (!get) return "unknown (no cublasLtGetProperty)";
  int major = 0, minor = 0, patch = 0;
  if (get(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      get(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS || get(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "unknown (cublasLtGetProperty failed)";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cudnn_version() {
  auto& library = ops::cuda::cudnn_library();
  if (!library.available()) return not_found(library);
  const auto get = function<decltype(&cudnnGetVersion)>(library, "cudnnGetVersion");
  if (!get) return "unknown (no cudnnGetVersion)";
  const long loaded = long(get());
  std::string s = dotted(loaded);
  if (loaded != long(CUDNN_VERSION)) s += " (built with " + dotted(long(CUDNN_VERSION)) + ")";
  return s;
}

std::string nccl_version() {
#if EMBER_INFO_HAS_NCCL
  auto& library = distributed::detail::nccl_library();
  if (!library.available()) return not_found(library);
  const auto get = function<decltype(&ncclGetVersion)>(library, "ncclGetVersion");
  if (!get) return "unknown (no ncclGetVersion)";
  int v = 0;
  if (get(&v) != ncclSuccess) return "unknown (ncclGetVersion failed)";
  // NCCL before 2.9 encoded major*1000 + minor*100 + patch.
  if (v < 20900) return std::to_string(v / 1000) + "." + std::to_string((v / 100) % 10) + "." +
                        std::to_string(v % 100);
  return dotted(v);
#else
  return "not found (ember was built without NCCL: set NCCL_ROOT and reconfigure)";
#endif
}

std::string cuda_library_locations() {
  std::vector<cuda::VendorLibrary*> libraries = {&ops::cuda::cublaslt_library(),
                                                 &ops::cuda::cudnn_library()};
#if EMBER_INFO_HAS_NCCL
  libraries.push_back(&distributed::detail::nccl_library());
#endif
  std::string s;
  for (cuda::VendorLibrary* library : libraries) {
    if (!s.empty()) s += "; ";
    s += library->display_name() + " " + (library->available() ? library->location() : not_found(*library));
  }
  return s;
}

}  // namespace ember::tools
