// CUDA driver for the fused normalization family (mirror of ops/cpu/norm.cpp): batch norm,
// group norm and RMS norm, forward and backward (kernels/norm.h has the preconditions).
//
// Invariants:
// - Batch norm reduces each channel over N * HW elements in two launches: a grid of
//   (slices, C) blocks (an [N, C] input: blocks of 32 channels x 8 row lanes, so reads stay
//   coalesced) writes per-slice partial sums to a workspace, then one thread per
//   channel combines its slices in slice order and derives the per-channel coefficients
//   (mean/invstd and the running update; dweight/dbias and dx's coefficients). The
//   elementwise pass then applies them. The slice count depends on the shape alone.
// - Forward sums are shifted by the channel's first element (sum of x - K and (x - K)^2), so
//   the one-pass variance does not cancel when |mean| >> std; accumulation in acc_t (f64 for
//   f32/f64, f32 for 16-bit), as the CPU.
// - Group norm: one block per (n, group) row for the statistics and y, or, when the rows are
//   too few to fill the GPU (gn_slices > 1: N * G under ~512 with rows of 4K+ elements, e.g. a
//   diffusion model's [1, 512, 64, 64] with 32 groups), each row split into slices whose
//   shifted partial sums (batch norm's kernel, the rows as channels) one thread per row
//   combines in slice order, then y elementwise. Backward reduces per (n, channel) plane (in
//   slices the same way when the planes are few and long), then per row, then writes dx
//   elementwise; dweight/dbias sum over n in order. Slice counts depend on the shape alone.
//   RMS norm: one block row per row (threads_per_row), dweight by chunk partials.
// - Deterministic (Note [deterministic CUDA reductions]): no float atomics anywhere.
// - Everything runs on the current stream of x's device under a device guard; workspaces come
//   from the caching allocator (stream-ordered); no host synchronization; 64-bit indexing.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "kernels/norm.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 256;

template <class A>
struct Pair {
  A a, b;
};
template <class A>
struct PairPlus {
  __device__ Pair<A> operator()(Pair<A> x, Pair<A> y) const { return {x.a + y.a, x.b + y.b}; }
};
// The total of row r's `slices` partials part[r * slices ..], added from zero in slice order.
template <class A>
__device__ __forceinline__ Pair<A> slice_total(const Pair<A>* part, int64_t r, int64_t slices) {
  Pair<A> t{A(0), A(0)};
  for (int64_t s = 0; s < slices; ++s) t = PairPlus<A>{}(t, part[r * slices + s]);
  return t;
}
template <class T>
struct Plus {
  __device__ T operator()(T a, T b) const { return a + b; }
};

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

int64_t grid_for(int64_t n) { return std::max<int64_t>(1, std::min<int64_t>(ceil_div(n, kThreads), 65535 * 16)); }

// Workspace of n values of T, stream-ordered through the caching allocator.
template <class T>
Tensor workspace(int64_t n, Device device) {
  return detail::make_tensor({std::max<int64_t>(n, 1) * int64_t(sizeof(T))}, DType::u8, device);
}

// Channel c's element j (0 <= j < N * HW) of an [N, C, HW] tensor; Index is uint32_t when
// every offset fits (the common case: a cheaper division), else uint64_t.
template <class Index>
__device__ __forceinline__ int64_t channel_offset(int64_t j, int64_t c, int64_t C, int64_t HW) {
  const Index n = Index(j) / Index(HW);
  const Index hw = Index(j) - n * Index(HW);
  return (int64_t(n) * C + c) * HW + int64_t(hw);
}

// Slices per channel: at least 16 elements per thread, about 1024 blocks in all.
int64_t bn_slices(int64_t M, int64_t C) {
  return std::max<int64_t>(1, std::min<int64_t>(ceil_div(M, int64_t(kThreads) * 16),
                                                std::max<int64_t>(1, ceil_div(1024, C))));
}

// ---- batch norm ----

// Partial (sum(x - K), sum((x - K)^2)) of slice blockIdx.x of channel blockIdx.y, K the
// channel's first element.
template <class S, class Index>
__global__ void batch_norm_stats_kernel(const S* x, int64_t C, int64_t HW, int64_t M,
                                        int64_t slices, Pair<acc_t<S>>* part) {
  using A = acc_t<S>;
  __shared__ Pair<A> smem[32];
  const int64_t c = blockIdx.y, s = blockIdx.x;
  const int64_t chunk = ceil_div(M, slices);
  const int64_t j0 = s * chunk, j1 = min64(M, j0 + chunk);
  const A K = A(load_c(x + c * HW));
  Pair<A> acc{A(0), A(0)};
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const A d = A(load_c(x + channel_offset<Index>(j, c, C, HW))) - K;
    acc.a += d;
    acc.b += d * d;
  }
  acc = row_reduce(acc, PairPlus<A>{}, smem, false);
  if (threadIdx.x == 0) part[c * slices + s] = acc;
}

// The same partials for an [N, C] input (HW == 1), where a channel is a column: a block of
// 32 channels x 8 row lanes, so a warp reads 32 adjacent channels of one row (coalesced).
// Lanes are combined in lane order. grad == nullptr: the forward's shifted sums of x; else
// the backward's (sum g, sum g * (x - mean)).
template <class S>
__global__ void batch_norm_cols_kernel(const S* x, const S* grad, const compute_t<S>* mean,
                                       int64_t N, int64_t C, int64_t slices, Pair<acc_t<S>>* part) {
  using A = acc_t<S>;
  __shared__ Pair<A> smem[8][32];
  const int64_t c = int64_t(blockIdx.y) * 32 + threadIdx.x, s = blockIdx.x;
  const int64_t chunk = ceil_div(N, slices);
  const int64_t r0 = s * chunk, r1 = min64(N, r0 + chunk);
  Pair<A> acc{A(0), A(0)};
  if (c < C) {
    const A K = grad ? A(mean[c]) : A(load_c(x + c));
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) {
      const A d = A(load_c(x + r * C + c)) - K;
      if (grad) {
        const A g = A(load_c(grad + r * C + c));
        acc.a += g;
        acc.b += g * d;
      } else {
        acc.a += d;
        acc.b += d * d;
      }
    }
  }
  smem[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || c >= C) return;
  for (unsigned yy = 1; yy < blockDim.y; ++yy) {
    acc.a += smem[yy][threadIdx.x].a;
    acc.b += smem[yy][threadIdx.x].b;
  }
  part[c * slices + s] = acc;
}

// Slices of rows for the column kernel: at least 64 rows per lane, about 1024 blocks.
int64_t bn_col_slices(int64_t N, int64_t C) {
  return std::max<int64_t>(1, std::min<int64_t>(ceil_div(N, 8 * 64), std::max<int64_t>(1, ceil_div(1024, ceil_div(C, 32)))));
}

// One thread per channel: mean / invstd from the partials (training) or from the running
// statistics (eval), the running update, and the affine coefficients y = x * scale + shift.
template <class S>
__global__ void batch_norm_finish_kernel(const S* x, const Pair<acc_t<S>>* part, int64_t slices,
                                         int64_t C, int64_t HW, int64_t M,
                                         const compute_t<S>* weight, const compute_t<S>* bias,
                                         compute_t<S>* mean, compute_t<S>* invstd,
                                         compute_t<S>* rm, compute_t<S>* rv, compute_t<S>* coef,
                                         bool training, double momentum, double eps) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double mu, is;
  if (training) {
    const Pair<A> tot = slice_total(part, c, slices);
    const A s1 = tot.a, s2 = tot.b;
    const double K = double(load_c(x + c * HW));
    const double d = double(s1) / double(M);
    const double var = fmax(double(s2) / double(M) - d * d, 0.0);
    mu = K + d;
    is = 1.0 / sqrt(var + eps);
    if (rm) {
      rm[c] = C_((1.0 - momentum) * double(rm[c]) + momentum * mu);
      rv[c] = C_((1.0 - momentum) * double(rv[c]) + momentum * var * double(M) / double(M - 1));
    }
  } else {
    mu = double(rm[c]);
    is = 1.0 / sqrt(double(rv[c]) + eps);
  }
  mean[c] = C_(mu);
  invstd[c] = C_(is);
  const double scale = is * (weight ? double(weight[c]) : 1.0);
  coef[c] = C_(scale);
  coef[C + c] = C_((bias ? double(bias[c]) : 0.0) - mu * scale);
}

// out = k1[c] * a + k2[c] * b + k3[c] elementwise over [N, C, HW] (b may be null: k2 unused).
// The forward's y = scale * x + shift and the backward's dx = k1 g + k2 x + k3.
template <class S, class Index>
__global__ void channel_affine_kernel(const S* a, const S* b, S* out, const compute_t<S>* k1,
                                      const compute_t<S>* k2, const compute_t<S>* k3, int64_t C,
                                      int64_t HW, int64_t total) {
  using C_ = compute_t<S>;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = int64_t((Index(i) / Index(HW)) % Index(C));
    C_ v = k1[c] * load_c(a + i) + k3[c];
    if (b) v += k2[c] * load_c(b + i);
    store_c(out + i, v);
  }
}

// Partial (sum g, sum g * (x - mean)) of a slice of channel blockIdx.y.
template <class S, class Index>
__global__ void batch_norm_bwd_reduce_kernel(const S* g, const S* x, const compute_t<S>* mean,
                                             int64_t C, int64_t HW, int64_t M, int64_t slices,
                                             Pair<acc_t<S>>* part) {
  using A = acc_t<S>;
  __shared__ Pair<A> smem[32];
  const int64_t c = blockIdx.y, s = blockIdx.x;
  const int64_t chunk = ceil_div(M, slices);
  const int64_t j0 = s * chunk, j1 = min64(M, j0 + chunk);
  const A mu = A(mean[c]);
  Pair<A> acc{A(0), A(0)};
  for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
    const int64_t o = channel_offset<Index>(j, c, C, HW);
    const A gv = A(load_c(g + o));
    acc.a += gv;
    acc.b += gv * (A(load_c(x + o)) - mu);
  }
  acc = row_reduce(acc, PairPlus<A>{}, smem, false);
  if (threadIdx.x == 0) part[c * slices + s] = acc;
}

// Per channel: dweight, dbias, and dx = k1 g + k2 x + k3 (coef = [k1 | k2 | k3]).
template <class S>
__global__ void batch_norm_bwd_finish_kernel(const Pair<acc_t<S>>* part, int64_t slices, int64_t C,
                                             int64_t M, const compute_t<S>* weight,
                                             const compute_t<S>* mean, const compute_t<S>* invstd,
                                             compute_t<S>* dweight, compute_t<S>* dbias,
                                             compute_t<S>* coef, bool training) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const Pair<A> tot = slice_total(part, c, slices);
  const A sg = tot.a, sgx = tot.b;
  const double is = double(invstd[c]);
  if (dbias) dbias[c] = C_(sg);
  if (dweight) dweight[c] = C_(double(sgx) * is);
  const double k1 = is * (weight ? double(weight[c]) : 1.0);
  double k2 = 0, k3 = 0;
  if (training) {
    k2 = -k1 * is * is * double(sgx) / double(M);
    k3 = -k1 * double(sg) / double(M) - double(mean[c]) * k2;
  }
  coef[c] = C_(k1);
  coef[C + c] = C_(k2);
  coef[2 * C + c] = C_(k3);
}

bool fits_u32(int64_t total) { return total < (int64_t(1) << 32); }

template <class S>
void batch_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Tensor& mean, const Tensor& invstd, const Tensor& running_mean,
                    const Tensor& running_var, int64_t N, int64_t C, int64_t HW, bool training,
                    double momentum, double eps) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t M = N * HW, total = x.numel();
  const S* xp = static_cast<const S*>(x.data_ptr());
  const bool u32 = fits_u32(total);
  const bool cols = HW == 1;
  const int64_t slices = !training ? 0 : cols ? bn_col_slices(N, C) : bn_slices(M, C);
  Tensor part = workspace<Pair<A>>(C * slices, x.device());
  Tensor coef = workspace<C_>(2 * C, x.device());
  // grid.y (max 65535) holds the channels (the column kernel: blocks of 32 of them); eval
  // has no reduction launch, so it takes any C.
  EMBER_CHECK(!training || (cols ? ceil_div(C, 32) : C) < 65536, ShapeError, "[batch_norm] ", C,
              " channels exceed the CUDA grid limit");
  if (training && cols) {
    const dim3 grid{unsigned(slices), unsigned(ceil_div(C, 32)), 1u};
    ::ember::cuda::launch_kernel(batch_norm_cols_kernel<S>, grid, dim3(32, 8), 0, on.stream,
        xp, nullptr, nullptr, N, C, slices,
                                                                  ptr<Pair<A>>(part));
    EMBER_CUDA_CHECK_LAUNCH();
  } else if (training) {
    const dim3 grid{unsigned(slices), unsigned(C), 1u};
    if (u32)
      ::ember::cuda::launch_kernel(batch_norm_stats_kernel<S, uint32_t>, grid, kThreads, 0, on.stream,
          xp, C, HW, M, slices, ptr<Pair<A>>(part));
    else
      ::ember::cuda::launch_kernel(batch_norm_stats_kernel<S, uint64_t>, grid, kThreads, 0, on.stream,
          xp, C, HW, M, slices, ptr<Pair<A>>(part));
    EMBER_CUDA_CHECK_LAUNCH();
  }
  ::ember::cuda::launch_kernel(batch_norm_finish_kernel<S>, unsigned(ceil_div(C, kThreads)), kThreads, 0, on.stream,
      xp, ptr<Pair<A>>(part), slices, C, HW, M, ptr<const C_>(weight), ptr<const C_>(bias),
      ptr<C_>(mean), ptr<C_>(invstd), ptr<C_>(running_mean), ptr<C_>(running_var), ptr<C_>(coef),
      training, momentum, eps);
  EMBER_CUDA_CHECK_LAUNCH();
  const C_* k = ptr<const C_>(coef);
  const unsigned blocks = unsigned(grid_for(total));
  if (u32)
    ::ember::cuda::launch_kernel(channel_affine_kernel<S, uint32_t>, blocks, kThreads, 0, on.stream,
        xp, nullptr, ptr<S>(y), k, nullptr, k + C, C, HW, total);
  else
    ::ember::cuda::launch_kernel(channel_affine_kernel<S, uint64_t>, blocks, kThreads, 0, on.stream,
        xp, nullptr, ptr<S>(y), k, nullptr, k + C, C, HW, total);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S>
void batch_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& invstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t N, int64_t C, int64_t HW, bool training) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t M = N * HW, total = x.numel();
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const S* xp = static_cast<const S*>(x.data_ptr());
  const bool u32 = fits_u32(total);
  const bool cols = HW == 1;
  EMBER_CHECK((cols ? ceil_div(C, 32) : C) < 65536, ShapeError, "[batch_norm_backward] ", C,
              " channels exceed the CUDA grid limit");
  const int64_t slices = cols ? bn_col_slices(N, C) : bn_slices(M, C);
  Tensor part = workspace<Pair<A>>(C * slices, x.device());
  Tensor coef = workspace<C_>(3 * C, x.device());
  const dim3 grid{unsigned(slices), unsigned(C), 1u};
  const C_* mp = ptr<const C_>(mean);
  if (cols)
    ::ember::cuda::launch_kernel(batch_norm_cols_kernel<S>, dim3(unsigned(slices), unsigned(ceil_div(C, 32))), dim3(32, 8),
                                 0, on.stream,
        xp, gp, mp, N, C, slices, ptr<Pair<A>>(part));
  else if (u32)
    ::ember::cuda::launch_kernel(batch_norm_bwd_reduce_kernel<S, uint32_t>, grid, kThreads, 0, on.stream,
        gp, xp, mp, C, HW, M, slices, ptr<Pair<A>>(part));
  else
    ::ember::cuda::launch_kernel(batch_norm_bwd_reduce_kernel<S, uint64_t>, grid, kThreads, 0, on.stream,
        gp, xp, mp, C, HW, M, slices, ptr<Pair<A>>(part));
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(batch_norm_bwd_finish_kernel<S>, unsigned(ceil_div(C, kThreads)), kThreads,
                               0, on.stream,
      ptr<Pair<A>>(part), slices, C, M, ptr<const C_>(weight), mp, ptr<const C_>(invstd),
      ptr<C_>(dweight), ptr<C_>(dbias), ptr<C_>(coef), training);
  EMBER_CUDA_CHECK_LAUNCH();
  if (!dx.defined()) return;
  const C_* k = ptr<const C_>(coef);
  const unsigned blocks = unsigned(grid_for(total));
  if (u32)
    ::ember::cuda::launch_kernel(channel_affine_kernel<S, uint32_t>, blocks, kThreads, 0, on.stream,
        gp, xp, ptr<S>(dx), k, k + C, k + 2 * C, C, HW, total);
  else
    ::ember::cuda::launch_kernel(channel_affine_kernel<S, uint64_t>, blocks, kThreads, 0, on.stream,
        gp, xp, ptr<S>(dx), k, k + C, k + 2 * C, C, HW, total);
  EMBER_CUDA_CHECK_LAUNCH();
}

// ---- group norm ----

// One block per row (n, group) of L = Cg * HW contiguous elements: two-pass statistics (the
// second pass reads the row from L1/L2), then y with each channel's affine.
template <class S>
__global__ void group_norm_fwd_kernel(const S* x, const compute_t<S>* weight,
                                      const compute_t<S>* bias, S* y, compute_t<S>* mean,
                                      compute_t<S>* rstd, int64_t G, int64_t Cg, int64_t HW,
                                      double eps) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  __shared__ A smem[32];
  const int64_t row = blockIdx.x, L = Cg * HW;
  const S* xr = x + row * L;
  A s = A(0);
  for (int64_t k = threadIdx.x; k < L; k += blockDim.x) s += A(load_c(xr + k));
  const A mu = row_reduce(s, Plus<A>{}, smem, true) / A(L);
  A sq = A(0);
  for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
    const A d = A(load_c(xr + k)) - mu;
    sq += d * d;
  }
  sq = row_reduce(sq, Plus<A>{}, smem, true);
  const A rs = A(1) / sqrt(sq / A(L) + A(eps));
  if (threadIdx.x == 0) {
    mean[row] = C_(mu);
    rstd[row] = C_(rs);
  }
  const int64_t c0 = (row % G) * Cg;
  S* yr = y + row * L;
  for (int64_t k = threadIdx.x; k < L; k += blockDim.x) {
    const int64_t c = c0 + k / HW;
    const C_ scale = C_(rs) * (weight ? weight[c] : C_(1));
    const C_ shift = (bias ? bias[c] : C_(0)) - C_(mu) * scale;
    store_c(yr + k, load_c(xr + k) * scale + shift);
  }
}

// Slices of each reduced row when the rows alone leave the GPU idle: batch norm's rule (at
// least 16 elements per thread, about 1024 blocks in all); 1 for most shapes.
int64_t gn_slices(int64_t len, int64_t rows) { return bn_slices(len, rows); }

// Rows too few to fill the GPU, forward: per-row mean and rstd from the slice partials of
// batch_norm_stats_kernel (the rows as its channels, shifted by each row's first element).
template <class S>
__global__ void group_norm_finish_kernel(const S* x, const Pair<acc_t<S>>* part, int64_t slices,
                                         int64_t rows, int64_t L, double eps, compute_t<S>* mean,
                                         compute_t<S>* rstd) {
  using A = acc_t<S>;
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const Pair<A> tot = slice_total(part, row, slices);
  const double d = double(tot.a) / double(L);
  const double var = fmax(double(tot.b) / double(L) - d * d, 0.0);
  mean[row] = compute_t<S>(double(load_c(x + row * L)) + d);
  rstd[row] = compute_t<S>(1.0 / sqrt(var + eps));
}

// y = x * scale + shift elementwise, scale = rstd_row * w_c, shift = b_c - mean_row * scale (the
// single-block kernel's formula).
template <class S, class Index>
__global__ void group_norm_affine_kernel(const S* x, const compute_t<S>* weight, const compute_t<S>* bias,
                                         const compute_t<S>* mean, const compute_t<S>* rstd, S* y,
                                         int64_t C, int64_t G, int64_t HW, int64_t total) {
  using C_ = compute_t<S>;
  const int64_t L = (C / G) * HW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = int64_t(Index(i) / Index(L));
    const int64_t c = int64_t((Index(i) / Index(HW)) % Index(C));
    const C_ scale = rstd[row] * (weight ? weight[c] : C_(1));
    const C_ shift = (bias ? bias[c] : C_(0)) - mean[row] * scale;
    store_c(y + i, load_c(x + i) * scale + shift);
  }
}

// Block p * slices + s over slice s of plane p = (n, c): (sum g, sum g * (x - mean)) of the
// slice into part[p * slices + s], x centered on its group's mean as on the CPU (no later
// difference cancels); slice_total() adds a plane's slices in order.
template <class S>
__global__ void group_norm_plane_sums_kernel(const S* g, const S* x, const compute_t<S>* mean,
                                             int64_t C, int64_t G, int64_t HW, int64_t slices,
                                             Pair<acc_t<S>>* part) {
  using A = acc_t<S>;
  __shared__ Pair<A> smem[32];
  const int64_t p = int64_t(blockIdx.x) / slices, s = int64_t(blockIdx.x) % slices;
  const int64_t chunk = ceil_div(HW, slices);
  const int64_t k0 = s * chunk, k1 = min64(HW, k0 + chunk);
  const A mu = A(mean[(p / C) * G + (p % C) / (C / G)]);
  Pair<A> acc{A(0), A(0)};
  for (int64_t k = k0 + threadIdx.x; k < k1; k += blockDim.x) {
    const A gv = A(load_c(g + p * HW + k));
    acc.a += gv;
    acc.b += gv * (A(load_c(x + p * HW + k)) - mu);
  }
  acc = row_reduce(acc, PairPlus<A>{}, smem, false);
  if (threadIdx.x == 0) part[p * slices + s] = acc;
}

// One thread per row (n, group): dx = rs * w_c * g + k2 * x + k3 (coef = [k2 | k3] per row).
template <class S>
__global__ void group_norm_row_coef_kernel(const Pair<acc_t<S>>* sums, int64_t slices,
                                           const compute_t<S>* weight,
                                           const compute_t<S>* mean, const compute_t<S>* rstd,
                                           int64_t rows, int64_t G, int64_t Cg, int64_t HW,
                                           compute_t<S>* coef) {
  using C_ = compute_t<S>;
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const int64_t n = row / G, c0 = (row % G) * Cg, C = G * Cg;
  double A_ = 0, B = 0;  // sum g*w, sum g*w*(x - mean) over the group
  for (int64_t k = 0; k < Cg; ++k) {
    const double w = weight ? double(weight[c0 + k]) : 1.0;
    const Pair<acc_t<S>> ps = slice_total(sums, n * C + c0 + k, slices);
    A_ += w * double(ps.a);
    B += w * double(ps.b);
  }
  const double mu = double(mean[row]), rs = double(rstd[row]), M = double(Cg * HW);
  const double k2 = -rs * rs * rs * B / M;
  coef[row] = C_(k2);
  coef[rows + row] = C_(-rs * A_ / M - mu * k2);
}

template <class S, class Index>
__global__ void group_norm_dx_kernel(const S* g, const S* x, S* dx, const compute_t<S>* weight,
                                     const compute_t<S>* rstd, const compute_t<S>* coef,
                                     int64_t rows, int64_t C, int64_t G, int64_t HW, int64_t total) {
  using C_ = compute_t<S>;
  const int64_t L = (C / G) * HW;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = int64_t(Index(i) / Index(L));
    const int64_t c = int64_t((Index(i) / Index(HW)) % Index(C));
    const C_ k1 = rstd[row] * (weight ? weight[c] : C_(1));
    store_c(dx + i, k1 * load_c(g + i) + coef[row] * load_c(x + i) + coef[rows + row]);
  }
}

// One thread per channel: dweight = sum_n ds * rstd (ds centered), dbias = sum_n db.
template <class S>
__global__ void group_norm_param_kernel(const Pair<acc_t<S>>* sums, int64_t slices,
                                        const compute_t<S>* rstd, int64_t N, int64_t C, int64_t G,
                                        compute_t<S>* dweight, compute_t<S>* dbias) {
  using C_ = compute_t<S>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t grp = c / (C / G);
  double sw = 0, sb = 0;
  for (int64_t n = 0; n < N; ++n) {
    const Pair<acc_t<S>> s = slice_total(sums, n * C + c, slices);
    sw += double(s.b) * double(rstd[n * G + grp]);
    sb += double(s.a);
  }
  if (dweight) dweight[c] = C_(sw);
  if (dbias) dbias[c] = C_(sb);
}

void check_grid(const char* op, int64_t blocks) {
  EMBER_CHECK(blocks < (int64_t(1) << 31), ShapeError, "[", op, "] ", blocks,
              " rows exceed the CUDA grid limit");
}

template <class S>
void group_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                    const Tensor& mean, const Tensor& rstd, int64_t N, int64_t C, int64_t HW,
                    int64_t G, double eps) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t rows = N * G, L = (C / G) * HW, total = x.numel();
  check_grid("group_norm", rows);
  const S* xp = static_cast<const S*>(x.data_ptr());
  const int64_t slices = gn_slices(L, rows);
  if (slices == 1) {
    ::ember::cuda::launch_kernel(group_norm_fwd_kernel<S>, unsigned(rows), kThreads, 0, on.stream,
        xp, ptr<const C_>(weight), ptr<const C_>(bias), ptr<S>(y), ptr<C_>(mean), ptr<C_>(rstd), G, C / G,
        HW, eps);
    EMBER_CUDA_CHECK_LAUNCH();
    return;
  }
  // slices > 1 means rows < 1024 (bn_slices), within grid.y.
  Tensor part = workspace<Pair<A>>(rows * slices, x.device());
  const dim3 grid{unsigned(slices), unsigned(rows), 1u};
  if (fits_u32(total))
    ::ember::cuda::launch_kernel(batch_norm_stats_kernel<S, uint32_t>, grid, kThreads, 0, on.stream,
        xp, rows, L, L, slices, ptr<Pair<A>>(part));
  else
    ::ember::cuda::launch_kernel(batch_norm_stats_kernel<S, uint64_t>, grid, kThreads, 0, on.stream,
        xp, rows, L, L, slices, ptr<Pair<A>>(part));
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(group_norm_finish_kernel<S>, unsigned(ceil_div(rows, kThreads)), kThreads, 0,
                               on.stream, xp, ptr<const Pair<A>>(part), slices, rows, L, eps, ptr<C_>(mean),
                               ptr<C_>(rstd));
  EMBER_CUDA_CHECK_LAUNCH();
  const unsigned blocks = unsigned(grid_for(total));
  if (fits_u32(total))
    ::ember::cuda::launch_kernel(group_norm_affine_kernel<S, uint32_t>, blocks, kThreads, 0, on.stream,
        xp, ptr<const C_>(weight), ptr<const C_>(bias), ptr<const C_>(mean), ptr<const C_>(rstd), ptr<S>(y), C,
        G, HW, total);
  else
    ::ember::cuda::launch_kernel(group_norm_affine_kernel<S, uint64_t>, blocks, kThreads, 0, on.stream,
        xp, ptr<const C_>(weight), ptr<const C_>(bias), ptr<const C_>(mean), ptr<const C_>(rstd), ptr<S>(y), C,
        G, HW, total);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S>
void group_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& mean,
                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                    const Tensor& dbias, int64_t N, int64_t C, int64_t HW, int64_t G) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const S* xp = static_cast<const S*>(x.data_ptr());
  const int64_t rows = N * G, total = x.numel();
  const int64_t planes = N * C, slices = gn_slices(HW, planes);  // slices > 1: planes < 1024
  check_grid("group_norm_backward", planes * slices);
  Tensor sums = workspace<Pair<A>>(planes * slices, x.device());
  ::ember::cuda::launch_kernel(group_norm_plane_sums_kernel<S>, unsigned(planes * slices), kThreads, 0, on.stream,
      gp, xp, ptr<const C_>(mean), C, G, HW, slices, ptr<Pair<A>>(sums));
  EMBER_CUDA_CHECK_LAUNCH();
  const C_* mp = ptr<const C_>(mean);
  const C_* rp = ptr<const C_>(rstd);
  if (dx.defined()) {
    Tensor coef = workspace<C_>(2 * rows, x.device());
    ::ember::cuda::launch_kernel(group_norm_row_coef_kernel<S>, unsigned(ceil_div(rows, kThreads)), kThreads,
                                 0, on.stream,
        ptr<Pair<A>>(sums), slices, ptr<const C_>(weight), mp, rp, rows, G, C / G, HW, ptr<C_>(coef));
    EMBER_CUDA_CHECK_LAUNCH();
    const unsigned blocks = unsigned(grid_for(total));
    if (fits_u32(total))
      ::ember::cuda::launch_kernel(group_norm_dx_kernel<S, uint32_t>, blocks, kThreads, 0, on.stream,
          gp, xp, ptr<S>(dx), ptr<const C_>(weight), rp, ptr<const C_>(coef), rows, C, G, HW, total);
    else
      ::ember::cuda::launch_kernel(group_norm_dx_kernel<S, uint64_t>, blocks, kThreads, 0, on.stream,
          gp, xp, ptr<S>(dx), ptr<const C_>(weight), rp, ptr<const C_>(coef), rows, C, G, HW, total);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (dweight.defined() || dbias.defined()) {
    ::ember::cuda::launch_kernel(group_norm_param_kernel<S>, unsigned(ceil_div(C, kThreads)), kThreads, 0, on.stream,
        ptr<Pair<A>>(sums), slices, rp, N, C, G, ptr<C_>(dweight), ptr<C_>(dbias));
    EMBER_CUDA_CHECK_LAUNCH();
  }
}

// ---- RMS norm ----

// G threads (a block row) per row: rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w.
template <class S>
__global__ void rms_norm_fwd_kernel(const S* x, const compute_t<S>* weight, S* y,
                                    compute_t<S>* rstd, int64_t rows, int64_t cols, double eps) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  __shared__ A smem[kThreads];  // 32 per block row, at most 8 block rows
  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = r < rows;
  const S* xr = x + (valid ? r : 0) * cols;
  A sq = A(0);
  if (valid)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) {
      const A v = A(load_c(xr + k));
      sq += v * v;
    }
  sq = row_reduce(sq, Plus<A>{}, smem, true);
  if (!valid) return;
  const C_ rs = C_(A(1) / sqrt(sq / A(cols) + A(eps)));
  if (threadIdx.x == 0) rstd[r] = rs;
  S* yr = y + r * cols;
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
    store_c(yr + k, load_c(xr + k) * rs * (weight ? weight[k] : C_(1)));
}

// dx = rs * g * w - rs^3 * mean(g * w * x) * x, one block row per row.
template <class S>
__global__ void rms_norm_bwd_kernel(const S* g, const S* x, const compute_t<S>* weight,
                                    const compute_t<S>* rstd, S* dx, int64_t rows, int64_t cols) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  __shared__ A smem[kThreads];
  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = r < rows;
  const int64_t base = (valid ? r : 0) * cols;
  A s = A(0);
  if (valid)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
      s += A(load_c(g + base + k)) * A(weight ? weight[k] : C_(1)) * A(load_c(x + base + k));
  s = row_reduce(s, Plus<A>{}, smem, true);
  if (!valid) return;
  const C_ rs = rstd[r];
  const C_ k2 = C_(-double(rs) * double(rs) * double(rs) * double(s) / double(cols));
  for (int64_t k = threadIdx.x; k < cols; k += blockDim.x)
    store_c(dx + base + k,
            rs * load_c(g + base + k) * (weight ? weight[k] : C_(1)) + k2 * load_c(x + base + k));
}

// dweight pass 1: block (32 columns) x (8 row lanes) sums g * x * rstd over one chunk of rows.
template <class S>
__global__ void rms_norm_param_kernel(const S* g, const S* x, const compute_t<S>* rstd,
                                      int64_t rows, int64_t cols, int64_t chunk_rows,
                                      acc_t<S>* part) {
  using A = acc_t<S>;
  __shared__ A smem[kThreads];
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  A acc = A(0);
  if (k < cols) {
    const int64_t r1 = min64(rows, (chunk + 1) * chunk_rows);
    for (int64_t r = chunk * chunk_rows + threadIdx.y; r < r1; r += blockDim.y)
      acc += A(load_c(g + r * cols + k)) * A(load_c(x + r * cols + k)) * A(rstd[r]);
  }
  smem[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || k >= cols) return;
  for (unsigned yy = 1; yy < blockDim.y; ++yy) acc += smem[yy * blockDim.x + threadIdx.x];
  part[chunk * cols + k] = acc;
}

template <class S>
__global__ void rms_norm_param_finish_kernel(const acc_t<S>* part, int64_t chunks, int64_t cols,
                                             compute_t<S>* dweight) {
  using A = acc_t<S>;
  const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= cols) return;
  A s = A(0);
  for (int64_t c = 0; c < chunks; ++c) s += part[c * cols + k];
  dweight[k] = compute_t<S>(s);
}

struct RowLaunch {
  int g, rows_per_block;
  int64_t blocks;
};
RowLaunch row_launch(int64_t rows, int64_t len, const char* op) {
  RowLaunch l;
  l.g = threads_per_row(len);
  l.rows_per_block = std::max(1, kThreads / l.g);
  l.blocks = ceil_div(rows, l.rows_per_block);
  check_grid(op, l.blocks);
  return l;
}

template <class S>
void rms_norm_fwd(const Tensor& x, const Tensor& weight, const Tensor& y, const Tensor& rstd,
                  int64_t cols, double eps) {
  using C_ = compute_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t rows = rstd.numel();
  const RowLaunch l = row_launch(rows, cols, "rms_norm");
  ::ember::cuda::launch_kernel(rms_norm_fwd_kernel<S>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                               0, on.stream,
      static_cast<const S*>(x.data_ptr()), ptr<const C_>(weight),
                                        ptr<S>(y), ptr<C_>(rstd), rows, cols, eps);
  EMBER_CUDA_CHECK_LAUNCH();
}

template <class S>
void rms_norm_bwd(const Tensor& grad, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                  const Tensor& dx, const Tensor& dweight, int64_t cols) {
  using C_ = compute_t<S>;
  using A = acc_t<S>;
  const auto on = ember::cuda::detail::on_device(x.device());
  const int64_t rows = rstd.numel();
  const S* gp = static_cast<const S*>(grad.data_ptr());
  const S* xp = static_cast<const S*>(x.data_ptr());
  const C_* rp = ptr<const C_>(rstd);
  if (dx.defined()) {
    const RowLaunch l = row_launch(rows, cols, "rms_norm_backward");
    ::ember::cuda::launch_kernel(rms_norm_bwd_kernel<S>, unsigned(l.blocks), dim3(unsigned(l.g), unsigned(l.rows_per_block)),
                                 0, on.stream,
        gp, xp, ptr<const C_>(weight), rp, ptr<S>(dx), rows, cols);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (!dweight.defined()) return;
  // Chunks from the shape alone (fixed summation order), enough blocks to fill the device.
  constexpr int bx = 32, by = kThreads / bx;
  const int64_t col_blocks = ceil_div(cols, bx);
  int64_t chunks = std::max<int64_t>(1, std::min(ceil_div(1024, col_blocks), ceil_div(rows, by * 32)));
  chunks = std::min<int64_t>(chunks, 65535);
  const int64_t chunk_rows = ceil_div(rows, chunks);
  chunks = ceil_div(rows, chunk_rows);
  check_grid("rms_norm_backward", col_blocks);
  Tensor part = workspace<A>(chunks * cols, x.device());
  ::ember::cuda::launch_kernel(rms_norm_param_kernel<S>, dim3(unsigned(col_blocks), unsigned(chunks)), dim3(bx, by),
                               0, on.stream,
      gp, xp, rp, rows, cols, chunk_rows, ptr<A>(part));
  EMBER_CUDA_CHECK_LAUNCH();
  ::ember::cuda::launch_kernel(rms_norm_param_finish_kernel<S>, unsigned(ceil_div(cols, kThreads)), kThreads,
                               0, on.stream,
      ptr<const A>(part), chunks, cols, ptr<C_>(dweight));
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

void batch_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& y, const Tensor& mean, const Tensor& invstd,
                           const Tensor& running_mean, const Tensor& running_var, int64_t N,
                           int64_t C, int64_t HW, bool training, double momentum, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    batch_norm_fwd<decltype(tag)>(x, weight, bias, y, mean, invstd, running_mean, running_var, N,
                                  C, HW, training, momentum, eps);
  });
}

void batch_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& invstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C,
                           int64_t HW, bool training) {
  visit_floating(x.dtype(), [&](auto tag) {
    batch_norm_bwd<decltype(tag)>(grad, x, weight, mean, invstd, dx, dweight, dbias, N, C, HW,
                                  training);
  });
}

void group_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& y, const Tensor& mean, const Tensor& rstd, int64_t N,
                           int64_t C, int64_t HW, int64_t G, double eps) {
  visit_floating(x.dtype(), [&](auto tag) {
    group_norm_fwd<decltype(tag)>(x, weight, bias, y, mean, rstd, N, C, HW, G, eps);
  });
}

void group_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, int64_t N, int64_t C,
                           int64_t HW, int64_t G) {
  visit_floating(x.dtype(), [&](auto tag) {
    group_norm_bwd<decltype(tag)>(grad, x, weight, mean, rstd, dx, dweight, dbias, N, C, HW, G);
  });
}

void rms_norm_fwd_kernel(const Tensor& x, const Tensor& weight, const Tensor& y,
                         const Tensor& rstd, int64_t cols, double eps) {
  visit_floating(x.dtype(),
                 [&](auto tag) { rms_norm_fwd<decltype(tag)>(x, weight, y, rstd, cols, eps); });
}

void rms_norm_bwd_kernel(const Tensor& grad, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight,
                         int64_t cols) {
  visit_floating(x.dtype(), [&](auto tag) {
    rms_norm_bwd<decltype(tag)>(grad, x, weight, rstd, dx, dweight, cols);
  });
}

}  // namespace ember::ops::cuda
