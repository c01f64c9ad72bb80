// Private to ops/: picks the backend namespace for a device. Every family declares its kernel
// signatures once in ops/kernels/<family>.h, for both ember::ops::cpu and ember::ops::cuda;
// a CPU-only build links ops/cuda_stub/<family>.cpp, whose kernels throw.
//
// EMBER_DISPATCH_KERNEL is also the profiler's op hook (Note [profiler hooks] in
// ember/profiler.h): every kernel of every op passes here, so one relaxed load decides
// between the plain call and the recorded one (out of line). The recorded name is the op's
// (op_name of a leading UnaryOp/BinaryOp/ReduceOp argument) or else the kernel's without
// "_kernel"; the recorded shapes are those of the kernel's tensor arguments, outputs included.
#pragma once

#include <concepts>
#include <string_view>
#include <utility>

#include "ember/cuda.h"
#include "ember/profiler.h"
#include "ember/tensor.h"

#define EMBER_DISPATCH_KERNEL(device, kernel, ...)                                 \
  ::ember::ops::kernel_dispatch::dispatch_kernel(                                   \
      ::ember::ops::kernel_dispatch::kernel_display_name(#kernel), (device),        \
      &::ember::ops::cpu::kernel, &::ember::ops::cuda::kernel, __VA_ARGS__)

// Declares a family's kernels in both backend namespaces from one list.
#define EMBER_DECLARE_KERNELS(LIST)  \
  namespace ember::ops::cpu {        \
  LIST                               \
  }                                  \
  namespace ember::ops::cuda {       \
  LIST                               \
  }

// Body of a stub kernel in a build without CUDA.
#define EMBER_NO_CUDA(op)                                                         \
  throw ::ember::NotImplementedError("[" op "] has no CUDA implementation in this build")

namespace ember::ops::kernel_dispatch {

constexpr std::string_view kernel_display_name(std::string_view kernel) {
  constexpr std::string_view suffix = "_kernel";
  return kernel.ends_with(suffix) ? kernel.substr(0, kernel.size() - suffix.size()) : kernel;
}

template <class T>
void add_profiled_arg(profiler::detail::ShapeSink&, const T&) {}
inline void add_profiled_arg(profiler::detail::ShapeSink& sink, const Tensor& t) {
  if (t.defined()) sink.add(t.sizes());
  else sink.add_undefined();
}
inline void add_profiled_arg(profiler::detail::ShapeSink& sink, const TensorList& ts) {
  for (const Tensor& t : ts) add_profiled_arg(sink, t);
}

template <class First, class... Rest>
std::string_view profiled_name(std::string_view kernel, const First& first, const Rest&...) {
  if constexpr (requires { { op_name(first) } -> std::convertible_to<const char*>; })
    return op_name(first);  // found by ADL: the family's op enum
  else
    return kernel;
}

template <class... P, class... A>
[[gnu::noinline, gnu::cold]] void dispatch_profiled(std::string_view kernel, Device device,
                                                    void (*cpu)(P...), void (*cuda)(P...),
                                                    A&... args) {
  auto fill = [&](profiler::detail::ShapeSink& sink) { (add_profiled_arg(sink, args), ...); };
  using Fill = decltype(fill);
  profiler::detail::Range range = profiler::detail::begin_op(
      profiled_name(kernel, args...), device,
      [](profiler::detail::ShapeSink& sink, const void* ctx) {
        (*static_cast<const Fill*>(ctx))(sink);
      },
      &fill);
  struct End {
    profiler::detail::Range& r;
    ~End() { profiler::detail::end(r); }
  } end{range};
  profiler::detail::start_clock(range);
  if (device.is_cuda()) cuda(args...);
  else cpu(args...);
}

template <class... P, class... A>
inline void dispatch_kernel(std::string_view kernel, Device device, void (*cpu)(P...),
                            void (*cuda)(P...), A&&... args) {
  if (profiler::detail::active()) [[unlikely]] {
    dispatch_profiled(kernel, device, cpu, cuda, args...);
    return;
  }
  if (device.is_cuda()) cuda(std::forward<A>(args)...);
  else cpu(std::forward<A>(args)...);
}

}  // namespace ember::ops::kernel_dispatch
