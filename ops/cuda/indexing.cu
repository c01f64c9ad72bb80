// CUDA driver of advanced indexing and nonzero (preconditions in ops/kernels/indexing.h; the
// CPU twin is ops/cpu/indexing.cpp).
//
// Invariants:
// - Every launch goes to the thread's current stream of the tensors' device under a device
//   guard, and is followed by a last-error check.
// - index_offset checks every value on the device (Note [deferred device checks]): a bad one
//   is recorded and skipped, so the offsets stay inside x and the gather/put that follows
//   never touches memory out of bounds; the IndexError is raised at the next synchronization.
// - Each output element (gather), offset element (index_offset) or index position (put) is
//   one thread's: no atomics. put with repeated indices writes one of the values, unordered
//   (PyTorch documents the same); accumulating puts do not come here (index_add).
// - nonzero: flags, then CUB's exclusive scan; the count is read by the front (its one
//   synchronization); the fill kernel finds nonzero elements as steps of the scan, so it is
//   dtype-free and its rows come out in row-major order.
#include <cub/device/device_scan.cuh>

#include <algorithm>

#include "ember/cuda/launch.h"
#include "ember/cuda/device_checks.h"
#include "ember/cuda/device_guard.h"
#include "kernels/elementwise.h"
#include "kernels/indexing.h"
#include "cub_scratch.cuh"
#include "loops.cuh"

namespace ember::ops::cuda {

namespace {

unsigned blocks_for(int64_t n) {
  return unsigned(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, int64_t(1) << 16));
}

template <class I>
struct OffsetOp {
  int64_t size, stride;
  ember::cuda::FaultSite site;
  __device__ void operator()(char** p) const {
    int64_t v = int64_t(*reinterpret_cast<const I*>(p[1]));
    if (v < -size || v >= size) {
      site.report(v);
      return;
    }
    if (v < 0) v += size;
    *reinterpret_cast<int64_t*>(p[0]) += v * stride;
  }
};

template <class U>
struct GatherOp {
  __device__ void operator()(char** p) const {
    const int64_t o = *reinterpret_cast<const int64_t*>(p[2]);
    *reinterpret_cast<U*>(p[0]) = *reinterpret_cast<const U*>(p[1] + o * int64_t(sizeof(U)));
  }
};

template <class U>
struct PutOp {
  __device__ void operator()(char** p) const {
    const int64_t o = *reinterpret_cast<const int64_t*>(p[2]);
    *reinterpret_cast<U*>(p[0] + o * int64_t(sizeof(U))) = *reinterpret_cast<const U*>(p[1]);
  }
};

template <class F>
void visit_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

template <class S>
__global__ void nonzero_flags_kernel(const S* x, int64_t n, int64_t* flags) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i <= n; i += int64_t(gridDim.x) * blockDim.x)
    flags[i] = i < n && ops::cast_value<bool, S>(x[i]) ? 1 : 0;
}

struct Dims {
  int nd = 0;
  int64_t sizes[kMaxDims];
};

__global__ void nonzero_fill_kernel_(const int64_t* pos, int64_t n, Dims dims, int64_t* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = pos[i];
    if (pos[i + 1] == row) continue;
    int64_t rem = i;
    for (int d = dims.nd - 1; d >= 0; --d) {
      out[row * dims.nd + d] = rem % dims.sizes[d];
      rem /= dims.sizes[d];
    }
  }
}

}  // namespace

void index_offset_kernel(const char* op, const Tensor& index, int64_t dim, int64_t size, int64_t stride,
                         const Tensor& off) {
  if (off.numel() == 0) return;
  const auto on = ember::cuda::detail::on_device(off.device());
  const ember::cuda::FaultSite site = ember::cuda::detail::fault_site(
      off.device().index, ember::cuda::FaultKind::index_out_of_range, op, dim, size);
  if (index.dtype() == DType::i32) launch_elementwise<2>({&off, &index}, OffsetOp<int32_t>{size, stride, site});
  else launch_elementwise<2>({&off, &index}, OffsetOp<int64_t>{size, stride, site});
  ember::cuda::detail::after_checked_launch(on.stream);
}

void index_gather_kernel(const Tensor& src, const Tensor& off, const Tensor& out) {
  visit_bits(out.element_size(), [&](auto tag) {
    using U = decltype(tag);
    launch_elementwise<3>({&out, &src, &off}, GatherOp<U>{});
  });
}

void index_put_kernel(const Tensor& dst, const Tensor& off, const Tensor& values) {
  visit_bits(dst.element_size(), [&](auto tag) {
    using U = decltype(tag);
    launch_elementwise<3>({&dst, &values, &off}, PutOp<U>{});
  });
}

void nonzero_scan_kernel(const Tensor& x, const Tensor& pos) {
  const int64_t n = x.numel();
  const Device device = x.device();
  const auto on = ember::cuda::detail::on_device(device);
  cudaStream_t stream = on.stream;
  Tensor flags = ember::detail::make_tensor({n + 1}, DType::i64, device);
  int64_t* fp = static_cast<int64_t*>(flags.data_ptr());
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(nonzero_flags_kernel<S>, blocks_for(n + 1), kThreads, 0, stream,
        static_cast<const S*>(x.data_ptr()), n, fp);
  });
  EMBER_CUDA_CHECK_LAUNCH();
  int64_t* pp = static_cast<int64_t*>(pos.data_ptr());
  cub_with_scratch(device, [&](void* temp, size_t& bytes) {
    return cub::DeviceScan::ExclusiveSum(temp, bytes, fp, pp, n + 1, stream);
  });
}

void nonzero_fill_kernel(const Tensor& x, const Tensor& pos, const Tensor& out) {
  const int64_t n = x.numel();
  EMBER_CHECK(x.dim() <= kMaxDims, ShapeError, "[nonzero] tensors of ", x.dim(), " dims exceed the CUDA limit of ",
              kMaxDims);
  Dims dims;
  dims.nd = int(x.dim());
  for (int d = 0; d < dims.nd; ++d) dims.sizes[d] = x.sizes()[size_t(d)];
  const auto on = ember::cuda::detail::on_device(x.device());
  ::ember::cuda::launch_kernel(nonzero_fill_kernel_, blocks_for(n), kThreads, 0, on.stream,
      static_cast<const int64_t*>(pos.data_ptr()), n,
                                                                  dims, static_cast<int64_t*>(out.data_ptr()));
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
