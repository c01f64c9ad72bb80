// cuBLASLt and cuDNN, opened on first use (Note [vendor libraries] in ember/cuda/vendor_library.h):
// ops/cuda/vendor_libraries.cu defines every function of theirs that ops/cuda calls.
#pragma once

#include "ember/cuda/vendor_library.h"

namespace ember::ops::cuda {
::ember::cuda::VendorLibrary& cublaslt_library();
::ember::cuda::VendorLibrary& cudnn_library();
}  // namespace ember::ops::cuda
