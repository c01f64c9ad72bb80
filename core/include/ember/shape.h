// Shape: the sizes or strides of a tensor. A small vector with inline room for kInlineDims
// dimensions, so that creating a tensor of ordinary rank does not touch the heap (dispatch
// overhead matters for small ops); higher ranks spill to the heap transparently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "ember/error.h"

namespace ember {

class Shape {
 public:
  static constexpr int kInlineDims = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.size()); }
  Shape(const std::vector<int64_t>& dims) { assign(dims.data(), dims.size()); }
  explicit Shape(size_t n, int64_t value = 0) {
    resize(n);
    std::fill(begin(), end(), value);
  }
  Shape(const int64_t* p, size_t n) { assign(p, n); }
  Shape(const Shape& o) { assign(o.data(), o.size()); }
  Shape& operator=(const Shape& o) {
    if (this != &o) assign(o.data(), o.size());
    return *this;
  }
  Shape(Shape&& o) noexcept { take(o); }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ~Shape() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap_ ? heap_ : inline_; }
  const int64_t* data() const { return heap_ ? heap_ : inline_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + size_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + size_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }

  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data()[i] = value;
    size_ = n;
  }
  void push_back(int64_t v) {
    reserve(size_ + 1);
    data()[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    reserve(size_ + 1);
    int64_t* d = data();
    std::memmove(d + pos + 1, d + pos, (size_ - pos) * sizeof(int64_t));
    d[pos] = v;
    ++size_;
  }
  void erase(size_t pos) {
    int64_t* d = data();
    std::memmove(d + pos, d + pos + 1, (size_ - pos - 1) * sizeof(int64_t));
    --size_;
  }
  void clear() { size_ = 0; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

  // Product of all entries (the number of elements when this holds sizes). A product past
  // int64_t throws ShapeError (a wrapped count would describe a tensor larger than its
  // memory), unless an entry is 0: then the tensor is empty whatever the others are.
  int64_t numel() const {
    int64_t n = 1;
    bool overflow = false;
    for (int64_t d : *this) overflow |= __builtin_mul_overflow(n, d, &n);
    if (overflow) [[unlikely]]
      return numel_overflowed();
    return n;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  int64_t numel_overflowed() const;  // 0 when an entry is 0, else throws ShapeError
  void reserve(size_t n) {
    if (n <= capacity_) return;
    size_t cap = std::max<size_t>(n, capacity_ * 2);
    auto* p = new int64_t[cap];
    std::memcpy(p, data(), size_ * sizeof(int64_t));
    delete[] heap_;
    heap_ = p;
    capacity_ = cap;
  }
  void assign(const int64_t* p, size_t n) {
    size_ = 0;
    reserve(n);
    if (n) std::memcpy(data(), p, n * sizeof(int64_t));  // p may be null when n == 0
    size_ = n;
  }
  void take(Shape& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    heap_ = o.heap_;
    if (!heap_) std::memcpy(inline_, o.inline_, size_ * sizeof(int64_t));
    o.heap_ = nullptr;
    o.size_ = 0;
    o.capacity_ = kInlineDims;
  }
  void release() {
    delete[] heap_;
    heap_ = nullptr;
    capacity_ = kInlineDims;
  }

  int64_t inline_[kInlineDims];
  int64_t* heap_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = kInlineDims;
};

// Contiguous (row-major) strides for the given sizes.
Shape contiguous_strides(const Shape& sizes);
// The strides of a dense NHWC block holding [N, C, H, W] (Note [Memory format]): [H*W*C, 1, W*C, C].
Shape channels_last_strides(const Shape& sizes);
// Broadcast two shapes with NumPy rules; throws ShapeError naming `op` when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);

void str_append(std::string& s, const Shape& shape);  // "[2, 3]"

}  // namespace ember
