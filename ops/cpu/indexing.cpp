// CPU driver of advanced indexing and nonzero (preconditions in ops/kernels/indexing.h).
//
// Invariants:
// - index_offset and index_gather run through the elementwise engine (parallel above its
//   grain); a bad index value is recorded by the first thread that meets it and thrown after
//   the loop (an exception must not leave an OpenMP region).
// - index_put runs in order on one thread, so a repeated index keeps its last value,
//   deterministically (as PyTorch's CPU kernel does).
// - nonzero lists elements in row-major order.
#include <atomic>
#include <cstring>

#include "kernels/elementwise.h"
#include "kernels/indexing.h"
#include "loops.h"

namespace ember::ops::cpu {

namespace {

class OffsetCheck {
 public:
  void fail(int64_t value) {
    bool expected = false;
    if (bad_.compare_exchange_strong(expected, true)) value_ = value;
  }
  void throw_if_failed(const char* op, int64_t dim, int64_t size) const {
    if (bad_.load())
      throw IndexError(str("[", op, "] index ", value_, " is out of range for dim ", dim, " of size ", size));
  }

 private:
  std::atomic<bool> bad_{false};
  int64_t value_ = 0;
};

// Calls f(U{}) with U an unsigned integer of `bytes` bytes: these kernels only move elements.
template <class F>
void visit_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(uint8_t{}); return;
    case 2: f(uint16_t{}); return;
    case 4: f(uint32_t{}); return;
    default: f(uint64_t{}); return;
  }
}

template <class T>
inline T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <class T>
inline void store(char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

void index_offset_kernel(const char* op, const Tensor& index, int64_t dim, int64_t size, int64_t stride,
                         const Tensor& off) {
  OffsetCheck check;
  auto run = [&](auto tag) {
    using I = decltype(tag);
    for_each_element<2>({&off, &index}, [&check, size, stride](std::array<char*, 2> p, std::array<int64_t, 2> s,
                                                                int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t v = int64_t(load<I>(p[1] + i * s[1]));
        if (v < -size || v >= size) {
          check.fail(v);
          continue;
        }
        if (v < 0) v += size;
        char* o = p[0] + i * s[0];
        store<int64_t>(o, load<int64_t>(o) + v * stride);
      }
    });
  };
  if (index.dtype() == DType::i32) run(int32_t{});
  else run(int64_t{});
  check.throw_if_failed(op, dim, size);
}

void index_gather_kernel(const Tensor& src, const Tensor& off, const Tensor& out) {
  visit_bits(out.element_size(), [&](auto tag) {
    using U = decltype(tag);
    for_each_element<3>({&out, &src, &off}, [](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t o = load<int64_t>(p[2] + i * s[2]);
        store<U>(p[0] + i * s[0], load<U>(p[1] + i * s[1] + o * int64_t(sizeof(U))));
      }
    });
  });
}

void index_put_kernel(const Tensor& dst, const Tensor& off, const Tensor& values) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  LoopPlan<3> plan = make_plan<3>({&dst, &values, &off});
  visit_bits(dst.element_size(), [&](auto tag) {
    using U = decltype(tag);
    auto inner = [](std::array<char*, 3> p, std::array<int64_t, 3> s, int64_t count) {
      for (int64_t i = 0; i < count; ++i) {
        const int64_t o = load<int64_t>(p[2] + i * s[2]);
        store<U>(p[0] + i * s[0] + o * int64_t(sizeof(U)), load<U>(p[1] + i * s[1]));
      }
    };
    run_range(plan, 0, n, inner);
  });
}

void nonzero_scan_kernel(const Tensor& x, const Tensor& pos) {
  const int64_t n = x.numel();
  int64_t* ps = pos.data_ptr<int64_t>();
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    const S* xs = static_cast<const S*>(x.data_ptr());
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      ps[i] = count;
      count += cast_value<bool, S>(xs[i]) ? 1 : 0;
    }
    ps[n] = count;
  });
}

void nonzero_fill_kernel(const Tensor& x, const Tensor& pos, const Tensor& out) {
  const int64_t n = x.numel(), nd = x.dim();
  const int64_t* ps = pos.data_ptr<int64_t>();
  int64_t* o = out.data_ptr<int64_t>();
  const Shape& sizes = x.sizes();
  // A pair of consecutive positions differs exactly where element i is nonzero.
  Shape idx(size_t(nd), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (ps[i + 1] != ps[i]) std::memcpy(o + ps[i] * nd, idx.data(), size_t(nd) * sizeof(int64_t));
    for (int64_t d = nd - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < sizes[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

}  // namespace ember::ops::cpu
