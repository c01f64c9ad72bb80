// The CPU elementwise iteration engine, shared by every elementwise family.
//
// Invariants: operand 0 is the output; every operand is viewed with the output's shape (a
// broadcast input has stride 0 there). Dims are coalesced where all operands are contiguous
// across them, so a contiguous op becomes one flat loop. Work is split into contiguous
// ranges of the flattened index across OpenMP threads, only above kParallelGrain elements
// (below it, threading costs more than it saves). The inner callback receives base pointers,
// per-operand byte strides of the innermost dim and a count: it is where the math happens,
// written so the compiler vectorizes the unit-stride case.
#pragma once

#include <array>
#include <cstdint>

#include "ember/tensor.h"
#include "kernels/loop_plan.h"

namespace ember::ops::cpu {

using ops::LoopPlan;
using ops::make_plan;

constexpr int64_t kParallelGrain = 32768;

// Thin wrappers so this header does not need <omp.h> in every includer.
int omp_threads();
int omp_thread();

// Runs inner(ptrs, inner_strides, count) over the elements [begin, end) of the plan.
template <size_t N, class Inner>
void run_range(const LoopPlan<N>& plan, int64_t begin, int64_t end, Inner& inner) {
  const int64_t nd = int64_t(plan.sizes.size());
  const int64_t inner_size = plan.sizes[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = plan.strides[k][nd - 1];
  // Multi-index of `begin` over the outer dims.
  Shape idx(static_cast<size_t>(nd), 0);
  int64_t rem = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    idx[d] = rem % plan.sizes[d];
    rem /= plan.sizes[d];
  }
  int64_t pos = begin;
  while (pos < end) {
    std::array<char*, N> ptrs;
    for (size_t k = 0; k < N; ++k) {
      char* p = plan.base[k];
      for (int64_t d = 0; d < nd; ++d) p += idx[d] * plan.strides[k][d];
      ptrs[k] = p;
    }
    int64_t count = std::min(inner_size - idx[nd - 1], end - pos);
    inner(ptrs, inner_strides, count);
    pos += count;
    idx[nd - 1] += count;
    for (int64_t d = nd - 1; d > 0 && idx[d] == plan.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Iterates all elements of the output (operand 0), in parallel when large enough.
template <size_t N, class Inner>
void for_each_element(const std::array<const Tensor*, N>& ts, Inner inner) {
  const int64_t n = ts[0]->numel();
  if (n == 0) return;
  if (n < kParallelGrain) {
    // Fast path for small, same-shape contiguous operands (the dispatch-overhead case).
    bool flat = true;
    for (size_t k = 0; k < N && flat; ++k)
      flat = ts[k]->sizes() == ts[0]->sizes() && ts[k]->is_contiguous();
    if (flat) {
      std::array<char*, N> ptrs;
      std::array<int64_t, N> strides;
      for (size_t k = 0; k < N; ++k) {
        ptrs[k] = static_cast<char*>(ts[k]->data_ptr());
        strides[k] = int64_t(ts[k]->element_size());
      }
      inner(ptrs, strides, n);
      return;
    }
  }
  LoopPlan<N> plan = make_plan(ts);
  if (n < kParallelGrain) {
    run_range(plan, 0, n, inner);
    return;
  }
#pragma omp parallel
  {
    int nt = omp_threads(), t = omp_thread();
    int64_t chunk = (n + nt - 1) / nt;
    int64_t b = std::min<int64_t>(n, chunk * t), e = std::min<int64_t>(n, b + chunk);
    Inner local = inner;
    if (b < e) run_range(plan, b, e, local);
  }
}

}  // namespace ember::ops::cpu
