// Tensor factories: ember::zeros({2, 3}), randn({3, 4}, DType::f64),
// full({2}, 1.5, Device::cuda()), tensor<float>({1, 2, 3, 4}, {2, 2}).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "ember/random.h"
#include "ember/tensor.h"

namespace ember {

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, Scalar value, TensorOptions options = {});
// [0, end) and [start, end) with step; the default dtype is i64 (f32 with a fractional arg).
Tensor arange(Scalar end, std::optional<TensorOptions> options = std::nullopt);
Tensor arange(Scalar start, Scalar end, Scalar step = 1,
              std::optional<TensorOptions> options = std::nullopt);
// `steps` evenly spaced values from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// Uniform [0, 1), standard normal, and integers in [low, high), from a Philox generator
// (the device's default unless given): the same seed gives the same values on any device.
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape,
               TensorOptions options = DType::i64, Generator* gen = nullptr);
// A random permutation of [0, n) (i64), used by data shuffling.
Tensor randperm(int64_t n, Generator* gen = nullptr);

// From host values: the dtype defaults to T's (float -> f32, int64_t -> i64, ...).
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& shape, std::optional<TensorOptions> options = std::nullopt);
template <class T>
Tensor tensor(const std::vector<T>& values) {
  return tensor(values, Shape{int64_t(values.size())});
}
// A 0-dim tensor.
Tensor scalar_tensor(Scalar value, TensorOptions options = {});

// The n x m identity (m defaults to n).
Tensor eye(int64_t n, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m, TensorOptions options = {});
// A tensor over memory the caller owns (zero-copy; options.device_ says where the memory is).
// strides default to contiguous; `deleter`, when given, runs exactly once with `data` when
// the last tensor or view over it is gone. The memory must outlive the tensors otherwise.
Tensor from_blob(void* data, const Shape& sizes, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& sizes, std::function<void(void*)> deleter, TensorOptions options = {});
Tensor from_blob(void* data, const Shape& sizes, const Shape& strides, std::function<void(void*)> deleter,
                 TensorOptions options = {});

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);

}  // namespace ember
