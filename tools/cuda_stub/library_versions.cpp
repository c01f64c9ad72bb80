// CPU-only build: no CUDA library is opened.
#include "library_versions.h"

namespace ember::tools {

std::string cublaslt_version() { return "not found (CPU-only build)"; }
std::string cudnn_version() { return "not found (CPU-only build)"; }
std::string nccl_version() { return "not found (CPU-only build)"; }
std::string cuda_library_locations() { return ""; }

}  // namespace ember::tools
