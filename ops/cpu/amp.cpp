// CPU driver of the amp family.
//
// Invariants:
// - amp_unscale_and_check_kernel is ONE OpenMP parallel loop over fixed chunks of every
//   gradient of the list (a chunk never spans two tensors); each thread keeps its own
//   "non-finite seen" bit and the bits are OR-reduced, so the flag does not depend on the
//   thread count and nothing is shared inside the loop.
// - Per element, as PyTorch: v = C(g) (C = double for f64, float otherwise); the flag is set
//   when v is not finite; g = v * inv_scale, stored back in g's dtype. The multiply is skipped
//   when inv_scale == 1 (same values, as PyTorch's kernel does).
// - Nothing throws inside the parallel region (the front validated everything).
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/amp.h"
#include "multi_tensor.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kChunk = 8192;
constexpr int64_t kGrain = 32768;

template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Returns whether any element was non-finite. The finiteness test is folded into the same
// pass: (v - v) is 0 for finite v and NaN for inf/NaN, so one accumulated sum tells.
template <class T>
bool unscale_range(T* __restrict g, int64_t n, float inv_scale) {
  using C = compute_t<T>;
  const C s = C(inv_scale);
  C acc = 0;
  if (inv_scale == 1.0f) {
    for (int64_t j = 0; j < n; ++j) {
      const C v = C(g[j]);
      acc += v - v;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const C v = C(g[j]);
      acc += v - v;
      g[j] = T(v * s);
    }
  }
  return acc != acc;  // NaN iff some v was inf or NaN
}

}  // namespace

void amp_unscale_and_check_kernel(const TensorList& grads, const Tensor& found_inf,
                                  const Tensor& inv_scale) {
  int64_t total = 0;
  const std::vector<WorkItem> work = make_work(grads, kChunk, total);
  const float inv = *static_cast<const float*>(inv_scale.data_ptr());
  const int64_t items = int64_t(work.size());
  int any = 0;
#pragma omp parallel for schedule(static) reduction(| : any) if (total >= kGrain)
  for (int64_t w = 0; w < items; ++w) {
    const WorkItem& it = work[size_t(w)];
    const Tensor& g = grads[size_t(it.tensor)];
    const bool bad = visit_floating(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      return unscale_range<T>(static_cast<T*>(g.data_ptr()) + it.begin, it.end - it.begin, inv);
    });
    any |= bad ? 1 : 0;
  }
  if (any) *static_cast<float*>(found_inf.data_ptr()) = 1.0f;
}

void amp_update_scale_kernel(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& found_inf, double growth_factor, double backoff_factor,
                             int64_t growth_interval) {
  float* s = static_cast<float*>(scale.data_ptr());
  int32_t* tracker = static_cast<int32_t*>(growth_tracker.data_ptr());
  const float found = *static_cast<const float*>(found_inf.data_ptr());
  // PyTorch 1.13's _amp_update_scale_cuda_kernel, operation for operation (f32 products).
  if (found != 0.0f) {
    *s = *s * float(backoff_factor);
    *tracker = 0;
  } else {
    const int32_t successful = *tracker + 1;
    if (successful == int32_t(growth_interval)) {
      const float grown = *s * float(growth_factor);
      if (std::isfinite(grown)) *s = grown;
      *tracker = 0;
    } else {
      *tracker = successful;
    }
  }
}

}  // namespace ember::ops::cpu
