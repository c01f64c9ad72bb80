// CPU family driver for unary, binary, where, copy (with casts) and fill.
// The op registries (functors.h) are expanded once here into dtype-dispatched loops; the
// unit-stride inner loop is a plain indexed loop the compiler vectorizes.
#include <omp.h>

#include <cstring>
#include <string_view>

#include "kernels/elementwise.h"
#include "loops.h"

namespace ember::ops::cpu {

int omp_threads() { return omp_get_num_threads(); }
int omp_thread() { return omp_get_thread_num(); }

namespace {

template <class T>
inline T load(const char* p) {
  return *reinterpret_cast<const T*>(p);
}

// out[i] = f(in[i]) with storage type S computing in compute_t<S>.
template <class S, class F>
void unary_loop(const Tensor& x, const Tensor& out, F f) {
  using C = compute_t<S>;
  for_each_element<2>({&out, &x}, [f](std::array<char*, 2> p, std::array<int64_t, 2> s,
                                      int64_t n) {
    S* o = reinterpret_cast<S*>(p[0]);
    const S* a = reinterpret_cast<const S*>(p[1]);
    if (s[0] == sizeof(S) && s[1] == sizeof(S)) {
      for (int64_t i = 0; i < n; ++i) o[i] = S(f(C(a[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<S*>(p[0] + i * s[0]) = S(f(C(load<S>(p[1] + i * s[1]))));
    }
  });
}

// out[i] = f(a[i], b[i]); S the input storage type, O the output storage type.
template <class S, class O, class F>
void binary_loop(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  using C = compute_t<S>;
  for_each_element<3>({&out, &a, &b}, [f](std::array<char*, 3> p, std::array<int64_t, 3> s,
                                          int64_t n) {
    O* o = reinterpret_cast<O*>(p[0]);
    const S* x = reinterpret_cast<const S*>(p[1]);
    const S* y = reinterpret_cast<const S*>(p[2]);
    constexpr int64_t so = sizeof(O), si = sizeof(S);
    if (s[0] == so && s[1] == si && s[2] == si) {
      for (int64_t i = 0; i < n; ++i) o[i] = O(f(C(x[i]), C(y[i])));
    } else if (s[0] == so && s[1] == si && s[2] == 0) {  // tensor op scalar
      const C yv = C(y[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = O(f(C(x[i]), yv));
    } else if (s[0] == so && s[1] == 0 && s[2] == si) {  // scalar op tensor
      const C xv = C(x[0]);
      for (int64_t i = 0; i < n; ++i) o[i] = O(f(xv, C(y[i])));
    } else {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<O*>(p[0] + i * s[0]) =
            O(f(C(load<S>(p[1] + i * s[1])), C(load<S>(p[2] + i * s[2]))));
    }
  });
}

template <class F>
void unary_dispatch(const Tensor& x, const Tensor& out, F f, bool floating_only) {
  if (floating_only) {
    visit_floating(x.dtype(), [&](auto tag) { unary_loop<decltype(tag)>(x, out, f); });
    return;
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) {
      throw DTypeError("[unary] bool tensors are not supported by this op");
    } else {
      unary_loop<S>(x, out, f);
    }
  });
}

// FloatingOnly ops (div, pow, the fused backward ones) are instantiated for float types only:
// the front has already promoted integer inputs.
template <bool FloatingOnly, class F>
void binary_dispatch(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const bool to_bool = out.dtype() == DType::b8;
  if constexpr (FloatingOnly) {
    visit_floating(a.dtype(), [&](auto tag) { binary_loop<decltype(tag), decltype(tag)>(a, b, out, f); });
  } else {
    visit_dtype(a.dtype(), [&](auto tag) {
      using S = decltype(tag);
      // bool operands compute in int (true + true is true, as in PyTorch) and store as bool.
      if constexpr (std::is_same_v<S, bool>)
        binary_loop<bool, bool>(a, b, out, [f](int x, int y) { return f(x, y) != 0; });
      else if (to_bool) binary_loop<S, bool>(a, b, out, f);
      else binary_loop<S, S>(a, b, out, f);
    });
  }
}

template <class To, class From>
void cast_loop(const Tensor& dst, const Tensor& src) {
  for_each_element<2>({&dst, &src}, [](std::array<char*, 2> p, std::array<int64_t, 2> s,
                                       int64_t n) {
    if constexpr (std::is_same_v<To, From>) {
      if (s[0] == sizeof(To) && s[1] == sizeof(From)) {
        std::memcpy(p[0], p[1], size_t(n) * sizeof(To));
        return;
      }
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<To*>(p[0] + i * s[0]) = cast_value<To, From>(load<From>(p[1] + i * s[1]));
  });
}

}  // namespace

void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& params) {
  switch (op) {
#define EMBER_UNARY_CASE(name, Functor, floating_only)            \
  case UnaryOp::name:                                             \
    unary_dispatch(x, out, fn::Functor{params}, floating_only);   \
    return;
    EMBER_UNARY_OPS(EMBER_UNARY_CASE)
#undef EMBER_UNARY_CASE
  }
}

void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out,
                   const UnaryParams& params) {
  switch (op) {
#define EMBER_BINARY_CASE(name, Functor, kind)                            \
  case BinaryOp::name:                                                    \
    binary_dispatch<std::string_view(#kind) == "floating">(a, b, out, fn::Functor{params}); \
    return;
    EMBER_BINARY_OPS(EMBER_BINARY_CASE)
#undef EMBER_BINARY_CASE
  }
}

void where_kernel(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  visit_dtype(out.dtype(), [&](auto tag) {
    using S = decltype(tag);
    for_each_element<4>({&out, &cond, &a, &b}, [](std::array<char*, 4> p,
                                                  std::array<int64_t, 4> s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        *reinterpret_cast<S*>(p[0] + i * s[0]) =
            load<bool>(p[1] + i * s[1]) ? load<S>(p[2] + i * s[2]) : load<S>(p[3] + i * s[3]);
    });
  });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto to) {
    visit_dtype(src.dtype(), [&](auto from) { cast_loop<decltype(to), decltype(from)>(dst, src); });
  });
}

void fill_kernel(const Tensor& t, Scalar value) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    S v;
    if constexpr (std::is_same_v<S, bool>) v = value.to_double() != 0;
    else if constexpr (std::is_integral_v<S>) v = S(value.to_int());
    else v = S(float(value.to_double()));
    if constexpr (std::is_same_v<S, double>) v = value.to_double();
    for_each_element<1>({&t}, [v](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
      if (s[0] == sizeof(S)) {
        S* o = reinterpret_cast<S*>(p[0]);
        for (int64_t i = 0; i < n; ++i) o[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) *reinterpret_cast<S*>(p[0] + i * s[0]) = v;
      }
    });
  });
}

void arange_kernel(const Tensor& t, const ArangeTerms& terms) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same_v<S, bool>) {
      S* o = static_cast<S*>(t.data_ptr());
      const int64_t n = t.numel();
      for (int64_t i = 0; i < n; ++i) o[i] = terms.at<S>(i);
    }
  });
}

}  // namespace ember::ops::cpu
