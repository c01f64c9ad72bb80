// The work list of the CPU multi-tensor drivers (foreach, optim, amp): every element of a
// tensor list cut into chunks, a chunk never spanning two tensors, in list order. The drivers
// share the chunks statically among OpenMP threads, so each element is handled by one thread
// and the split depends on the sizes alone.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ember/tensor.h"

namespace ember::ops::cpu {

struct WorkItem {
  int64_t tensor, begin, end;
};

// The chunks of `chunk` elements of all tensors, in list order; `total` gets their elements.
inline std::vector<WorkItem> make_work(const TensorList& ts, int64_t chunk, int64_t& total) {
  std::vector<WorkItem> work;
  total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const int64_t n = ts[i].numel();
    total += n;
    for (int64_t b = 0; b < n; b += chunk) work.push_back({int64_t(i), b, std::min(n, b + chunk)});
  }
  return work;
}

}  // namespace ember::ops::cpu
