// CPU driver of the foreach family (kernels/foreach.h).
//
// Invariants:
// - One OpenMP loop covers every element of every tensor: the tensors are cut into chunks of
//   kChunk elements (a chunk never spans two tensors), shared statically among threads.
// - foreach_norm: each chunk yields a partial in double (sums over 8 fixed lanes, combined in
//   a fixed tree), and the partials are combined left to right in list order by one thread, so
//   the result is a fixed function of the sizes and values: 1 thread and 16 agree bit for bit.
//   max |x| propagates NaN.
// - foreach_mul: each element is x = P(C(x) * C(P(s))), mul_'s arithmetic (the scalar rounded to
//   the tensor's dtype, the product in the compute type, rounded once).
// - Nothing throws inside the parallel region (the front validated everything).
#include <omp.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/foreach.h"
#include "multi_tensor.h"

namespace ember::ops::cpu {

namespace {

constexpr int64_t kChunk = 16384;  // elements per work item (and per norm partial)
constexpr int64_t kGrain = 32768;  // total elements below which one thread is faster

enum class NormKind { sum_abs, sum_sq, max_abs };

// The partial of one contiguous run. Sums use 8 independent lanes (so the loop vectorizes
// without reassociation) combined as a balanced tree.
template <NormKind K, class S>
double chunk_partial(const S* x, int64_t n) {
  using C = compute_t<S>;
  if constexpr (K == NormKind::max_abs) {
    C m = 0;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      const C a = std::fabs(C(x[j]));
      nan |= a != a;
      m = a > m ? a : m;
    }
    return nan ? std::numeric_limits<double>::quiet_NaN() : double(m);
  } else {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    auto f = [](S v) {
      const double d = double(C(v));
      if constexpr (K == NormKind::sum_sq) return d * d;
      else return std::fabs(d);
    };
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
      for (int l = 0; l < 8; ++l) acc[l] += f(x[j + l]);
    for (int l = 0; j < n; ++j, ++l) acc[l] += f(x[j]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  }
}

template <NormKind K>
double norm_of(const TensorList& ts) {
  int64_t total = 0;
  const std::vector<WorkItem> work = make_work(ts, kChunk, total);
  const int64_t n = int64_t(work.size());
  std::vector<double> partial(size_t(n), 0.0);
#pragma omp parallel for schedule(static) if (total >= kGrain)
  for (int64_t w = 0; w < n; ++w) {
    const WorkItem& it = work[size_t(w)];
    const Tensor& t = ts[size_t(it.tensor)];
    partial[size_t(w)] = visit_floating(t.dtype(), [&](auto tag) {
      using S = decltype(tag);
      return chunk_partial<K>(static_cast<const S*>(t.data_ptr()) + it.begin, it.end - it.begin);
    });
  }
  double acc = 0;
  for (double p : partial) {
    if constexpr (K == NormKind::max_abs) {
      if (acc == acc && (p != p || p > acc)) acc = p;  // the first NaN stays
    } else {
      acc += p;
    }
  }
  return K == NormKind::sum_sq ? std::sqrt(acc) : acc;
}

// The multiplier of mul_ for a tensor of type P: the scalar rounded to P, in P's compute type.
template <class P>
compute_t<P> rounded_scalar(double s) {
  if constexpr (std::is_same_v<P, double>) return s;
  else return compute_t<P>(P(float(s)));
}

}  // namespace

void foreach_norm_kernel(const TensorList& tensors, double ord, const Tensor& out) {
  double r = 0;
  if (ord == 2) r = norm_of<NormKind::sum_sq>(tensors);
  else if (ord == 1) r = norm_of<NormKind::sum_abs>(tensors);
  else r = norm_of<NormKind::max_abs>(tensors);
  if (out.dtype() == DType::f64) *static_cast<double*>(out.data_ptr()) = r;
  else *static_cast<float*>(out.data_ptr()) = float(r);
}

void foreach_mul_kernel(const TensorList& tensors, const Tensor& scalar, double value) {
  const double s = scalar.defined() ? visit_floating(scalar.dtype(), [&](auto tag) {
    using Sc = decltype(tag);
    return double(compute_t<Sc>(*static_cast<const Sc*>(scalar.data_ptr())));
  })
                                    : value;
  int64_t total = 0;
  const std::vector<WorkItem> work = make_work(tensors, kChunk, total);
  const int64_t n = int64_t(work.size());
#pragma omp parallel for schedule(static) if (total >= kGrain)
  for (int64_t w = 0; w < n; ++w) {
    const WorkItem& it = work[size_t(w)];
    const Tensor& t = tensors[size_t(it.tensor)];
    visit_floating(t.dtype(), [&](auto tag) {
      using P = decltype(tag);
      using C = compute_t<P>;
      const C m = rounded_scalar<P>(s);
      P* x = static_cast<P*>(t.data_ptr()) + it.begin;
      const int64_t len = it.end - it.begin;
      for (int64_t j = 0; j < len; ++j) x[j] = P(C(x[j]) * m);
    });
  }
}

}  // namespace ember::ops::cpu
