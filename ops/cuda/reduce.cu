// CUDA driver of the reduce family (mirror of ops/cpu/reduce.cpp). The front hands over an
// [O, R, K] view (kernels/reduce.h): output o*K + k reduces in[o, :, k].
//
// Invariants:
// - Two shapes of work. "Rows" (K == 1): a group of G threads (one block row, G a multiple of
//   32) reduces a run of R elements, thread t taking elements t, t+G, ... (coalesced when R
//   has stride 1). "Columns" (K > 1): a block of bx x by threads covers bx adjacent outputs
//   (coalesced along K) and by row lanes, each lane walking its rows; lanes are combined in
//   lane order through shared memory. Any strides work in both; the front only guarantees
//   that one of the two layouts is contiguous where it matters for speed.
// - Determinism (Note [deterministic CUDA reductions] in reduce_utils.cuh): no atomics. A
//   long reduction is split into nseg segments (a count computed from the shape alone), each
//   segment's partial is written to scratch, and a second kernel combines the partials of
//   each output in segment order. So the same shape gives bit-identical results every run,
//   on any GPU.
// - Accumulation: sums, means, norms and variances of f16/bf16 accumulate in f32, of f32 and
//   f64 in f64 (acc_t); integer and bool sums in i64, wrapping like the CPU. amax/amin/argmax
//   are exact. Variance merges (count, mean, M2) summaries with Chan's formula, one element
//   at a time within a thread (Welford), so data with a large offset keeps its accuracy.
// - NaN: amax/amin/max/min and the +-inf norms return NaN when any element is NaN; argmax /
//   argmin return the first NaN's index, else the first index of the extremum (the CPU's
//   rules; the arg combine compares carried indices, so it is independent of thread order).
#include <cmath>
#include <limits>
#include <type_traits>

#include "ember/cuda/launch.h"
#include "kernels/reduce.h"
#include "reduce_utils.cuh"

namespace ember::ops::cuda {

namespace {

constexpr int kBlockThreads = 256;
constexpr int64_t kTargetItems = 1024;   // split long reductions until about this many groups
constexpr int64_t kMinSegment = 8192;    // rows: fewest elements per segment
constexpr int64_t kMinLaneRows = 32;     // columns: fewest rows per lane and segment

// ---- the math of each op: identity, map (one element), combine (a precedes b), write ----

enum class MapKind : uint8_t { ident, abs, square, nonzero, int_pow, pow };
enum class FinKind : uint8_t { plain, div, sqrt, root };

template <class A>
__device__ __forceinline__ A pow_acc(A x, A y) {
  if constexpr (std::is_same_v<A, float>) return powf(x, y);
  else return pow(x, y);
}
template <class A>
__device__ __forceinline__ A sqrt_acc(A x) {
  if constexpr (std::is_same_v<A, float>) return sqrtf(x);
  else return sqrt(x);
}

// Floating sums of f(x), finished by g(sum): sum, mean, and the finite-p norms.
template <class S>
struct SumOp {
  using A = acc_t<S>;
  using Acc = A;
  S* out;
  MapKind map_kind;
  FinKind fin_kind;
  int int_p;  // int_pow
  A p;        // pow
  A fin_arg;  // div: the count; root: 1 / p
  __device__ Acc identity() const { return A(0); }
  __device__ Acc map(const S* x, int64_t) const {
    const A v = A(load_c(x));
    switch (map_kind) {
      case MapKind::ident: return v;
      case MapKind::abs: return v < A(0) ? -v : v;
      case MapKind::square: return v * v;
      case MapKind::nonzero: return v != A(0) ? A(1) : A(0);
      case MapKind::int_pow: {
        const A a = v < A(0) ? -v : v;
        A r = a;
        for (int i = 1; i < int_p; ++i) r *= a;
        return r;
      }
      case MapKind::pow: return pow_acc(v < A(0) ? -v : v, p);
    }
    return v;
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __device__ void write(Acc a, int64_t i) const {
    switch (fin_kind) {
      case FinKind::plain: break;
      case FinKind::div: a = a / fin_arg; break;
      case FinKind::sqrt: a = sqrt_acc(a); break;
      case FinKind::root: a = pow_acc(a, fin_arg); break;
    }
    store_c(out + i, a);
  }
};

// Integer and bool sums: exact in int64, wrapping on overflow (two's complement via uint64).
template <class S>
struct IntSumOp {
  using Acc = int64_t;
  int64_t* out;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(const S* x, int64_t) const { return int64_t(*x); }
  __device__ Acc combine(Acc a, Acc b) const { return int64_t(uint64_t(a) + uint64_t(b)); }
  __device__ void write(Acc a, int64_t i) const { out[i] = a; }
};

// amax/amin, and the +-inf norms (abs): exact, NaN wins.
template <class S>
struct ExtremumOp {
  using C = compute_t<S>;
  using Acc = C;
  S* out;
  bool is_max, take_abs;
  __device__ Acc identity() const {
    if constexpr (std::is_same_v<C, bool>) return !is_max;
    else if constexpr (std::numeric_limits<C>::has_infinity)
      return is_max ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    else return is_max ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
  }
  __device__ Acc map(const S* x, int64_t) const {
    const C v = load_c(x);
    if constexpr (std::is_floating_point_v<C>)
      if (take_abs) return v < C(0) ? -v : v;
    return v;
  }
  // b replaces a when it is more extreme or NaN; a NaN a stays (any comparison with it fails).
  __device__ Acc combine(Acc a, Acc b) const {
    if (is_max) return (b > a || is_nan_value(b)) ? b : a;
    return (b < a || is_nan_value(b)) ? b : a;
  }
  __device__ void write(Acc a, int64_t i) const { store_c(out + i, a); }
};

// max/min with the index of the first extremum (or of the first NaN).
template <class S>
struct ArgOp {
  using C = compute_t<S>;
  struct Acc {
    C value;
    int64_t index;  // -1: identity
  };
  S* values;  // may be null (argmax/argmin)
  int64_t* indices;
  bool is_max;
  __device__ Acc identity() const { return {C(), -1}; }
  __device__ Acc map(const S* x, int64_t r) const { return {load_c(x), r}; }
  // Symmetric in its arguments (ties and NaN pairs go to the lower index), so the result is
  // the first-index answer whatever grouping the tree used.
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool an = is_nan_value(a.value), bn = is_nan_value(b.value);
    if (an || bn) {
      if (an && bn) return a.index < b.index ? a : b;
      return an ? a : b;
    }
    if (is_max ? b.value > a.value : b.value < a.value) return b;
    if (is_max ? a.value > b.value : a.value < b.value) return a;
    return a.index < b.index ? a : b;
  }
  __device__ void write(Acc a, int64_t i) const {
    if (values) store_c(values + i, a.value);
    indices[i] = a.index;
  }
};

// var/std: (count, mean, M2) summaries merged with Chan's formula.
template <class S>
struct VarOp {
  using A = acc_t<S>;
  struct Acc {
    A n, mean, m2;
  };
  S* out;
  A correction;
  bool take_sqrt;
  __device__ Acc identity() const { return {A(0), A(0), A(0)}; }
  __device__ Acc map(const S* x, int64_t) const { return {A(1), A(load_c(x)), A(0)}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.n == A(0)) return b;
    if (b.n == A(0)) return a;
    const A n = a.n + b.n, delta = b.mean - a.mean;
    return {n, a.mean + delta * (b.n / n), a.m2 + b.m2 + delta * delta * (a.n * b.n / n)};
  }
  __device__ void write(Acc a, int64_t i) const {
    const A d = a.n - correction;
    const A v = a.m2 / (d > A(0) ? d : A(0));
    store_c(out + i, take_sqrt ? sqrt_acc(v) : v);
  }
};

// ---- kernels ----

// Rows: block row y handles work item blockIdx.x * blockDim.y + y = (o, segment s); its
// blockDim.x threads reduce x[o*os + r*rs] for r in the segment.
template <class S, class Op>
__global__ void reduce_rows_kernel(Op op, const S* x, int64_t O, int64_t os, int64_t R, int64_t rs,
                                   int64_t seg_len, int64_t nseg, typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);
  const int64_t item = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool valid = item < O * nseg;
  const int64_t o = valid ? item / nseg : 0, s = valid ? item % nseg : 0;
  Acc acc = op.identity();
  if (valid) {
    const int64_t r1 = min64(R, (s + 1) * seg_len);
    const S* base = x + o * os;
    for (int64_t r = s * seg_len + threadIdx.x; r < r1; r += blockDim.x)
      acc = op.combine(acc, op.map(base + r * rs, r));
  }
  acc = row_reduce(acc, [&](const Acc& a, const Acc& b) { return op.combine(a, b); }, smem, false);
  if (valid && threadIdx.x == 0) {
    if (nseg == 1) op.write(acc, o);
    else partial[s * O + o] = acc;
  }
}

// Columns: block b covers outputs (o, k0 .. k0+bx) of segment s; lane y walks rows
// y, y+by, ... of the segment; the by lanes are combined in lane order.
template <class S, class Op>
__global__ void reduce_cols_kernel(Op op, const S* x, int64_t O, int64_t os, int64_t R, int64_t rs,
                                   int64_t K, int64_t ks, int64_t seg_rows, int64_t nseg,
                                   typename Op::Acc* partial) {
  using Acc = typename Op::Acc;
  EMBER_DYNAMIC_SHARED_MEMORY(smem_raw);
  Acc* smem = reinterpret_cast<Acc*>(smem_raw);  // [by][bx]
  const int64_t kblocks = ceil_div(K, blockDim.x);
  const int64_t b = blockIdx.x;
  const int64_t s = b % nseg, kb = (b / nseg) % kblocks, o = b / nseg / kblocks;
  const int64_t k = kb * blockDim.x + threadIdx.x;
  Acc acc = op.identity();
  if (k < K) {
    const int64_t r1 = min64(R, (s + 1) * seg_rows);
    const S* base = x + o * os + k * ks;
    for (int64_t r = s * seg_rows + threadIdx.y; r < r1; r += blockDim.y)
      acc = op.combine(acc, op.map(base + r * rs, r));
  }
  smem[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && k < K) {
    for (unsigned y = 1; y < blockDim.y; ++y) acc = op.combine(acc, smem[y * blockDim.x + threadIdx.x]);
    if (nseg == 1) op.write(acc, o * K + k);
    else partial[s * (O * K) + o * K + k] = acc;
  }
}

// Second pass: output i combines its nseg partials in segment order.
template <class Op>
__global__ void reduce_finish_kernel(Op op, const typename Op::Acc* partial, int64_t n_out,
                                     int64_t nseg) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_out;
       i += int64_t(gridDim.x) * blockDim.x) {
    typename Op::Acc acc = partial[i];
    for (int64_t s = 1; s < nseg; ++s) acc = op.combine(acc, partial[s * n_out + i]);
    op.write(acc, i);
  }
}

// ---- launch ----

template <class S, class Op>
void run(const Op& op, const Tensor& in) {
  using Acc = typename Op::Acc;
  const S* x = static_cast<const S*>(in.data_ptr());
  const int64_t O = in.sizes()[0], R = in.sizes()[1], K = in.sizes()[2];
  const int64_t os = in.strides()[0], rs = in.strides()[1], ks = in.strides()[2];
  const int64_t n_out = O * K;
  if (n_out == 0) return;
  const auto on = ember::cuda::detail::on_device(in.device());
  cudaStream_t stream = on.stream;
  Tensor scratch;
  Acc* partial = nullptr;
  int64_t nseg = 1;
  auto alloc_partials = [&] {
    if (nseg == 1) return;
    scratch = detail::make_tensor({nseg * n_out * int64_t(sizeof(Acc))}, DType::u8, in.device());
    partial = static_cast<Acc*>(scratch.data_ptr());
  };
  if (K == 1) {
    if (O < kTargetItems && R > 2 * kMinSegment)
      nseg = std::min(ceil_div(kTargetItems, O), ceil_div(R, kMinSegment));
    const int64_t seg_len = std::max<int64_t>(ceil_div(R, nseg), 1);
    nseg = std::max<int64_t>(ceil_div(R, seg_len), 1);
    alloc_partials();
    const int g = threads_per_row(seg_len), rows_per_block = std::max(1, kBlockThreads / g);
    const int64_t blocks = ceil_div(O * nseg, rows_per_block);
    EMBER_CHECK(blocks < (int64_t(1) << 31), ShapeError, "[cuda reduce] ", O,
                " outputs exceed the CUDA grid limit");
    const size_t smem = size_t(rows_per_block) * 32 * sizeof(Acc);
    ::ember::cuda::launch_kernel(reduce_rows_kernel<S, Op>, unsigned(blocks), dim3(unsigned(g), unsigned(rows_per_block)),
                                 smem, stream,
        op, x, O, os, R, rs, seg_len, nseg, partial);
    EMBER_CUDA_CHECK_LAUNCH();
  } else {
    int bx = 32;
    while (bx / 2 >= K) bx /= 2;  // narrow outputs: more row lanes instead of idle columns
    const int by = kBlockThreads / bx;
    const int64_t kblocks = ceil_div(K, bx), items = O * kblocks;
    const int64_t min_rows = int64_t(by) * kMinLaneRows;
    if (items < kTargetItems && R > 2 * min_rows)
      nseg = std::min(ceil_div(kTargetItems, items), ceil_div(R, min_rows));
    const int64_t seg_rows = std::max<int64_t>(ceil_div(R, nseg), 1);
    nseg = std::max<int64_t>(ceil_div(R, seg_rows), 1);
    alloc_partials();
    EMBER_CHECK(items * nseg < (int64_t(1) << 31), ShapeError, "[cuda reduce] ", n_out,
                " outputs exceed the CUDA grid limit");
    const size_t smem = size_t(kBlockThreads) * sizeof(Acc);
    ::ember::cuda::launch_kernel(reduce_cols_kernel<S, Op>, unsigned(items * nseg), dim3(unsigned(bx), unsigned(by)),
                                 smem, stream,
        op, x, O, os, R, rs, K, ks, seg_rows, nseg, partial);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  if (nseg > 1) {
    const int64_t blocks = std::min<int64_t>(ceil_div(n_out, kBlockThreads), int64_t(1) << 16);
    ::ember::cuda::launch_kernel(reduce_finish_kernel<Op>, unsigned(blocks), kBlockThreads, 0, stream,
        op, partial, n_out, nseg);
    EMBER_CUDA_CHECK_LAUNCH();
  }
  // `scratch` is released here on the host; the caching allocator hands its block only to
  // later work on the same stream, which runs after these kernels.
}

template <class S>
void run_sum(const Tensor& in, const Tensor& out, MapKind map, FinKind fin, double p = 0,
             double fin_arg = 0, int int_p = 0) {
  using A = acc_t<S>;
  run<S>(SumOp<S>{out.data_ptr<S>(), map, fin, int_p, A(p), A(fin_arg)}, in);
}

template <class S>
void norm_dispatch(const Tensor& in, const Tensor& out, double p) {
  S* o = out.data_ptr<S>();
  if (std::isinf(p)) run<S>(ExtremumOp<S>{o, p > 0, true}, in);
  else if (p == 0) run_sum<S>(in, out, MapKind::nonzero, FinKind::plain);
  else if (p == 1) run_sum<S>(in, out, MapKind::abs, FinKind::plain);
  else if (p == 2) run_sum<S>(in, out, MapKind::square, FinKind::sqrt);
  else if (p > 2 && p <= 8 && p == std::floor(p))
    run_sum<S>(in, out, MapKind::int_pow, FinKind::root, p, 1.0 / p, int(p));
  else run_sum<S>(in, out, MapKind::pow, FinKind::root, p, 1.0 / p);
}

}  // namespace

void reduce_kernel(ReduceOp op, const Tensor& in, const Tensor& out, const ReduceParams& params) {
  const DType dt = in.dtype();
  switch (op) {
    case ReduceOp::sum:
      if (is_floating(dt)) {
        visit_floating(dt, [&](auto t) { run_sum<decltype(t)>(in, out, MapKind::ident, FinKind::plain); });
      } else {
        visit_dtype(dt, [&](auto t) {
          using S = decltype(t);
          if constexpr (std::is_integral_v<S>) run<S>(IntSumOp<S>{out.data_ptr<int64_t>()}, in);
        });
      }
      return;
    case ReduceOp::mean:
      visit_floating(dt, [&](auto t) {
        run_sum<decltype(t)>(in, out, MapKind::ident, FinKind::div, 0, double(in.sizes()[1]));
      });
      return;
    case ReduceOp::amax:
    case ReduceOp::amin:
      visit_dtype(dt, [&](auto t) {
        using S = decltype(t);
        run<S>(ExtremumOp<S>{out.data_ptr<S>(), op == ReduceOp::amax, false}, in);
      });
      return;
    case ReduceOp::var:
    case ReduceOp::std:
      visit_floating(dt, [&](auto t) {
        using S = decltype(t);
        using A = acc_t<S>;
        run<S>(VarOp<S>{out.data_ptr<S>(), A(params.correction), op == ReduceOp::std}, in);
      });
      return;
    case ReduceOp::norm:
      visit_floating(dt, [&](auto t) { norm_dispatch<decltype(t)>(in, out, params.p); });
      return;
  }
}

void arg_reduce_kernel(bool is_max, const Tensor& in, const Tensor& values, const Tensor& indices) {
  visit_dtype(in.dtype(), [&](auto t) {
    using S = decltype(t);
    S* v = values.defined() ? values.data_ptr<S>() : nullptr;
    run<S>(ArgOp<S>{v, indices.data_ptr<int64_t>(), is_max}, in);
  });
}

}  // namespace ember::ops::cuda
