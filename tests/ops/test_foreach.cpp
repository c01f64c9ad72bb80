// foreach family (ops::foreach_norm, ops::foreach_mul_): on the CPU against an independent f64
// reference over the elements (every order, mixed dtypes and sizes across chunk boundaries,
// non-contiguous and empty tensors, NaN), determinism across thread counts, and foreach_mul_
// bit for bit against mul_ per tensor; on CUDA against the CPU (more tensors than one launch
// table holds, 16-bit and f32 mixed, unaligned data, large tensors), bitwise determinism, and
// replay under a CUDA graph capture.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ember/ops/foreach.h"
#include "support/test_support.h"

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The reference norm of all elements of all tensors, in double (their stored values).
double reference_norm(const TensorList& ts, double ord) {
  double acc = ord == -kInf ? kInf : 0;
  bool nan = false;
  for (const Tensor& t : ts)
    for (double v : t.to_vector<double>()) {
      const double a = std::fabs(v);
      nan |= v != v;
      if (ord == kInf) acc = std::max(acc, a);
      else if (ord == -kInf) acc = std::min(acc, a);
      else if (ord == 0) acc += v != 0;
      else acc += std::pow(a, ord);
    }
  if (nan && ord != 0) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(ord) || ord == 0 || ord == 1) return acc;
  return std::pow(acc, 1.0 / ord);
}

// Sizes around the chunk (16384) and vector-width boundaries, and a few larger ones.
const int64_t kSizes[] = {1, 7, 8, 100, 16383, 16384, 16385, 40000, 3, 0, 65537, 768, 2304};

// `count` tensors cycling through kSizes and `dtypes`, some of them non-contiguous.
TensorList make_list(int count, const std::vector<DType>& dtypes, Device dev, bool strided = true) {
  TensorList out;
  for (int i = 0; i < count; ++i) {
    const int64_t n = kSizes[size_t(i) % std::size(kSizes)];
    const DType dt = dtypes[size_t(i) % dtypes.size()];
    Tensor t = randn({n}, TensorOptions(DType::f32)).to(dt);
    if (strided && i % 5 == 2 && n >= 4) t = randn({2 * n}, TensorOptions(DType::f32)).to(dt).slice(0, 0, 2 * n, 2);
    else if (strided && i % 5 == 4 && n % 4 == 0) t = t.view({4, n / 4}).t();  // a transpose
    else if (i % 7 == 3 && n > 1) t = t.narrow(0, 1, n - 1);  // contiguous, offset by one element
    out.push_back(t.to(dev));
  }
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.sizes() != b.sizes()) return false;
  if (a.numel() == 0) return true;  // no data pointer to compare (memcmp of null is undefined)
  Tensor x = a.cpu().contiguous(), y = b.cpu().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), size_t(x.numel()) * x.element_size()) == 0;
}

}  // namespace

// ---------------------------------------------------------------- CPU

TEST(ForeachNorm, MatchesF64ReferenceOnMixedTensors) {
  manual_seed(1);
  const TensorList ts = make_list(40, {DType::f32, DType::bf16, DType::f16}, Device::cpu());
  for (double ord : {2.0, 1.0, kInf, -kInf, 0.0, 3.0, 0.5}) {
    SCOPED_TRACE(ord);
    Tensor n = ops::foreach_norm(ts, ord);
    EXPECT_EQ(n.dim(), 0);
    EXPECT_EQ(n.dtype(), DType::f32);
    EXPECT_EQ(n.device(), Device::cpu());
    EXPECT_TRUE(test::all_close(n, std::vector<double>{reference_norm(ts, ord)}, 2e-6, 0));
  }
}

TEST(ForeachNorm, F64WhenAnyTensorIsF64) {
  manual_seed(2);
  const TensorList ts = make_list(30, {DType::f64, DType::f32, DType::bf16}, Device::cpu());
  for (double ord : {2.0, 1.0, kInf, 3.0}) {
    SCOPED_TRACE(ord);
    Tensor n = ops::foreach_norm(ts, ord);
    EXPECT_EQ(n.dtype(), DType::f64);
    EXPECT_TRUE(test::all_close(n, std::vector<double>{reference_norm(ts, ord)}, 1e-13, 0));
  }
}

TEST(ForeachNorm, EmptyTensorsAndNaN) {
  const TensorList empty = {zeros({0}), zeros({3, 0}, TensorOptions(DType::bf16))};
  EXPECT_EQ(ops::foreach_norm(empty).item<double>(), 0.0);
  EXPECT_EQ(ops::foreach_norm(empty, kInf).item<double>(), 0.0);
  EXPECT_EQ(ops::foreach_norm(empty, -kInf).item<double>(), kInf);
  // One NaN anywhere (after larger values, in a later chunk) makes every order NaN.
  Tensor a = ones({20000}), b = full({40000}, 3.0);
  b.narrow(0, 30000, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  for (double ord : {2.0, 1.0, kInf, 3.0}) EXPECT_TRUE(std::isnan(ops::foreach_norm({a, b, a}, ord).item<double>()));
  // Infinities: the 2-norm and the max are inf.
  Tensor c = ones({5});
  c.narrow(0, 2, 1).fill_(-kInf);
  EXPECT_EQ(ops::foreach_norm({a, c}).item<double>(), kInf);
  EXPECT_EQ(ops::foreach_norm({a, c}, kInf).item<double>(), kInf);
}

TEST(ForeachNorm, SameBitsForAnyThreadCount) {
  manual_seed(3);
  TensorList ts = make_list(30, {DType::f32, DType::bf16}, Device::cpu());
  ts.push_back(randn({300001}));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Tensor one = ops::foreach_norm(ts), one_inf = ops::foreach_norm(ts, kInf);
  omp_set_num_threads(std::max(2, saved));
  const Tensor many = ops::foreach_norm(ts), many_inf = ops::foreach_norm(ts, kInf);
  omp_set_num_threads(saved);
  EXPECT_TRUE(same_bits(one, many));
  EXPECT_TRUE(same_bits(one_inf, many_inf));
}

TEST(ForeachNorm, Errors) {
  EXPECT_TRUE(test::message_of<ValueError>([] { ops::foreach_norm({}); }).starts_with("[foreach_norm] expects at least one tensor"));
  EXPECT_TRUE(test::message_of<DTypeError>([] { ops::foreach_norm({ones({2}), ones({2}, TensorOptions(DType::i64))}); })
                  .starts_with("[foreach_norm] tensor 1 must be floating-point"));
  EXPECT_TRUE(test::message_of<ValueError>([] { ops::foreach_norm({ones({2})}, NAN); }).starts_with("[foreach_norm] ord"));
  EXPECT_TRUE(test::message_of<ValueError>([] { ops::foreach_norm({ones({2}), Tensor()}); }).starts_with("[foreach_norm]"));
}

TEST(ForeachMul, EqualsMulPerTensorBitForBit) {
  manual_seed(4);
  for (DType sdt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtype_name(sdt));
    const TensorList ts = make_list(40, {DType::f32, DType::bf16, DType::f16, DType::f64}, Device::cpu());
    TensorList expected;
    const Tensor s = scalar_tensor(0.3183098861837907, sdt);
    for (const Tensor& t : ts) expected.push_back(t.clone().mul_(s));
    std::vector<uint32_t> versions;
    for (const Tensor& t : ts) versions.push_back(t.version());
    ops::foreach_mul_(ts, s);
    for (size_t i = 0; i < ts.size(); ++i) {
      EXPECT_TRUE(same_bits(ts[i], expected[i])) << "tensor " << i << " " << dtype_name(ts[i].dtype());
      EXPECT_GT(ts[i].version(), versions[i]);
    }
  }
}

TEST(ForeachMul, Errors) {
  Tensor a = ones({3});
  EXPECT_TRUE(test::message_of<ValueError>([&] { ops::foreach_mul_({a}, ones({1})); })
                  .starts_with("[foreach_mul_] the scalar must be a 0-dim floating-point tensor"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { ops::foreach_mul_({a}, scalar_tensor(2, DType::i64)); })
                  .starts_with("[foreach_mul_] the scalar must be a 0-dim floating-point tensor"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { ops::foreach_mul_({zeros({1}).expand({4})}, scalar_tensor(2.0, DType::f32)); })
                  .starts_with("[foreach_mul_]"));
  ops::foreach_mul_({}, scalar_tensor(2.0, DType::f32));  // nothing to do
}

// ---------------------------------------------------------------- CUDA vs CPU

TEST(ForeachCuda, NormMatchesCpuOnManyMixedTensors) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(5);
  // 600 tensors: more than one launch table (256) per dtype for f32 and bf16.
  const TensorList cpu = make_list(600, {DType::f32, DType::bf16, DType::f32, DType::f16}, Device::cpu());
  TensorList dev;
  for (const Tensor& t : cpu) dev.push_back(t.cuda());
  for (double ord : {2.0, 1.0, kInf, 3.0, -kInf}) {
    SCOPED_TRACE(ord);
    Tensor n = ops::foreach_norm(dev, ord);
    EXPECT_EQ(n.device(), Device::cuda(0));
    EXPECT_EQ(n.dtype(), DType::f32);
    EXPECT_TRUE(test::all_close(n.cpu(), ops::foreach_norm(cpu, ord), 1e-5, 0));
  }
  // With an f64 tensor the result is f64 and accumulated in f64.
  TensorList cpu64 = cpu, dev64 = dev;
  cpu64.push_back(randn({1000}, TensorOptions(DType::f64)));
  dev64.push_back(cpu64.back().cuda());
  Tensor n64 = ops::foreach_norm(dev64);
  EXPECT_EQ(n64.dtype(), DType::f64);
  EXPECT_TRUE(test::all_close(n64.cpu(), ops::foreach_norm(cpu64), 1e-12, 0));
}

TEST(ForeachCuda, NormOfLargeTensors) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(6);
  // ~600 MB on the device: many blocks per tensor, a partial buffer of ~12K entries.
  const TensorList cpu = {randn({100'000'003}), randn({64'000'001}).to(DType::bf16), randn({5})};
  TensorList dev;
  for (const Tensor& t : cpu) dev.push_back(t.cuda());
  EXPECT_TRUE(test::all_close(ops::foreach_norm(dev).cpu(), ops::foreach_norm(cpu), 1e-5, 0));
  EXPECT_TRUE(test::all_close(ops::foreach_norm(dev, kInf).cpu(), ops::foreach_norm(cpu, kInf), 0, 0));
}

TEST(ForeachCuda, EmptyTensorsAndNaN) {
  EMBER_SKIP_WITHOUT_CUDA();
  const TensorList empty = {zeros({0}).cuda(), zeros({0}, TensorOptions(DType::bf16)).cuda()};
  EXPECT_EQ(ops::foreach_norm(empty).item<double>(), 0.0);
  EXPECT_EQ(ops::foreach_norm(empty, kInf).item<double>(), 0.0);
  Tensor a = ones({20000}).cuda(), b = full({40000}, 3.0).cuda();
  b.narrow(0, 30000, 1).fill_(std::numeric_limits<double>::quiet_NaN());
  for (double ord : {2.0, 1.0, kInf}) EXPECT_TRUE(std::isnan(ops::foreach_norm({a, b, empty[0], a}, ord).item<double>()));
}

TEST(ForeachCuda, NormIsBitwiseDeterministic) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(7);
  TensorList dev;
  for (const Tensor& t : make_list(300, {DType::f32, DType::bf16}, Device::cpu())) dev.push_back(t.cuda());
  dev.push_back(randn({10'000'000}).cuda());
  for (double ord : {2.0, 1.0}) {
    const Tensor a = ops::foreach_norm(dev, ord), b = ops::foreach_norm(dev, ord);
    EXPECT_TRUE(same_bits(a, b)) << "ord " << ord;
  }
}

TEST(ForeachCuda, MulMatchesCpuBitForBit) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(8);
  for (DType sdt : {DType::f32, DType::f64, DType::bf16}) {
    for (bool host_scalar : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(sdt)) + (host_scalar ? " host scalar" : " device scalar"));
      const TensorList cpu = make_list(300, {DType::f32, DType::bf16, DType::f16, DType::f64}, Device::cpu());
      TensorList dev;
      for (const Tensor& t : cpu) dev.push_back(t.cuda());
      const Tensor s = scalar_tensor(0.7071067811865476, sdt);
      ops::foreach_mul_(cpu, s);
      ops::foreach_mul_(dev, host_scalar ? s : s.cuda());
      for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(same_bits(dev[i], cpu[i])) << "tensor " << i;
    }
  }
}

TEST(ForeachCuda, NormAndMulReplayUnderGraphCapture) {
  EMBER_SKIP_WITHOUT_CUDA();
  manual_seed(9);
  TensorList dev;
  for (const Tensor& t : make_list(300, {DType::f32, DType::bf16}, Device::cpu(), false)) dev.push_back(t.cuda());
  Tensor scale = scalar_tensor(0.5, DType::f32).cuda();
  // Warm-up outside the capture (the allocator's first blocks), then capture.
  (void)ops::foreach_norm(dev);
  cuda::Graph g;
  Tensor total;
  {
    cuda::GraphCapture capture(g);
    total = ops::foreach_norm(dev);
    ops::foreach_mul_(dev, scale);
  }
  for (int replay = 0; replay < 2; ++replay) {
    // New values in the same tensors and a new scale, read by the replay on the device.
    TensorList cpu;
    for (Tensor t : dev) {
      Tensor v = randn(t.sizes(), TensorOptions(DType::f32)).to(t.dtype());
      t.copy_(v.cuda());
      cpu.push_back(v);
    }
    const double s = replay == 0 ? 0.25 : 3.0;
    scale.fill_(s);
    g.replay();
    EXPECT_TRUE(test::all_close(total.cpu(), ops::foreach_norm(cpu), 1e-5, 0));
    ops::foreach_mul_(cpu, scalar_tensor(s, DType::f32));
    for (size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(same_bits(dev[i], cpu[i])) << "tensor " << i;
  }
}
