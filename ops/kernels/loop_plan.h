// The iteration plan shared by the CPU and CUDA elementwise drivers: operand 0 is the
// output, every operand is viewed with the output's shape (stride 0 where broadcast), and
// dims are coalesced wherever all operands are contiguous across them.
#pragma once

#include <array>
#include <utility>
#include <vector>

#include "ember/tensor.h"

namespace ember::ops {

// Strides of `t` viewed with shape `shape` (right-aligned broadcasting), in bytes.
inline Shape broadcast_byte_strides(const Tensor& t, const Shape& shape) {
  const int64_t isz = int64_t(t.element_size());
  const size_t nd = shape.size(), td = size_t(t.dim());
  Shape st(nd, 0);
  for (size_t i = 0; i < td; ++i) {
    size_t d = nd - td + i;
    st[d] = t.sizes()[i] == 1 && shape[d] != 1 ? 0 : t.strides()[i] * isz;
  }
  return st;
}

template <size_t N>
struct LoopPlan {
  Shape sizes;                   // coalesced, innermost last
  std::array<Shape, N> strides;  // in bytes
  std::array<char*, N> base;
};

// Strides of `t` viewed with shape `shape` (right-aligned broadcasting), in bytes.
Shape broadcast_byte_strides(const Tensor& t, const Shape& shape);

template <size_t N>
LoopPlan<N> make_plan(const std::array<const Tensor*, N>& ts) {
  LoopPlan<N> plan;
  const Shape& shape = ts[0]->sizes();
  std::array<Shape, N> st;
  for (size_t k = 0; k < N; ++k) {
    st[k] = broadcast_byte_strides(*ts[k], shape);
    plan.base[k] = static_cast<char*>(ts[k]->data_ptr());
  }
  // Iterate in the output's memory order: its dims sorted by stride, largest outermost (a
  // stable sort, so a contiguous output keeps the logical order). A channels_last or
  // transposed output then streams through memory, and dims coalesce wherever every operand
  // shares that order (channels_last operands of a channels_last output: one flat loop).
  const int64_t nd = int64_t(shape.size());
  std::array<int64_t, 8> order_small{};
  std::vector<int64_t> order_big;
  int64_t* order = nd <= 8 ? order_small.data() : (order_big.resize(size_t(nd)), order_big.data());
  for (int64_t d = 0; d < nd; ++d) order[d] = d;
  for (int64_t i = 1; i < nd; ++i)  // insertion sort: stable, and nd is small
    for (int64_t j = i; j > 0 && st[0][size_t(order[j - 1])] < st[0][size_t(order[j])]; --j)
      std::swap(order[j - 1], order[j]);
  // Coalesce from the innermost dim outwards, dropping size-1 dims.
  for (int64_t i = nd - 1; i >= 0; --i) {
    const int64_t d = order[i];
    int64_t size = shape[d];
    if (size == 1) continue;
    if (!plan.sizes.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < N; ++k)
        mergeable = mergeable && st[k][d] == plan.strides[k][0] * plan.sizes[0];
      if (mergeable) {
        plan.sizes[0] *= size;
        continue;
      }
    }
    plan.sizes.insert(0, size);
    for (size_t k = 0; k < N; ++k) plan.strides[k].insert(0, st[k][d]);
  }
  if (plan.sizes.empty()) {  // a single element
    plan.sizes.push_back(1);
    for (size_t k = 0; k < N; ++k) plan.strides[k].push_back(0);
  }
  return plan;
}

}  // namespace ember::ops
