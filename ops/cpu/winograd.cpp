// Winograd F(2x2, 3x3) convolution, forward and both gradients, on the CPU.
//
// Note [Winograd convolution]
// F(2x2, 3x3) (Lavin & Gray, 2015) makes a 2x2 output tile from a 4x4 input tile d with 16
// multiplications per (input, output) channel pair instead of im2col's 36:
//   y = A^T [ (G g G^T) (.) (B^T d B) ] A        (.) = elementwise, g = the 3x3 filter
// Summed over input channels, the (.) at each of the 16 positions xi is one GEMM over the
// channels: M_xi[O, tiles] = U_xi[O, C] @ V_xi[C, tiles], with U = G g G^T (the weights,
// transformed once per call) and V = B^T d B (every input tile); then y = A^T M A per tile.
// The GEMMs do 16/36 of im2col's multiply-adds; the transforms are a few additions each.
// The gradients reuse the same transforms:
//   input:  the input gradient of a stride-1 3x3 convolution is a 3x3 convolution of the
//           output gradient (padding 2 - p) with the filters flipped and in/out channels
//           swapped, so it is `forward` again;
//   weight: the formula is linear in U, so by its adjoint dU_xi[O, C] = sum over tiles of
//           dM_xi[O, t] V_xi[C, t] with dM = A dy A^T, and dg = G^T dU G: one GEMM per xi
//           whose inner dimension is the tiles (long, the GEMM's good shape).
// Tiles hanging over the output's bottom/right edge compute outputs that are dropped (and
// whose dy reads as 0); input reads outside the image (padding, overhang) read 0.
// Work comes in units of (group, run of tile rows across the batch) of about kUnitTiles
// tiles: big enough that Eigen's per-call packing and setup are small next to each GEMM, few
// enough that V and M (16 * (C + O) * tiles values) stay within kUnitBytes. Units run in
// parallel, one single-threaded GEMM each (Note [GEMM threading], ops/cpu/linalg.cpp).
// Measured (bench/bench_conv.cpp, docs/performance.md): 1.3-2.1x faster than im2col per pass.
// The weight gradient sums per-thread partials in thread order (static schedule), so it is
// the same on every run with the same thread count, like the im2col path.
// Accuracy: G has halves and each transform stage adds up to 3 terms, so rounding errors are
// a few ulps larger than im2col's (f32: ~1e-6 relative), inside every tolerance we test.
#include "winograd.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "kernels/linalg.h"

namespace ember::ops::cpu::winograd {

namespace {

constexpr int kPositions = 16;       // 4x4 transformed tile
// Tiles per work unit: at most kUnitTiles (measured on 2 cores: 256 and 1024 slower), fewer
// when V and M of that many tiles would pass kUnitBytes (many channels).
constexpr int64_t kUnitTiles = 512;
constexpr double kUnitBytes = 4 << 20;
// Fewer channels in or out per group, and the transforms and the GEMMs' short sides cost
// more than the multiplications saved (bench_conv: 8 -> 32 and 8 -> 64 ran 0.83-0.97x of
// im2col; 16 -> 16, 16 -> 64, 64 -> 16 ran 1.2-2.1x).
constexpr int64_t kMinChannels = 16;
constexpr double kParallelMinMacs = 200000;

// The 1-D maps; a 2-D transform applies one to every column, then to every row.
struct InputTransform {  // B^T: 4 -> 4
  static constexpr int in = 4, out = 4;
  template <class T>
  static void apply(const T* a, T* o) {
    o[0] = a[0] - a[2];
    o[1] = a[1] + a[2];
    o[2] = a[2] - a[1];
    o[3] = a[1] - a[3];
  }
};
struct OutputTransform {  // A^T: 4 -> 2
  static constexpr int in = 4, out = 2;
  template <class T>
  static void apply(const T* a, T* o) {
    o[0] = a[0] + a[1] + a[2];
    o[1] = a[1] - a[2] - a[3];
  }
};
struct OutputAdjoint {  // A: 2 -> 4
  static constexpr int in = 2, out = 4;
  template <class T>
  static void apply(const T* a, T* o) {
    o[0] = a[0];
    o[1] = a[0] + a[1];
    o[2] = a[0] - a[1];
    o[3] = -a[1];
  }
};
struct WeightTransform {  // G: 3 -> 4
  static constexpr int in = 3, out = 4;
  template <class T>
  static void apply(const T* a, T* o) {
    o[0] = a[0];
    o[1] = T(0.5) * (a[0] + a[1] + a[2]);
    o[2] = T(0.5) * (a[0] - a[1] + a[2]);
    o[3] = a[2];
  }
};
struct WeightAdjoint {  // G^T: 4 -> 3
  static constexpr int in = 4, out = 3;
  template <class T>
  static void apply(const T* a, T* o) {
    o[0] = a[0] + T(0.5) * (a[1] + a[2]);
    o[1] = T(0.5) * (a[1] - a[2]);
    o[2] = T(0.5) * (a[1] + a[2]) + a[3];
  }
};

// out (F::out x F::out) = L in L^T, L the 1-D map F; both row-major.
template <class F, class T>
void transform_2d(const T* in, T* out) {
  constexpr int I = F::in, O = F::out;
  T rows[O][I];
  for (int j = 0; j < I; ++j) {
    T col[I], r[O];
    for (int i = 0; i < I; ++i) col[i] = in[i * I + j];
    F::apply(col, r);
    for (int i = 0; i < O; ++i) rows[i][j] = r[i];
  }
  for (int i = 0; i < O; ++i) F::apply(rows[i], out + i * O);
}

// The tile grid over the output and its cut into work units. A unit is a run of tile rows of
// one group, counted across the batch (row R is sample R / tiles_h's tile row R % tiles_h),
// so small images still make GEMMs of a few hundred tiles.
struct Plan {
  int64_t Cg, Og, Ho, Wo;
  int64_t tiles_h, tiles_w;  // ceil(Ho / 2), ceil(Wo / 2)
  int64_t rows;              // N * tiles_h
  int64_t band, per_group;   // tile rows per unit, units per group
  int64_t units;

  Plan(const Problem& p, size_t elem_size)
      : Cg(p.C / p.groups), Og(p.O / p.groups), Ho(p.Ho()), Wo(p.Wo()), tiles_h((Ho + 1) / 2),
        tiles_w((Wo + 1) / 2), rows(p.N * tiles_h) {
    // As few units as keep each within the tile budget (at least one row), of equal height.
    const double tile_bytes = kPositions * double(Cg + Og) * double(elem_size);  // its V and M
    const double unit_tiles = std::min<double>(kUnitTiles, kUnitBytes / tile_bytes);
    // ... and, when there are rows enough, 4 units per thread or more (dynamic balance).
    const int64_t threads = omp_get_max_threads();
    const int64_t rows_max = std::clamp<int64_t>(int64_t(unit_tiles) / tiles_w, 1,
                                                 std::max<int64_t>((rows * p.groups) / (4 * threads), 1));
    per_group = (rows + rows_max - 1) / rows_max;
    band = (rows + per_group - 1) / per_group;
    per_group = (rows + band - 1) / band;
    units = p.groups * per_group;
  }
  int64_t max_tiles() const { return band * tiles_w; }
  // The transforms' `work`: the output side's 4 values per tile, or the input side's split
  // rows (2 per tile row and 2 more, per sample run).
  int64_t work_elems() const {
    return std::max(4 * max_tiles(), 2 * (2 * std::min(band, tiles_h) + 2) * (tiles_w + 1));
  }
  bool parallel(const Problem& p) const {
    const double macs = double(p.N) * double(Ho) * double(Wo) * double(p.O) * double(Cg) * 9;
    return units > 1 && macs >= kParallelMinMacs && !omp_in_parallel() && omp_get_max_threads() > 1;
  }
  // Calls f(n, ty0, r, count) for each run of the tile rows [R0, R0 + rows_in_unit) inside
  // one sample: sample n's tile rows ty0 .. ty0 + count, the unit's rows r .. r + count.
  template <class F>
  void each_run(int64_t R0, int64_t rows_in_unit, F f) const {
    for (int64_t r = 0; r < rows_in_unit;) {
      const int64_t n = (R0 + r) / tiles_h, ty0 = (R0 + r) % tiles_h;
      const int64_t count = std::min(rows_in_unit - r, tiles_h - ty0);
      f(n, ty0, r, count);
      r += count;
    }
  }
};

// U[xi][o][c] = (G w[o][c] G^T)[xi] for all O filters of Cg channels each.
template <class T>
std::vector<T> transform_weights(const T* w, int64_t O, int64_t Cg) {
  std::vector<T> U(size_t(kPositions * O * Cg));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < Cg; ++c) {
      T u[kPositions];
      transform_2d<WeightTransform>(w + (o * Cg + c) * 9, u);
      for (int xi = 0; xi < kPositions; ++xi) U[size_t((xi * O + o) * Cg + c)] = u[xi];
    }
  return U;
}

// The transforms read and write unit-stride arrays only, in `work`: the input side splits
// each input row it reads into even and odd columns once (gather_columns), the output side
// keeps one array per tile element. each_tile then transforms a vector of adjacent tiles at
// a time (the compiler does not vectorize the per-tile loop by itself, and scalar transforms
// cost as much as the GEMMs).

// A vector of Bytes / sizeof(T) values of T (GCC/Clang vector extension): the arithmetic of
// the 1-D maps applies lane by lane, so transform_2d runs on that many tiles at once.
template <class T, int Bytes>
struct Simd {
  typedef T vec __attribute__((vector_size(Bytes)));
  static constexpr int64_t lanes = Bytes / sizeof(T);
};

// load<V>(p): *p for a scalar V, the vector at p (any alignment) for a vector V; store alike.
template <class V, class T>
V load(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class V, class T>
void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// tile(V{}, t) over t = 0 .. tiles: V a 32-byte vector of T while that many tiles remain,
// then at most once a 16-byte one, then V = T one tile at a time (a 12-tile row: 8 + 4).
template <class T, class F>
void each_tile(int64_t tiles, F tile) {
  using Wide = Simd<T, 32>;
  using Half = Simd<T, 16>;
  int64_t t = 0;
  for (; t + Wide::lanes <= tiles; t += Wide::lanes) tile(typename Wide::vec{}, t);
  if (t + Half::lanes <= tiles) {
    tile(typename Half::vec{}, t);
    t += Half::lanes;
  }
  for (; t < tiles; ++t) tile(T{}, t);
}

// dst[k * stride + q] = src[2q + k - lead] for k < K, q < n: the K columns of n tiles (2
// apart) in one row, 0 outside src[0, len) or everywhere when src == nullptr. The interior
// loop has no checks (the compiler vectorizes its stride-2 loads); only edge tiles test.
template <int K, class T>
void gather_columns(const T* src, int64_t len, int64_t lead, int64_t n, T* dst, int64_t stride) {
  if (!src) {
    for (int k = 0; k < K; ++k) std::fill(dst + k * stride, dst + k * stride + n, T(0));
    return;
  }
  const int64_t lo = std::min(n, (lead + 1) / 2);  // first q whose columns are all >= 0
  const int64_t last = len + lead - K;             // q <= last / 2: all columns < len
  const int64_t hi = std::clamp<int64_t>(last < 0 ? 0 : last / 2 + 1, lo, n);
  auto edge = [&](int64_t q) {
    for (int k = 0; k < K; ++k) {
      const int64_t col = 2 * q + k - lead;
      dst[k * stride + q] = col >= 0 && col < len ? src[col] : T(0);
    }
  };
  for (int64_t q = 0; q < lo; ++q) edge(q);
  for (int64_t q = lo; q < hi; ++q)
    for (int k = 0; k < K; ++k) dst[k * stride + q] = src[2 * q + k - lead];
  for (int64_t q = hi; q < n; ++q) edge(q);
}

// V[xi][c][t] = (B^T d B)[xi] for the unit's tiles t (tile rows from R0) of the Cg channels
// of x [N, C, H, W] starting at x (the group's first channel of sample 0). Tile rows overlap
// by two input rows and tiles by two columns, so each input row a run of tile rows reads is
// split into even and odd columns once, and the tiles read their 4x4 from there.
// Sample by sample, then channel by channel: x is read in memory order (a unit spans several
// samples; channel-major order jumped a sample's worth of channels between short plane
// pieces, and the 7x7 maps' passes ran ~11% slower on activations not in cache).
template <class T>
void transform_input(const T* x, const Problem& p, const Plan& pl, int64_t R0, int64_t tiles, T* V, T* work) {
  const int64_t tw = pl.tiles_w, pairs = tw + 1, plane_stride = pl.Cg * tiles;
  T* split = work;  // run input row j: even columns at split[2j * pairs], odd ones after them
  pl.each_run(R0, tiles / tw, [&](int64_t n, int64_t ty0, int64_t r0, int64_t count) {
    for (int64_t c = 0; c < pl.Cg; ++c) {
      const T* plane = x + (n * p.C + c) * p.H * p.W;
      for (int64_t j = 0; j < 2 * count + 2; ++j) {
        const int64_t ih = 2 * ty0 - p.ph + j;
        gather_columns<2>(ih >= 0 && ih < p.H ? plane + ih * p.W : nullptr, p.W, p.pw, pairs,
                          split + 2 * j * pairs, pairs);
      }
      for (int64_t r = 0; r < count; ++r) {
        const T* top = split + 4 * r * pairs;  // run input row 2r: the tile row's first
        T* out = V + c * tiles + (r0 + r) * tw;
        each_tile<T>(tw, [=](auto lanes, int64_t t) {
          using Vec = decltype(lanes);
          Vec d[16], v[kPositions];
          for (int i = 0; i < 4; ++i) {
            const T* even = top + 2 * i * pairs;
            const T* odd = even + pairs;
            d[4 * i + 0] = load<Vec>(even + t);
            d[4 * i + 1] = load<Vec>(odd + t);
            d[4 * i + 2] = load<Vec>(even + t + 1);
            d[4 * i + 3] = load<Vec>(odd + t + 1);
          }
          transform_2d<InputTransform>(d, v);
          for (int xi = 0; xi < kPositions; ++xi) store(out + xi * plane_stride + t, v[xi]);
        });
      }
    }
  });
}

// y = (A^T M A) + bias for the unit's tiles, from M[xi][o][t]; y [N, O, Ho, Wo] starts at the
// group's first channel of sample 0. Sample by sample, as transform_input: y is written in
// memory order.
template <class T>
void transform_output(const T* M, const T* bias, const Problem& p, const Plan& pl, int64_t R0, int64_t tiles, T* y,
                      T* work) {
  const int64_t tw = pl.tiles_w, plane_stride = pl.Og * tiles;
  T* q = work;  // q[k][t]: tile t's output k = 2 * row + column (4 * tiles)
  pl.each_run(R0, tiles / tw, [&](int64_t n, int64_t ty0, int64_t r0, int64_t count) {
    for (int64_t o = 0; o < pl.Og; ++o) {
      const T* in = M + o * tiles + r0 * tw;
      const T b = bias ? bias[o] : T(0);
      T* qr = q + r0 * tw;
      each_tile<T>(count * tw, [=](auto lanes, int64_t t) {
        using Vec = decltype(lanes);
        Vec m[kPositions], out[4];
        for (int xi = 0; xi < kPositions; ++xi) m[xi] = load<Vec>(in + xi * plane_stride + t);
        transform_2d<OutputTransform>(m, out);
        for (int k = 0; k < 4; ++k) store(qr + k * tiles + t, Vec(out[k] + b));
      });
      T* plane = y + (n * p.O + o) * pl.Ho * pl.Wo;
      for (int64_t r = 0; r < count; ++r)
        for (int i = 0; i < 2 && 2 * (ty0 + r) + i < pl.Ho; ++i) {
          const T* even = q + 2 * i * tiles + (r0 + r) * tw;
          const T* odd = even + tiles;
          T* row = plane + (2 * (ty0 + r) + i) * pl.Wo;
          for (int64_t t = 0; t < pl.Wo / 2; ++t) {
            row[2 * t] = even[t];
            row[2 * t + 1] = odd[t];
          }
          if (pl.Wo % 2) row[pl.Wo - 1] = even[pl.Wo / 2];
        }
    }
  });
}

// dM[xi][o][t] = (A dy A^T)[xi] for the unit's tiles of dy [N, O, Ho, Wo] (starting at the
// group's first channel of sample 0; 0 past the edge). Sample by sample, as transform_input.
template <class T>
void transform_output_grad(const T* gy, const Problem& p, const Plan& pl, int64_t R0, int64_t tiles, T* dM,
                           T* work) {
  const int64_t tw = pl.tiles_w, plane_stride = pl.Og * tiles;
  T* g = work;  // g[k][t]: tile t's dy value k = 2 * row + column (4 * tiles)
  pl.each_run(R0, tiles / tw, [&](int64_t n, int64_t ty0, int64_t r0, int64_t count) {
    for (int64_t o = 0; o < pl.Og; ++o) {
      const T* plane = gy + (n * p.O + o) * pl.Ho * pl.Wo;
      for (int64_t r = 0; r < count; ++r)
        for (int i = 0; i < 2; ++i) {
          const int64_t oh = 2 * (ty0 + r) + i;
          gather_columns<2>(oh < pl.Ho ? plane + oh * pl.Wo : nullptr, pl.Wo, 0, tw,
                            g + 2 * i * tiles + (r0 + r) * tw, tiles);
        }
      T* out = dM + o * tiles + r0 * tw;
      const T* gr = g + r0 * tw;
      each_tile<T>(count * tw, [=](auto lanes, int64_t t) {
        using Vec = decltype(lanes);
        Vec dy[4], m[kPositions];
        for (int k = 0; k < 4; ++k) dy[k] = load<Vec>(gr + k * tiles + t);
        transform_2d<OutputAdjoint>(dy, m);
        for (int xi = 0; xi < kPositions; ++xi) store(out + xi * plane_stride + t, m[xi]);
      });
    }
  });
}

// This thread's scratch, grow-only and kept between calls: a fresh multi-megabyte buffer per
// call cost its page faults and zeroing (~3% of the MNIST CNN's step). Contents undefined.
// 64-byte aligned on every thread, so that a unit computes alike on whichever thread the
// dynamic schedule hands it to (docs/reliability.md: Eigen scratch aligned).
template <class T>
T* thread_scratch(size_t elems) {
  struct Buffer {
    T* data = nullptr;
    size_t elems = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer buffer;
  if (buffer.elems < elems) {
    std::free(buffer.data);
    buffer.data = static_cast<T*>(std::aligned_alloc(64, (elems * sizeof(T) + 63) / 64 * 64));
    buffer.elems = buffer.data ? elems : 0;
    if (!buffer.data) throw std::bad_alloc();
  }
  return buffer.data;
}

// The threads for_each_unit runs units on: f's `slot` is below this.
size_t unit_slots(const Problem& p, const Plan& pl) { return pl.parallel(p) ? size_t(omp_get_max_threads()) : 1; }

// Runs f(g, R0, tiles, scratch, slot) for every unit, on all threads when worth it (slot: the
// running thread's number in this call, < unit_slots; 0 when not parallel, even inside a
// caller's parallel region). Dynamic schedule (a busy neighbour core slows one thread, not
// the call) unless `in_order`: then each thread runs a fixed, contiguous share of the units
// (for per-thread sums added in order).
template <class T, class F>
void for_each_unit(const Problem& p, const Plan& pl, size_t scratch_elems, bool in_order, F f) {
  auto unit = [&](int64_t u, T* scratch, size_t slot) {
    const int64_t R0 = (u % pl.per_group) * pl.band;
    f(u / pl.per_group, R0, (std::min(pl.rows, R0 + pl.band) - R0) * pl.tiles_w, scratch, slot);
  };
  if (unit_slots(p, pl) == 1) {
    T* scratch = thread_scratch<T>(scratch_elems);
    for (int64_t u = 0; u < pl.units; ++u) unit(u, scratch, 0);
    return;
  }
#pragma omp parallel
  {
    T* scratch = thread_scratch<T>(scratch_elems);
    const size_t slot = size_t(omp_get_thread_num());
    if (in_order) {
#pragma omp for schedule(static)
      for (int64_t u = 0; u < pl.units; ++u) unit(u, scratch, slot);
    } else {
#pragma omp for schedule(dynamic, 1)
      for (int64_t u = 0; u < pl.units; ++u) unit(u, scratch, slot);
    }
  }
}

}  // namespace

bool eligible(const Problem& p) {
  return p.ph >= 0 && p.ph <= 2 && p.pw >= 0 && p.pw <= 2 && p.Ho() >= 1 && p.Wo() >= 1 &&
         p.C / p.groups >= kMinChannels && p.O / p.groups >= kMinChannels;
}

template <class T>
void forward(const T* x, const T* w, const T* bias, T* y, const Problem& p) {
  const Plan pl(p, sizeof(T));
  const std::vector<T> U = transform_weights(w, p.O, pl.Cg);
  const int64_t v_elems = kPositions * pl.Cg * pl.max_tiles();
  for_each_unit<T>(
      p, pl, size_t(pl.work_elems() + v_elems + kPositions * pl.Og * pl.max_tiles()), false,
      [&](int64_t g, int64_t R0, int64_t tiles, T* scratch, size_t) {
        T* work = scratch;
        T* V = work + pl.work_elems();
        T* M = V + v_elems;
        transform_input(x + g * pl.Cg * p.H * p.W, p, pl, R0, tiles, V, work);
        for (int xi = 0; xi < kPositions; ++xi)
          gemm<T>(pl.Og, tiles, pl.Cg, {U.data() + (xi * p.O + g * pl.Og) * pl.Cg, pl.Cg, 1},
                  {V + xi * pl.Cg * tiles, tiles, 1}, {M + xi * pl.Og * tiles, tiles, 1}, false);
        transform_output(M, bias ? bias + g * pl.Og : nullptr, p, pl, R0, tiles, y + g * pl.Og * pl.Ho * pl.Wo, work);
      });
}

template <class T>
void backward_input(const T* gy, const T* w, T* gx, const Problem& p) {
  // The flipped, channel-swapped filters: wf[g*Cg + c][o][i][j] = w[g*Og + o][c][2-i][2-j].
  const int64_t Cg = p.C / p.groups, Og = p.O / p.groups;
  std::vector<T> wf(size_t(p.C * Og * 9));
  for (int64_t g = 0; g < p.groups; ++g)
    for (int64_t o = 0; o < Og; ++o)
      for (int64_t c = 0; c < Cg; ++c)
        for (int k = 0; k < 9; ++k)
          wf[size_t(((g * Cg + c) * Og + o) * 9 + k)] = w[((g * Og + o) * Cg + c) * 9 + (8 - k)];
  forward(gy, wf.data(), static_cast<const T*>(nullptr), gx,
          Problem{p.N, p.O, p.Ho(), p.Wo(), p.C, 2 - p.ph, 2 - p.pw, p.groups});
}

template <class T>
void backward_weight(const T* gy, const T* x, T* gw, const Problem& p) {
  const Plan pl(p, sizeof(T));
  // Each thread sums its units into its own dU[xi][o][c] (all O filters), added up below in
  // thread order; scratch: the work buffer, V and dM of one unit.
  const int64_t du_elems = kPositions * p.O * pl.Cg, v_elems = kPositions * pl.Cg * pl.max_tiles();
  std::vector<std::vector<T>> partial(unit_slots(p, pl));
  for_each_unit<T>(
      p, pl, size_t(pl.work_elems() + v_elems + kPositions * pl.Og * pl.max_tiles()), true,
      [&](int64_t g, int64_t R0, int64_t tiles, T* scratch, size_t slot) {
        std::vector<T>& dU = partial[slot];
        if (dU.empty()) dU.assign(size_t(du_elems), T(0));
        T* work = scratch;
        T* V = work + pl.work_elems();
        T* dM = V + v_elems;
        transform_input(x + g * pl.Cg * p.H * p.W, p, pl, R0, tiles, V, work);
        transform_output_grad(gy + g * pl.Og * pl.Ho * pl.Wo, p, pl, R0, tiles, dM, work);
        for (int xi = 0; xi < kPositions; ++xi)
          gemm<T>(pl.Og, pl.Cg, tiles, {dM + xi * pl.Og * tiles, tiles, 1}, {V + xi * pl.Cg * tiles, 1, tiles},
                  {dU.data() + (xi * p.O + g * pl.Og) * pl.Cg, pl.Cg, 1}, true);
      });
  std::vector<T> dU(size_t(du_elems), T(0));
  for (const std::vector<T>& part : partial)
    for (size_t i = 0; i < part.size(); ++i) dU[i] += part[i];
  for (int64_t o = 0; o < p.O; ++o)
    for (int64_t c = 0; c < pl.Cg; ++c) {
      T du[kPositions];
      for (int xi = 0; xi < kPositions; ++xi) du[xi] = dU[size_t((xi * p.O + o) * pl.Cg + c)];
      transform_2d<WeightAdjoint>(du, gw + (o * pl.Cg + c) * 9);
    }
}

#define EMBER_WINOGRAD_INSTANTIATE(T)                                                    \
  template void forward<T>(const T*, const T*, const T*, T*, const Problem&);           \
  template void backward_input<T>(const T*, const T*, T*, const Problem&);              \
  template void backward_weight<T>(const T*, const T*, T*, const Problem&);
EMBER_WINOGRAD_INSTANTIATE(float)
EMBER_WINOGRAD_INSTANTIATE(double)
#undef EMBER_WINOGRAD_INSTANTIATE

}  // namespace ember::ops::cpu::winograd
