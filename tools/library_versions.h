// Versions of the CUDA libraries ember-info reports. Defined in tools/cuda (CUDA builds; it
// links cuBLAS, and cuDNN/NCCL when CMake found them) or tools/cuda_stub (CPU-only builds).
// Each answers "not found" when the library is not linked, and never throws: asking a
// library its version needs no GPU.
#pragma once

#include <string>

namespace ember::tools {

std::string cublas_version();  // "13.1.0"
std::string cudnn_version();   // "9.19.0 (built with 9.19.0)"
std::string nccl_version();    // "2.28.3"

}  // namespace ember::tools
