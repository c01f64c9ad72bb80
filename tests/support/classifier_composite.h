// The composite that linear_cross_entropy replaces, the reference of its forward and gradient
// tests (tests/ops/test_classifier.cpp, tests/autograd/test_classifier_grad.cpp): linear,
// the logits sliced to the `classes` used columns, cross_entropy over the flattened rows.
#pragma once

#include <cstdint>

#include <ember/ember.h>

inline ember::Tensor classifier_composite(const ember::Tensor& x, const ember::Tensor& w,
                                          const ember::Tensor& t, int64_t classes, int64_t ignore,
                                          ember::Reduction r) {
  ember::Tensor logits = ember::linear(x, w);
  logits = logits.narrow(logits.dim() - 1, 0, classes);
  const int64_t n = t.numel();
  return ember::cross_entropy(logits.reshape({n, classes}), t.reshape({n}),
                              {.ignore_index = ignore, .reduction = r});
}
