// The current stream, at the level of raw handles: what every kernel launch, cuBLAS/cuDNN
// call, allocation and copy in ember uses. Only core/cuda and ops/cuda include this header.
//
// Invariant: each thread has one current stream per device, initially that device's default
// stream (the legacy stream, handle 0); StreamGuard (the user-facing cuda::Stream API) and
// graph capture change it with set_current_stream_handle and put the old one back.
#pragma once

#include <cuda_runtime.h>

namespace ember::cuda::detail {

// The device that is current for this thread (cudaGetDevice).
int current_device();
// The stream this thread launches on for `device` (-1: the current device).
cudaStream_t current_stream_handle(int device = -1);
// Makes `stream` current for this thread on `device` (-1: the current device).
void set_current_stream_handle(cudaStream_t stream, int device = -1);

}  // namespace ember::cuda::detail
