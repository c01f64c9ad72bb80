// The SIMT layer of the CUDA simulation (ember/cuda_sim/simt.h) on small kernels whose results
// are known by construction, under every schedule; the errors a GPU would give (or that are
// undefined behaviour there) refused with a clear message; and ember's own deterministic
// warp/row reductions (ops/cuda/reduce_utils.cuh, compiled unchanged as host C++) against a
// host sum in the order the Note [deterministic CUDA reductions] defines.
#include <cuda_runtime.h>

#include "ember/cuda_sim/simt.h"
// After the layer: device code sees its threadIdx, barriers and shuffles.
#define EMBER_CUDA_SIM 1
#include "../../ops/cuda/reduce_utils.cuh"
#include "ember/cuda/launch.h"  // EMBER_DYNAMIC_SHARED_MEMORY

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace sim = ember::cuda::sim;

namespace {

// These tests read a kernel's results right after sim::launch, the SIMT layer's own contract
// without a runtime. In a simulation build this binary also loads the simulated runtime (ember's
// shared libraries link it), whose static initializer installs its submit hook: launches would
// then queue on the default stream until something synchronizes. This file's initializer runs
// after the libraries' and takes the hook away.
const bool kLayerAlone = [] {
  sim::detail::set_submit_hook(nullptr);
  return true;
}();

std::vector<sim::Schedule> every_schedule() {
  std::vector<sim::Schedule> all;
  for (auto lanes : {sim::LaneOrder::forward, sim::LaneOrder::reverse, sim::LaneOrder::random})
    for (auto warps : {sim::WarpPolicy::lockstep, sim::WarpPolicy::eager, sim::WarpPolicy::eager_reverse})
      all.push_back({lanes, warps, 7});
  return all;
}
std::string name(const sim::Schedule& s) {
  return std::to_string(int(s.lanes)) + "/" + std::to_string(int(s.warps));
}

// The message of the SimError f throws ("" when none).
std::string sim_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const sim::SimError& e) {
    return e.what();
  }
  return "";
}
// f throws a SimError whose message contains `text`.
::testing::AssertionResult fails_saying(const std::function<void()>& f, const std::string& text) {
  const std::string message = sim_error(f);
  if (message.find(text) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected an error saying \"" << text << "\", got \"" << message << "\"";
}

__global__ void write_indices(int* out) {
  const int tid = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const int bid = int(blockIdx.x + gridDim.x * blockIdx.y);
  const int threads = int(blockDim.x * blockDim.y * blockDim.z);
  out[bid * threads + tid] = bid * 10000 + int(threadIdx.z) * 100 + int(threadIdx.y) * 10 + int(threadIdx.x);
}

// Reverses each block's slice through shared memory: correct only with the barrier.
__global__ void reverse_block(const float* in, float* out) {
  __shared__ float tile[256];
  const int i = int(threadIdx.x), base = int(blockIdx.x * blockDim.x);
  tile[i] = in[base + i];
  __syncthreads();
  out[base + i] = tile[int(blockDim.x) - 1 - i];
}

// Doubles a tile in place, then reads the neighbour's element: right only with the second
// barrier (out[i] = 2 in[i + 1]).
__global__ void double_then_shift(const float* in, float* out, bool second_barrier) {
  __shared__ float tile[256];
  const int i = int(threadIdx.x), n = int(blockDim.x);
  tile[i] = in[i];
  __syncthreads();
  tile[i] *= 2;
  if (second_barrier) __syncthreads();
  out[i] = tile[(i + 1) % n];
}

__global__ void shuffles(const int* in, int* out) {
  const int lane = int(threadIdx.x) & 31;
  const int v = in[threadIdx.x];
  int sum = v;
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  int scan = v;  // inclusive prefix sum
  for (int off = 1; off < 32; off <<= 1) {
    const int u = __shfl_up_sync(0xffffffffu, scan, off);
    if (lane >= off) scan += u;
  }
  const int next = __shfl_down_sync(0xffffffffu, v, 1);
  const int from_3 = __shfl_sync(0xffffffffu, v, 3);
  const int in_eight = __shfl_sync(0xffffffffu, v, 1, 8);  // lane 1 of each group of 8
  const unsigned odd = __ballot_sync(0xffffffffu, v & 1);
  const int any_big = __any_sync(0xffffffffu, v > 90), all_pos = __all_sync(0xffffffffu, v >= 0);
  const unsigned same = __match_any_sync(0xffffffffu, v % 3);
  int* o = out + threadIdx.x * 9;
  o[0] = sum, o[1] = scan, o[2] = next, o[3] = from_3, o[4] = in_eight;
  o[5] = int(odd), o[6] = any_big, o[7] = all_pos, o[8] = int(same);
}

__global__ void barrier_in_branch(int* out) {
  if (threadIdx.x < 32) __syncthreads();  // the other warps return: undefined on the GPU
  out[threadIdx.x] = 1;
}
__global__ void shuffle_after_exit(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, int(threadIdx.x), 1);  // names exited lanes
}
__global__ void not_in_own_mask(int* out) { out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 0); }
__global__ void reads_outside_mask(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, int(threadIdx.x), 20);
}
__global__ void different_collectives(int* out) {
  if (threadIdx.x & 1) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  else out[threadIdx.x] = int(__ballot_sync(0xffffffffu, 1));
}
__global__ void uses_dynamic_shared(int* out) {
  EMBER_DYNAMIC_SHARED_MEMORY(smem);  // as ember's kernels declare it
  int* s = reinterpret_cast<int*>(smem);
  s[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

// ember's row_reduce: one block row (threadIdx.y) per row of x, blockDim.x threads striding
// over it, then the deterministic reduction; thread 0 of the row writes the sum.
__global__ void row_sums(const double* x, int64_t rows, int64_t cols, double* out) {
  __shared__ double smem[32 * 4];
  const int64_t r = int64_t(blockIdx.x) * blockDim.y + threadIdx.y;
  double v = 0;
  if (r < rows)
    for (int64_t k = threadIdx.x; k < cols; k += blockDim.x) v += x[r * cols + k];
  v = ember::ops::cuda::row_reduce(v, [](double a, double b) { return a + b; }, smem, true);
  if (r < rows && threadIdx.x == 0) out[r] = v;
}

// The same sum on the host, in row_reduce's order: per-thread strided partials, a shuffle-down
// tree of adjacent lanes per warp, the same tree over the warp results.
double host_row_reduce(const std::vector<double>& row, int threads) {
  std::vector<double> part(size_t(threads), 0.0);
  for (int t = 0; t < threads; ++t)
    for (size_t k = size_t(t); k < row.size(); k += size_t(threads)) part[size_t(t)] += row[k];
  auto tree = [](std::vector<double> v, int n) {
    for (int delta = 1; delta < 32; delta <<= 1)
      for (int lane = 0; lane + delta < n; lane += 2 * delta) v[size_t(lane)] += v[size_t(lane + delta)];
    return v[0];
  };
  std::vector<double> warps;
  for (int w = 0; w < threads / 32; ++w) warps.push_back(tree({part.begin() + w * 32, part.begin() + w * 32 + 32}, 32));
  if (warps.size() == 1) return warps[0];
  warps.resize(32, 0.0);
  return tree(warps, threads / 32);
}

// One warp: A [16 x 16], B^T [16 (n) x 16 (k)] and B [16 (k) x 16 (n)] (16-bit, row-major)
// into shared rows of 24 elements by cp.async, fragments by ldmatrix (B through both the plain
// and the .trans form), two mma.m16n8k16 per form: D = A B [16 x 16] twice.
__global__ void mma_tiles(const uint16_t* a, const uint16_t* bt, const uint16_t* b, float* d_plain, float* d_trans,
                          bool bf16) {
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  constexpr int pitch = 24;  // elements: 48-byte rows, 16-byte aligned
  const int lane = int(threadIdx.x);
  const uint32_t base = sim::shared_address(smem);
  const uint16_t* src[3] = {a, bt, b};
  for (int chunk = lane; chunk < 3 * 16 * 2; chunk += 32) {  // 16-byte chunks: matrix, row, half
    const int m = chunk / 32, row = chunk % 32 / 2, half = chunk % 2;
    sim::cp_async(base + uint32_t(((m * 16 + row) * pitch + half * 8) * 2), src[m] + row * 16 + half * 8, 16, 16);
  }
  sim::cp_async_commit();
  sim::cp_async_wait(0);
  __syncwarp();
  auto address = [&](int m, int row, int col) { return base + uint32_t(((m * 16 + row) * pitch + col) * 2); };
  const int mat = lane / 8, r = lane % 8;
  uint32_t fa[4], fb[4], fbt[4];
  sim::ldmatrix_x4(fa, address(0, (mat % 2) * 8 + r, (mat / 2) * 8), false);
  sim::ldmatrix_x4(fb, address(1, (mat / 2) * 8 + r, (mat % 2) * 8), false);  // from B^T
  sim::ldmatrix_x4(fbt, address(2, (mat % 2) * 8 + r, (mat / 2) * 8), true);  // from B
  const int g = lane >> 2, t = lane & 3;
  for (int nt = 0; nt < 2; ++nt) {
    float c[4] = {0, 0, 0, 0}, ct[4] = {0, 0, 0, 0};
    sim::mma_m16n8k16(c, fa, fb[2 * nt], fb[2 * nt + 1], bf16);
    sim::mma_m16n8k16(ct, fa, fbt[2 * nt], fbt[2 * nt + 1], bf16);
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      d_plain[rows[i] * 16 + nt * 8 + cols[i]] = c[i];
      d_trans[rows[i] * 16 + nt * 8 + cols[i]] = ct[i];
    }
  }
}

__global__ void cp_async_never_waited(const float* src) {
  EMBER_DYNAMIC_SHARED_MEMORY(smem);
  sim::cp_async(sim::shared_address(smem) + 16 * threadIdx.x, src, 16, 16);
  sim::cp_async_commit();
}

}  // namespace

// The emulated tensor-core path (PTX ISA fragment layouts of ldmatrix and mma.m16n8k16)
// against a host matrix product of the same 16-bit values: bit for bit (exact products, f32
// sums in k order), in bf16 and f16, with B's fragments from both ldmatrix forms.
TEST(SimtPtx, LdmatrixAndMmaComputeTheMatrixProduct) {
  std::mt19937 rng(9);
  for (bool bf16 : {true, false}) {
    std::vector<uint16_t> a(256), bt(256), b(256);
    std::vector<float> af(256), bf(256);
    for (int i = 0; i < 256; ++i) {
      // Multiples of 1/4 and 1/2 below 8: exact in both formats.
      const float va = float(int(rng() % 17) - 8) * 0.5f, vb = float(int(rng() % 13) - 6) * 0.25f;
      af[size_t(i)] = va;
      bf[size_t(i)] = vb;  // B[k][n] at k * 16 + n
    }
    // Subnormal in f16 (below 2^-14) and tiny in bf16: the conversions' edge cases.
    af[0] = std::ldexp(1.0f, -20), af[17] = -std::ldexp(3.0f, -24);
    auto to16 = [&](float v) -> uint16_t {
      if (bf16) return uint16_t(ember::cuda::sim::detail::to_bits(v) >> 16);
      return ember::Half(v).bits;
    };
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        a[size_t(i * 16 + j)] = to16(af[size_t(i * 16 + j)]);
        b[size_t(i * 16 + j)] = to16(bf[size_t(i * 16 + j)]);
        bt[size_t(j * 16 + i)] = to16(bf[size_t(i * 16 + j)]);
      }
    std::vector<float> plain(256, -1), trans(256, -1);
    sim::launch(mma_tiles, dim3(1), dim3(32), 3 * 16 * 24 * 2, nullptr, a.data(), bt.data(), b.data(), plain.data(),
                trans.data(), bf16);
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j) {
        float want = 0;
        for (int k = 0; k < 16; ++k) want += af[size_t(i * 16 + k)] * bf[size_t(k * 16 + j)];
        EXPECT_EQ(plain[size_t(i * 16 + j)], want) << (bf16 ? "bf16" : "f16") << " D[" << i << "][" << j << "]";
        EXPECT_EQ(trans[size_t(i * 16 + j)], want) << (bf16 ? "bf16" : "f16") << " D[" << i << "][" << j << "], .trans";
      }
  }
}

TEST(SimtPtx, CpAsyncNeverWaitedForIsAnError) {
  std::vector<float> src(4, 1.0f);
  EXPECT_TRUE(fails_saying([&] { sim::launch(cp_async_never_waited, dim3(1), dim3(2), 64, nullptr, src.data()); },
                          "never waited for"));
}

TEST(Simt, IndicesOfEveryThreadAndBlock) {
  const dim3 grid(3, 2), block(4, 3, 2);
  std::vector<int> out(6 * 24, -1);
  sim::launch(write_indices, grid, block, 0, nullptr, out.data());
  for (int b = 0; b < 6; ++b)
    for (int z = 0; z < 2; ++z)
      for (int y = 0; y < 3; ++y)
        for (int x = 0; x < 4; ++x)
          EXPECT_EQ(out[size_t(b * 24 + x + 4 * (y + 3 * z))], b * 10000 + z * 100 + y * 10 + x);
}

TEST(Simt, SharedMemoryWithABarrierIsRightUnderEverySchedule) {
  std::vector<float> in(512), out(512);
  std::iota(in.begin(), in.end(), 0.0f);
  for (const sim::Schedule& s : every_schedule()) {
    sim::ScheduleGuard guard(s);
    std::fill(out.begin(), out.end(), -1.0f);
    sim::launch(reverse_block, dim3(2), dim3(256), 0, nullptr, in.data(), out.data());
    for (int i = 0; i < 512; ++i) ASSERT_EQ(out[size_t(i)], float((i / 256) * 256 + 255 - i % 256)) << name(s);
  }
}

// Without the second barrier the result depends on the schedule (which lanes ran their
// write before their neighbour's read): running under several schedules is how the simulation
// exposes a missing __syncthreads. With it every schedule agrees with the definition.
TEST(Simt, AMissingBarrierShowsAsScheduleDependentResults) {
  std::vector<float> in(256), out(256), want(256);
  std::iota(in.begin(), in.end(), 1.0f);
  for (int i = 0; i < 256; ++i) want[size_t(i)] = 2 * in[size_t((i + 1) % 256)];
  int wrong = 0;
  for (const sim::Schedule& s : every_schedule()) {
    sim::ScheduleGuard guard(s);
    sim::launch(double_then_shift, dim3(1), dim3(256), 0, nullptr, in.data(), out.data(), true);
    EXPECT_EQ(out, want) << name(s);
    sim::launch(double_then_shift, dim3(1), dim3(256), 0, nullptr, in.data(), out.data(), false);
    wrong += out != want;
  }
  EXPECT_GT(wrong, 0) << "no schedule exposed the missing barrier";
}

TEST(Simt, WarpCollectivesFollowTheirDefinitions) {
  std::mt19937 rng(3);
  std::vector<int> in(64), out(64 * 9);
  for (int& v : in) v = int(rng() % 100);
  for (const sim::Schedule& s : every_schedule()) {
    sim::ScheduleGuard guard(s);
    sim::launch(shuffles, dim3(1), dim3(64), 0, nullptr, in.data(), out.data());
    for (int w = 0; w < 2; ++w) {
      const int* v = in.data() + 32 * w;
      unsigned odd = 0;
      bool any_big = false;
      for (int i = 0; i < 32; ++i) {
        odd |= unsigned(v[i] & 1) << i;
        any_big |= v[i] > 90;
      }
      const int sum = std::accumulate(v, v + 32, 0);
      for (int lane = 0, scan = 0; lane < 32; ++lane) {
        scan += v[lane];
        const int* o = out.data() + (32 * w + lane) * 9;
        unsigned same = 0;
        for (int j = 0; j < 32; ++j) same |= unsigned(v[j] % 3 == v[lane] % 3) << j;
        SCOPED_TRACE("warp " + std::to_string(w) + " lane " + std::to_string(lane) + " schedule " + name(s));
        EXPECT_EQ(o[0], sum);
        EXPECT_EQ(o[1], scan);
        EXPECT_EQ(o[2], lane < 31 ? v[lane + 1] : v[lane]);  // the last lane keeps its own value
        EXPECT_EQ(o[3], v[3]);
        EXPECT_EQ(o[4], v[(lane & ~7) + 1]);
        EXPECT_EQ(unsigned(o[5]), odd);
        EXPECT_EQ(o[6], int(any_big));
        EXPECT_EQ(o[7], 1);
        EXPECT_EQ(unsigned(o[8]), same);
      }
    }
  }
}

TEST(Simt, UndefinedSynchronizationIsAClearError) {
  std::vector<int> out(64);
  EXPECT_TRUE(fails_saying([&] { sim::launch(barrier_in_branch, dim3(1), dim3(64), 0, nullptr, out.data()); },
                          "exited before a __syncthreads"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(shuffle_after_exit, dim3(1), dim3(32), 0, nullptr, out.data()); },
                          "which has exited"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(not_in_own_mask, dim3(1), dim3(32), 0, nullptr, out.data()); },
                          "is not in its own mask"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(reads_outside_mask, dim3(1), dim3(32), 0, nullptr, out.data()); },
                          "which is not in the mask"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(different_collectives, dim3(1), dim3(32), 0, nullptr, out.data()); },
                          "different collectives"));
  EXPECT_TRUE(fails_saying([] { __syncthreads(); }, "outside a kernel"));
}

TEST(Simt, LaunchesAreCheckedAsAnH100ChecksThem) {
  std::vector<int> out(1024);
  EXPECT_TRUE(fails_saying([&] { sim::launch(uses_dynamic_shared, dim3(1), dim3(1025), 0, nullptr, out.data()); },
                          "invalid configuration argument: block"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(uses_dynamic_shared, dim3(1), dim3(1, 1, 65), 0, nullptr, out.data()); },
                          "z <= 64"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(uses_dynamic_shared, dim3(1, 65536), dim3(32), 0, nullptr, out.data()); },
                          "invalid configuration argument: grid"));
  EXPECT_TRUE(fails_saying([&] { sim::launch(uses_dynamic_shared, dim3(0), dim3(32), 0, nullptr, out.data()); },
                          "invalid configuration argument: grid"));
  // Dynamic shared memory: 48 KB unless the kernel opted in, and never beyond 227 KB.
  const size_t big = 64 * 1024;
  EXPECT_TRUE(fails_saying([&] { sim::launch(uses_dynamic_shared, dim3(1), dim3(256), big, nullptr, out.data()); },
                          "48 KB without cudaFuncSetAttribute"));
  sim::set_max_dynamic_shared_memory(reinterpret_cast<const void*>(&uses_dynamic_shared), big);
  EXPECT_EQ(sim_error([&] { sim::launch(uses_dynamic_shared, dim3(1), dim3(256), big, nullptr, out.data()); }), "");
  for (int i = 0; i < 256; ++i) EXPECT_EQ(out[size_t(i)], 255 - i);
  EXPECT_THROW(sim::set_max_dynamic_shared_memory(reinterpret_cast<const void*>(&uses_dynamic_shared), 228 * 1024),
               sim::SimError);
}

// ember's own row_reduce (ops/cuda/reduce_utils.cuh), unchanged: one warp and several per
// row, several rows per block, a last block with rows past the end (their threads stay alive
// to the barriers, as the Note requires). The result equals the host sum in the Note's order
// bit for bit, under every schedule.
TEST(SimtReduceUtils, RowReduceIsTheDocumentedTreeUnderEverySchedule) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  for (const auto& [threads, rows_per_block] : std::vector<std::pair<int, int>>{{32, 4}, {128, 2}, {256, 1}}) {
    const int64_t rows = 5, cols = 1000;
    std::vector<double> x(size_t(rows * cols));
    for (double& v : x) v = normal(rng);
    const unsigned blocks = unsigned((rows + rows_per_block - 1) / rows_per_block);
    for (const sim::Schedule& s : every_schedule()) {
      sim::ScheduleGuard guard(s);
      std::vector<double> out(size_t(rows), -1.0);
      sim::launch(row_sums, dim3(blocks), dim3(unsigned(threads), unsigned(rows_per_block)), 0, nullptr, x.data(),
                  rows, cols, out.data());
      for (int64_t r = 0; r < rows; ++r) {
        const std::vector<double> row(x.begin() + r * cols, x.begin() + (r + 1) * cols);
        EXPECT_EQ(out[size_t(r)], host_row_reduce(row, threads))
            << threads << " threads, row " << r << ", schedule " << name(s);
      }
    }
  }
}
