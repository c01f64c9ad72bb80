// matmul and linear against an independent reference: a naive triple loop in f64 over host
// copies, with torch.matmul's promotion and batch-broadcast rules spelled out separately.
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/ops/matmul_config.h"
#include "support/test_support.h"

using namespace ember;

namespace {

using Dims = std::vector<int64_t>;

// torch.matmul on host values, the slow obvious way.
Tensor ref_matmul(const Tensor& a, const Tensor& b) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Dims sa = a.sizes().vec(), sb = b.sizes().vec();
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), 1);
  if (b_vec) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  const Dims ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t nb = std::max(ba.size(), bb.size());
  Dims batch(nb, 1);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t x = i + ba.size() >= nb ? ba[i + ba.size() - nb] : 1;
    const int64_t y = i + bb.size() >= nb ? bb[i + bb.size() - nb] : 1;
    batch[i] = std::max(x, y);
  }
  int64_t nbatch = 1;
  for (int64_t s : batch) nbatch *= s;
  // Flat offset of batch index `idx` in an operand with batch dims `own` (size-1 broadcasts).
  auto offset = [&](const Dims& own, const Dims& idx, int64_t mat) {
    int64_t off = 0, stride = mat;
    for (size_t i = own.size(); i-- > 0;) {
      const int64_t k = own[i] == 1 ? 0 : idx[i + nb - own.size()];
      off += k * stride;
      stride *= own[i];
    }
    return off;
  };
  std::vector<double> out(size_t(nbatch * M * N), 0.0);
  Dims idx(nb, 0);
  for (int64_t t = 0; t < nbatch; ++t) {
    int64_t rem = t;
    for (size_t i = nb; i-- > 0;) {
      idx[i] = rem % batch[i];
      rem /= batch[i];
    }
    const int64_t oa = offset(ba, idx, M * K), ob = offset(bb, idx, K * N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += av[size_t(oa + i * K + k)] * bv[size_t(ob + k * N + j)];
        out[size_t(t * M * N + i * N + j)] = s;
      }
  }
  Dims shape = batch;
  if (!a_vec) shape.push_back(M);
  if (!b_vec) shape.push_back(N);
  return tensor<double>(out, Shape(shape));
}

Tensor rnd(const Dims& shape) { return randn(Shape(shape), DType::f64); }

struct Tol {
  double rtol, atol;
};
// For an inner dim of K with N(0, 1) operands: a 16-bit result is dominated by its one
// final rounding (relative); an f32/f64 sum of K products can cancel to near zero, so its
// absolute error grows with K (a few ulps of the partial sums' size per term).
Tol tol_for(DType t, int64_t K = 1) {
  const double k = double(std::max<int64_t>(K, 1));
  switch (t) {
    case DType::f64: return {1e-12, 1e-12 + 8 * 1.1e-16 * k};
    case DType::f32: return {1e-5, 1e-5 + 8 * 6e-8 * k};
    case DType::f16: return {2e-3, 2e-3};
    case DType::bf16: return {1e-2, 1e-2};
    default: return {0, 0};
  }
}

// a, b in f64; computed in `dtype`, compared with the reference on the dtype-rounded inputs
// (so only the product's own error is measured).
::testing::AssertionResult matmul_matches(const Tensor& a, const Tensor& b, DType dtype) {
  Tensor ad = a.to(dtype), bd = b.to(dtype);
  Tensor out = matmul(ad, bd);
  if (out.dtype() != dtype) return ::testing::AssertionFailure() << "result dtype " << str(out.dtype());
  Tensor ref = ref_matmul(ad, bd);
  Tol t = tol_for(dtype, a.size(-1));
  return test::all_close(out, ref, t.rtol, t.atol);
}

const std::vector<std::pair<Dims, Dims>> kShapeCases = {
    {{7}, {7}},                      // dot
    {{4, 7}, {7}},                   // matrix x vector
    {{7}, {7, 5}},                   // vector x matrix
    {{4, 7}, {7, 5}},                // mm
    {{1, 7}, {7, 1}},
    {{3, 4, 7}, {7, 5}},             // batched x matrix (folded into one GEMM)
    {{4, 7}, {3, 7, 5}},             // matrix x batched
    {{3, 4, 7}, {3, 7, 5}},          // bmm
    {{2, 1, 4, 7}, {3, 7, 5}},       // [B,1,M,K] x [H,K,N]
    {{2, 1, 4, 7}, {1, 3, 7, 5}},    // broadcast on both sides
    {{3, 4, 7}, {7}},                // batched x vector
    {{7}, {2, 3, 7, 5}},             // vector x batched
    {{2, 3, 1, 7}, {7, 1}},
    {{67, 129}, {129, 65}},          // past Eigen's small-product path and a block edge
    {{64, 8, 9}, {64, 9, 10}},       // many small GEMMs: parallel over the batch
    {{2, 150, 170}, {2, 170, 160}},  // few large GEMMs: Eigen's threads
};

std::string label(const Dims& a, const Dims& b) { return str(Shape(a), " x ", Shape(b)); }

}  // namespace

TEST(Matmul, ShapesF64) {
  for (auto& [sa, sb] : kShapeCases) {
    SCOPED_TRACE(label(sa, sb));
    Tensor a = rnd(sa), b = rnd(sb);
    EXPECT_EQ(matmul(a, b).sizes(), ref_matmul(a, b).sizes());
    EXPECT_TRUE(matmul_matches(a, b, DType::f64));
  }
}

TEST(Matmul, AllFloatDTypes) {
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    for (auto& [sa, sb] : kShapeCases) {
      SCOPED_TRACE(label(sa, sb) + " " + dtype_name(dt));
      EXPECT_TRUE(matmul_matches(rnd(sa), rnd(sb), dt));
    }
  }
}

TEST(Matmul, IntegerDTypesAreExact) {
  for (DType dt : {DType::i32, DType::i64}) {
    Tensor a = randint(-5, 6, {3, 4, 6}, dt), b = randint(-5, 6, {6, 5}, dt);
    Tensor out = matmul(a, b);
    EXPECT_EQ(out.dtype(), dt);
    EXPECT_TRUE(test::all_close(out, ref_matmul(a, b), 0, 0));
  }
}

TEST(Matmul, ZeroSizes) {
  EXPECT_EQ(matmul(rnd({0, 3}), rnd({3, 4})).sizes(), Shape({0, 4}));
  EXPECT_EQ(matmul(rnd({2, 0, 3}), rnd({3, 4})).sizes(), Shape({2, 0, 4}));
  // K == 0: a sum of nothing is zero.
  Tensor z = matmul(rnd({2, 0}), rnd({0, 3}));
  EXPECT_TRUE(test::all_close(z, zeros({2, 3}, DType::f64), 0, 0));
  EXPECT_TRUE(test::all_close(matmul(rnd({0}), rnd({0})), zeros({}, DType::f64), 0, 0));
}

TEST(Matmul, NonContiguousOperands) {
  const Tensor a_t = rnd({7, 4}).t();                                 // column-major
  const Tensor b_t = rnd({5, 7}).t();                                 // column-major
  const Tensor a_sliced = rnd({6, 16}).slice(1, 1, 15, 2);            // [6, 7], col stride 2
  const Tensor b_rows = rnd({14, 5}).slice(0, 0, 14, 2);              // [7, 5], row stride 10
  const Tensor a_batch_perm = rnd({4, 3, 7}).permute({1, 0, 2});      // [3, 4, 7], batch not outer
  const Tensor b_batch_t = rnd({3, 5, 7}).transpose(1, 2);            // [3, 7, 5] col-major mats
  const Tensor a_expanded = rnd({1, 4, 7}).expand({3, 4, 7});         // stride-0 batch
  const Tensor b_rowbcast = rnd({1, 5}).expand({7, 5});               // stride-0 rows (packed)
  const Tensor v_strided = rnd({14}).slice(0, 0, 14, 2);              // [7], stride 2
  const Tensor c_3d = rnd({2, 4, 3, 7}).transpose(1, 2);              // [2, 3, 4, 7], not foldable
  struct Case {
    const char* name;
    Tensor a, b;
  };
  const std::vector<Case> cases = {
      {"a^T", a_t, rnd({7, 5})},
      {"b^T", rnd({4, 7}), b_t},
      {"a^T b^T", a_t, b_t},
      {"sliced cols", a_sliced, rnd({7, 5})},
      {"sliced rows", rnd({4, 7}), b_rows},
      {"permuted batch", a_batch_perm, rnd({3, 7, 5})},
      {"transposed batch", rnd({3, 4, 7}), b_batch_t},
      {"expanded batch", a_expanded, rnd({3, 7, 5})},
      {"expanded rows", rnd({4, 7}), b_rowbcast},
      {"strided vector", rnd({4, 7}), v_strided},
      {"strided dot", v_strided, v_strided},
      {"unfoldable x matrix", c_3d, rnd({7, 5})},
      {"unfoldable x matrix^T", c_3d, b_t},
  };
  for (DType dt : {DType::f64, DType::f32, DType::bf16}) {
    for (auto& c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt));
      Tol t = tol_for(dt, 7);
      // The strided operand is used as is (not converted first) for f32/f64.
      Tensor a = dt == DType::f64 ? c.a : c.a.to(dt), b = dt == DType::f64 ? c.b : c.b.to(dt);
      EXPECT_TRUE(test::all_close(matmul(a, b), ref_matmul(a, b), t.rtol, t.atol));
    }
  }
}

TEST(Matmul, InputsUnchangedAndOutputFresh) {
  Tensor a = rnd({3, 4}), b = rnd({4, 2});
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  Tensor c = matmul(a, b);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(test::all_close(a, {3, 4}, av, 0, 0));
  EXPECT_TRUE(test::all_close(b, {4, 2}, bv, 0, 0));
  EXPECT_TRUE(test::all_close(a.matmul(b), c, 0, 0));  // the method forwards to the op
}

TEST(Matmul, ShapeErrors) {
  try {
    matmul(zeros({2, 3}), zeros({4, 5}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "[matmul] shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  }
  EXPECT_THROW(matmul(zeros({3}), zeros({4})), ShapeError);
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({2})), ShapeError);
  EXPECT_THROW(matmul(zeros({}), zeros({3})), ShapeError);
  try {
    matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul] batch dims [2] and [3]"), std::string::npos) << e.what();
  }
}

TEST(Matmul, DTypeErrors) {
  try {
    matmul(zeros({2, 3}), zeros({3, 2}, DType::f64));
    FAIL() << "expected a DTypeError";
  } catch (const DTypeError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("[matmul]", 0), 0u) << m;
    EXPECT_NE(m.find("f32"), std::string::npos) << m;
    EXPECT_NE(m.find("f64"), std::string::npos) << m;
  }
  EXPECT_THROW(matmul(zeros({2, 2}, DType::b8), zeros({2, 2}, DType::b8)), DTypeError);
  EXPECT_THROW(matmul(Tensor(), zeros({2})), ValueError);
}

// ---- linear ----

namespace {
Tensor ref_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> wv = w.to_vector<double>();
  const int64_t out = w.size(0), in = w.size(1);
  std::vector<double> wt(size_t(in * out));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) wt[size_t(i * out + o)] = wv[size_t(o * in + i)];
  Tensor y = ref_matmul(x, tensor<double>(wt, {in, out}));
  if (!b.defined()) return y;
  std::vector<double> yv = y.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t i = 0; i < yv.size(); ++i) yv[i] += bv[i % size_t(out)];
  return tensor<double>(yv, y.sizes());
}
}  // namespace

TEST(Linear, MatchesReference) {
  const Tensor w = rnd({5, 7}), b = rnd({5});
  const std::vector<Tensor> xs = {rnd({7}), rnd({3, 7}), rnd({2, 3, 7}), rnd({3, 2, 7}).transpose(0, 1),
                                  rnd({7, 3}).t(), rnd({0, 7})};
  for (DType dt : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    Tol t = tol_for(dt, 7);
    for (const Tensor& x0 : xs) {
      SCOPED_TRACE(str(x0.sizes(), " ", dt));
      Tensor x = x0.to(dt), wd = w.to(dt), bd = b.to(dt);
      EXPECT_TRUE(test::all_close(linear(x, wd, bd), ref_linear(x, wd, bd), t.rtol, t.atol));
      EXPECT_TRUE(test::all_close(linear(x, wd), ref_linear(x, wd, Tensor()), t.rtol, t.atol));
    }
  }
  // A transposed (column-major) weight is read in place.
  Tensor wt = rnd({7, 5}).t();
  Tensor x = rnd({4, 7});
  EXPECT_TRUE(test::all_close(linear(x, wt, b), ref_linear(x, wt, b), 1e-12, 1e-12));
}

TEST(Linear, Errors) {
  try {
    linear(zeros({2, 3}), zeros({4, 5}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[linear] input of shape [2, 3] does not match weight of shape [4, 5]", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(linear(zeros({2, 3}), zeros({3})), ShapeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({3})), ShapeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}, DType::f64)), DTypeError);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({4}, DType::f64)), DTypeError);
}

// ---- every device against the f64 reference (CUDA cases skip without a GPU) ----

class MatmulDevice : public ::testing::TestWithParam<Device> {};

TEST_P(MatmulDevice, MatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);  // the f32 tolerance below is exact f32's
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto& [sa, sb] : kShapeCases) {
      SCOPED_TRACE(label(sa, sb) + " " + dtype_name(dt));
      Tensor a = rnd(sa).to(dt), b = rnd(sb).to(dt);
      Tensor out = matmul(a.to(dev), b.to(dev));
      EXPECT_EQ(out.device(), dev);
      Tol t = tol_for(dt, a.size(-1));
      EXPECT_TRUE(test::all_close(out.cpu(), ref_matmul(a, b), 4 * t.rtol, 4 * t.atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatmulDevice, ::testing::ValuesIn(test::test_devices()), test::device_label);

// ---- CUDA (cuBLASLt) against the f64 reference, every dtype and layout ----
//
// Tolerances on top of tol_for (which covers the final rounding of each dtype):
// - f32 with TF32 on: each input is rounded to a 10-bit mantissa (relative error <= 2^-11),
//   so a product is off by ~1e-3 relative and a sum of K of them by ~5e-4 * sqrt(K) in
//   absolute terms (N(0, 1) inputs): rtol 1e-2, atol 5e-3 * sqrt(K) (about 10 sigma).
// - f32 with TF32 off and f64: exact arithmetic, only the summation order differs: 4x tol_for.
// - f16 / bf16 (f32 accumulation, one final rounding): 2x tol_for, i.e. rtol = atol = 4e-3
//   for f16 and 2e-2 for bf16.

namespace {

Tol device_tol(DType dt, int64_t K, bool tf32) {
  const Tol t = tol_for(dt, K);
  if (dt == DType::f32 && tf32) return {1e-2, 5e-3 * std::sqrt(double(std::max<int64_t>(K, 1)))};
  if (dt == DType::f16 || dt == DType::bf16) return {2 * t.rtol, 2 * t.atol};
  return {4 * t.rtol, 4 * t.atol};
}

// An operand built on the device the same way as on the CPU: a fresh base tensor, moved,
// then viewed (so views stay views on the device instead of being copied contiguous).
struct ViewCase {
  const char* name;
  Dims a_base;
  std::function<Tensor(const Tensor&)> a_view;
  Dims b_base;
  std::function<Tensor(const Tensor&)> b_view;
};

Tensor same(const Tensor& t) { return t; }

const std::vector<ViewCase>& view_cases() {
  static const std::vector<ViewCase> cases = {
      {"a^T", {70, 40}, [](const Tensor& t) { return t.t(); }, {70, 50}, same},
      {"b^T", {40, 70}, same, {50, 70}, [](const Tensor& t) { return t.t(); }},
      {"a^T b^T", {70, 40}, [](const Tensor& t) { return t.t(); }, {50, 70}, [](const Tensor& t) { return t.t(); }},
      {"sliced cols (ld 2)", {6, 16}, [](const Tensor& t) { return t.slice(1, 1, 15, 2); }, {7, 5}, same},
      {"sliced rows (ld 10)", {4, 7}, same, {14, 5}, [](const Tensor& t) { return t.slice(0, 0, 14, 2); }},
      {"column block (offset view)", {33, 20}, [](const Tensor& t) { return t.slice(1, 3, 20, 1); }, {17, 9}, same},
      {"permuted batch (loop)", {4, 3, 9, 7}, [](const Tensor& t) { return t.permute({1, 0, 2, 3}); },
       {3, 4, 7, 5}, same},
      {"transposed batch", {3, 4, 7}, same, {3, 5, 7}, [](const Tensor& t) { return t.transpose(1, 2); }},
      {"expanded batch", {1, 4, 7}, [](const Tensor& t) { return t.expand({3, 4, 7}); }, {3, 7, 5}, same},
      {"expanded rows (packed)", {4, 7}, same, {1, 5}, [](const Tensor& t) { return t.expand({7, 5}); }},
      {"strided vector", {4, 7}, same, {14}, [](const Tensor& t) { return t.slice(0, 0, 14, 2); }},
      {"unfoldable x matrix", {2, 4, 3, 7}, [](const Tensor& t) { return t.transpose(1, 2); }, {7, 5}, same},
  };
  return cases;
}

// Shapes beyond kShapeCases: large enough for tensor-core tiles, tall/skinny, odd sizes
// (unaligned leading dims for 16-bit types), batched with broadcast on both sides.
const std::vector<std::pair<Dims, Dims>> kDeviceShapeCases = {
    {{128, 256}, {256, 64}},          // aligned square-ish
    {{1000, 16}, {16, 8}},            // tall and skinny
    {{3, 300}, {300, 2}},             // wide inner dim, tiny output
    {{1, 513}, {513, 1}},             // dot as a GEMM
    {{37, 41}, {41, 43}},             // odd leading dims
    {{5, 1, 33, 17}, {1, 6, 17, 19}}, // broadcast batch on both sides
    {{8, 64, 32}, {32, 48}},          // batched x matrix (folded)
    {{64, 32}, {8, 32, 48}},          // matrix x batched (stride-0 a)
};

class MatmulCuda : public ::testing::TestWithParam<Device> {};

}  // namespace

// Every dtype, shape and layout on `dev` against the f64 reference computed from the same
// (dtype-rounded) inputs; on the CPU this runs the same body as a control.
TEST_P(MatmulCuda, DTypesShapesAgainstReference) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  std::vector<std::pair<Dims, Dims>> shapes = kShapeCases;
  shapes.insert(shapes.end(), kDeviceShapeCases.begin(), kDeviceShapeCases.end());
  struct Mode {
    DType dt;
    bool tf32;
  };
  for (Mode m : {Mode{DType::f32, false}, Mode{DType::f32, true}, Mode{DType::f64, false}, Mode{DType::f16, false},
                 Mode{DType::bf16, false}}) {
    cuda::AllowTF32Guard tf32(m.tf32);
    for (auto& [sa, sb] : shapes) {
      SCOPED_TRACE(label(sa, sb) + " " + dtype_name(m.dt) + (m.tf32 ? " tf32" : ""));
      Tensor a = rnd(sa).to(m.dt), b = rnd(sb).to(m.dt);
      Tensor out = matmul(a.to(dev), b.to(dev));
      ASSERT_TRUE(out.device() == dev);
      ASSERT_TRUE(out.dtype() == m.dt);
      const Tol t = dev.is_cuda() ? device_tol(m.dt, a.size(-1), m.tf32) : tol_for(m.dt, a.size(-1));
      EXPECT_TRUE(test::all_close(out.cpu(), ref_matmul(a, b), t.rtol, t.atol));
    }
  }
}

TEST_P(MatmulCuda, ViewsAreReadInPlace) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const ViewCase& c : view_cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt));
      Tensor a_base = rnd(c.a_base).to(dt), b_base = rnd(c.b_base).to(dt);
      Tensor a = c.a_view(a_base), b = c.b_view(b_base);
      Tensor out = matmul(c.a_view(a_base.to(dev)), c.b_view(b_base.to(dev)));
      const Tol t = dev.is_cuda() ? device_tol(dt, a.size(-1), false) : tol_for(dt, a.size(-1));
      EXPECT_TRUE(test::all_close(out.cpu(), ref_matmul(a, b), t.rtol, t.atol));
      // The CUDA result equals the CPU's within the same tolerance.
      EXPECT_TRUE(test::all_close(out.cpu(), matmul(a, b), t.rtol, t.atol));
    }
  }
}

TEST_P(MatmulCuda, ZeroSizesAndEmptyInnerDim) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : {DType::f32, DType::bf16}) {
    EXPECT_EQ(matmul(rnd({0, 3}).to(dt).to(dev), rnd({3, 4}).to(dt).to(dev)).sizes(), Shape({0, 4}));
    Tensor z = matmul(rnd({2, 0}).to(dt).to(dev), rnd({0, 3}).to(dt).to(dev));  // K == 0: zeros
    EXPECT_TRUE(test::all_close(z.cpu(), zeros({2, 3}, dt), 0, 0));
    // linear with K == 0 is the broadcast bias.
    Tensor bias = rnd({3}).to(dt);
    Tensor y = linear(rnd({2, 0}).to(dt).to(dev), rnd({3, 0}).to(dt).to(dev), bias.to(dev));
    EXPECT_TRUE(test::all_close(y.cpu(), bias.expand({2, 3}), 0, 0));
  }
}

TEST(MatmulCudaOnly, IntegerDTypesSayNotImplementedOnCuda) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  Tensor a = randint(-5, 6, {3, 4}, DType::i32).to(dev), b = randint(-5, 6, {4, 2}, DType::i32).to(dev);
  EXPECT_NE(test::message_of<NotImplementedError>([&] { matmul(a, b); }).find("[matmul]"), std::string::npos);
}

// linear's forward (bias through the cuBLASLt epilogue on CUDA) against the reference.
TEST_P(MatmulCuda, LinearWithBiasEpilogue) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  struct XCase {
    const char* name;
    Dims base;
    std::function<Tensor(const Tensor&)> view;
  };
  const std::vector<XCase> xs = {
      {"1-D", {37}, same},
      {"2-D", {64, 37}, same},
      {"3-D (folded)", {4, 16, 37}, same},
      {"3-D transposed (copied)", {16, 4, 37}, [](const Tensor& t) { return t.transpose(0, 1); }},
      {"x^T", {37, 9}, [](const Tensor& t) { return t.t(); }},
  };
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    const Tol t = dev.is_cuda() ? device_tol(dt, 37, false) : tol_for(dt, 37);
    Tensor w = rnd({29, 37}).to(dt), b = rnd({29}).to(dt);
    Tensor b_strided_base = rnd({58}).to(dt);  // a stride-2 bias (copied before the epilogue)
    Tensor b_strided = b_strided_base.slice(0, 0, 58, 2);
    Tensor w_t_base = rnd({37, 29}).to(dt);    // a column-major weight, read in place
    for (const XCase& c : xs) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dt));
      Tensor x_base = rnd(c.base).to(dt);
      Tensor x = c.view(x_base), xd = c.view(x_base.to(dev));
      EXPECT_TRUE(test::all_close(linear(xd, w.to(dev), b.to(dev)).cpu(), ref_linear(x, w, b), t.rtol, t.atol));
      EXPECT_TRUE(test::all_close(linear(xd, w.to(dev)).cpu(), ref_linear(x, w, Tensor()), t.rtol, t.atol));
      EXPECT_TRUE(test::all_close(linear(xd, w.to(dev), b_strided_base.to(dev).slice(0, 0, 58, 2)).cpu(),
                                  ref_linear(x, w, b_strided), t.rtol, t.atol));
      EXPECT_TRUE(test::all_close(linear(xd, w_t_base.to(dev).t(), b.to(dev)).cpu(), ref_linear(x, w_t_base.t(), b),
                                  t.rtol, t.atol));
    }
  }
}

// The TF32 switch: a process-wide flag with a scoped guard; on CUDA it changes f32 results
// (TF32 rounds the inputs), on the CPU it changes nothing.
TEST_P(MatmulCuda, AllowTF32Switch) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  const bool initial = cuda::allow_tf32();
  {
    cuda::AllowTF32Guard off(false);
    EXPECT_FALSE(cuda::allow_tf32());
    {
      cuda::AllowTF32Guard on(true);
      EXPECT_TRUE(cuda::allow_tf32());
    }
    EXPECT_FALSE(cuda::allow_tf32());
  }
  EXPECT_EQ(cuda::allow_tf32(), initial);

  // Inputs with full 24-bit mantissas, so TF32's rounding shows in every product.
  const int64_t n = 512;
  Tensor a = rnd({n, n}).to(DType::f32), b = rnd({n, n}).to(DType::f32);
  const Tensor ref = ref_matmul(a, b);
  Tensor exact, fast;
  {
    cuda::AllowTF32Guard g(false);
    exact = matmul(a.to(dev), b.to(dev)).cpu();
  }
  {
    cuda::AllowTF32Guard g(true);
    fast = matmul(a.to(dev), b.to(dev)).cpu();
  }
  const Tol t_exact = dev.is_cuda() ? device_tol(DType::f32, n, false) : tol_for(DType::f32, n);
  EXPECT_TRUE(test::all_close(exact, ref, t_exact.rtol, t_exact.atol));
  const Tol t_fast = device_tol(DType::f32, n, true);
  EXPECT_TRUE(test::all_close(fast, ref, t_fast.rtol, t_fast.atol));
  const std::vector<double> ev = exact.to_vector<double>(), fv = fast.to_vector<double>(),
                            rv = ref.to_vector<double>();
  double err_exact = 0, err_fast = 0;
  for (size_t i = 0; i < rv.size(); ++i) {
    err_exact = std::max(err_exact, std::abs(ev[i] - rv[i]));
    err_fast = std::max(err_fast, std::abs(fv[i] - rv[i]));
  }
  if (dev.is_cuda()) {
    // TF32's error is ~2^13 times f32's per product: far more than summation order alone.
    EXPECT_GT(err_fast, 8 * err_exact) << "TF32 on gave exact-f32 accuracy: is the switch ignored?";
  } else {
    EXPECT_EQ(ev, fv) << "the TF32 switch must not change CPU results";
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatmulCuda, ::testing::ValuesIn(test::test_devices()), test::device_label);
