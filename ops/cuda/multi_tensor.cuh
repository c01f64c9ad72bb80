// Multi-tensor apply, shared by the fused optimizer updates (optim.cu) and the foreach family
// (foreach.cu): one kernel launch covers the chunks of many tensors, described by a table
// written into the kernel's parameter block.
//
// Invariants (Note [multi-tensor tables]):
// - A table holds at most kMaxTensorsPerLaunch tensors and fits the 32 KiB kernel-parameter
//   limit of CUDA >= 12.1 on sm_70+ (ember targets sm_90). Block b of a launch handles chunk b:
//   tensor i owns blocks [chunk_begin[i], chunk_begin[i + 1]) and a chunk is
//   kMultiTensorChunk elements of one tensor (the last chunk of a tensor may be shorter).
// - The table is a __grid_constant__ kernel parameter, so indexing it with a block-dependent
//   tensor number reads the constant bank directly (no local copy of 16 KiB per thread), and a
//   launch needs no host-to-device copy, allocation or synchronization: it can be captured in a
//   CUDA graph, and the table's values are baked into the graph like any other argument.
// - Tensors are given in list order and tables are filled in that order, so the chunk a block
//   handles is a function of the list's sizes alone (what makes the foreach reductions
//   deterministic).
// - Callers pass only non-empty, contiguous tensors; one launch per table.
#pragma once

#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "ember/error.h"
#include "ember/tensor.h"

namespace ember::ops::cuda {

constexpr int64_t kMultiTensorChunk = 16384;  // elements per block
constexpr int kMaxTensorsPerLaunch = 256;

template <int Depth>
struct TensorTable {
  int n;                                           // tensors in this launch
  int64_t chunk_begin[kMaxTensorsPerLaunch + 1];   // first block of each tensor; [n] = all blocks
  void* ptr[Depth][kMaxTensorsPerLaunch];          // operand d of tensor i
  int64_t numel[kMaxTensorsPerLaunch];
  double a[kMaxTensorsPerLaunch];                  // per-tensor scalars, the caller's meaning
  double b[kMaxTensorsPerLaunch];
};
static_assert(sizeof(TensorTable<4>) <= 32000, "a tensor table must fit the kernel parameters");

// The tensor whose chunks contain this block: the last i with chunk_begin[i] <= block (of a
// TensorTable, or any table with the same n and chunk_begin: amp.cu's).
template <class Table>
__device__ __forceinline__ int tensor_of_block(const Table& t, int64_t block) {
  int lo = 0, hi = t.n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.chunk_begin[mid] <= block) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

inline int64_t multi_tensor_chunks(int64_t numel) {
  return (numel + kMultiTensorChunk - 1) / kMultiTensorChunk;
}

// Tensor indices grouped by dtype, groups in order of first appearance, each in list order.
inline std::vector<std::pair<DType, std::vector<size_t>>> group_by_dtype(const TensorList& ts) {
  std::vector<std::pair<DType, std::vector<size_t>>> groups;
  for (size_t i = 0; i < ts.size(); ++i) {
    auto it = groups.begin();
    while (it != groups.end() && it->first != ts[i].dtype()) ++it;
    if (it == groups.end()) groups.push_back({ts[i].dtype(), {i}});
    else it->second.push_back(i);
  }
  return groups;
}

// Fills tables with the tensors `idx` of `ts` (set_row(table, row, i) writes operand pointers
// and scalars of tensor i into row `row`) and calls launch(table, blocks) for each full table
// and the last one.
template <int Depth, class SetRow, class Launch>
void launch_tables(const TensorList& ts, const std::vector<size_t>& idx, SetRow set_row,
                   Launch launch) {
  TensorTable<Depth> t;
  t.n = 0;
  int64_t blocks = 0;
  auto flush = [&] {
    // Rows of empty tensors own no chunk, so no block would read them: a table of only those
    // is not launched (0 blocks is an invalid launch configuration on the device).
    if (blocks > 0) {
      t.chunk_begin[t.n] = blocks;
      launch(t, blocks);
    }
    t.n = 0;
    blocks = 0;
  };
  for (size_t i : idx) {
    const int64_t n = ts[i].numel();
    const int64_t chunks = multi_tensor_chunks(n);
    EMBER_CHECK(chunks <= int64_t(INT_MAX), ShapeError, "[multi_tensor_apply] a tensor of ", n,
                " elements exceeds the launch limit");
    if (t.n == kMaxTensorsPerLaunch || blocks + chunks > int64_t(INT_MAX)) flush();
    t.chunk_begin[t.n] = blocks;
    t.numel[t.n] = n;
    set_row(t, t.n, i);
    blocks += chunks;
    ++t.n;
  }
  flush();
}

}  // namespace ember::ops::cuda
