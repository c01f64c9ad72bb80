// cuda::detail::DeviceGuard: the one way CUDA code makes a device current (DESIGN.md section 8:
// "the thread's current device is restored by a guard after every switch").
//
// Why a guard and never a bare cudaSetDevice: the current device is per-thread state the user
// owns. A launcher that switches for an op on cuda:1 and leaves it switched changes where the
// user's next allocation, stream or graph capture goes (a capture begun on the wrong device
// records nothing of the work that follows, and replays an empty graph).
//
// Only code in core/cuda, ops/cuda and distributed/nccl includes this header.
#pragma once

#include <cuda_runtime.h>

#include "ember/cuda.h"
#include "ember/cuda/check.h"
#include "ember/cuda/stream_handle.h"

namespace ember::cuda::detail {

class DeviceGuard {
 public:
  // Makes `device` current (a no-op when it already is: cudaGetDevice is a thread-local read).
  explicit DeviceGuard(int device) {
    EMBER_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      EMBER_CUDA_CHECK(cudaSetDevice(device));
      switched_ = true;
    }
  }
  // Puts the caller's device back. A destructor cannot throw, and switching to a device that
  // was current a moment ago cannot fail short of a dying runtime, which is not ours to report.
  // Except when the caller's device has no context yet (a thread that never chose a device
  // reads 0 from cudaGetDevice): switching back would create one there (hundreds of MB, and an
  // error on an exclusive-process GPU) for a device nothing ran on. PyTorch's guard does the
  // same (MaybeSetDevice).
  ~DeviceGuard() {
    if (switched_ && primary_context_active(previous_)) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  int previous() const { return previous_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
};

// What a kernel launcher needs: `device` current until the end of the caller's scope, and this
// thread's current stream on it.
//   const auto on = ember::cuda::detail::on_device(x.device().index);
//   ember::cuda::launch_kernel(kernel, grid, block, 0, on.stream, ...);
struct DeviceStream {
  DeviceGuard guard;
  cudaStream_t stream;
};
inline DeviceStream on_device(int device) {
  return {DeviceGuard(device), current_stream_handle(device)};
}
inline DeviceStream on_device(Device device) { return on_device(int(device.index)); }

}  // namespace ember::cuda::detail
