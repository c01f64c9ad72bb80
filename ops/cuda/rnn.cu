// CUDA driver of the recurrent cell pointwise kernels (mirror of ops/cpu/rnn.cpp; math in
// ember/ops/rnn.h, preconditions in kernels/rnn.h).
//
// Invariants:
// - One thread per (row, unit) pair, j in [0, H): it reads the k gate values of unit j (k
//   loads H apart in the row) and writes all of that unit's outputs, so the accumulate
//   (read-modify-write of dc_prev / dh_prev) never races. Adjacent threads touch adjacent
//   units: every load and store is coalesced.
// - 64-bit indices throughout; a grid-stride loop covers N*H past the grid limit.
// - Everything on the current stream of the tensors' device (restored by the guard).
// - Math in the compute type (f32 for 16-bit storage), as on the CPU.
#include <algorithm>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "kernels/rnn.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 256;

template <class C>
__device__ __forceinline__ C sigmoid_c(C x) {
  return C(1) / (C(1) + exp_c(-x));
}
template <class C>
__device__ __forceinline__ C tanh_c(C x) {
  if constexpr (std::is_same_v<C, float>) return tanhf(x);
  else return tanh(x);
}

struct Grid {
  unsigned blocks;
  int64_t total;
};
Grid grid_for(int64_t N, int64_t H) {
  const int64_t total = N * H;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
  return {unsigned(std::max<int64_t>(blocks, 1)), total};
}

template <class S>
__global__ void lstm_cell_fwd_kernel_impl(const S* __restrict__ gx, int64_t sgx,
                                          const S* __restrict__ gh, int64_t sgh,
                                          const S* __restrict__ cp, int64_t scp, S* __restrict__ h,
                                          int64_t sh, S* __restrict__ c, int64_t sc,
                                          S* __restrict__ gates, int64_t sg, int64_t H,
                                          int64_t total) {
  using C = compute_t<S>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e - r * H;
    const S* x = gx + r * sgx + j;
    C v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = load_c(x + k * H);
      if (gh) v[k] += load_c(gh + r * sgh + j + k * H);
    }
    const C i = sigmoid_c(v[0]), f = sigmoid_c(v[1]), g = tanh_c(v[2]), o = sigmoid_c(v[3]);
    const C cn = f * load_c(cp + r * scp + j) + i * g;
    store_c(c + r * sc + j, cn);
    store_c(h + r * sh + j, o * tanh_c(cn));
    S* gs = gates + r * sg + j;
    store_c(gs, i);
    store_c(gs + H, f);
    store_c(gs + 2 * H, g);
    store_c(gs + 3 * H, o);
  }
}

template <class S>
__global__ void lstm_cell_bwd_kernel_impl(const S* __restrict__ dh, int64_t sdh,
                                          const S* __restrict__ dc, int64_t sdc,
                                          const S* __restrict__ gates, int64_t sg,
                                          const S* __restrict__ cp, int64_t scp,
                                          const S* __restrict__ c, int64_t sc, S* __restrict__ dg,
                                          int64_t sdg, S* dcp, int64_t sdcp, bool accumulate,
                                          int64_t H, int64_t total) {
  using C = compute_t<S>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e - r * H;
    const S* gs = gates + r * sg + j;
    const C i = load_c(gs), f = load_c(gs + H), g = load_c(gs + 2 * H), o = load_c(gs + 3 * H);
    const C d_h = load_c(dh + r * sdh + j);
    const C tc = tanh_c(load_c(c + r * sc + j));
    const C dct = load_c(dc + r * sdc + j) + d_h * o * (C(1) - tc * tc);
    S* d = dg + r * sdg + j;
    store_c(d, dct * g * i * (C(1) - i));
    store_c(d + H, dct * load_c(cp + r * scp + j) * f * (C(1) - f));
    store_c(d + 2 * H, dct * i * (C(1) - g * g));
    store_c(d + 3 * H, d_h * tc * o * (C(1) - o));
    S* out = dcp + r * sdcp + j;
    store_c(out, (accumulate ? load_c(out) : C(0)) + dct * f);
  }
}

template <class S>
__global__ void gru_cell_fwd_kernel_impl(const S* __restrict__ gx, int64_t sgx,
                                         const S* __restrict__ gh, int64_t sgh,
                                         const S* __restrict__ hp, int64_t shp, S* __restrict__ h,
                                         int64_t sh, S* __restrict__ ws, int64_t sw, int64_t H,
                                         int64_t total) {
  using C = compute_t<S>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e - r * H;
    const S* x = gx + r * sgx + j;
    const S* y = gh + r * sgh + j;
    const C rr = sigmoid_c(load_c(x) + load_c(y));
    const C z = sigmoid_c(load_c(x + H) + load_c(y + H));
    const C ghn = load_c(y + 2 * H);
    const C n = tanh_c(load_c(x + 2 * H) + rr * ghn);
    const C p = load_c(hp + r * shp + j);
    store_c(h + r * sh + j, n + z * (p - n));
    S* w = ws + r * sw + j;
    store_c(w, rr);
    store_c(w + H, z);
    store_c(w + 2 * H, n);
    store_c(w + 3 * H, ghn);
  }
}

template <class S>
__global__ void gru_cell_bwd_kernel_impl(const S* __restrict__ dh, int64_t sdh,
                                         const S* __restrict__ ws, int64_t sw,
                                         const S* __restrict__ hp, int64_t shp,
                                         S* __restrict__ dgx, int64_t sdgx, S* __restrict__ dgh,
                                         int64_t sdgh, S* dhp, int64_t sdhp, bool accumulate,
                                         int64_t H, int64_t total) {
  using C = compute_t<S>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / H, j = e - r * H;
    const S* w = ws + r * sw + j;
    const C rr = load_c(w), z = load_c(w + H), n = load_c(w + 2 * H), ghn = load_c(w + 3 * H);
    const C d = load_c(dh + r * sdh + j);
    const C p = load_c(hp + r * shp + j);
    const C dn = d * (C(1) - z) * (C(1) - n * n);
    const C dr = dn * ghn * rr * (C(1) - rr);
    const C dz = d * (p - n) * z * (C(1) - z);
    S* gx = dgx + r * sdgx + j;
    S* gh = dgh + r * sdgh + j;
    store_c(gx, dr);
    store_c(gx + H, dz);
    store_c(gx + 2 * H, dn);
    store_c(gh, dr);
    store_c(gh + H, dz);
    store_c(gh + 2 * H, dn * rr);
    S* out = dhp + r * sdhp + j;
    store_c(out, (accumulate ? load_c(out) : C(0)) + d * z);
  }
}

template <class S>
const S* cptr(const Tensor& t) {
  return t.defined() ? static_cast<const S*>(t.data_ptr()) : nullptr;
}
template <class S>
S* mptr(const Tensor& t) {
  return static_cast<S*>(t.data_ptr());
}
int64_t rs(const Tensor& t) { return t.defined() ? t.strides()[0] : 0; }

}  // namespace

void lstm_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& c_prev,
                          const Tensor& h, const Tensor& c, const Tensor& gates) {
  const Grid g = grid_for(h.sizes()[0], h.sizes()[1]);
  if (g.total == 0) return;
  const auto on = ember::cuda::detail::on_device(h.device());
  visit_floating(h.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(lstm_cell_fwd_kernel_impl<S>, g.blocks, kThreads, 0, on.stream,
        cptr<S>(gx), rs(gx), cptr<S>(gh), rs(gh), cptr<S>(c_prev), rs(c_prev), mptr<S>(h),
        rs(h), mptr<S>(c), rs(c), mptr<S>(gates), rs(gates), h.sizes()[1], g.total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void lstm_cell_bwd_kernel(const Tensor& dh, const Tensor& dc, const Tensor& gates,
                          const Tensor& c_prev, const Tensor& c, const Tensor& dgates,
                          const Tensor& dc_prev, bool accumulate) {
  const Grid g = grid_for(dh.sizes()[0], dh.sizes()[1]);
  if (g.total == 0) return;
  const auto on = ember::cuda::detail::on_device(dh.device());
  visit_floating(dh.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(lstm_cell_bwd_kernel_impl<S>, g.blocks, kThreads, 0, on.stream,
        cptr<S>(dh), rs(dh), cptr<S>(dc), rs(dc), cptr<S>(gates), rs(gates), cptr<S>(c_prev),
        rs(c_prev), cptr<S>(c), rs(c), mptr<S>(dgates), rs(dgates), mptr<S>(dc_prev),
        rs(dc_prev), accumulate, dh.sizes()[1], g.total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void gru_cell_fwd_kernel(const Tensor& gx, const Tensor& gh, const Tensor& h_prev,
                         const Tensor& h, const Tensor& ws) {
  const Grid g = grid_for(h.sizes()[0], h.sizes()[1]);
  if (g.total == 0) return;
  const auto on = ember::cuda::detail::on_device(h.device());
  visit_floating(h.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(gru_cell_fwd_kernel_impl<S>, g.blocks, kThreads, 0, on.stream,
        cptr<S>(gx), rs(gx), cptr<S>(gh), rs(gh), cptr<S>(h_prev), rs(h_prev), mptr<S>(h),
        rs(h), mptr<S>(ws), rs(ws), h.sizes()[1], g.total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

void gru_cell_bwd_kernel(const Tensor& dh, const Tensor& ws, const Tensor& h_prev,
                         const Tensor& dgx, const Tensor& dgh, const Tensor& dh_prev,
                         bool accumulate) {
  const Grid g = grid_for(dh.sizes()[0], dh.sizes()[1]);
  if (g.total == 0) return;
  const auto on = ember::cuda::detail::on_device(dh.device());
  visit_floating(dh.dtype(), [&](auto tag) {
    using S = decltype(tag);
    ::ember::cuda::launch_kernel(gru_cell_bwd_kernel_impl<S>, g.blocks, kThreads, 0, on.stream,
        cptr<S>(dh), rs(dh), cptr<S>(ws), rs(ws), cptr<S>(h_prev), rs(h_prev), mptr<S>(dgx),
        rs(dgx), mptr<S>(dgh), rs(dgh), mptr<S>(dh_prev), rs(dh_prev), accumulate,
        dh.sizes()[1], g.total);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
