// Tensor structure: Shape, strides, views (geometry, values and shared storage), copies and
// conversions, item, printing.
#include <cmath>
#include <limits>
#include <sstream>

#include "support/test_support.h"

using namespace ember;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
std::vector<double> iota(int64_t n, double start = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i);
  return v;
}
// arange(n) as f64 in the given shape.
Tensor seq(const Shape& shape) { return tensor(iota(shape.numel()), shape); }
using test::message_of;
}  // namespace

// ---- Shape ----

TEST(Shape, SmallAndSpilledToHeap) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.size(), 3u);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[1], 3);
  EXPECT_EQ(s.back(), 4);
  Shape big{1, 2, 3, 4, 5, 6, 7, 8, 9};  // more than kInlineDims
  EXPECT_EQ(big.size(), 9u);
  EXPECT_EQ(big.numel(), 362880);
  Shape copy = big;
  EXPECT_EQ(copy, big);
  Shape moved = std::move(copy);
  EXPECT_EQ(moved, big);
  moved.push_back(10);
  EXPECT_EQ(moved.size(), 10u);
  EXPECT_NE(moved, big);
  Shape grown = s;
  for (int i = 0; i < 10; ++i) grown.push_back(1);
  EXPECT_EQ(grown.size(), 13u);
  EXPECT_EQ(grown[2], 4);
  grown.insert(0, 7);
  EXPECT_EQ(grown[0], 7);
  EXPECT_EQ(grown[1], 2);
  grown.erase(0);
  EXPECT_EQ(grown[0], 2);
  EXPECT_EQ(Shape().numel(), 1);
  EXPECT_TRUE(Shape().empty());
  EXPECT_EQ(Shape(std::vector<int64_t>{5, 6}), Shape({5, 6}));
  EXPECT_EQ(Shape({5, 6}).vec(), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(str(Shape{2, 3}), "[2, 3]");
  EXPECT_EQ(str(Shape{}), "[]");
}

TEST(Shape, ContiguousStridesBroadcastAndWrap) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), Shape({12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Shape({}));
  EXPECT_EQ(contiguous_strides({5}), Shape({1}));
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}, "t"), Shape({2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {3}, "t"), Shape({3}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 5}, "t"), Shape({0, 5}));
  std::string msg = message_of<ShapeError>([] { broadcast_shapes({2, 3}, {4}, "myop"); });
  EXPECT_EQ(msg.rfind("[myop]", 0), 0u) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_EQ(wrap_dim(-1, 3, "t"), 2);
  EXPECT_EQ(wrap_dim(0, 0, "t"), 0);
  EXPECT_THROW(wrap_dim(3, 3, "t"), IndexError);
  EXPECT_THROW(wrap_dim(-4, 3, "t"), IndexError);
}

// ---- geometry ----

TEST(Tensor, BasicGeometry) {
  Tensor x = zeros({2, 3, 4});
  EXPECT_TRUE(x.defined());
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.sizes(), Shape({2, 3, 4}));
  EXPECT_EQ(x.shape(), Shape({2, 3, 4}));
  EXPECT_EQ(x.strides(), Shape({12, 4, 1}));
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.stride(0), 12);
  EXPECT_THROW(x.size(3), IndexError);
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.storage_offset(), 0);
  EXPECT_EQ(x.dtype(), DType::f32);
  EXPECT_EQ(x.element_size(), 4u);
  EXPECT_TRUE(x.is_cpu());
  EXPECT_FALSE(x.is_cuda());
  EXPECT_TRUE(x.is_floating_point());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 64, 0u) << "CPU storage is 64-byte aligned";
  Tensor s = zeros({});
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  Tensor e = zeros({0, 3});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ((e + 1).sizes(), Shape({0, 3}));
  Tensor copy = x;  // a handle copy shares the impl
  EXPECT_TRUE(copy.is_same(x));
}

TEST(Tensor, TypedDataPtrChecksDType) {
  Tensor x = zeros({3}, DType::f64);
  EXPECT_NO_THROW(x.data_ptr<double>());
  EXPECT_THROW(x.data_ptr<float>(), DTypeError);
}

TEST(Views, ShareStorageAndWritesAreVisible) {
  Tensor x = seq({2, 3});
  Tensor v = x.view({3, 2});
  EXPECT_EQ(v.storage(), x.storage());
  v.data_ptr<double>()[5] = 50;
  EXPECT_EQ(vals(x)[5], 50);
  // Writes through strided views land in the base.
  x.select(1, 1).fill_(-1);  // column 1
  EXPECT_EQ(vals(x), (std::vector<double>{0, -1, 2, 3, -1, 50}));
  x.t().select(0, 2).mul_(10);  // column 2 through a transpose
  EXPECT_EQ(vals(x), (std::vector<double>{0, -1, 20, 3, -1, 500}));
  x.slice(1, 0, 3, 2).add_(1);  // columns 0 and 2
  EXPECT_EQ(vals(x), (std::vector<double>{1, -1, 21, 4, -1, 501}));
  Tensor row = x.select(0, 1);
  row.copy_(tensor<double>({7, 8, 9}));
  EXPECT_EQ(vals(x), (std::vector<double>{1, -1, 21, 7, 8, 9}));
  // ...and writes to the base show through the views.
  x.fill_(2);
  EXPECT_EQ(vals(v), std::vector<double>(6, 2));
  EXPECT_EQ(vals(row), std::vector<double>(3, 2));
  // detach shares storage too.
  Tensor d = x.detach();
  EXPECT_EQ(d.storage(), x.storage());
}

TEST(Views, ViewAndReshape) {
  Tensor x = seq({2, 3, 4});
  Tensor v = x.view({6, -1});
  EXPECT_EQ(v.sizes(), Shape({6, 4}));
  EXPECT_EQ(v.strides(), Shape({4, 1}));
  EXPECT_EQ(vals(v), iota(24));
  EXPECT_EQ(x.view({24}).sizes(), Shape({24}));
  EXPECT_EQ(x.view({-1}).sizes(), Shape({24}));
  EXPECT_EQ(x.view({2, 1, 12}).sizes(), Shape({2, 1, 12}));
  EXPECT_THROW(x.view({5, -1}), ShapeError);
  EXPECT_THROW(x.view({-1, -1}), ShapeError);
  EXPECT_THROW(x.view({7, 4}), ShapeError);

  // A transposed tensor cannot be flattened without a copy; view says to use reshape.
  Tensor t = x.transpose(0, 2);  // [4, 3, 2]
  std::string msg = message_of<ShapeError>([&] { t.view({24}); });
  EXPECT_EQ(msg.rfind("[view]", 0), 0u) << msg;
  EXPECT_NE(msg.find("reshape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3, 2]"), std::string::npos) << msg;
  // But dims that stay contiguous can still be split or merged.
  Tensor p = x.permute({1, 0, 2});  // [3, 2, 4], last dim contiguous
  Tensor pv = p.view({3, 2, 2, 2});
  EXPECT_EQ(pv.storage(), x.storage());
  EXPECT_EQ(pv.strides(), Shape({4, 12, 2, 1}));
  EXPECT_THROW(p.view({6, 4}), ShapeError);

  // reshape: a view when possible, otherwise a copy with the same values.
  Tensor r1 = x.reshape({4, 6});
  EXPECT_EQ(r1.storage(), x.storage());
  Tensor r2 = t.reshape({24});
  EXPECT_NE(r2.storage(), x.storage());
  std::vector<double> expected;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) expected.push_back(double(i * 12 + j * 4 + k));
  EXPECT_EQ(vals(r2), expected);
  EXPECT_EQ(vals(t), expected);  // iteration of a strided tensor is row-major over its sizes
  EXPECT_EQ(zeros({}).reshape({1, 1}).sizes(), Shape({1, 1}));
  EXPECT_EQ(zeros({1}).view({}).dim(), 0);
  EXPECT_EQ(zeros({0, 4}).view({2, 0, 2}).sizes(), Shape({2, 0, 2}));
}

TEST(Views, PermuteAndTranspose) {
  Tensor x = seq({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), Shape({4, 2, 3}));
  EXPECT_EQ(p.strides(), Shape({1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  EXPECT_EQ(p.storage(), x.storage());
  auto pv = vals(p);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(pv[size_t(a * 6 + b * 3 + c)], b * 12 + c * 4 + a);
  EXPECT_EQ(x.permute({-1, 0, 1}).sizes(), Shape({4, 2, 3}));
  EXPECT_THROW(x.permute({0, 0, 1}), ShapeError);
  EXPECT_THROW(x.permute({0, 1}), ShapeError);
  Tensor t = x.transpose(-1, 0);
  EXPECT_EQ(t.sizes(), Shape({4, 3, 2}));
  EXPECT_EQ(t.strides(), Shape({1, 4, 12}));
  EXPECT_EQ(vals(x.transpose(1, 1)), iota(24));
  Tensor m = seq({2, 3});
  EXPECT_EQ(m.t().sizes(), Shape({3, 2}));
  EXPECT_EQ(vals(m.t()), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(vals(m.t().t()), iota(6));
  EXPECT_THROW(x.t(), ShapeError);
  EXPECT_EQ(seq({5}).t().sizes(), Shape({5}));
}

TEST(Views, NarrowSliceSelect) {
  Tensor x = seq({4, 5});
  Tensor n = x.narrow(1, 1, 3);
  EXPECT_EQ(n.sizes(), Shape({4, 3}));
  EXPECT_EQ(n.strides(), Shape({5, 1}));
  EXPECT_EQ(n.storage_offset(), 1);
  EXPECT_EQ(vals(n.select(0, 2)), (std::vector<double>{11, 12, 13}));
  EXPECT_EQ(vals(x.narrow(0, -1, 1)), (std::vector<double>{15, 16, 17, 18, 19}));
  EXPECT_THROW(x.narrow(1, 3, 3), IndexError);
  EXPECT_THROW(x.narrow(2, 0, 1), IndexError);

  Tensor v = seq({10});
  Tensor s = v.slice(0, 1, 8, 3);
  EXPECT_EQ(s.sizes(), Shape({3}));
  EXPECT_EQ(s.strides(), Shape({3}));
  EXPECT_EQ(s.storage_offset(), 1);
  EXPECT_EQ(vals(s), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(vals(v.slice(0, 1, 9, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(vals(v.slice(0, 1, 10, 3)), (std::vector<double>{1, 4, 7}));
  EXPECT_EQ(vals(v.slice(0, 0, 10, 2)), (std::vector<double>{0, 2, 4, 6, 8}));
  EXPECT_EQ(vals(v.slice(0, -3, 10)), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(vals(v.slice(0, 2, -5)), (std::vector<double>{2, 3, 4}));
  EXPECT_EQ(v.slice(0, 8, 100).numel(), 2);  // clamped like Python slicing
  EXPECT_EQ(v.slice(0, 6, 3).numel(), 0);
  EXPECT_THROW(v.slice(0, 0, 5, 0), ValueError);
  Tensor s2 = x.slice(0, 1, 4, 2).slice(1, 0, 5, 2);  // rows 1, 3; columns 0, 2, 4
  EXPECT_EQ(s2.sizes(), Shape({2, 3}));
  EXPECT_EQ(s2.strides(), Shape({10, 2}));
  EXPECT_EQ(vals(s2), (std::vector<double>{5, 7, 9, 15, 17, 19}));

  Tensor sel = x.select(1, -1);
  EXPECT_EQ(sel.sizes(), Shape({4}));
  EXPECT_EQ(sel.strides(), Shape({5}));
  EXPECT_EQ(vals(sel), (std::vector<double>{4, 9, 14, 19}));
  Tensor scalar = x.select(0, 3).select(0, 2);
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<double>(), 17);
  EXPECT_THROW(x.select(0, 4), IndexError);
  EXPECT_THROW(x.select(0, -5), IndexError);
}

// PyTorch refuses each; a wrapped size or element count used to give an empty view or a sum
// of 0 or NaN.
TEST(Views, SizesThatAreNegativeOrOverflowAreRefused) {
  Tensor c = tensor<double>({1, 2, 3}, {3, 1});
  EXPECT_NE(message_of<ShapeError>([&] { c.expand({3, -2}); }).find("[expand] size -2"), std::string::npos);
  EXPECT_NE(message_of<ShapeError>([&] { c.expand({-3, 3, 4}); }).find("[expand] size -3"), std::string::npos);
  const int64_t big = int64_t(1) << 40;
  EXPECT_NE(message_of<ShapeError>([&] { c.expand({big, 3, big}); }).find("[expand] the shape"), std::string::npos);
  Tensor one = ones({1, 1});
  EXPECT_NE(message_of<ShapeError>([&] { one.expand({int64_t(1) << 62, 4}); }).find("more than 2^63 elements"),
            std::string::npos);
  // An empty dim makes any other size fine, as for a factory.
  EXPECT_EQ(one.expand({0, big}).numel(), 0);
  EXPECT_EQ(c.expand({big, 3, 1}).size(0), big);  // 2^40 x 3 elements: a valid view of 3 values
  Tensor v = arange(10);
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_NE(message_of<IndexError>([&] { v.narrow(0, 2, huge); }).find("[narrow] start 2 and length"),
            std::string::npos);
  EXPECT_THROW(v.narrow(0, 11, 0), IndexError);
  EXPECT_EQ(v.narrow(0, 10, 0).numel(), 0);
  EXPECT_EQ(v.narrow(0, -3, 3).to_vector<int64_t>(), (std::vector<int64_t>{7, 8, 9}));
}

TEST(Views, ExpandSqueezeUnsqueezeFlatten) {
  Tensor c = tensor<double>({1, 2, 3}, {3, 1});
  Tensor e = c.expand({2, 3, 4});
  EXPECT_EQ(e.sizes(), Shape({2, 3, 4}));
  EXPECT_EQ(e.strides(), Shape({0, 1, 0}));
  EXPECT_EQ(e.storage(), c.storage());
  auto ev = vals(e);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(ev[size_t(i)], 1 + (i / 4) % 3);
  EXPECT_EQ(c.expand({-1, 5}).sizes(), Shape({3, 5}));
  EXPECT_EQ(c.expand_as(zeros({3, 2})).sizes(), Shape({3, 2}));
  EXPECT_THROW(c.expand({4, 4}), ShapeError);
  EXPECT_THROW(c.expand({4}), ShapeError);

  Tensor x = zeros({1, 3, 1, 2});
  EXPECT_EQ(x.squeeze().sizes(), Shape({3, 2}));
  EXPECT_EQ(x.squeeze(0).sizes(), Shape({3, 1, 2}));
  EXPECT_EQ(x.squeeze(-2).sizes(), Shape({1, 3, 2}));
  EXPECT_EQ(x.squeeze(1).sizes(), Shape({1, 3, 1, 2}));  // not size 1: unchanged
  EXPECT_EQ(zeros({1, 1}).squeeze().dim(), 0);
  EXPECT_EQ(x.unsqueeze(0).sizes(), Shape({1, 1, 3, 1, 2}));
  EXPECT_EQ(x.unsqueeze(4).sizes(), Shape({1, 3, 1, 2, 1}));
  EXPECT_EQ(x.unsqueeze(-1).sizes(), Shape({1, 3, 1, 2, 1}));
  EXPECT_THROW(x.unsqueeze(6), IndexError);
  Tensor t = seq({3, 4}).t();  // non-contiguous: unsqueeze keeps it a view
  Tensor u = t.unsqueeze(1);
  EXPECT_EQ(u.sizes(), Shape({4, 1, 3}));
  EXPECT_EQ(u.storage(), t.storage());
  EXPECT_EQ(vals(u), vals(t));
  EXPECT_EQ(u.squeeze(1).strides(), t.strides());

  Tensor f = seq({2, 3, 4, 5});
  EXPECT_EQ(f.flatten().sizes(), Shape({120}));
  EXPECT_EQ(f.flatten(1).sizes(), Shape({2, 60}));
  EXPECT_EQ(f.flatten(1, 2).sizes(), Shape({2, 12, 5}));
  EXPECT_EQ(f.flatten(-2, -1).sizes(), Shape({2, 3, 20}));
  EXPECT_EQ(f.flatten(2, 2).sizes(), Shape({2, 3, 4, 5}));
  EXPECT_EQ(f.flatten(1).storage(), f.storage());
  EXPECT_THROW(f.flatten(2, 1), ShapeError);
  EXPECT_EQ(zeros({}).flatten().sizes(), Shape({1}));
  Tensor ft = f.transpose(0, 3).flatten();  // needs a copy
  EXPECT_EQ(ft.sizes(), Shape({120}));
  EXPECT_EQ(vals(ft), vals(f.transpose(0, 3)));
}

TEST(Views, Contiguous) {
  Tensor x = seq({3, 4});
  EXPECT_TRUE(x.contiguous().is_same(x));
  Tensor t = x.t();
  Tensor c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.strides(), Shape({3, 1}));
  EXPECT_NE(c.storage(), x.storage());
  EXPECT_EQ(vals(c), vals(t));
  // A size-1 dim's stride does not matter for contiguity.
  Tensor s = x.select(1, 0).unsqueeze(1);  // [3, 1] with strides [4, 4]
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_TRUE(x.narrow(0, 1, 1).is_contiguous());
  EXPECT_TRUE(x.slice(1, 0, 4, 2).narrow(0, 0, 1).select(0, 0).slice(0, 0, 1).is_contiguous());
  // High-rank (spilled Shape) views and copies.
  Tensor h = seq({2, 1, 2, 1, 2, 1, 2, 3});
  Tensor hp = h.permute({7, 6, 5, 4, 3, 2, 1, 0});
  EXPECT_EQ(hp.sizes(), Shape({3, 2, 1, 2, 1, 2, 1, 2}));
  Tensor hc = hp.contiguous();
  EXPECT_EQ(vals(hc), vals(hp));
  EXPECT_EQ(vals(hc.permute({7, 6, 5, 4, 3, 2, 1, 0}).contiguous()), iota(48));
}

// ---- conversions and copies ----

TEST(Convert, ToDTypeRoundTrips) {
  Tensor x = tensor<float>({0.1f, -2.5f, 3.0f, 1e-3f, 65504.0f, -7.25f}, {2, 3});
  Tensor d = x.to(DType::f64);
  EXPECT_EQ(d.dtype(), DType::f64);
  EXPECT_EQ(d.sizes(), x.sizes());
  EXPECT_EQ(vals(d.to(DType::f32)), vals(x));
  EXPECT_TRUE(x.to(DType::f32).is_same(x));  // no-op conversion returns the tensor itself
  // f16 and bf16 round to nearest even and convert back exactly.
  Tensor third = full({1}, 1.0 / 3.0, DType::f64);
  EXPECT_EQ(third.to(DType::f16).item<double>(), 0.333251953125);
  EXPECT_EQ(third.to(DType::bf16).item<double>(), 0.333984375);
  EXPECT_EQ(third.to(DType::f16).data_ptr<Half>()[0].bits, 0x3555);
  EXPECT_EQ(third.to(DType::bf16).data_ptr<BFloat16>()[0].bits, 0x3EAB);
  Tensor h = x.to(DType::f16);
  EXPECT_EQ(h.element_size(), 2u);
  EXPECT_EQ(h.data_ptr<Half>()[4].bits, 0x7BFF);
  EXPECT_EQ(full({1}, 70000.0).to(DType::f16).item<double>(), INFINITY);
  EXPECT_EQ(full({1}, 2049.0).to(DType::f16).item<double>(), 2048.0);
  EXPECT_EQ(full({1}, 2051.0).to(DType::f16).item<double>(), 2052.0);
  EXPECT_EQ(full({1}, 257.0).to(DType::bf16).item<double>(), 256.0);
  EXPECT_EQ(full({1}, 259.0).to(DType::bf16).item<double>(), 260.0);
  Tensor hh = h.to(DType::bf16).to(DType::f32);  // f16 -> bf16 rounds again
  EXPECT_EQ(hh.to_vector<float>()[0], BFloat16(float(Half(0.1f))));
  EXPECT_TRUE(std::isnan(full({1}, NAN).to(DType::f16).item<double>()));
  EXPECT_TRUE(std::isnan(full({1}, NAN).to(DType::bf16).item<double>()));
  // Floating to integer truncates toward zero, as in C and PyTorch.
  Tensor f = tensor<double>({2.7, -2.7, 0.5, -0.5, 100.0}, {5});
  EXPECT_EQ(f.to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{2, -2, 0, 0, 100}));
  EXPECT_EQ(f.to(DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{2, -2, 0, 0, 100}));
  EXPECT_EQ(tensor<double>({2.7, 255.0}, {2}).to(DType::u8).to_vector<int64_t>(), (std::vector<int64_t>{2, 255}));
  // To bool: any nonzero value is true, however small.
  Tensor b = tensor<double>({0.0, 0.5, -3.0, 1e-50, -0.0}, {5}).to(DType::b8);
  EXPECT_EQ(b.dtype(), DType::b8);
  EXPECT_EQ(vals(b), (std::vector<double>{0, 1, 1, 1, 0}));
  EXPECT_EQ(vals(tensor<int64_t>({0, 2, -1}, {3}).to(DType::b8)), (std::vector<double>{0, 1, 1}));
  EXPECT_EQ(vals(b.to(DType::f32)), (std::vector<double>{0, 1, 1, 1, 0}));
  // Integers widen and narrow exactly within range.
  Tensor big = tensor<int64_t>({(int64_t(1) << 40) + 3, -5}, {2});
  EXPECT_EQ(big.to(DType::f64).to(DType::i64).to_vector<int64_t>(), big.to_vector<int64_t>());
  EXPECT_EQ(tensor<int32_t>({-7, 300}, {2}).to(DType::i64).to_vector<int64_t>(),
            (std::vector<int64_t>{-7, 300}));
  // Non-contiguous sources convert in logical order.
  Tensor nc = seq({3, 2}).t().to(DType::f32);
  EXPECT_TRUE(nc.is_contiguous());
  EXPECT_EQ(vals(nc), (std::vector<double>{0, 2, 4, 1, 3, 5}));
}

TEST(Convert, ToDevice) {
  Tensor x = seq({2});
  EXPECT_TRUE(x.to(Device::cpu()).is_same(x));
  EXPECT_TRUE(x.cpu().is_same(x));
  if (!cuda::is_available()) {
    EXPECT_THROW(x.to(Device::cuda()), DeviceError);
    EXPECT_THROW(x.cuda(), DeviceError);
  } else {
    Tensor g = x.cuda();
    EXPECT_TRUE(g.is_cuda());
    EXPECT_EQ(vals(g), vals(x));
    EXPECT_EQ(vals(g.to(Device::cpu(), DType::f32)), vals(x));
  }
}

TEST(Convert, Clone) {
  Tensor x = seq({2, 3});
  Tensor c = x.clone();
  EXPECT_NE(c.storage(), x.storage());
  EXPECT_EQ(c.sizes(), x.sizes());
  EXPECT_EQ(c.dtype(), x.dtype());
  EXPECT_EQ(vals(c), vals(x));
  c.fill_(0);
  EXPECT_EQ(vals(x), iota(6));  // independent
  Tensor ct = x.t().clone();
  EXPECT_EQ(vals(ct), vals(x.t()));
  EXPECT_EQ(ct.sizes(), Shape({3, 2}));
  Tensor ci = tensor<int64_t>({1, 2}, {2}).clone();
  EXPECT_EQ(ci.dtype(), DType::i64);
}

TEST(Convert, CopyBroadcastsAndConverts) {
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(tensor<int64_t>({1, 2, 3}, {3}));
  EXPECT_EQ(dst.dtype(), DType::f64);
  EXPECT_EQ(vals(dst), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  dst.copy_(tensor<float>({-1.5f, 2.5f}, {2, 1}));
  EXPECT_EQ(vals(dst), (std::vector<double>{-1.5, -1.5, -1.5, 2.5, 2.5, 2.5}));
  dst.copy_(full({}, 4.0));
  EXPECT_EQ(vals(dst), std::vector<double>(6, 4.0));
  // Into a non-contiguous destination.
  Tensor base = zeros({3, 2}, DType::i32);
  Tensor view = base.t();  // [2, 3]
  view.copy_(seq({2, 3}));
  EXPECT_EQ(vals(base), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  // f32 -> f16 copy rounds.
  Tensor h = zeros({1}, DType::f16);
  h.copy_(full({1}, 1.0 + 1.0 / 2048.0, DType::f64));
  EXPECT_EQ(h.data_ptr<Half>()[0].bits, 0x3C00);
  // A self-overlapping copy reads everything before writing (x[1:] = x[:-1]).
  Tensor s = seq({5});
  s.slice(0, 1, 5).copy_(s.slice(0, 0, 4));
  EXPECT_EQ(vals(s), (std::vector<double>{0, 0, 1, 2, 3}));
  // The source must broadcast to the destination's shape.
  EXPECT_THROW(dst.copy_(zeros({3, 3})), ShapeError);
  EXPECT_THROW(zeros({3}).copy_(zeros({2, 3})), ShapeError);
  // fill_ and zero_ convert the scalar to the dtype.
  Tensor i = zeros({2}, DType::i64);
  i.fill_(7);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{7, 7}));
  i.zero_();
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 0}));
}

TEST(Convert, Item) {
  EXPECT_EQ(full({}, 2.5).item<double>(), 2.5);
  EXPECT_EQ(full({1, 1}, 2.5).item<float>(), 2.5f);
  EXPECT_EQ(full({1}, 2.75).item<int64_t>(), 2);
  EXPECT_EQ(full({}, -3, DType::i32).item<int>(), -3);
  EXPECT_EQ(full({}, 7, DType::u8).item<int64_t>(), 7);
  EXPECT_EQ(full({}, true, DType::b8).item<bool>(), true);
  EXPECT_EQ(full({}, 0.1, DType::f64).item<double>(), 0.1);  // exact in f64
  EXPECT_EQ(full({}, 0.1, DType::f16).item<double>(), double(float(Half(0.1f))));
  // 64-bit integers come back exactly (not through a double).
  const int64_t big = (int64_t(1) << 62) + 1;
  EXPECT_EQ(full({}, big, DType::i64).item<int64_t>(), big);
  EXPECT_EQ(tensor<int64_t>({big, -big}, {2}).to_vector<int64_t>(), (std::vector<int64_t>{big, -big}));
  EXPECT_EQ(seq({3, 4}).select(0, 2).select(0, 1).item<double>(), 9);
  EXPECT_THROW(zeros({2}).item<double>(), ValueError);
  EXPECT_THROW(Tensor().item<double>(), Error);
}

// ---- printing ----

TEST(Print, ShapeDTypeAndValues) {
  std::ostringstream os;
  os << arange(6).view({2, 3});
  std::string s = os.str();
  EXPECT_EQ(s.rfind("tensor(", 0), 0u) << s;
  EXPECT_NE(s.find("[[0, 1, 2],"), std::string::npos) << s;
  EXPECT_NE(s.find("[3, 4, 5]]"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2, 3]"), std::string::npos) << s;
  EXPECT_NE(s.find("dtype=i64"), std::string::npos) << s;
  EXPECT_EQ(s.back(), ')');

  std::string f = tensor<float>({1.5f, -2.25f}, {2}).str();
  EXPECT_NE(f.find("1.5000"), std::string::npos) << f;
  EXPECT_NE(f.find("-2.2500"), std::string::npos) << f;
  EXPECT_NE(f.find("dtype=f32"), std::string::npos) << f;
  std::string ints = tensor<double>({1, 2}, {2}).str();
  EXPECT_NE(ints.find("[1., 2.]"), std::string::npos) << ints;
  std::string sci = tensor<double>({1e-6, 2e-6}, {2}).str();
  EXPECT_NE(sci.find("e-06"), std::string::npos) << sci;
  std::string special = tensor<float>({NAN, INFINITY, -INFINITY, 1.0f}, {4}).str();
  EXPECT_NE(special.find("nan"), std::string::npos) << special;
  EXPECT_NE(special.find("-inf"), std::string::npos) << special;
  EXPECT_NE(full({}, 3.5).str().find("3.5000"), std::string::npos) << full({}, 3.5).str();
  EXPECT_NE(full({}, 3.5).str().find("shape=[]"), std::string::npos);
  std::string g = ones({2}).requires_grad_().str();
  EXPECT_NE(g.find("requires_grad"), std::string::npos) << g;
  EXPECT_NE(seq({2, 2}).t().str().find("[[0., 2.],"), std::string::npos) << seq({2, 2}).t().str();
  EXPECT_EQ(str(zeros({2, 3}, DType::bf16)), "Tensor[2, 3] bf16 cpu");
}

TEST(Print, TruncatesLargeTensors) {
  // Up to 1000 elements everything prints.
  std::string full_s = arange(1000).str();
  EXPECT_EQ(full_s.find("..."), std::string::npos);
  EXPECT_NE(full_s.find(" 500,"), std::string::npos);
  // Above 1000, only the edges of each dim print, with "..." in between.
  std::string s = arange(2000).str();
  EXPECT_NE(s.find("[0, 1, 2, ..., 1997, 1998, 1999]"), std::string::npos) << s;
  EXPECT_NE(s.find("shape=[2000]"), std::string::npos) << s;
  EXPECT_LT(s.size(), 200u) << s;
  std::string m = arange(100 * 100).view({100, 100}).str();
  EXPECT_NE(m.find("..."), std::string::npos);
  EXPECT_NE(m.find("[0, 1, 2, ..., 97, 98, 99]"), std::string::npos) << m;
  EXPECT_NE(m.find("[9900, 9901, 9902, ..., 9997, 9998, 9999]"), std::string::npos) << m;
  EXPECT_EQ(m.find("[300,"), std::string::npos) << "row 3 must be elided";
  EXPECT_LT(m.size(), 600u) << m;
}

// Note [released storage]: the memory goes, the storage (its views, its version) stays; any
// read of a tensor on it is an error until reallocate() brings memory back.
TEST(Storage, ReleasedMemoryIsRefusedUntilReallocated) {
  Tensor t = zeros({4, 3});
  Tensor row = t.narrow(0, 1, 1);
  const uint32_t version = t.version();
  t.storage()->release_memory();
  EXPECT_TRUE(t.storage()->is_released());
  EXPECT_EQ(t.storage()->nbytes(), size_t(48));
  try {
    (void)row.data_ptr();
    FAIL() << "a view of released storage handed out its pointer";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)t.sum(), ValueError);
  t.storage()->release_memory();  // idempotent
  t.storage()->reallocate();
  EXPECT_FALSE(t.storage()->is_released());
  EXPECT_EQ(t.version(), version);
  t.fill_(2.0);
  EXPECT_EQ(row.sum().item<float>(), 6.0f);
  // Memory owned elsewhere cannot be released.
  float outside[2] = {1, 2};
  auto wrapped = std::make_shared<Storage>(outside, sizeof outside, Device::cpu(), nullptr);
  EXPECT_THROW(wrapped->release_memory(), ValueError);
}
