// Factories (zeros, ones, full, arange, linspace, rand, randn, randint, tensor, *_like),
// the seeded Philox RNG, and what naming a CUDA device does without one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "support/test_support.h"

using namespace ember;

namespace {
std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
double mean_of(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}
double std_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size() - 1));
}
}  // namespace

TEST(Factory, ZerosOnesFullEmpty) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.sizes(), Shape({2, 3}));
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_TRUE(z.is_cpu());
  EXPECT_TRUE(z.is_contiguous());
  EXPECT_EQ(vals(z), std::vector<double>(6, 0.0));
  EXPECT_FALSE(z.requires_grad());
  Tensor o = ones({4}, DType::i32);
  EXPECT_EQ(o.dtype(), DType::i32);
  EXPECT_EQ(vals(o), std::vector<double>(4, 1.0));
  Tensor f = full({2, 2}, 2.5, DType::f64);
  EXPECT_EQ(vals(f), std::vector<double>(4, 2.5));
  EXPECT_EQ(vals(full({3}, -7, DType::i64)), std::vector<double>(3, -7));
  EXPECT_EQ(vals(full({2}, true, DType::b8)), std::vector<double>(2, 1));
  EXPECT_EQ(full({1}, 0.1, DType::f64).item<double>(), 0.1);  // no detour through float
  EXPECT_EQ(full({1}, 0.1, DType::f16).data_ptr<Half>()[0].bits, Half(0.1f).bits);
  EXPECT_EQ(vals(ones({2}, DType::bf16)), std::vector<double>(2, 1.0));
  Tensor e = empty({3, 0});
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(empty({5}, DType::u8).element_size(), 1u);
  Tensor g = zeros({2}, TensorOptions(DType::f64).requires_grad());
  EXPECT_TRUE(g.requires_grad());
  EXPECT_TRUE(g.is_leaf());
  EXPECT_EQ(g.dtype(), DType::f64);
  EXPECT_THROW(zeros({2, -1}), ShapeError);
  Tensor s = scalar_tensor(3.5, DType::f64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<double>(), 3.5);
}

TEST(Factory, ArangeOfMoreElementsThanATensorHoldsIsRefused) {
  for (double end : {1e300, std::numeric_limits<double>::infinity()}) {
    const std::string msg = test::message_of<ValueError>([&] { arange(0.0, end); });
    EXPECT_NE(msg.find("[arange] range [0, "), std::string::npos) << msg;
    EXPECT_NE(msg.find("more than a tensor can hold"), std::string::npos) << msg;
  }
}

TEST(Factory, Arange) {
  Tensor a = arange(5);
  EXPECT_EQ(a.dtype(), DType::i64);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(5, 0, -2).to_vector<int64_t>(), (std::vector<int64_t>{5, 3, 1}));
  Tensor f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_EQ(vals(f), (std::vector<double>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(0, 1, 0.3).numel(), 4);  // ceil((1 - 0) / 0.3)
  EXPECT_EQ(arange(4, DType::f64).dtype(), DType::f64);
  EXPECT_EQ(vals(arange(4, DType::f64)), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(arange(3, 3).numel(), 0);
  EXPECT_THROW(arange(0, 5, 0), ValueError);
  EXPECT_THROW(arange(5, 0, 1), ValueError);
  // Integers are exact beyond f64's integers; floating values are start + i * step rounded
  // once (a fused multiply-add), the formula every device shares.
  const int64_t big = (int64_t(1) << 53) + 1;
  EXPECT_EQ(arange(big, big + 3).to_vector<int64_t>(), (std::vector<int64_t>{big, big + 1, big + 2}));
  const std::vector<double> tenth = arange(0.3, 2.0, 0.1, DType::f64).to_vector<double>();
  ASSERT_EQ(tenth.size(), 17u);
  for (size_t i = 0; i < tenth.size(); ++i) EXPECT_EQ(tenth[i], std::fma(double(i), 0.1, 0.3)) << i;
  EXPECT_THROW(arange(3, DType::b8), DTypeError);
  // Floating values into an integer dtype: truncated through int64 and wrapped, as casts do.
  EXPECT_EQ(arange(-3.0, 0.0, 1.0, DType::u8).to_vector<int64_t>(), (std::vector<int64_t>{253, 254, 255}));
}

// arange is made on the device, not copied from the host: bit-identical with the CPU in every
// dtype, and legal inside a graph capture (a host copy would invalidate it).
TEST(FactoryCuda, ArangeIsMadeOnTheDevice) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32, DType::u8}) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(arange(0, 200, 1, TensorOptions(dt).device(dev)).cpu().to_vector<double>(),
              arange(0, 200, 1, dt).to_vector<double>());
    if (is_floating(dt)) {
      EXPECT_EQ(arange(-1.5, 7.0, 0.37, TensorOptions(dt).device(dev)).cpu().to_vector<double>(),
                arange(-1.5, 7.0, 0.37, dt).to_vector<double>());
    }
  }
  Tensor y;
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g);
    y = arange(5, 5 + 64, 1, TensorOptions(DType::i64).device(dev)) * 2;
  }
  g.replay();
  EXPECT_EQ(y.cpu().to_vector<int64_t>(), (arange(5, 69) * 2).to_vector<int64_t>());
}

TEST(Factory, Linspace) {
  Tensor l = linspace(0, 1, 5);
  EXPECT_EQ(l.dtype(), DType::f32);
  EXPECT_EQ(vals(l), (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
  Tensor d = linspace(-1, 2, 7, DType::f64);
  EXPECT_TRUE(test::all_close(d, {-1, -0.5, 0, 0.5, 1, 1.5, 2}, 0, 1e-15));
  EXPECT_EQ(vals(d).back(), 2.0);  // the end is exact
  EXPECT_EQ(linspace(0.1, 0.7, 3, DType::f64).to_vector<double>().back(), 0.7);
  EXPECT_EQ(vals(linspace(3, 5, 1)), (std::vector<double>{3}));
  EXPECT_EQ(linspace(3, 5, 0).numel(), 0);
  EXPECT_THROW(linspace(0, 1, -1), ValueError);
}

TEST(Factory, FromHostValues) {
  Tensor t = tensor<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_EQ(t.sizes(), Shape({2, 3}));
  EXPECT_EQ(vals(t), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(tensor<double>({1.5}).dtype(), DType::f64);
  EXPECT_EQ(tensor<int64_t>({1, 2}).dtype(), DType::i64);
  EXPECT_EQ(tensor<int32_t>({1, 2}).dtype(), DType::i32);
  EXPECT_EQ(tensor<uint8_t>({1, 255}).to_vector<int64_t>(), (std::vector<int64_t>{1, 255}));
  EXPECT_EQ(tensor<double>({1.5, 2.5}).sizes(), Shape({2}));
  // With options: converted on the way in.
  Tensor c = tensor<double>({1.25, -2.75}, {2}, DType::f16);
  EXPECT_EQ(c.dtype(), DType::f16);
  EXPECT_EQ(vals(c), (std::vector<double>{1.25, -2.75}));
  Tensor r = tensor<double>({1, 2}, {2}, TensorOptions(DType::f64).requires_grad());
  EXPECT_TRUE(r.requires_grad());
  EXPECT_TRUE(r.is_leaf());
  Tensor scalar = tensor<double>({4.0}, Shape{});
  EXPECT_EQ(scalar.dim(), 0);
  EXPECT_EQ(scalar.item<double>(), 4.0);
  // The host vector is copied: changing it afterwards does not change the tensor.
  std::vector<float> host{1, 2};
  Tensor h = tensor(host, {2});
  host[0] = 100;
  EXPECT_EQ(vals(h)[0], 1);
  EXPECT_THROW(tensor<float>({1, 2, 3}, {2, 2}), ShapeError);
}

TEST(Factory, LikeFactories) {
  Tensor x = zeros({2, 5}, DType::f64).t();  // non-contiguous source
  for (const Tensor& t : {empty_like(x), zeros_like(x), ones_like(x), full_like(x, 3), rand_like(x),
                          randn_like(x)}) {
    EXPECT_EQ(t.sizes(), Shape({5, 2}));
    EXPECT_EQ(t.dtype(), DType::f64);
    EXPECT_EQ(t.device(), x.device());
    EXPECT_FALSE(t.requires_grad());
    EXPECT_NE(t.storage(), x.storage());
  }
  EXPECT_EQ(vals(ones_like(x)), std::vector<double>(10, 1));
  EXPECT_EQ(vals(full_like(x, 3)), std::vector<double>(10, 3));
  EXPECT_EQ(vals(zeros_like(tensor<int64_t>({5}))), std::vector<double>(1, 0));
  EXPECT_EQ(zeros_like(tensor<int64_t>({5})).dtype(), DType::i64);
  Tensor p = ones({3}, DType::f64).requires_grad_();
  EXPECT_FALSE(zeros_like(p).requires_grad());
}

// ---- RNG ----

TEST(Random, SameSeedSameValuesDifferentSeedDifferentValues) {
  manual_seed(1234);
  Tensor a = rand({1000});
  Tensor an = randn({7, 11}, DType::f64);
  Tensor ai = randint(0, 100, {50});
  manual_seed(1234);
  Tensor b = rand({1000});
  Tensor bn = randn({7, 11}, DType::f64);
  Tensor bi = randint(0, 100, {50});
  EXPECT_EQ(vals(a), vals(b));
  EXPECT_EQ(vals(an), vals(bn));
  EXPECT_EQ(vals(ai), vals(bi));
  manual_seed(1235);
  Tensor c = rand({1000});
  auto av = vals(a), cv = vals(c);
  int same = 0;
  for (size_t i = 0; i < av.size(); ++i) same += av[i] == cv[i];
  EXPECT_LT(same, 5);
  // Consecutive draws from one seed differ from each other (the counter advances).
  manual_seed(1234);
  Tensor d1 = rand({100}), d2 = rand({100});
  EXPECT_NE(vals(d1), vals(d2));
  // A private generator is independent of the default one and reproducible.
  Generator g1(42), g2(42);
  Tensor p1 = randn({64}, DType::f32, &g1);
  rand({10});  // advancing the default generator does not matter
  Tensor p2 = randn({64}, DType::f32, &g2);
  EXPECT_EQ(vals(p1), vals(p2));
  // State save/restore replays the same numbers.
  Generator& gen = default_generator();
  auto state = gen.get_state();
  Tensor r1 = rand({33}, DType::f64);
  gen.set_state(state);
  Tensor r2 = rand({33}, DType::f64);
  EXPECT_EQ(vals(r1), vals(r2));
}

TEST(Random, ValuesDoNotDependOnShapeOrThreading) {
  // A large fill (parallel) begins with the same values as a small one from the same state.
  Generator g1(7), g2(7);
  auto small = vals(rand({10}, DType::f64, &g1));
  auto large = vals(rand({200000}, DType::f64, &g2));
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], large[i]);
  Generator g3(7);
  auto reshaped = vals(rand({2, 5}, DType::f64, &g3));
  EXPECT_EQ(reshaped, small);
}

TEST(Random, UniformInUnitInterval) {
  manual_seed(0);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    auto v = vals(rand({100000}, dt));
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    EXPECT_GE(lo, 0.0) << dtype_name(dt);
    EXPECT_LT(hi, 1.0) << dtype_name(dt);
    EXPECT_LT(lo, 1e-3) << dtype_name(dt);
    EXPECT_GT(hi, 0.99) << dtype_name(dt);
    EXPECT_NEAR(mean_of(v), 0.5, 0.005) << dtype_name(dt);
    EXPECT_NEAR(std_of(v), std::sqrt(1.0 / 12.0), 0.005) << dtype_name(dt);
  }
  // Each decile gets about a tenth of the samples.
  auto v = vals(rand({100000}, DType::f64));
  std::vector<int> bins(10, 0);
  for (double x : v) ++bins[size_t(x * 10)];
  for (int b : bins) EXPECT_NEAR(b, 10000, 500);
}

TEST(Random, NormalMomentsAndTails) {
  manual_seed(99);
  for (DType dt : {DType::f32, DType::f64}) {
    auto v = vals(randn({100000}, dt));
    EXPECT_NEAR(mean_of(v), 0.0, 0.015) << dtype_name(dt);  // ~5 standard errors
    EXPECT_NEAR(std_of(v), 1.0, 0.015) << dtype_name(dt);
    int beyond2 = 0;
    for (double x : v) beyond2 += std::fabs(x) > 2;
    EXPECT_NEAR(beyond2 / 100000.0, 0.0455, 0.004) << dtype_name(dt);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
  }
  // Odd element counts and the two halves of each Box-Muller pair are both normal.
  auto odd = vals(randn({100001}, DType::f64));
  std::vector<double> evens, odds;
  for (size_t i = 0; i < odd.size(); ++i) (i % 2 ? odds : evens).push_back(odd[i]);
  EXPECT_NEAR(std_of(evens), 1.0, 0.02);
  EXPECT_NEAR(std_of(odds), 1.0, 0.02);
}

TEST(Random, RandintRangeAndCoverage) {
  manual_seed(5);
  Tensor r = randint(-3, 4, {10000});
  EXPECT_EQ(r.dtype(), DType::i64);
  std::set<int64_t> seen;
  for (int64_t x : r.to_vector<int64_t>()) {
    ASSERT_GE(x, -3);
    ASSERT_LT(x, 4);
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 7u);
  EXPECT_EQ(randint(0, 10, {5}, DType::i32).dtype(), DType::i32);
  auto one = randint(7, 8, {20}).to_vector<int64_t>();
  EXPECT_EQ(one, std::vector<int64_t>(20, 7));
  EXPECT_THROW(randint(3, 3, {2}), ValueError);
  EXPECT_THROW(rand({2}, DType::i64), DTypeError);
  EXPECT_THROW(randn({2}, DType::i32), DTypeError);
}

TEST(Random, Randperm) {
  manual_seed(3);
  auto p = randperm(50).to_vector<int64_t>();
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[size_t(i)], i);
  std::vector<int64_t> identity(50);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(p, identity);
}

// ---- devices ----

TEST(Devices, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:1"), Device::cuda(1));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_THROW(Device::parse("gpu"), ValueError);
  EXPECT_THROW(Device::parse("cuda:x"), ValueError);
  EXPECT_TRUE(Device::cuda().is_cuda());
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
}

TEST(Devices, CudaWithoutADeviceThrowsDeviceError) {
  if (cuda::is_available()) {
    Tensor z = zeros({2}, Device::cuda());
    EXPECT_TRUE(z.is_cuda());
    EXPECT_EQ(vals(z), std::vector<double>(2, 0));
    EXPECT_EQ(vals(ones({3}, Device::cuda())), std::vector<double>(3, 1));
    return;
  }
  EXPECT_EQ(cuda::device_count(), 0);
  for (auto make : std::vector<std::function<Tensor()>>{
           [] { return zeros({2}, Device::cuda()); },
           [] { return ones({2}, TensorOptions(DType::f64).device(Device::cuda())); },
           [] { return empty({2}, Device::cuda()); },
           [] { return full({2}, 1.0, Device::cuda(1)); },
           [] { return rand({2}, Device::cuda()); },
           [] { return randn({2}, Device::cuda()); },
           [] { return arange(3, TensorOptions(Device::cuda())); },
           [] { return tensor<float>({1, 2}, {2}, TensorOptions(Device::cuda())); },
           [] { return ones({2}).to(Device::cuda()); }}) {
    try {
      make();
      ADD_FAILURE() << "expected a DeviceError";
    } catch (const DeviceError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg[0], '[') << msg;
      EXPECT_NE(msg.find("cuda:"), std::string::npos) << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected a DeviceError, got: " << e.what();
    }
  }
}
