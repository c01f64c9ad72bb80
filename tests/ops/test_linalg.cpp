// matmul and linear against an independent reference: a naive triple loop in f64 over host
// copies, with torch.matmul's promotion and batch-broadcast rules spelled out separately.
#include <string>
#include <vector>

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
  EXPECT_TRUE(test::all_close(a, av, 0, 0));
  EXPECT_TRUE(test::all_close(b, bv, 0, 0));
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

// ---- devices: the same results off the CPU (skips without a GPU or a CUDA kernel) ----

class MatmulDevice : public ::testing::TestWithParam<Device> {};

TEST_P(MatmulDevice, MatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : {DType::f32, DType::bf16}) {
    for (auto& [sa, sb] : kShapeCases) {
      SCOPED_TRACE(label(sa, sb) + " " + dtype_name(dt));
      Tensor a = rnd(sa).to(dt), b = rnd(sb).to(dt);
      Tensor out;
      try {
        out = matmul(a.to(dev), b.to(dev));
      } catch (const NotImplementedError& e) {
        GTEST_SKIP() << e.what();
      }
      Tol t = tol_for(dt, a.size(-1));
      EXPECT_TRUE(test::all_close(out.cpu(), ref_matmul(a, b), 4 * t.rtol, 4 * t.atol));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, MatmulDevice, ::testing::ValuesIn(test::test_devices()), test::device_label);
