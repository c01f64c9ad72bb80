// CPU driver of the indexing/joining family (preconditions in ops/kernels/index.h).
//
// Invariants:
// - Accumulating kernels (index_add, scatter_add) are deterministic and race-free: every
//   output element is owned by exactly one thread, which adds its contributions in index
//   order. So results do not depend on the thread count, and repeated indices accumulate.
// - Index values are checked as they are read; an out-of-range value is recorded by the
//   first thread to see it and thrown (IndexError naming it) after the parallel loop, since
//   an exception must not leave an OpenMP region.
//
// Note [dropout Philox layout]: element i (row-major over the mask) of a dropout mask uses
// counter (offset + i / 4) and word i % 4 of that draw as a 24-bit uniform u in [0, 1); the
// element is kept when u >= p. A mask of n elements consumes (n + 3) / 4 counters. It depends
// only on (seed, offset, i): not on threads, not on the input's layout. CUDA must match.
#include <omp.h>

#include <atomic>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/index.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

class IndexCheck {
 public:
  void fail(int64_t value) {
    bool expected = false;
    if (bad_.compare_exchange_strong(expected, true)) value_ = value;
  }
  void throw_if_failed(const char* op, int64_t dim, int64_t size) const {
    if (bad_.load())
      throw IndexError(str("[", op, "] index ", value_, " is out of range for dim ", dim,
                           " of size ", size));
  }

 private:
  std::atomic<bool> bad_{false};
  int64_t value_ = 0;
};

template <class F>
void visit_index(DType t, F&& f) {
  if (t == DType::i32) f(int32_t{});
  else f(int64_t{});
}

int64_t prod(const Shape& s, int64_t begin, int64_t end) {
  int64_t n = 1;
  for (int64_t d = begin; d < end; ++d) n *= s[d];
  return n;
}

// Copies `count` elements of `isz` bytes; single elements by typed load/store, not memcpy.
inline void copy_elems(char* dst, const char* src, int64_t count, size_t isz) {
  if (count == 1) {
    switch (isz) {
      case 1: *dst = *src; return;
      case 2: std::memcpy(dst, src, 2); return;
      case 4: std::memcpy(dst, src, 4); return;
      case 8: std::memcpy(dst, src, 8); return;
    }
  }
  std::memcpy(dst, src, size_t(count) * isz);
}

// dst[i] += src[i] in the compute type of S.
template <class S>
inline void add_into(S* dst, const S* src, int64_t n) {
  using C = compute_t<S>;
  for (int64_t i = 0; i < n; ++i) dst[i] = S(C(dst[i]) + C(src[i]));
}

// Calls f(offsets, j_begin, j_end) for every "line": each position of `sizes` with
// coordinate `dim` = 0, offsets[k] being operand k's element offset there (strides[k] gives
// its strides), and [j_begin, j_end) a range of positions along dim. With splittable, a
// line may be cut into several ranges run by different threads (gather: no shared writes);
// without it, one call covers the whole line, so the line's writes belong to one thread
// (scatter_add). Work is split across threads in contiguous task ranges when large enough.
template <size_t N, class F>
void for_each_line(const Shape& sizes, int64_t dim, const std::array<Shape, N>& strides,
                   bool splittable, F f) {
  Shape ls;
  std::array<Shape, N> lst;
  for (int64_t d = 0; d < int64_t(sizes.size()); ++d) {
    if (d == dim) continue;
    ls.push_back(sizes[d]);
    for (size_t k = 0; k < N; ++k) lst[k].push_back(strides[k][d]);
  }
  const int64_t lines = ls.numel(), nd = int64_t(ls.size()), len = sizes[dim];
  if (lines == 0 || len == 0) return;
  const bool parallel = lines * len >= kParallelGrain && omp_get_max_threads() > 1;
  const int64_t nt = omp_get_max_threads();
  // Pieces per line: enough tasks for every thread when lines alone are too few.
  const int64_t pieces = splittable && parallel && lines < nt ? std::min(len, (nt + lines - 1) / lines) : 1;
  const int64_t piece = (len + pieces - 1) / pieces;
  const int64_t tasks = lines * pieces;
  auto run = [&](int64_t begin, int64_t end) {  // tasks [begin, end), line-major
    int64_t line = begin / pieces, p = begin % pieces;
    Shape idx(static_cast<size_t>(nd), 0);
    std::array<int64_t, N> off{};
    int64_t rem = line;
    for (int64_t d = nd - 1; d >= 0; --d) {
      idx[d] = rem % ls[d];
      rem /= ls[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * lst[k][d];
    }
    for (int64_t t = begin; t < end; ++t) {
      f(off, p * piece, std::min(len, (p + 1) * piece));
      if (++p < pieces) continue;
      p = 0;
      for (int64_t d = nd - 1; d >= 0; --d) {
        ++idx[d];
        for (size_t k = 0; k < N; ++k) off[k] += lst[k][d];
        if (idx[d] < ls[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= idx[d] * lst[k][d];
        idx[d] = 0;
      }
    }
  };
  if (!parallel || tasks == 1) {
    run(0, tasks);
    return;
  }
#pragma omp parallel
  {
    const int64_t n = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t chunk = (tasks + n - 1) / n;
    const int64_t b = std::min(tasks, chunk * t), e = std::min(tasks, b + chunk);
    if (b < e) run(b, e);
  }
}

}  // namespace

void cat_kernel(const TensorList& inputs, int64_t dim, const Tensor& out) {
  const Shape& os = out.sizes();
  const int64_t outer = prod(os, 0, dim), inner = prod(os, dim + 1, int64_t(os.size()));
  const int64_t out_row = os[dim] * inner;
  const size_t isz = out.element_size();
  char* ob = static_cast<char*>(out.data_ptr());
  // Same-dtype contiguous inputs (the common case) are row memcpys, all in one parallel
  // loop; others go through the converting strided copy into their slice of out.
  struct Piece {
    const char* src;
    int64_t row;     // elements per outer index
    int64_t offset;  // element offset of the piece within an out row
  };
  std::vector<Piece> fast;
  int64_t at = 0;
  for (const Tensor& t : inputs) {
    const int64_t len = t.sizes()[dim];
    if (t.numel() > 0) {
      if (t.dtype() == out.dtype() && t.is_contiguous()) {
        fast.push_back({static_cast<const char*>(t.data_ptr()), len * inner, at * inner});
      } else {
        Tensor slice = ember::detail::make_view(out, t.sizes(), out.strides(),
                                                out.storage_offset() + at * out.strides()[dim]);
        copy_kernel(slice, t);
      }
    }
    at += len;
  }
  if (fast.empty()) return;
  const int64_t pieces = int64_t(fast.size()), tasks = outer * pieces;
  int64_t elems = 0;
  for (const Piece& p : fast) elems += p.row * outer;
#pragma omp parallel for schedule(static) if (elems > kParallelGrain && tasks > 1)
  for (int64_t k = 0; k < tasks; ++k) {
    const int64_t o = k / pieces;
    const Piece& p = fast[size_t(k % pieces)];
    copy_elems(ob + size_t(o * out_row + p.offset) * isz, p.src + size_t(o * p.row) * isz, p.row, isz);
  }
}

void index_select_kernel(const char* op, const Tensor& x, int64_t dim, const Tensor& index,
                         const Tensor& out) {
  const Shape& xs = x.sizes();
  const int64_t outer = prod(xs, 0, dim), inner = prod(xs, dim + 1, int64_t(xs.size()));
  const int64_t size = xs[dim], n = index.numel();
  const size_t isz = x.element_size();
  const char* xb = static_cast<const char*>(x.data_ptr());
  char* ob = static_cast<char*>(out.data_ptr());
  IndexCheck check;
  visit_index(index.dtype(), [&](auto tag) {
    using I = decltype(tag);
    const I* idx = static_cast<const I*>(index.data_ptr());
    if (outer == 0 || inner == 0) {  // nothing to copy, but bad indices are still errors
      for (int64_t j = 0; j < n; ++j)
        if (idx[j] < 0 || idx[j] >= size) check.fail(int64_t(idx[j]));
      return;
    }
    const int64_t tasks = outer * n;
#pragma omp parallel for schedule(static) if (tasks * inner > kParallelGrain)
    for (int64_t k = 0; k < tasks; ++k) {
      const int64_t o = k / n, v = int64_t(idx[k % n]);
      if (v < 0 || v >= size) {
        check.fail(v);
        continue;
      }
      copy_elems(ob + size_t(k * inner) * isz, xb + size_t((o * size + v) * inner) * isz, inner, isz);
    }
  });
  check.throw_if_failed(op, dim, size);
}

void index_add_kernel(const char* op, const Tensor& out, int64_t dim, const Tensor& index,
                      const Tensor& src) {
  const Shape& os = out.sizes();
  const int64_t outer = prod(os, 0, dim), inner = prod(os, dim + 1, int64_t(os.size()));
  const int64_t size = os[dim], n = index.numel();
  IndexCheck check;
  visit_index(index.dtype(), [&](auto itag) {
    using I = decltype(itag);
    const I* idx = static_cast<const I*>(index.data_ptr());
    // Validate first: the partitioned loop below skips the indices a task does not own.
    for (int64_t j = 0; j < n; ++j)
      if (idx[j] < 0 || idx[j] >= size) {
        check.fail(int64_t(idx[j]));
        return;
      }
    if (outer == 0 || inner == 0) return;
    visit_dtype(out.dtype(), [&](auto vtag) {
      using S = decltype(vtag);
      if constexpr (std::is_same_v<S, bool>) {
        throw DTypeError(str("[", op, "] is not defined for bool tensors"));
      } else {
        S* ob = static_cast<S*>(out.data_ptr());
        const S* sb = static_cast<const S*>(src.data_ptr());
        // Tasks are (outer index, column block, row part): a task owns the out rows whose
        // index is congruent to its part modulo `parts`, so tasks never share an element.
        // Parts only exist to find parallelism when outer x blocks is small (embedding).
        constexpr int64_t kBlock = 1024;
        const int64_t blocks = (inner + kBlock - 1) / kBlock;
        const int64_t nt = omp_get_max_threads();
        const bool parallel = outer * n * inner > kParallelGrain && nt > 1;
        const int64_t parts = parallel && outer * blocks < nt
                                  ? std::min<int64_t>(size, (nt + outer * blocks - 1) / (outer * blocks))
                                  : 1;
        const int64_t tasks = outer * blocks * parts;
#pragma omp parallel for schedule(dynamic, 1) if (parallel && tasks > 1)
        for (int64_t k = 0; k < tasks; ++k) {
          const int64_t part = k % parts, b = (k / parts) % blocks, o = k / (parts * blocks);
          const int64_t c0 = b * kBlock, cn = std::min(kBlock, inner - c0);
          S* orow = ob + o * size * inner + c0;
          const S* srow = sb + o * n * inner + c0;
          for (int64_t j = 0; j < n; ++j) {
            const int64_t v = int64_t(idx[j]);
            if (parts > 1 && v % parts != part) continue;
            add_into(orow + v * inner, srow + j * inner, cn);
          }
        }
      }
    });
  });
  check.throw_if_failed(op, dim, size);
}

void gather_kernel(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const int64_t size = x.sizes()[dim];
  const int64_t xs = x.strides()[dim], is = index.strides()[dim], os = out.strides()[dim];
  IndexCheck check;
  visit_dtype(x.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    visit_index(index.dtype(), [&](auto itag) {
      using I = decltype(itag);
      const S* xp = static_cast<const S*>(x.data_ptr());
      const I* ip = static_cast<const I*>(index.data_ptr());
      S* op = static_cast<S*>(out.data_ptr());
      for_each_line<3>(index.sizes(), dim, {out.strides(), index.strides(), x.strides()}, true,
                       [&](const std::array<int64_t, 3>& off, int64_t jb, int64_t je) {
                         for (int64_t j = jb; j < je; ++j) {
                           const int64_t v = int64_t(ip[off[1] + j * is]);
                           if (v < 0 || v >= size) {
                             check.fail(v);
                             continue;
                           }
                           op[off[0] + j * os] = xp[off[2] + v * xs];
                         }
                       });
    });
  });
  check.throw_if_failed("gather", dim, size);
}

void scatter_add_kernel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t size = out.sizes()[dim];
  const int64_t os = out.strides()[dim], is = index.strides()[dim], ss = src.strides()[dim];
  IndexCheck check;
  visit_dtype(out.dtype(), [&](auto vtag) {
    using S = decltype(vtag);
    if constexpr (std::is_same_v<S, bool>) {
      throw DTypeError("[scatter_add] is not defined for bool tensors");
    } else {
      using C = compute_t<S>;
      visit_index(index.dtype(), [&](auto itag) {
        using I = decltype(itag);
        S* op = static_cast<S*>(out.data_ptr());
        const I* ip = static_cast<const I*>(index.data_ptr());
        const S* sp = static_cast<const S*>(src.data_ptr());
        // A line fixes every coordinate but dim, so it owns its out line: no races.
        for_each_line<3>(index.sizes(), dim, {out.strides(), index.strides(), src.strides()}, false,
                         [&](const std::array<int64_t, 3>& off, int64_t jb, int64_t je) {
                           for (int64_t j = jb; j < je; ++j) {
                             const int64_t v = int64_t(ip[off[1] + j * is]);
                             if (v < 0 || v >= size) {
                               check.fail(v);
                               continue;
                             }
                             S& o = op[off[0] + v * os];
                             o = S(C(o) + C(sp[off[2] + j * ss]));
                           }
                         });
      });
    }
  });
  check.throw_if_failed("scatter_add", dim, size);
}

void tri_kernel(const Tensor& x, const Tensor& out, int64_t diagonal, bool upper) {
  const int64_t nd = x.dim();
  const int64_t rows = x.sizes()[nd - 2], cols = x.sizes()[nd - 1];
  const int64_t rs = x.strides()[nd - 2], cs = x.strides()[nd - 1];
  const int64_t total_rows = out.numel() / cols;
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* xp = static_cast<const S*>(x.data_ptr());
    S* op = static_cast<S*>(out.data_ptr());
#pragma omp parallel for schedule(static) if (out.numel() > kParallelGrain)
    for (int64_t r = 0; r < total_rows; ++r) {
      const int64_t i = r % rows;
      int64_t off = i * rs, rem = r / rows;
      for (int64_t d = nd - 3; d >= 0; --d) {
        off += (rem % x.sizes()[d]) * x.strides()[d];
        rem /= x.sizes()[d];
      }
      // Kept columns: tril j <= i + diagonal, triu j >= i + diagonal.
      const int64_t edge = std::clamp<int64_t>(upper ? i + diagonal : i + diagonal + 1, 0, cols);
      const int64_t keep_begin = upper ? edge : 0, keep_end = upper ? cols : edge;
      S* orow = op + r * cols;
      for (int64_t j = 0; j < cols; ++j)
        orow[j] = j >= keep_begin && j < keep_end ? xp[off + j * cs] : S(0);
    }
  });
}

void dropout_mask_kernel(const Tensor& mask, Generator::State s, double p) {
  bool* m = static_cast<bool*>(mask.data_ptr());
  const int64_t n = mask.numel(), counters = int64_t(dropout_counters(n));
#pragma omp parallel for schedule(static) if (n > kParallelGrain)
  for (int64_t c = 0; c < counters; ++c) {
    uint32_t w[4];
    Philox::draw(s.seed, s.offset + uint64_t(c), w);
    const int64_t base = 4 * c, count = std::min<int64_t>(4, n - base);
    for (int64_t k = 0; k < count; ++k) m[base + k] = double(Philox::uniform(w[k])) >= p;
  }
}

void masked_scale_kernel(const Tensor& x, const Tensor& mask, double scale, const Tensor& out) {
  visit_floating(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    using C = compute_t<S>;
    const C keep = C(scale);
    // x * (mask * scale): multiplying (rather than selecting) keeps NaN and inf visible, as
    // PyTorch's x * mask; and the mask as a 0/1 number, not a branch, lets the loop vectorize
    // (a branch on a random mask mispredicted about every other element: 8x slower).
    for_each_element<3>({&out, &x, &mask}, [keep](std::array<char*, 3> p, std::array<int64_t, 3> s,
                                                  int64_t n) {
      if (s[0] == sizeof(S) && s[1] == sizeof(S) && s[2] == 1) {
        S* o = reinterpret_cast<S*>(p[0]);
        const S* a = reinterpret_cast<const S*>(p[1]);
        const uint8_t* m = reinterpret_cast<const uint8_t*>(p[2]);
        for (int64_t i = 0; i < n; ++i) o[i] = S(C(a[i]) * (C(m[i]) * keep));
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t m = *reinterpret_cast<const uint8_t*>(p[2] + i * s[2]);
          const S a = *reinterpret_cast<const S*>(p[1] + i * s[1]);
          *reinterpret_cast<S*>(p[0] + i * s[0]) = S(C(a) * (C(m) * keep));
        }
      }
    });
  });
}

}  // namespace ember::ops::cpu
