// CUDA driver for the fused optimizer updates (Adam/AdamW, SGD with momentum): a
// multi-tensor apply (ops/cuda/multi_tensor.cuh, Note [multi-tensor tables]). The host writes
// a table (pointers, sizes, per-tensor scalars) into the kernel's parameter block and launches
// one kernel over the chunks of every tensor in it.
//
// Invariants:
// - One launch per parameter dtype present (usually one), and within a dtype one launch per
//   kMaxTensorsPerLaunch tensors. Block b handles chunk b of the launch.
// - The math is the CPU driver's (ops/cpu/optim.cpp), element for element, in the compute
//   type (double for f64, float otherwise); only FMA contraction may differ in the last bit.
// - Launches go to this thread's current stream, like every other ops/cuda launch, and each
//   is followed by a check of the last error.
#include <type_traits>
#include <utility>
#include <vector>

#include "ember/cuda/launch.h"
#include "ember/cuda/check.h"
#include "ember/cuda/device_guard.h"
#include "ember/cuda/stream_handle.h"
#include "kernels/optim.h"
#include "multi_tensor.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kThreads = 512;
constexpr int64_t kChunk = kMultiTensorChunk;  // elements per block (32 per thread)

template <class C>
__device__ __forceinline__ C device_sqrt(C x) {
  if constexpr (std::is_same_v<C, float>) return sqrtf(x);
  else return sqrt(x);
}

template <class P>
using state_t = std::conditional_t<std::is_same_v<P, double>, double, float>;

template <class C>
struct AdamConsts {
  C beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay;
  bool l2, decoupled, maximize;
};

// Note [capturable optimizer step] (ops/src/optim.cpp): with `lr` set, the scalars come from
// device memory (lr, steps[t.a[i]]) and the host's t.a/t.b/k.decay are not used; found_inf,
// when set and non-zero, makes every block return before touching anything.
struct DeviceSchedule {
  const double* lr = nullptr;
  const double* steps = nullptr;
  const float* found_inf = nullptr;
  double beta1 = 0, beta2 = 0, weight_decay = 0;
};

// Table operands: p, g, m, v and vmax (null without amsgrad).
template <class P, class S, class C>
__global__ void adam_multi_tensor_kernel(const __grid_constant__ TensorTable<5> t,
                                         const AdamConsts<C> k, const DeviceSchedule sched) {
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(t, block);
  const int64_t begin = (block - t.chunk_begin[i]) * kChunk;
  const int64_t end = min(begin + kChunk, t.numel[i]);
  P* p = static_cast<P*>(t.ptr[0][i]);
  const P* g = static_cast<const P*>(t.ptr[1][i]);
  S* m = static_cast<S*>(t.ptr[2][i]);
  S* v = static_cast<S*>(t.ptr[3][i]);
  S* vmax = static_cast<S*>(t.ptr[4][i]);
  C neg_step_size = C(-t.a[i]), bias_corr2_sqrt = C(t.b[i]), decay = k.decay;
  if (sched.lr != nullptr) {
    if (sched.found_inf != nullptr && *sched.found_inf != 0.0f) return;
    const double lr = *sched.lr;
    const AdamTensorScalars s =
        adam_tensor_scalars(lr, sched.steps[int64_t(t.a[i])] + 1, sched.beta1, sched.beta2);
    neg_step_size = C(-s.step_size);
    bias_corr2_sqrt = C(s.bias_corr2_sqrt);
    decay = C(1 - lr * sched.weight_decay);
  }
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    C grad = C(g[j]);
    if (k.maximize) grad = -grad;
    C param = C(p[j]);
    if (k.decoupled) param = param * decay;
    if (k.l2) grad = grad + k.weight_decay * param;
    const C mj = C(m[j]) * k.beta1 + k.one_minus_beta1 * grad;
    const C vj = C(v[j]) * k.beta2 + k.one_minus_beta2 * grad * grad;
    m[j] = S(mj);
    v[j] = S(vj);
    C v_used = vj;
    if (vmax != nullptr) {
      v_used = torch_maximum(C(vmax[j]), vj);
      vmax[j] = S(v_used);
    }
    const C denom = device_sqrt(v_used) / bias_corr2_sqrt + k.eps;
    p[j] = P(param + neg_step_size * mj / denom);
  }
}

// steps[i] += 1 for every i, unless found_inf is set and non-zero. Launched after the update
// kernel on the same stream, so every block of the update has read the old counts.
__global__ void advance_steps_kernel(double* steps, int64_t n, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    steps[i] += 1;
}

template <class C>
struct SgdConsts {
  C lr_neg, momentum, one_minus_dampening, weight_decay;
  bool has_wd, has_momentum, nesterov, maximize;
};

template <class P, class S, class C>
__global__ void sgd_multi_tensor_kernel(const __grid_constant__ TensorTable<3> t,
                                        const SgdConsts<C> k) {
  const int64_t block = blockIdx.x;
  const int i = tensor_of_block(t, block);
  const int64_t begin = (block - t.chunk_begin[i]) * kChunk;
  const int64_t end = min(begin + kChunk, t.numel[i]);
  P* p = static_cast<P*>(t.ptr[0][i]);
  const P* g = static_cast<const P*>(t.ptr[1][i]);
  S* buf = static_cast<S*>(t.ptr[2][i]);  // null without momentum
  const bool first = t.a[i] != 0;
  for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
    C d = C(g[j]);
    if (k.maximize) d = -d;
    const C param = C(p[j]);
    if (k.has_wd) d = d + k.weight_decay * param;
    if (k.has_momentum) {
      const C b = first ? d : C(buf[j]) * k.momentum + k.one_minus_dampening * d;
      buf[j] = S(b);
      d = k.nesterov ? d + k.momentum * b : b;
    }
    p[j] = P(param + k.lr_neg * d);
  }
}

// One multi-tensor launch per dtype (and per full table). row_scalars(i) gives tensor i's
// (a, b) table entries: the host scalars, or with a schedule the index into its steps.
template <class RowScalars>
void launch_adam(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                 const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs, const AdamStepParams& hp,
                 const DeviceSchedule& sched,
                 RowScalars row_scalars, cudaStream_t stream) {
  for (const auto& [dtype, idx] : group_by_dtype(params)) {
    visit_floating(dtype, [&](auto tag) {
      using P = decltype(tag);
      using S = state_t<P>;
      using C = S;
      const AdamConsts<C> k{C(hp.beta1), C(hp.beta2), C(1 - hp.beta1), C(1 - hp.beta2), C(hp.eps),
                            C(hp.weight_decay), C(1 - hp.lr * hp.weight_decay),
                            !hp.decoupled_weight_decay && hp.weight_decay != 0,
                            hp.decoupled_weight_decay, hp.maximize};
      launch_tables<5>(
          params, idx,
          [&](TensorTable<5>& t, int row, size_t i) {
            t.ptr[0][row] = params[i].data_ptr();
            t.ptr[1][row] = grads[i].data_ptr();
            t.ptr[2][row] = exp_avgs[i].data_ptr();
            t.ptr[3][row] = exp_avg_sqs[i].data_ptr();
            t.ptr[4][row] = hp.amsgrad ? max_exp_avg_sqs[i].data_ptr() : nullptr;
            const std::pair<double, double> ab = row_scalars(i);
            t.a[row] = ab.first;
            t.b[row] = ab.second;
          },
          [&](const TensorTable<5>& t, int64_t blocks) {
            ::ember::cuda::launch_kernel(adam_multi_tensor_kernel<P, S, C>, unsigned(blocks), kThreads, 0, stream,
                t, k, sched);
            EMBER_CUDA_CHECK_LAUNCH();
          });
    });
  }
}

}  // namespace

void adam_step_kernel(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                      const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                      const std::vector<AdamTensorScalars>& scalars, const AdamStepParams& hp) {
  const auto on = ember::cuda::detail::on_device(params[0].device().index);
  cudaStream_t stream = on.stream;
  launch_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp, DeviceSchedule{},
              [&](size_t i) { return std::make_pair(scalars[i].step_size, scalars[i].bias_corr2_sqrt); },
              stream);
}

void adam_step_scheduled_kernel(const TensorList& params, const TensorList& grads,
                                const TensorList& exp_avgs, const TensorList& exp_avg_sqs,
                                const TensorList& max_exp_avg_sqs, const Tensor& lr, const Tensor& steps,
                                const std::vector<size_t>& step_index, const Tensor& found_inf,
                                const AdamStepParams& hp) {
  const auto on = ember::cuda::detail::on_device(steps.device().index);
  cudaStream_t stream = on.stream;
  DeviceSchedule sched;
  sched.lr = static_cast<const double*>(lr.data_ptr());
  sched.steps = static_cast<const double*>(steps.data_ptr());
  sched.found_inf = found_inf.defined() ? static_cast<const float*>(found_inf.data_ptr()) : nullptr;
  sched.beta1 = hp.beta1;
  sched.beta2 = hp.beta2;
  sched.weight_decay = hp.weight_decay;
  launch_adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, hp, sched,
              [&](size_t i) { return std::make_pair(double(step_index[i]), 0.0); }, stream);
  const int64_t n = steps.numel();
  ::ember::cuda::launch_kernel(advance_steps_kernel, unsigned((n + kThreads - 1) / kThreads), kThreads, 0, stream,
      static_cast<double*>(steps.data_ptr()), n, sched.found_inf);
  EMBER_CUDA_CHECK_LAUNCH();
}

void sgd_step_kernel(const TensorList& params, const TensorList& grads,
                     const TensorList& momentum_buffers, const std::vector<uint8_t>& first,
                     const SgdStepParams& hp) {
  const auto on = ember::cuda::detail::on_device(params[0].device().index);
  cudaStream_t stream = on.stream;
  const bool has_momentum = hp.momentum != 0;
  for (const auto& [dtype, idx] : group_by_dtype(params)) {
    visit_floating(dtype, [&](auto tag) {
      using P = decltype(tag);
      using S = state_t<P>;
      using C = S;
      const SgdConsts<C> k{C(-hp.lr), C(hp.momentum), C(1 - hp.dampening), C(hp.weight_decay),
                           hp.weight_decay != 0, has_momentum, hp.nesterov, hp.maximize};
      launch_tables<3>(
          params, idx,
          [&](TensorTable<3>& t, int row, size_t i) {
            t.ptr[0][row] = params[i].data_ptr();
            t.ptr[1][row] = grads[i].data_ptr();
            t.ptr[2][row] = has_momentum ? momentum_buffers[i].data_ptr() : nullptr;
            t.a[row] = has_momentum && first[i] != 0 ? 1.0 : 0.0;
            t.b[row] = 0.0;
          },
          [&](const TensorTable<3>& t, int64_t blocks) {
            ::ember::cuda::launch_kernel(sgd_multi_tensor_kernel<P, S, C>, unsigned(blocks), kThreads, 0, stream,
                t, k);
            EMBER_CUDA_CHECK_LAUNCH();
          });
    });
  }
}

}  // namespace ember::ops::cuda
