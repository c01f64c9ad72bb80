// The simulated CUDA runtime (core/cuda_sim/runtime.cpp) through the cudart API itself, as
// ember's core/cuda calls it, against what the CUDA runtime documents: memory, copies and
// poison, the last-error latch, device properties, graph capture (recording, replay,
// parameters fixed at capture, a side stream joined by an event, the calls a capture refuses)
// and ember's launch point (ember/cuda/launch.h) in the simulation build. Links no libcudart.
#include <cuda.h>
#include <cuda_runtime_api.h>

#define EMBER_CUDA_SIM 1
#include "ember/cuda/launch.h"
// The simulation's CUB (core/cuda_sim/shim), as ops/cuda includes it.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <numeric>
#include <random>
#include <vector>

namespace {

__global__ void add_scalar(float* x, int n, float v) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += v;
}

std::vector<float> read(const float* device, int n) {
  std::vector<float> h(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpyAsync(h.data(), device, size_t(n) * 4, cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  return h;
}

}  // namespace

TEST(SimRuntime, MemoryCopiesPoisonAndTheLastError) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 64 * 4), cudaSuccess);
  for (float v : read(d, 64)) EXPECT_TRUE(std::isnan(v)) << "fresh device memory is NaN-poisoned";
  std::vector<float> h(64, 2.5f);
  ASSERT_EQ(cudaMemcpyAsync(d, h.data(), 64 * 4, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 16 * 4, nullptr), cudaSuccess);
  std::vector<float> back = read(d, 64);
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[16], 2.5f);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, h.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  // A pointer cudaMalloc did not return: an error, latched until read.
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  EXPECT_EQ(total - free_bytes, size_t(64 * 4));
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST(SimRuntime, AnH100sProperties) {
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.sharedMemPerBlockOptin, size_t(227 * 1024));
  EXPECT_EQ(cudaGetDeviceProperties(&p, 99), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
}

TEST(SimRuntime, LaunchPointRunsKernelsAndLatchesRefusedLaunches) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 100 * 4), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 100 * 4, nullptr), cudaSuccess);
  ember::cuda::launch_kernel(add_scalar, dim3(2), dim3(64), 0, nullptr, d, 100, 1.5);  // double -> float
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  for (float v : read(d, 100)) EXPECT_EQ(v, 1.5f);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(2048), 0, nullptr, d, 100, 1.0f);  // 2048 threads
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  for (float v : read(d, 100)) EXPECT_EQ(v, 1.5f) << "a refused launch runs nothing";
  cudaFree(d);
}

// Capture records launches and copies; a replay runs them with the parameters of the capture.
TEST(SimRuntime, CaptureRecordsAndReplays) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), 32 * 4), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 32 * 4, nullptr), cudaSuccess);
  cudaStream_t s = nullptr, side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  float v = 1.0f;
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, s, d, 32, v);
  v = 100.0f;  // the capture holds the value passed at the launch
  // A side stream joins by waiting on an event recorded in the capture.
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  unsigned long long id_main = 0, id_side = 0;
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id_main), cudaSuccess);
  ASSERT_EQ(cudaStreamGetCaptureInfo(side, &status, &id_side), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_EQ(id_side, id_main);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, side, d, 32, 10.0f);
  ASSERT_EQ(cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  for (float x : read(d, 32)) EXPECT_EQ(x, 0.0f) << "capture records, it does not run";
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  // `s` is non-blocking: the legacy stream's read does not wait for it (the simulation's
  // deferred streams made this test's missing synchronization fail).
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  for (float x : read(d, 32)) EXPECT_EQ(x, 22.0f);  // (1 + 10) twice
  ASSERT_EQ(cudaStreamGetCaptureInfo(side, &status, &id_side), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone) << "the side stream left the capture with it";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
  cudaStreamDestroy(s);
  cudaStreamDestroy(side);
  cudaFree(d);
}

// What a capture refuses, as the GPU refuses it: a synchronization (which also invalidates the
// capture) and a cudaMalloc in thread-local mode, allowed once the thread relaxed its mode.
TEST(SimRuntime, CaptureRefusesSynchronizationAndMalloc) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  (void)cudaGetLastError();

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  cudaFree(p);
  cudaStreamDestroy(s);
}

// ember's primary_context_active asks the driver through the runtime's entry points: a device
// counts as touched once this process used it.
// Work waits on its stream until something needs it (EMBER_SIM_STREAMS=deferred, the
// default), so a consumer on another stream that skips the event wait sees the producer's
// memory unwritten, as it could on the card; with the wait it sees the result. The legacy
// stream and blocking streams order each other; pageable copies behave as cudart's.
TEST(SimRuntime, StreamsRunDeferredAndOnlyEventsOrderThem) {
  const char* mode = std::getenv("EMBER_SIM_STREAMS");
  if (mode && std::string(mode) == "eager") GTEST_SKIP() << "EMBER_SIM_STREAMS=eager: work runs when issued";
  float *src = nullptr, *dst = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 32 * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dst), 32 * 4), cudaSuccess);
  cudaStream_t producer = nullptr, consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(src, 0, 32 * 4, producer), cudaSuccess);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, producer, src, 32, 2.0f);

  // No wait: the consumer's copy runs when the consumer is synchronized, before the producer.
  ASSERT_EQ(cudaMemcpyAsync(dst, src, 32 * 4, cudaMemcpyDeviceToDevice, consumer), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  std::vector<float> h(32);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), dst, 32 * 4, cudaMemcpyDeviceToHost, consumer), cudaSuccess);
  for (float v : h) EXPECT_TRUE(std::isnan(v)) << "the producer's work ran without anyone waiting for it";

  // With the event: the producer runs up to the record first.
  cudaEvent_t ready = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, producer, src, 32, 100.0f);  // after the record
  ASSERT_EQ(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(dst, src, 32 * 4, cudaMemcpyDeviceToDevice, consumer), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(h.data(), dst, 32 * 4, cudaMemcpyDeviceToHost, consumer), cudaSuccess);
  for (float v : h) EXPECT_EQ(v, 2.0f) << "the copy sees the work before the event, not after";
  ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  for (float v : read(src, 32)) EXPECT_EQ(v, 102.0f);

  // A blocking stream and the legacy stream wait for each other's earlier work.
  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&blocking, cudaStreamDefault), cudaSuccess);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, blocking, src, 32, 1.0f);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, nullptr, src, 32, 1000.0f);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, blocking, dst, 32, 0.0f);
  ASSERT_EQ(cudaMemcpyAsync(dst, src, 32 * 4, cudaMemcpyDeviceToDevice, blocking), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  for (float v : read(dst, 32)) EXPECT_EQ(v, 1103.0f);

  // From pageable memory the source is read at the call; cudaFree synchronizes the device.
  std::vector<float> ones(32, 1.0f);
  ASSERT_EQ(cudaMemcpyAsync(src, ones.data(), 32 * 4, cudaMemcpyHostToDevice, producer), cudaSuccess);
  std::fill(ones.begin(), ones.end(), -1.0f);
  ember::cuda::launch_kernel(add_scalar, dim3(1), dim3(32), 0, producer, src, 32, 4.0f);
  ASSERT_EQ(cudaMemcpyAsync(dst, src, 32 * 4, cudaMemcpyDeviceToDevice, producer), cudaSuccess);
  ASSERT_EQ(cudaFree(src), cudaSuccess);
  std::vector<float> after(32);
  std::memcpy(after.data(), dst, 32 * 4);  // no stream call: cudaFree ran everything
  for (float v : after) EXPECT_EQ(v, 5.0f);

  ASSERT_EQ(cudaEventDestroy(ready), cudaSuccess);
  for (cudaStream_t s : {producer, consumer, blocking}) ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  ASSERT_EQ(cudaFree(dst), cudaSuccess);
}

TEST(SimRuntime, PrimaryContextStateThroughTheDriverEntryPoints) {
  void* get = nullptr;
  void* state = nullptr;
  cudaDriverEntryPointQueryResult q{};
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDeviceGet", &get, 12000, cudaEnableDefault, &q), cudaSuccess);
  ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state, 12000, cudaEnableDefault, &q),
            cudaSuccess);
  CUdevice dev{};
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUdevice*, int)>(get)(&dev, 0), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = 0;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(reinterpret_cast<CUresult (*)(CUdevice, unsigned*, int*)>(state)(dev, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
}

// The CUB algorithms ember calls: the two-call protocol, stable radix sorts over the key bits
// only (plain and segmented, ascending and descending), scans in place, stream order under
// capture (offsets read when the work runs). Against std::stable_sort and std::partial_sum.
TEST(SimCub, SortsAndScansKeepCubsContract) {
  std::mt19937_64 rng(5);
  const int n = 1000;
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng() % 4096 + (rng() % 4 << 20);  // bits above end_bit = 12 must not matter
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<uint64_t> kout(n);
  std::vector<int64_t> pout(n);
  size_t bytes = 0;
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys.data(), kout.data(), pos.data(), pout.data(), n, 0,
                                            12, nullptr),
            cudaSuccess);
  EXPECT_GE(bytes, size_t(1));
  EXPECT_EQ(pout[0], 0) << "the size query does no work";
  std::vector<char> temp(bytes);
  ASSERT_EQ(cub::DeviceRadixSort::SortPairs(temp.data(), bytes, keys.data(), kout.data(), pos.data(), pout.data(), n,
                                            0, 12, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);  // the sort waits on its stream until then
  std::vector<int64_t> want(n);
  std::iota(want.begin(), want.end(), 0);
  std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) { return (keys[a] & 4095) < (keys[b] & 4095); });
  EXPECT_EQ(pout, want);

  // Segmented, descending, on unsigned 32-bit keys; offsets [0, 300, 300, 1000).
  std::vector<uint32_t> k32(n), k32out(n);
  for (auto& k : k32) k = uint32_t(rng() % 50);
  std::vector<int> offsets = {0, 300, 300, 1000};
  ASSERT_EQ(cub::DeviceSegmentedRadixSort::SortPairsDescending(temp.data(), bytes, k32.data(), k32out.data(),
                                                              pos.data(), pout.data(), n, 3, offsets.data(),
                                                              offsets.data() + 1, 0, 32, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  for (int s = 0; s < 3; ++s) {
    std::vector<int64_t> seg;
    for (int i = offsets[s]; i < offsets[s + 1]; ++i) seg.push_back(i);
    std::stable_sort(seg.begin(), seg.end(), [&](int64_t a, int64_t b) { return k32[size_t(b)] < k32[size_t(a)]; });
    for (size_t i = 0; i < seg.size(); ++i) EXPECT_EQ(pout[size_t(offsets[s]) + i], seg[i]) << "segment " << s;
  }

  // Scans, in place, recorded under capture and run by the replay.
  std::vector<int64_t> x(n, 0), inclusive(n), exclusive(n);
  for (auto& v : x) v = int64_t(rng() % 7);
  std::partial_sum(x.begin(), x.end(), inclusive.begin());
  std::exclusive_scan(x.begin(), x.end(), exclusive.begin(), int64_t(0));
  std::vector<int64_t> a = x, b = x;
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cub::DeviceScan::InclusiveSum(temp.data(), bytes, a.data(), a.data(), n, s), cudaSuccess);
  ASSERT_EQ(cub::DeviceScan::ExclusiveSum(temp.data(), bytes, b.data(), b.data(), int64_t(n), s), cudaSuccess);
  EXPECT_EQ(a, x) << "recorded, not run";
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(a, inclusive);
  EXPECT_EQ(b, exclusive);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}
