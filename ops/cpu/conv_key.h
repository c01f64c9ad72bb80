// One CPU convolution pass's geometry as a map key: the pass, the input and weight shapes, the
// parameters, whether a bias is added, the activations' layout and the OpenMP thread count (a plan or a measured choice
// for 2 threads says nothing about 8). The caches of ops/cpu/conv.cpp (the measured algorithm)
// and ops/onednn/conv.cpp (oneDNN's primitives) are keyed by it.
#pragma once

#include <omp.h>

#include <array>
#include <compare>
#include <cstdint>

#include "ember/ops/conv.h"
#include "ember/shape.h"

namespace ember::ops::cpu {

struct ConvKey {
  ConvPass pass;
  std::array<int64_t, 4> x, w;
  std::array<int64_t, 2> stride, padding, dilation;
  int64_t groups;
  bool bias;
  MemoryFormat format;  // of x and y (and their gradients); the weight is always OIHW
  int threads;
  auto operator<=>(const ConvKey&) const = default;

  static ConvKey of(ConvPass pass, const Shape& x, const Shape& w, const Conv2dParams& p, bool bias,
                    MemoryFormat format) {
    return {pass,     {x[0], x[1], x[2], x[3]}, {w[0], w[1], w[2], w[3]}, p.stride, p.padding, p.dilation,
            p.groups, bias, format, omp_get_max_threads()};
  }
};

}  // namespace ember::ops::cpu
