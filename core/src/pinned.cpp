// Tensor::pin_memory and Tensor::is_pinned: page-locked host copies for data loaders.
//
// Invariants:
// - pin_memory() accepts CPU tensors only and returns a contiguous copy whose storage comes
//   from cuda::detail::host_alloc (cudaHostAlloc) and is released by host_free. Such a copy
//   is what lets to(Device::cuda(), true) take the asynchronous path of
//   cuda::detail::copy_bytes (a contiguous source of the destination's dtype goes straight
//   to it; see ops::copy_).
// - Without a visible CUDA device (or in a CPU-only build) it returns *this, and is_pinned()
//   is false: a loader asked to pin memory then works unchanged on a CPU-only machine.
// - An already pinned tensor is returned as is (as PyTorch does); the copy carries no
//   autograd state (loaders pin data, not graph nodes).
// - is_pinned() asks the CUDA runtime about the storage, so memory pinned elsewhere counts.
#include <cstring>
#include <memory>

#include "ember/cuda.h"
#include "ember/tensor.h"

namespace ember {

namespace {
// Copies the elements of `src` in row-major order into the contiguous buffer `dst`. Core has
// no kernels (Note [Tensor methods]), and pinning happens once per batch, so a plain
// odometer over the strides is enough for the rare strided source.
void copy_to_contiguous(char* dst, const Tensor& src) {
  const size_t item = src.element_size();
  const int64_t n = src.numel();
  if (n == 0) return;
  const char* base = static_cast<const char*>(src.data_ptr());
  if (src.is_contiguous()) {
    std::memcpy(dst, base, size_t(n) * item);
    return;
  }
  const int64_t nd = src.dim();
  const Shape& sizes = src.sizes();
  const Shape& strides = src.strides();
  Shape index(size_t(nd), 0);
  int64_t offset = 0;  // in elements, relative to data_ptr()
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + size_t(i) * item, base + offset * int64_t(item), item);
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++index[size_t(d)] < sizes[size_t(d)]) {
        offset += strides[size_t(d)];
        break;
      }
      offset -= (sizes[size_t(d)] - 1) * strides[size_t(d)];
      index[size_t(d)] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::pin_memory() const {
  detail::check_defined("pin_memory", *this);
  EMBER_CHECK(is_cpu(), DeviceError, "[pin_memory] only CPU tensors can be pinned, got a tensor on ",
              device());
  if (!cuda::is_available() || is_pinned()) return *this;
  const size_t nbytes = size_t(numel()) * element_size();
  void* p = cuda::detail::host_alloc(nbytes);
  std::shared_ptr<Storage> storage;
  try {
    storage = std::make_shared<Storage>(p, nbytes, Device::cpu(),
                                        [](void* q) { cuda::detail::host_free(q); });
  } catch (...) {
    cuda::detail::host_free(p);
    throw;
  }
  copy_to_contiguous(static_cast<char*>(p), *this);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = sizes();
  impl->strides = contiguous_strides(sizes());
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

bool Tensor::is_pinned() const {
  return defined() && is_cpu() && cuda::detail::is_pinned(storage()->data());
}

}  // namespace ember
