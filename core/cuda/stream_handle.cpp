#include "ember/cuda/stream_handle.h"

#include <vector>

#include "ember/cuda/check.h"

namespace ember::cuda::detail {

namespace {
// Indexed by device; grown on first use. nullptr (0) is the legacy default stream.
thread_local std::vector<cudaStream_t> current_streams;

cudaStream_t& slot(int device) {
  if (device < 0) device = current_device();
  if (current_streams.size() <= size_t(device)) current_streams.resize(size_t(device) + 1, nullptr);
  return current_streams[size_t(device)];
}
}  // namespace

int current_device() {
  int device = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

cudaStream_t current_stream_handle(int device) { return slot(device); }

void set_current_stream_handle(cudaStream_t stream, int device) { slot(device) = stream; }

}  // namespace ember::cuda::detail
