// CPU driver of the fused classifier (Note [fused classifier memory] in
// ember/ops/classifier.h): the per-row loss + dlogits pass and the backward's scale.
//
// Invariants:
// - Rows are split across OpenMP threads (above kGrain elements of work); each row is done
//   start to finish by one thread, in the compute type (f32 for 16-bit storage, rounded once
//   on store), so results do not depend on the thread count. The total is summed serially in
//   row order, in double.
// - Only the first `classes` columns of a row take part; the padded ones are written 0.
// - Targets are validated serially before the parallel region (nothing inside it throws),
//   with cross_entropy's IndexError message.
// - The same math as cross_entropy's CPU driver (ops/cpu/nn.cpp): max-subtracted
//   log-sum-exp, -log p_t = (max - x_t) + log(sum). A -inf logit is not special-cased here (a
//   GEMM output is -inf only when its inputs hold infinities).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "eigen_util.h"
#include "kernels/classifier.h"
#include "kernels/target_dtype.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kGrain = 32768;  // elements of work below which one thread is faster

template <class S, class T>
void fwd(const Tensor& logits, const Tensor& target, const Tensor& loss, const Tensor& grad_factor,
         int64_t classes, int64_t ignore, bool mean, bool write_grad) {
  using C = compute_t<S>;  // also the stats type
  const int64_t n = logits.sizes()[0], vp = logits.sizes()[1];
  S* lp = logits.data_ptr<S>();
  const T* tp = target.data_ptr<T>();
  const int64_t ts = target.strides()[0];
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = int64_t(tp[i * ts]);
    check_class_target("linear_cross_entropy", t, i, classes, ignore);
    kept += t != ignore;
  }
  std::vector<double> row_loss(size_t(n), 0.0);
  const bool threads = n > 1 && n * vp >= kGrain;
#pragma omp parallel if (threads)
  {
    Buffer<C> buf;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      S* row = lp + i * vp;
      const int64_t t = int64_t(tp[i * ts]);
      if (t == ignore) {
        if (write_grad) std::fill(row, row + vp, S(C(0)));
        continue;
      }
      // The row in C: in place when the storage already is C, else converted into buf.
      C* x;
      if constexpr (std::is_same_v<S, C>) {
        x = row;
      } else {
        buf.resize(size_t(classes));
        for (int64_t k = 0; k < classes; ++k) buf[size_t(k)] = C(row[k]);
        x = buf.data();
      }
      VecMap<C> xv(x, classes);
      const C m = xv.maxCoeff();
      const C s = (xv - m).exp().sum();
      row_loss[size_t(i)] = double((m - x[t]) + std::log(s));
      if (!write_grad) continue;
      xv = (xv - m).exp() * (C(1) / s);  // softmax, then minus the one-hot
      x[t] -= C(1);
      if constexpr (!std::is_same_v<S, C>)
        for (int64_t k = 0; k < classes; ++k) row[k] = S(x[k]);
      std::fill(row + classes, row + vp, S(C(0)));
    }
  }
  double total = 0;  // serial and in row order: the same value for any thread count
  for (double v : row_loss) total += v;
  if (mean) total /= double(kept);  // 0/0 = NaN, as in PyTorch
  *loss.data_ptr<C>() = C(total);
  if (write_grad) *grad_factor.data_ptr<C>() = mean ? C(1.0 / double(std::max<int64_t>(kept, 1))) : C(1);
}

template <class S>
void scale(const Tensor& t, const Tensor& grad, const Tensor& factor) {
  using C = compute_t<S>;
  const C s = *grad.data_ptr<C>() * *factor.data_ptr<C>();
  S* p = t.data_ptr<S>();
  const int64_t n = t.numel();
  if constexpr (std::is_same_v<S, C>) {
    VecMap<C> v(p, n);
    v *= s;
  } else {
#pragma omp parallel for schedule(static) if (n >= 4 * kGrain)
    for (int64_t k = 0; k < n; ++k) p[k] = S(C(p[k]) * s);
  }
}

}  // namespace

void linear_cross_entropy_fwd_kernel(const Tensor& logits, const Tensor& target, const Tensor& loss,
                                     const Tensor& grad_factor, int64_t classes, int64_t ignore_index,
                                     bool mean, bool write_grad) {
  visit_floating(logits.dtype(), [&](auto tag) {
    visit_target(target.dtype(), "linear_cross_entropy", [&](auto ttag) {
      fwd<decltype(tag), decltype(ttag)>(logits, target, loss, grad_factor, classes, ignore_index, mean,
                                         write_grad);
    });
  });
}

void linear_cross_entropy_scale_kernel(const Tensor& t, const Tensor& grad, const Tensor& factor) {
  visit_floating(t.dtype(), [&](auto tag) { scale<decltype(tag)>(t, grad, factor); });
}

}  // namespace ember::ops::cpu
