// Bad input across the API: each case must throw the right ember::Error subclass, with a
// message that begins with "[op]" and names the offending shapes, dtypes or devices.
#include <functional>

#include "support/test_support.h"

using namespace ember;

namespace {
// Runs f, expects an E whose message starts with "[op]" and contains every `mentions`.
template <class E>
void expect_error(const char* what, const std::function<void()>& f, const std::string& op,
                  const std::vector<std::string>& mentions) {
  static_assert(std::is_base_of_v<Error, E> && std::is_base_of_v<std::runtime_error, E>);
  SCOPED_TRACE(what);
  try {
    f();
    ADD_FAILURE() << what << ": no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[" + op + "]", 0), 0u) << what << ": message should start with [" << op
                                                 << "]: " << msg;
    for (const std::string& m : mentions)
      EXPECT_NE(msg.find(m), std::string::npos) << what << ": message should mention '" << m
                                                << "': " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": wrong exception type: " << e.what();
  }
}
}  // namespace

TEST(Errors, MatmulShapesAndDTypes) {
  expect_error<ShapeError>("2-D mismatch", [] { matmul(zeros({2, 3}), zeros({4, 5})); }, "matmul",
                           {"[2, 3]", "[4, 5]"});
  expect_error<ShapeError>("batch dims", [] { matmul(zeros({2, 3, 4}), zeros({3, 4, 5})); }, "matmul",
                           {"[2, 3, 4]", "[3, 4, 5]"});
  expect_error<ShapeError>("vectors", [] { matmul(zeros({3}), zeros({4})); }, "matmul", {"[3]", "[4]"});
  expect_error<ShapeError>("method", [] { zeros({5, 2}).matmul(zeros({3, 2})); }, "matmul",
                           {"[5, 2]", "[3, 2]"});
  expect_error<DTypeError>("dtype", [] { matmul(zeros({2, 3}), zeros({3, 5}, DType::i64)); }, "matmul",
                           {"f32", "i64"});
  expect_error<ShapeError>("linear", [] { linear(zeros({2, 3}), zeros({4, 5})); }, "linear", {"[2, 3]", "[4, 5]"});
}

TEST(Errors, Broadcasting) {
  expect_error<ShapeError>("add", [] { (void)(zeros({2, 3}) + zeros({4})); }, "add", {"[2, 3]", "[4]"});
  expect_error<ShapeError>("mul", [] { zeros({2}).mul(zeros({3})); }, "mul", {"[2]", "[3]"});
  expect_error<ShapeError>("sub 3-D", [] { ember::sub(zeros({2, 3, 4}), zeros({3, 1, 5})); }, "sub",
                           {"[2, 3, 4]", "[3, 1, 5]"});
  expect_error<ShapeError>("lt", [] { zeros({2, 3}).lt(zeros({3, 2})); }, "lt", {"[2, 3]", "[3, 2]"});
  expect_error<ShapeError>("in place cannot grow", [] {
    Tensor x = zeros({3});
    x.add_(zeros({2, 3}));
  }, "add", {"[3]", "[2, 3]"});
  expect_error<ShapeError>("copy_", [] { zeros({3}).copy_(zeros({2})); }, "copy_", {"[3]", "[2]"});
  expect_error<ShapeError>("expand", [] { zeros({3, 1}).expand({4, 4}); }, "expand", {"[3, 1]", "[4, 4]"});
}

TEST(Errors, Views) {
  expect_error<ShapeError>("view needs a copy", [] { zeros({2, 3}).t().view({6}); }, "view",
                           {"[3, 2]", "[6]", "reshape"});
  expect_error<ShapeError>("view numel", [] { zeros({2, 3}).view({4, 2}); }, "view", {"[4, 2]", "[2, 3]"});
  expect_error<ShapeError>("reshape numel", [] { zeros({2, 3}).reshape({7}); }, "reshape", {"[7]", "[2, 3]"});
  expect_error<ShapeError>("two -1", [] { zeros({2, 3}).view({-1, -1}); }, "view", {"-1"});
  expect_error<ShapeError>("permute", [] { zeros({2, 3}).permute({0, 0}); }, "permute", {"[0, 0]"});
  expect_error<IndexError>("select", [] { zeros({3, 2}).select(0, 3); }, "select", {"3"});
  expect_error<IndexError>("narrow", [] { zeros({3, 2}).narrow(0, 2, 2); }, "narrow", {"size 3"});
  expect_error<IndexError>("transpose dim", [] { zeros({3, 2}).transpose(0, 2); }, "transpose", {"2"});
  expect_error<ShapeError>("t of 3-D", [] { zeros({2, 3, 4}).t(); }, "t", {"[2, 3, 4]"});
}

TEST(Errors, JoiningAndIndexing) {
  expect_error<ShapeError>("cat sizes", [] { cat({zeros({2, 3}), zeros({2, 4})}, 0); }, "cat",
                           {"[2, 3]", "[2, 4]"});
  expect_error<ShapeError>("cat ranks", [] { cat({zeros({2, 3}), zeros({6})}, 0); }, "cat", {"[2, 3]", "[6]"});
  expect_error<IndexError>("cat dim", [] { cat({zeros({2, 3}), zeros({2, 3})}, 2); }, "cat", {"2"});
  expect_error<ValueError>("cat empty", [] { cat({}, 0); }, "cat", {});
  expect_error<ShapeError>("stack", [] { stack({zeros({2, 3}), zeros({3, 2})}); }, "stack", {"[2, 3]", "[3, 2]"});
  expect_error<IndexError>("index_select", [] { zeros({3}).index_select(0, tensor<int64_t>({0, 3}, {2})); },
                           "index_select", {"3"});
  expect_error<IndexError>("index_select negative", [] { zeros({3}).index_select(0, tensor<int64_t>({-4}, {1})); },
                           "index_select", {"-4"});
  expect_error<DTypeError>("index_select float index", [] { zeros({3}).index_select(0, zeros({1})); },
                           "index_select", {"f32"});
  expect_error<IndexError>("gather", [] { zeros({3, 2}).gather(1, tensor<int64_t>({0, 2, 1}, {3, 1})); }, "gather",
                           {"2"});
  expect_error<IndexError>("embedding", [] { embedding(zeros({5, 2}), tensor<int64_t>({7}, {1})); }, "embedding",
                           {"7", "5"});
  expect_error<IndexError>("scatter_add", [] {
    zeros({3}).scatter_add(0, tensor<int64_t>({5}, {1}), ones({1}));
  }, "scatter_add", {"5"});
}

TEST(Errors, CrossEntropyTargets) {
  expect_error<IndexError>("class too large", [] {
    cross_entropy(zeros({4, 5}), tensor<int64_t>({0, 1, 2, 5}, {4}));
  }, "cross_entropy", {"5"});
  expect_error<IndexError>("negative class", [] {
    cross_entropy(zeros({4, 5}), tensor<int64_t>({0, 1, -1, 2}, {4}));
  }, "cross_entropy", {"-1"});
  expect_error<DTypeError>("float target", [] { cross_entropy(zeros({4, 5}), zeros({4})); }, "cross_entropy",
                           {"f32"});
  expect_error<ShapeError>("target shape", [] {
    cross_entropy(zeros({4, 5}), tensor<int64_t>({0, 1, 2}, {3}));
  }, "cross_entropy", {"[4, 5]", "[3]"});
  // The ignore_index itself is not out of range.
  EXPECT_NO_THROW(cross_entropy(zeros({2, 5}), tensor<int64_t>({-100, 1}, {2})));
}

TEST(Errors, DTypes) {
  expect_error<DTypeError>("requires_grad_ on i64", [] { tensor<int64_t>({1}).requires_grad_(); },
                           "requires_grad_", {"i64"});
  expect_error<DTypeError>("requires_grad_ on bool", [] { ones({2}).gt(0).requires_grad_(); },
                           "requires_grad_", {"bool"});
  expect_error<DTypeError>("in-place float into int", [] {
    Tensor i = tensor<int64_t>({1}, {1});
    i.add_(zeros({1}));
  }, "add", {"f32", "i64"});
  expect_error<DTypeError>("where condition", [] { ember::where(zeros({2}), zeros({2}), zeros({2})); }, "where",
                           {"f32"});
  expect_error<DTypeError>("bool math", [] { ones({2}).gt(0).neg(); }, "neg", {"bool"});
  expect_error<DTypeError>("data_ptr", [] { zeros({2}).data_ptr<double>(); }, "data_ptr", {"f32", "f64"});
  expect_error<DTypeError>("rand of ints", [] { rand({2}, DType::i64); }, "rand", {"i64"});
}

TEST(Errors, Autograd) {
  expect_error<AutogradError>("implicit gradient", [] {
    Tensor x = ones({3}, DType::f64).requires_grad_();
    (x * 2).backward();
  }, "backward", {"[3]"});
  expect_error<ShapeError>("gradient shape", [] {
    Tensor x = ones({3}, DType::f64).requires_grad_();
    (x * 2).backward(ones({4}, DType::f64));
  }, "backward", {"[4]", "[3]"});
  expect_error<AutogradError>("leaf in place", [] {
    Tensor x = ones({3}, DType::f64).requires_grad_();
    x.mul_(2);
  }, "mul_", {"leaf"});
  expect_error<AutogradError>("requires_grad_ of non-leaf", [] {
    Tensor x = ones({3}, DType::f64).requires_grad_();
    (x * 2).requires_grad_(false);
  }, "requires_grad_", {"leaf"});
}

TEST(Errors, CudaOnACpuOnlyMachine) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  expect_error<DeviceError>("zeros", [] { zeros({2}, Device::cuda()); }, "zeros", {"cuda:0"});
  expect_error<DeviceError>("randn", [] { randn({2}, Device::cuda(1)); }, "randn", {"cuda:1"});
  expect_error<DeviceError>("to", [] { zeros({2}).to(Device::cuda()); }, "to", {"cuda:0"});
  expect_error<DeviceError>("cuda()", [] { zeros({2}).cuda(); }, "to", {"cuda:0"});
}

TEST(Errors, AllDeriveFromEmberError) {
  // One catch clause handles the whole family.
  int caught = 0;
  for (auto f : std::vector<std::function<void()>>{
           [] { matmul(zeros({2, 3}), zeros({4, 5})); },
           [] { zeros({3}).select(0, 9); },
           [] { tensor<int64_t>({1}).requires_grad_(); },
           [] { Device::parse("tpu"); },
           [] { test::load_fixture("no_such_file.txt", "x"); }}) {
    try {
      f();
    } catch (const Error&) {
      ++caught;
    }
  }
  EXPECT_EQ(caught, 5);
}
