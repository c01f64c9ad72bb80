// CUDA build: library versions straight from the libraries (the ones actually loaded, which
// may differ from the headers ember was compiled against). cuDNN and NCCL are optional:
// tools/CMakeLists.txt defines EMBER_INFO_HAS_CUDNN / EMBER_INFO_HAS_NCCL when it found and
// linked them.
#include <cublas_api.h>

#include <string>

#include "library_versions.h"

#if EMBER_INFO_HAS_CUDNN
#include <cudnn.h>
#endif
#if EMBER_INFO_HAS_NCCL
#include <nccl.h>
#endif

namespace ember::tools {

namespace {
// major*10000 + minor*100 + patch (cuDNN >= 9 and NCCL >= 2.9 both encode versions so).
std::string dotted(long v) {
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
         std::to_string(v % 100);
}
}  // namespace

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS)
    return "unknown (cublasGetProperty failed)";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string cudnn_version() {
#if EMBER_INFO_HAS_CUDNN
  const long loaded = long(cudnnGetVersion());
  std::string s = dotted(loaded);
  if (loaded != long(CUDNN_VERSION)) s += " (built with " + dotted(long(CUDNN_VERSION)) + ")";
  return s;
#else
  return "not found (set CUDNN_ROOT and reconfigure)";
#endif
}

std::string nccl_version() {
#if EMBER_INFO_HAS_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown (ncclGetVersion failed)";
  // NCCL before 2.9 encoded major*1000 + minor*100 + patch.
  if (v < 20900) return std::to_string(v / 1000) + "." + std::to_string((v / 100) % 10) + "." +
                        std::to_string(v % 100);
  return dotted(v);
#else
  return "not found (set NCCL_ROOT and reconfigure)";
#endif
}

}  // namespace ember::tools
