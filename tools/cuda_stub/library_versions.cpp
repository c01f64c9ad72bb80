// CPU-only build: no CUDA library is linked.
#include "library_versions.h"

namespace ember::tools {

std::string cublas_version() { return "not found (CPU-only build)"; }
std::string cudnn_version() { return "not found (CPU-only build)"; }
std::string nccl_version() { return "not found (CPU-only build)"; }

}  // namespace ember::tools
