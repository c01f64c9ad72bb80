// CUDA family driver for unary, binary, where, copy (with casts) and fill: the same op
// registries as ops/cpu/elementwise.cpp, expanded into device functors.
#include <string_view>

#include "ember/cuda/launch.h"
#include "kernels/elementwise.h"
#include "loops.cuh"

namespace ember::ops::cuda {

namespace {

template <class S, class F>
struct UnaryOp_ {
  F f;
  __device__ void operator()(char** p) const {
    using C = compute_t<S>;
    *reinterpret_cast<S*>(p[0]) = S(f(C(*reinterpret_cast<const S*>(p[1]))));
  }
};

template <class S, class O, class F>
struct BinaryOp_ {
  F f;
  __device__ void operator()(char** p) const {
    using C = compute_t<S>;
    C a = C(*reinterpret_cast<const S*>(p[1])), b = C(*reinterpret_cast<const S*>(p[2]));
    if constexpr (std::is_same_v<O, bool>) *reinterpret_cast<bool*>(p[0]) = f(a, b) != C(0);
    else *reinterpret_cast<O*>(p[0]) = O(f(a, b));
  }
};

// bool operands compute in int (true + true is true, as in PyTorch) and store as bool.
template <class F>
struct BoolBinaryOp {
  F f;
  __device__ void operator()(char** p) const {
    int a = *reinterpret_cast<const bool*>(p[1]), b = *reinterpret_cast<const bool*>(p[2]);
    *reinterpret_cast<bool*>(p[0]) = f(a, b) != 0;
  }
};

template <class S>
struct WhereOp {
  __device__ void operator()(char** p) const {
    *reinterpret_cast<S*>(p[0]) = *reinterpret_cast<const bool*>(p[1])
                                      ? *reinterpret_cast<const S*>(p[2])
                                      : *reinterpret_cast<const S*>(p[3]);
  }
};

template <class To, class From>
struct CastOp {
  __device__ void operator()(char** p) const {
    *reinterpret_cast<To*>(p[0]) = ops::cast_value<To, From>(*reinterpret_cast<const From*>(p[1]));
  }
};

template <class S>
struct FillOp {
  S v;
  __device__ void operator()(char** p) const { *reinterpret_cast<S*>(p[0]) = v; }
};

template <class F>
void unary_dispatch(const Tensor& x, const Tensor& out, F f, bool floating_only) {
  auto run = [&](auto tag) {
    using S = decltype(tag);
    launch_elementwise<2>({&out, &x}, UnaryOp_<S, F>{f});
  };
  if (floating_only) {
    visit_floating(x.dtype(), run);
    return;
  }
  visit_dtype(x.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_same_v<S, bool>) throw DTypeError("[unary] bool tensors are not supported by this op");
    else run(tag);
  });
}

// FloatingOnly ops are instantiated for float types only (the front promoted integers).
template <bool FloatingOnly, class F>
void binary_dispatch(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  if constexpr (FloatingOnly) {
    visit_floating(a.dtype(), [&](auto tag) {
      using S = decltype(tag);
      launch_elementwise<3>({&out, &a, &b}, BinaryOp_<S, S, F>{f});
    });
  } else {
    visit_dtype(a.dtype(), [&](auto tag) {
      using S = decltype(tag);
      if constexpr (std::is_same_v<S, bool>) {
        launch_elementwise<3>({&out, &a, &b}, BoolBinaryOp<F>{f});
      } else if (out.dtype() == DType::b8) {
        launch_elementwise<3>({&out, &a, &b}, BinaryOp_<S, bool, F>{f});
      } else {
        launch_elementwise<3>({&out, &a, &b}, BinaryOp_<S, S, F>{f});
      }
    });
  }
}

}  // namespace

void unary_kernel(UnaryOp op, const Tensor& x, const Tensor& out, const UnaryParams& params) {
  switch (op) {
#define EMBER_UNARY_CASE(name, Functor, floating_only)           \
  case UnaryOp::name:                                            \
    unary_dispatch(x, out, fn::Functor{params}, floating_only);  \
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
    launch_elementwise<4>({&out, &cond, &a, &b}, WhereOp<decltype(tag)>{});
  });
}

void copy_kernel(const Tensor& dst, const Tensor& src) {
  visit_dtype(dst.dtype(), [&](auto to) {
    visit_dtype(src.dtype(), [&](auto from) {
      launch_elementwise<2>({&dst, &src}, CastOp<decltype(to), decltype(from)>{});
    });
  });
}

void fill_kernel(const Tensor& t, Scalar value) {
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    S v;
    if constexpr (std::is_same_v<S, bool>) v = value.to_double() != 0;
    else if constexpr (std::is_integral_v<S>) v = S(value.to_int());
    else if constexpr (std::is_same_v<S, double>) v = value.to_double();
    else v = S(float(value.to_double()));
    launch_elementwise<1>({&t}, FillOp<S>{v});
  });
}

template <class S>
__global__ void arange_fwd_kernel(S* out, int64_t n, ArangeTerms terms) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = terms.at<S>(i);
}

// Made on the device (no host values, no copy): GPT's positions are an arange inside every
// forward, which a host-built tensor would turn into a synchronizing copy (and a capture error).
void arange_kernel(const Tensor& t, const ArangeTerms& terms) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const auto on = ember::cuda::detail::on_device(t.device().index);
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, int64_t(1) << 16);
  visit_dtype(t.dtype(), [&](auto tag) {
    using S = decltype(tag);
    if constexpr (!std::is_same_v<S, bool>)
      ::ember::cuda::launch_kernel(arange_fwd_kernel<S>, unsigned(blocks), 256, 0, on.stream,
          static_cast<S*>(t.data_ptr()), n, terms);
  });
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace ember::ops::cuda
