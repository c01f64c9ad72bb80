// Eigen for the CPU drivers that work on rows and blocks through Eigen maps (nn, classifier,
// attention): the include, and the array and scratch types they share.
#pragma once

// GCC 12 reports its own AVX-512 intrinsics (inlined through Eigen's packet math) as "maybe
// uninitialized" (a known false positive); silence that for these headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop
#include <vector>

namespace ember::ops::cpu {

template <class C>
using Vec = Eigen::Array<C, Eigen::Dynamic, 1>;
template <class C>
using VecMap = Eigen::Map<Vec<C>>;
template <class C>
using CVecMap = Eigen::Map<const Vec<C>>;

// Scratch memory aligned to Eigen's packet size. Eigen's vectorized reductions over an
// unaligned Map (row sums, max, dot products) peel a scalar head up to the first aligned
// address, so their rounding depends on the buffer's address modulo the packet size. With
// malloc'd buffers and per-thread scratch under a dynamic schedule that differed from run to
// run; aligned scratch makes the results bit-identical across runs (set_deterministic).
template <class C>
using Buffer = std::vector<C, Eigen::aligned_allocator<C>>;

}  // namespace ember::ops::cpu
