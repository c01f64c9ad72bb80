// The SIMT layer of ember's CUDA simulation (issue 39): CUDA kernels compiled as host C++ and
// executed on the CPU, one fiber per CUDA thread, so that CI (no GPU) runs ember's own kernels.
//
// Include it after the CUDA headers (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h: the types and
// the host halves of the conversions) and before the kernel sources; it redefines what a host
// compiler cannot express: __shared__, threadIdx/blockIdx/blockDim/gridDim, the warp
// collectives, barriers, atomics and the device-only intrinsics.
//
// Invariants:
// - Blocks run one after another on the calling OS thread; the threads of a block are fibers
//   (ucontext) on that thread with stacks of their own, so locals stay private and any control
//   flow works. A fiber runs until it reaches a synchronization point (__syncthreads, a
//   __*_sync warp collective) or exits; only then does the scheduler switch.
// - __shared__ storage is thread_local static storage: one instance per kernel function
//   (instantiation), seen by every fiber of the block, reused by the next block (blocks never
//   overlap). Dynamic shared memory is one buffer per launch, dynamic_shared_memory(), filled
//   with 0xFF bytes (NaN in every float type) before each block; ember's kernels declare it
//   with EMBER_DYNAMIC_SHARED_MEMORY (ember/cuda/launch.h), `extern __shared__` on the GPU.
//   Static __shared__ arrays keep what the previous block left (the GPU's are undefined): a
//   read before any write in a block is not flagged there yet.
// - A barrier releases when every thread of the block waits at it. A thread that exited
//   before a barrier the others wait at is an error (strict, the default): ember's kernels
//   keep out-of-range threads alive to the last barrier (Note in ops/cuda/reduce_utils.cuh).
// - A warp collective releases when every lane its mask names has arrived at a collective
//   with the same operation and mask; a lane missing from its own mask, a mask naming an exited
//   lane, lanes meeting at different collectives, and a shuffle reading a lane outside the
//   mask are errors. No runnable thread and no releasable barrier or collective: a deadlock,
//   reported with every thread's state. Errors throw SimError out of launch().
// - Schedules (EMBER_SIM_LANES=fwd|rev|rand:SEED, EMBER_SIM_WARPS=lockstep|eager|eager-rev,
//   or Schedule in code): the order lanes run between sync points and how far warps run ahead
//   of each other. A kernel whose result depends on them is missing a barrier.
// - Launches are checked as an H100 checks them: block <= 1024 threads (x, y <= 1024, z <=
//   64), grid x < 2^31, y and z <= 65535, dynamic shared memory <= 48 KB unless the kernel
//   opted in (set_max_dynamic_shared_memory, up to 227 KB), parameters <= 32764 bytes.
//
// What it cannot find, left to the GPU run: inter-block and cross-stream timing (blocks run in
// order), real tensor-core rounding, performance.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace ember::cuda::sim {

struct SimError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A launch the GPU would refuse (the configuration, the shared memory, the parameters), with
// the error the CUDA runtime gives for it.
struct LaunchError : SimError {
  LaunchError(cudaError_t e, const std::string& what) : SimError(what), error(e) {}
  cudaError_t error;
};

enum class LaneOrder : uint8_t { forward, reverse, random };
enum class WarpPolicy : uint8_t { lockstep, eager, eager_reverse };
struct Schedule {
  LaneOrder lanes = LaneOrder::forward;
  WarpPolicy warps = WarpPolicy::lockstep;
  uint64_t seed = 1;  // LaneOrder::random
};
// The schedule of later launches on this thread (default: from the environment, else forward
// lockstep). ScheduleGuard sets one for a scope.
Schedule schedule();
void set_schedule(const Schedule& s);
struct ScheduleGuard {
  explicit ScheduleGuard(const Schedule& s) : saved_(schedule()) { set_schedule(s); }
  ~ScheduleGuard() { set_schedule(saved_); }
  ScheduleGuard(const ScheduleGuard&) = delete;
  ScheduleGuard& operator=(const ScheduleGuard&) = delete;

 private:
  Schedule saved_;
};

constexpr size_t kDefaultDynamicSharedLimit = 48 * 1024, kMaxDynamicSharedOptIn = 227 * 1024;
constexpr size_t kMaxParameterBytes = 32764;

// The running block's dynamic shared memory (nullptr outside a kernel).
inline unsigned char* dynamic_shared_memory();

// What cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) does.
void set_max_dynamic_shared_memory(const void* kernel, size_t bytes);

// ---- PTX instructions ember's kernels use, emulated from the PTX ISA's definitions (the
// EMBER_CUDA_SIM branch of a kernel file's PTX-wrapper section calls these).

// A shared-memory address as the 32-bit shared window sees it: the offset into the block's
// dynamic shared memory (the only shared memory ember's tensor-core kernels address this way).
uint32_t shared_address(const void* p);
void* shared_pointer(uint32_t address, size_t bytes);
// cp.async.{ca,cg}.shared.global [dst], [src], bytes, src_bytes: the destination holds 0xFF
// (NaN) bytes from issue until a wait completes its group (a read before the wait shows);
// then src_bytes are copied and the rest zero-filled. A thread that exits with copies never
// waited for is an error.
void cp_async(uint32_t dst, const void* src, int bytes, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending_groups_allowed);
// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8m..8m+7 give the row addresses of
// matrix m (16-byte aligned); each lane receives, per matrix, the pair of elements at row
// lane/4, columns 2(lane%4) and 2(lane%4)+1 (of the transpose with .trans).
void ldmatrix_x4(uint32_t (&r)[4], uint32_t address, bool trans);
// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: c += a * b on the warp's fragments.
void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16);
// ex2.approx.ftz.f32 (the sim computes 2^x exactly, then flushes a subnormal result to zero).
float ex2_approx_ftz(float x);

// Latches `e` as the calling thread's last CUDA error (the simulated runtime, runtime.cpp):
// what a launch the GPU refuses leaves for the check after it.
void set_last_error(cudaError_t e);

struct Stats {
  uint64_t launches = 0, blocks = 0, threads = 0, barriers = 0, warp_collectives = 0;
};
Stats stats();

namespace detail {

// The thread being emulated; set by the scheduler before each switch into a fiber.
inline thread_local uint3 t_thread_idx{}, t_block_idx{};
inline thread_local dim3 t_block_dim{1, 1, 1}, t_grid_dim{1, 1, 1};
inline thread_local unsigned char* t_dynamic_shared = nullptr;
inline thread_local size_t t_dynamic_shared_bytes = 0;

enum class Collective : uint8_t { syncwarp, shfl_idx, shfl_up, shfl_down, shfl_xor, ballot, any, all, match_any,
                                  ldmatrix, mma };
// One lane's part in a warp collective: blocks the fiber until the collective releases and
// returns this lane's result (the value read, the ballot bits, ...).
uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width, const char* where);
void sync_threads(const char* where);

using Body = void (*)(void* closure);
// Throws LaunchError for a launch an H100 refuses.
void check_launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared, size_t parameter_bytes);
void run_grid(dim3 grid, dim3 block, size_t dynamic_shared, Body body, void* closure);
// Hands `work` to the simulated runtime's hook, which records it when `stream` is capturing a
// graph or queues it on the stream until something waits for it (runtime.cpp); without a
// runtime, or when the hook declines, it runs now.
void submit(cudaStream_t stream, std::function<void()> work);
using SubmitHook = bool (*)(cudaStream_t stream, std::function<void()>& work);  // true: taken
void set_submit_hook(SubmitHook hook);

}  // namespace detail
inline unsigned char* dynamic_shared_memory() { return detail::t_dynamic_shared; }
namespace detail {

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

}  // namespace detail

// kernel<<<grid, block, dynamic_shared, stream>>>(args...): every thread runs the kernel with
// its own copy of the parameters, converted from args as a launch converts them. It runs when
// the stream reaches it (runtime.cpp: at once, or when something waits for the stream), or, on
// a stream capturing a graph, is recorded with its parameters for the graph's replays. A launch
// an H100 refuses throws LaunchError before anything is queued.
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t dynamic_shared, cudaStream_t stream,
            Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "a launch passes one argument per kernel parameter");
  using Tuple = std::tuple<std::decay_t<Params>...>;
  struct Closure {
    void (*kernel)(Params...);
    Tuple params;  // copied at launch, as CUDA copies them into the parameter buffer
  };
  const size_t parameter_bytes = (size_t(0) + ... + sizeof(std::decay_t<Params>));
  detail::check_launch(reinterpret_cast<const void*>(kernel), grid, block, dynamic_shared, parameter_bytes);
  auto closure = std::make_shared<Closure>(Closure{kernel, Tuple(std::forward<Args>(args)...)});
  detail::submit(stream, [closure, grid, block, dynamic_shared] {
    detail::run_grid(grid, block, dynamic_shared,
                     [](void* c) {
                       auto* cl = static_cast<Closure*>(c);
                       Tuple mine = cl->params;  // this thread's parameters
                       std::apply(cl->kernel, mine);
                     },
                     closure.get());
  });
}

}  // namespace ember::cuda::sim

// ---- what device code sees ----

#undef __shared__
#define __shared__ thread_local
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (::ember::cuda::sim::detail::t_thread_idx)
#define blockIdx (::ember::cuda::sim::detail::t_block_idx)
#define blockDim (::ember::cuda::sim::detail::t_block_dim)
#define gridDim (::ember::cuda::sim::detail::t_grid_dim)

inline void __syncthreads() { ::ember::cuda::sim::detail::sync_threads("__syncthreads"); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  (void)::ember::cuda::sim::detail::warp_collective(::ember::cuda::sim::detail::Collective::syncwarp, mask, 0, 0,
                                                    32, "__syncwarp");
}

#define EMBER_SIM_SHUFFLE(name, kind)                                                             \
  template <class T>                                                                              \
  inline T name(unsigned mask, T var, int arg, int width = 32) {                                  \
    namespace d = ::ember::cuda::sim::detail;                                                     \
    return d::from_bits<T>(d::warp_collective(d::Collective::kind, mask, d::to_bits(var), int(arg), \
                                              width, #name));                                      \
  }
EMBER_SIM_SHUFFLE(__shfl_sync, shfl_idx)
EMBER_SIM_SHUFFLE(__shfl_up_sync, shfl_up)
EMBER_SIM_SHUFFLE(__shfl_down_sync, shfl_down)
EMBER_SIM_SHUFFLE(__shfl_xor_sync, shfl_xor)
#undef EMBER_SIM_SHUFFLE

inline unsigned __ballot_sync(unsigned mask, int predicate) {
  namespace d = ::ember::cuda::sim::detail;
  return unsigned(d::warp_collective(d::Collective::ballot, mask, predicate != 0, 0, 32, "__ballot_sync"));
}
inline int __any_sync(unsigned mask, int predicate) {
  namespace d = ::ember::cuda::sim::detail;
  return int(d::warp_collective(d::Collective::any, mask, predicate != 0, 0, 32, "__any_sync"));
}
inline int __all_sync(unsigned mask, int predicate) {
  namespace d = ::ember::cuda::sim::detail;
  return int(d::warp_collective(d::Collective::all, mask, predicate != 0, 0, 32, "__all_sync"));
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  namespace d = ::ember::cuda::sim::detail;
  return unsigned(d::warp_collective(d::Collective::match_any, mask, d::to_bits(value), 0, 32, "__match_any_sync"));
}

// Atomics: fibers never switch inside one, so a plain read-modify-write is atomic here.
namespace ember::cuda::sim::detail {
template <class T, class Update>
inline T read_modify_write(T* p, Update update) {
  const T old = *p;
  *p = update(old);
  return old;
}
}  // namespace ember::cuda::sim::detail
template <class T>
inline T atomicAdd(T* p, T v) {
  return ::ember::cuda::sim::detail::read_modify_write(p, [v](T old) { return old + v; });
}
template <class T>
inline T atomicMin(T* p, T v) {
  return ::ember::cuda::sim::detail::read_modify_write(p, [v](T old) { return v < old ? v : old; });
}
template <class T>
inline T atomicMax(T* p, T v) {
  return ::ember::cuda::sim::detail::read_modify_write(p, [v](T old) { return old < v ? v : old; });
}
template <class T>
inline T atomicExch(T* p, T v) {
  return ::ember::cuda::sim::detail::read_modify_write(p, [v](T) { return v; });
}
template <class T>
inline T atomicCAS(T* p, T compare, T v) {
  return ::ember::cuda::sim::detail::read_modify_write(p, [=](T old) { return old == compare ? v : old; });
}
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// Device-only intrinsics, by their definitions.
inline float __uint_as_float(unsigned v) { return ::ember::cuda::sim::detail::from_bits<float>(v); }
inline unsigned __float_as_uint(float v) { return unsigned(::ember::cuda::sim::detail::to_bits(v)); }
inline float __int_as_float(int v) { return ::ember::cuda::sim::detail::from_bits<float>(unsigned(v)); }
inline int __float_as_int(float v) { return int(unsigned(::ember::cuda::sim::detail::to_bits(v))); }
inline long long __double_as_longlong(double v) { return (long long)::ember::cuda::sim::detail::to_bits(v); }
inline double __longlong_as_double(long long v) {
  return ::ember::cuda::sim::detail::from_bits<double>((unsigned long long)v);
}
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(int v) { return v == 0 ? 32 : __builtin_clz(unsigned(v)); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline int __ffsll(long long v) { return __builtin_ffsll(v); }

// The device math library's unqualified names (min/max over mixed integer widths, the
// classification functions) that device code calls without std::.
template <class A, class B>
inline constexpr std::common_type_t<A, B> min(A a, B b) {
  return b < a ? b : a;
}
template <class A, class B>
inline constexpr std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}
using std::isfinite;
using std::isinf;
using std::isnan;

// cuda_runtime.h's typed overload (nvcc only): the kernel's address as the runtime's key.
template <class... Params>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}
