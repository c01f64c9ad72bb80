// Versions of the CUDA libraries ember-info reports. Defined in tools/cuda (CUDA builds: the
// libraries ember opens on first use, Note [vendor libraries]) or tools/cuda_stub (CPU-only
// and simulation builds). Each answers "not found (...)" when the library cannot be opened,
// and never throws: asking a library its version needs no GPU.
#pragma once

#include <string>

namespace ember::tools {

std::string cublaslt_version();  // "13.1.0"
std::string cudnn_version();     // "9.19.0 (built with 9.19.0)"
std::string nccl_version();      // "2.28.3"
// "cuBLASLt /path/libcublasLt.so.13; cuDNN not found (libcudnn.so.9); NCCL ..." ("" without CUDA).
std::string cuda_library_locations();

}  // namespace ember::tools
