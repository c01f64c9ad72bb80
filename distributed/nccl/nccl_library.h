// NCCL, opened on first use (Note [vendor libraries] in ember/cuda/vendor_library.h).
#pragma once

#include "ember/cuda/vendor_library.h"

namespace ember::distributed::detail {
::ember::cuda::VendorLibrary& nccl_library();
}  // namespace ember::distributed::detail
