// CPU driver of the sort family (kernels/sort.h): sort and topk per row on (key, index)
// entries with std::sort / std::nth_element, OpenMP over rows; inclusive scans over an
// [O, N, K] view, OpenMP over (o, column block).
//
// Invariants:
// - The order is Note [sort order] (ember/ops/sort.h). NaNs are partitioned out of each row
//   first (in index order) and placed at the end (ascending) or the front (descending), so the
//   comparator on the rest is the plain (key, index) order; -0.0 == 0.0 there, so they tie.
// - Scans accumulate floating types in double (as PyTorch's CPU cumsum/cumprod), integers in
//   int64 with two's-complement wrap-around; each output is a fixed sequential function of its
//   column, so the thread count never changes a result.
#include <omp.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/sort.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

template <class C>
struct Entry {
  C key;
  int64_t index;
};

template <class C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// The first k entries of a row in the row's order (Note [sort order]): descending puts NaNs
// first, ascending last. On return buf holds exactly min(k, n) entries in order.
template <class S, class Cmp>
void order_row_with(const S* row, int64_t n, int64_t k, bool descending, Cmp cmp,
                    std::vector<Entry<compute_t<S>>>& buf, std::vector<int64_t>& nans) {
  using C = compute_t<S>;
  buf.clear();
  nans.clear();
  if (k > 0 && k * 64 <= n) {
    // Small k: one streaming pass keeps the best k non-NaN entries in a heap whose top is the
    // worst of them, so almost every element costs one well-predicted comparison and nothing
    // is written (PyTorch materializes the row and partial_sorts it). k (not k minus the NaNs,
    // unknown until the end) is kept: the best k - #NaN are among them.
    auto visit = [&](int64_t j) {
      const C v = C(row[j]);
      if (is_nan(v)) {
        nans.push_back(j);
        return;
      }
      const Entry<C> e{v, j};
      if (int64_t(buf.size()) < k) {
        buf.push_back(e);
        std::push_heap(buf.begin(), buf.end(), cmp);
      } else if (cmp(e, buf.front())) {
        std::pop_heap(buf.begin(), buf.end(), cmp);
        buf.back() = e;
        std::push_heap(buf.begin(), buf.end(), cmp);
      }
    };
    // Once the heap is full, a block none of whose values could enter (all strictly worse
    // than the heap top's key, none NaN: !(v < t) is true for NaN) is skipped with one
    // vectorizable test; a block that may hold a candidate is visited element by element.
    constexpr int64_t kBlock = 16;
    int64_t j = 0;
    while (j < n) {
      if (int64_t(buf.size()) == k && j + kBlock <= n) {
        const C t = buf.front().key;
        bool maybe = false;
        if (descending) {
          for (int64_t i = 0; i < kBlock; ++i) maybe |= !(C(row[j + i]) < t);
        } else {
          for (int64_t i = 0; i < kBlock; ++i) maybe |= !(C(row[j + i]) > t);
        }
        if (!maybe) {
          j += kBlock;
          continue;
        }
      }
      for (const int64_t end = std::min(n, j + kBlock); j < end; ++j) visit(j);
    }
    std::sort_heap(buf.begin(), buf.end(), cmp);
  } else {
    for (int64_t j = 0; j < n; ++j) {
      const C v = C(row[j]);
      if (is_nan(v)) nans.push_back(j);
      else buf.push_back({v, j});
    }
    // How many of the non-NaN entries fall among the first k.
    const int64_t finite = int64_t(buf.size()), nn = int64_t(nans.size());
    const int64_t take = descending ? std::max<int64_t>(0, k - nn) : std::min(k, finite);
    if (take > 0) {
      if (take < finite) std::nth_element(buf.begin(), buf.begin() + take, buf.end(), cmp);
      std::sort(buf.begin(), buf.begin() + take, cmp);
    }
  }
  const int64_t nn = int64_t(nans.size());
  const int64_t take = descending ? std::max<int64_t>(0, k - nn) : std::min(k, int64_t(buf.size()));
  buf.resize(size_t(take));
  // Assemble the first k: NaN entries carry key NaN and their index.
  if (descending && nn > 0) {
    std::vector<Entry<C>> out;
    out.reserve(size_t(k));
    for (int64_t j = 0; j < std::min(k, nn); ++j) out.push_back({C(row[nans[size_t(j)]]), nans[size_t(j)]});
    out.insert(out.end(), buf.begin(), buf.end());
    buf.swap(out);
  } else if (!descending) {
    for (int64_t j = 0; int64_t(buf.size()) < k; ++j) buf.push_back({C(row[nans[size_t(j)]]), nans[size_t(j)]});
  }
}

template <class S>
void order_row(const S* row, int64_t n, int64_t k, bool descending,
               std::vector<Entry<compute_t<S>>>& buf, std::vector<int64_t>& nans) {
  using C = compute_t<S>;
  auto asc = [](const Entry<C>& a, const Entry<C>& b) {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  };
  auto desc = [](const Entry<C>& a, const Entry<C>& b) {
    return a.key > b.key || (a.key == b.key && a.index < b.index);
  };
  if (descending) order_row_with<S>(row, n, k, true, desc, buf, nans);
  else order_row_with<S>(row, n, k, false, asc, buf, nans);
}

template <class S>
void sort_rows(const Tensor& in, const Tensor& values, const Tensor& indices, int64_t k,
               bool descending) {
  using C = compute_t<S>;
  const int64_t M = in.sizes()[0], N = in.sizes()[1], rs = in.strides()[0];
  const S* x = static_cast<const S*>(in.data_ptr());
  S* vo = static_cast<S*>(values.data_ptr());
  int64_t* io = static_cast<int64_t*>(indices.data_ptr());
  auto body = [&](int64_t r, std::vector<Entry<C>>& buf, std::vector<int64_t>& nans) {
    const S* row = x + r * rs;
    order_row<S>(row, N, k, descending, buf, nans);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t src = buf[size_t(j)].index;
      vo[r * k + j] = row[src];  // the stored value itself (keeps -0.0, NaN payloads)
      io[r * k + j] = src;
    }
  };
  const bool parallel = M > 1 && M * N >= kParallelGrain / 4;
#pragma omp parallel if (parallel)
  {
    std::vector<Entry<C>> buf;
    std::vector<int64_t> nans;
    buf.reserve(size_t(N));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < M; ++r) body(r, buf, nans);
  }
}

// Accumulator of a scan: double for floating types, int64 (wrapping) for integers.
template <class S>
using scan_acc_t = std::conditional_t<std::is_integral_v<S>, uint64_t, double>;

template <class S, bool kProd>
void scan_typed(const Tensor& in, const Tensor& out) {
  using A = scan_acc_t<S>;
  const int64_t O = in.sizes()[0], N = in.sizes()[1], K = in.sizes()[2];
  const int64_t os = in.strides()[0], ns = in.strides()[1], ks = in.strides()[2];
  const S* x = static_cast<const S*>(in.data_ptr());
  S* y = static_cast<S*>(out.data_ptr());
  auto load = [](S v) -> A {
    if constexpr (std::is_integral_v<S>) return A(int64_t(v));
    else return A(compute_t<S>(v));
  };
  auto store = [](A a) -> S {
    if constexpr (std::is_integral_v<S>) return S(int64_t(a));
    else if constexpr (std::is_same_v<S, double>) return a;
    else return S(float(a));
  };
  constexpr int64_t kCols = 256;
  const int64_t kblocks = (K + kCols - 1) / kCols, items = O * kblocks;
  const bool parallel = items > 1 && O * N * K >= kParallelGrain;
#pragma omp parallel if (parallel)
  {
    A acc[kCols];
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t o = item / kblocks, k0 = (item % kblocks) * kCols;
      const int64_t nk = std::min(kCols, K - k0);
      auto step = [](A a, A v) {
        if constexpr (kProd) return A(a * v);
        else return A(a + v);
      };
      if (K == 1) {  // one row: a plain running sum over the row
        const S* src = x + o * os;
        S* dst = y + o * N;
        A a = kProd ? A(1) : A(0);
        if (ns == 1) {
          for (int64_t n = 0; n < N; ++n) dst[n] = store(a = step(a, load(src[n])));
        } else {
          for (int64_t n = 0; n < N; ++n) dst[n] = store(a = step(a, load(src[n * ns])));
        }
        continue;
      }
      for (int64_t k = 0; k < nk; ++k) acc[k] = kProd ? A(1) : A(0);
      for (int64_t n = 0; n < N; ++n) {
        const S* src = x + o * os + n * ns + k0 * ks;
        S* dst = y + (o * N + n) * K + k0;
        if (ks == 1) {  // unit-stride columns: the compiler vectorizes across k
          for (int64_t k = 0; k < nk; ++k) dst[k] = store(acc[k] = step(acc[k], load(src[k])));
        } else {
          for (int64_t k = 0; k < nk; ++k) dst[k] = store(acc[k] = step(acc[k], load(src[k * ks])));
        }
      }
    }
  }
}

}  // namespace

void sort_kernel(const Tensor& in, const Tensor& values, const Tensor& indices, bool descending) {
  visit_dtype(in.dtype(), [&](auto tag) {
    sort_rows<decltype(tag)>(in, values, indices, in.sizes()[1], descending);
  });
}

void topk_kernel(const Tensor& in, const Tensor& values, const Tensor& indices, bool largest) {
  visit_dtype(in.dtype(), [&](auto tag) {
    sort_rows<decltype(tag)>(in, values, indices, values.sizes()[1], largest);
  });
}

void scan_kernel(ScanOp op, const Tensor& in, const Tensor& out) {
  visit_dtype(in.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) {
      throw DTypeError("[scan] internal error: bool input (the front casts it to i64)");
    } else {
      if (op == ScanOp::cumprod) scan_typed<S, true>(in, out);
      else scan_typed<S, false>(in, out);
    }
  });
}

}  // namespace ember::ops::cpu
