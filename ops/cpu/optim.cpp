// CPU driver for the fused optimizer updates (Adam/AdamW, SGD with momentum).
//
// Invariants:
// - One OpenMP parallel loop covers every element of every tensor of the list: the tensors
//   are cut into fixed chunks of kChunk elements (a chunk never spans two tensors), and the
//   chunks are shared statically among threads. Each element is updated by exactly one
//   thread, so results do not depend on the thread count.
// - The per-element math is PyTorch 1.13's single-tensor algorithm, operation for
//   operation, in the compute type C (double for f64 parameters, float otherwise); the
//   scalars are rounded once from double to C, as PyTorch passes Python floats to kernels.
// - Nothing throws inside the parallel region (the front validated everything).
#include <omp.h>

#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/optim.h"
#include "multi_tensor.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kChunk = 8192;   // elements per work item
constexpr int64_t kGrain = 32768;  // total elements below which one thread is faster

// body(item) for every work item, in one parallel loop when the total is large enough.
template <class F>
void for_each_chunk(const std::vector<WorkItem>& work, int64_t total, F&& body) {
  const int64_t n = int64_t(work.size());
#pragma omp parallel for schedule(static) if (total >= kGrain)
  for (int64_t w = 0; w < n; ++w) body(work[size_t(w)]);
}

// The state type of a parameter type (optim_state_dtype): double for double, else float.
template <class P>
using state_t = std::conditional_t<std::is_same_v<P, double>, double, float>;

template <class C>
struct AdamConsts {
  C beta1, beta2, one_minus_beta1, one_minus_beta2, eps, weight_decay, decay;
  bool l2, decoupled, maximize;
};

// The flags are template parameters so the loop body has no branches and vectorizes
// (with -fno-math-errno, sqrt becomes one vector instruction). vmax is null without amsgrad.
template <bool Decoupled, bool L2, bool Maximize, bool AMSGrad, class P, class S, class C>
void adam_range(P* __restrict p, const P* __restrict g, S* __restrict m, S* __restrict v,
                S* __restrict vmax, int64_t n, const AdamConsts<C>& k, C neg_step_size, C bias_corr2_sqrt) {
  const C beta1 = k.beta1, beta2 = k.beta2, omb1 = k.one_minus_beta1, omb2 = k.one_minus_beta2;
  const C eps = k.eps, wd = k.weight_decay, decay = k.decay;
  for (int64_t j = 0; j < n; ++j) {
    C grad = C(g[j]);
    if constexpr (Maximize) grad = -grad;
    C param = C(p[j]);
    if constexpr (Decoupled) param = param * decay;
    if constexpr (L2) grad = grad + wd * param;
    const C mj = C(m[j]) * beta1 + omb1 * grad;
    const C vj = C(v[j]) * beta2 + omb2 * grad * grad;
    m[j] = S(mj);
    v[j] = S(vj);
    C v_used = vj;
    if constexpr (AMSGrad) {
      v_used = torch_maximum(C(vmax[j]), vj);
      vmax[j] = S(v_used);
    }
    const C denom = std::sqrt(v_used) / bias_corr2_sqrt + eps;
    p[j] = P(param + neg_step_size * mj / denom);
  }
}

template <class P, class S, class C>
void adam_range(P* p, const P* g, S* m, S* v, S* vmax, int64_t n, const AdamConsts<C>& k,
                C neg_step_size, C bias_corr2_sqrt) {
  auto run = [&]<bool D, bool L, bool M>() {
    if (vmax != nullptr) adam_range<D, L, M, true, P, S, C>(p, g, m, v, vmax, n, k, neg_step_size, bias_corr2_sqrt);
    else adam_range<D, L, M, false, P, S, C>(p, g, m, v, vmax, n, k, neg_step_size, bias_corr2_sqrt);
  };
  const int flags = (k.decoupled ? 4 : 0) | (k.l2 ? 2 : 0) | (k.maximize ? 1 : 0);
  switch (flags) {
    case 0: return run.template operator()<false, false, false>();
    case 1: return run.template operator()<false, false, true>();
    case 2: return run.template operator()<false, true, false>();
    case 3: return run.template operator()<false, true, true>();
    case 4: return run.template operator()<true, false, false>();
    case 5: return run.template operator()<true, false, true>();
    case 6: return run.template operator()<true, true, false>();
    default: return run.template operator()<true, true, true>();
  }
}

template <class C>
struct SgdConsts {
  C lr_neg, momentum, one_minus_dampening, weight_decay;
  bool has_wd, has_momentum, nesterov, maximize;
};

template <class P, class S, class C>
void sgd_range(P* __restrict p, const P* __restrict g, S* __restrict buf, bool first, int64_t n,
               const SgdConsts<C>& k) {
  for (int64_t j = 0; j < n; ++j) {
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

}  // namespace

void adam_step_kernel(const TensorList& params, const TensorList& grads, const TensorList& exp_avgs,
                      const TensorList& exp_avg_sqs, const TensorList& max_exp_avg_sqs,
                      const std::vector<AdamTensorScalars>& scalars, const AdamStepParams& hp) {
  int64_t total = 0;
  const std::vector<WorkItem> work = make_work(params, kChunk, total);
  for_each_chunk(work, total, [&](const WorkItem& w) {
    const size_t i = size_t(w.tensor);
    visit_floating(params[i].dtype(), [&](auto tag) {
      using P = decltype(tag);
      using S = state_t<P>;
      using C = S;
      const AdamConsts<C> k{C(hp.beta1), C(hp.beta2), C(1 - hp.beta1), C(1 - hp.beta2), C(hp.eps),
                            C(hp.weight_decay), C(1 - hp.lr * hp.weight_decay),
                            !hp.decoupled_weight_decay && hp.weight_decay != 0,
                            hp.decoupled_weight_decay, hp.maximize};
      adam_range<P, S, C>(static_cast<P*>(params[i].data_ptr()) + w.begin,
                          static_cast<const P*>(grads[i].data_ptr()) + w.begin,
                          static_cast<S*>(exp_avgs[i].data_ptr()) + w.begin,
                          static_cast<S*>(exp_avg_sqs[i].data_ptr()) + w.begin,
                          hp.amsgrad ? static_cast<S*>(max_exp_avg_sqs[i].data_ptr()) + w.begin : nullptr,
                          w.end - w.begin, k,
                          C(-scalars[i].step_size), C(scalars[i].bias_corr2_sqrt));
    });
  });
}

void adam_step_scheduled_kernel(const TensorList& params, const TensorList& grads,
                                const TensorList& exp_avgs, const TensorList& exp_avg_sqs,
                                const TensorList& max_exp_avg_sqs, const Tensor& lr, const Tensor& steps,
                                const std::vector<size_t>& step_index, const Tensor& found_inf,
                                const AdamStepParams& hp) {
  if (found_inf.defined() && *static_cast<const float*>(found_inf.data_ptr()) != 0) return;
  double* counts = static_cast<double*>(steps.data_ptr());
  AdamStepParams now = hp;
  now.lr = *static_cast<const double*>(lr.data_ptr());
  std::vector<AdamTensorScalars> scalars;
  scalars.reserve(params.size());
  for (size_t k = 0; k < params.size(); ++k)
    scalars.push_back(adam_tensor_scalars(now.lr, counts[step_index[k]] + 1, hp.beta1, hp.beta2));
  if (!params.empty()) adam_step_kernel(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, scalars, now);
  for (int64_t i = 0; i < steps.numel(); ++i) counts[i] += 1;
}

void sgd_step_kernel(const TensorList& params, const TensorList& grads,
                     const TensorList& momentum_buffers, const std::vector<uint8_t>& first,
                     const SgdStepParams& hp) {
  int64_t total = 0;
  const std::vector<WorkItem> work = make_work(params, kChunk, total);
  const bool has_momentum = hp.momentum != 0;
  for_each_chunk(work, total, [&](const WorkItem& w) {
    const size_t i = size_t(w.tensor);
    visit_floating(params[i].dtype(), [&](auto tag) {
      using P = decltype(tag);
      using S = state_t<P>;
      using C = S;
      const SgdConsts<C> k{C(-hp.lr), C(hp.momentum), C(1 - hp.dampening), C(hp.weight_decay),
                           hp.weight_decay != 0, has_momentum, hp.nesterov, hp.maximize};
      S* buf = has_momentum ? static_cast<S*>(momentum_buffers[i].data_ptr()) + w.begin : nullptr;
      sgd_range<P, S, C>(static_cast<P*>(params[i].data_ptr()) + w.begin,
                         static_cast<const P*>(grads[i].data_ptr()) + w.begin, buf,
                         has_momentum && first[i] != 0, w.end - w.begin, k);
    });
  });
}

}  // namespace ember::ops::cpu
