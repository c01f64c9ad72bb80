// LibTorch-style indexing, masks, einsum and the small tensor ops against PyTorch
// (tests/fixtures/indexing_reference.txt from make_indexing_fixtures.py) and against explicit
// loops; operators and conversions; from_blob's ownership; errors naming the op; CUDA bodies
// compared with the CPU (they skip without a GPU).
#include <cmath>
#include <cstdlib>

#include "support/test_support.h"

using namespace ember;
using namespace ember::indexing;
using test::all_close;
using test::load_fixture;

namespace {

const char* kRef = "indexing_reference.txt";
Tensor fx(const std::string& name, DType dt = DType::f64) { return load_fixture(kRef, name).tensor(dt); }
Tensor ilist(std::vector<int64_t> v) { return tensor<int64_t>(v); }

// x[i, j] of a 2-D tensor by explicit loops over index vectors (an independent reference).
std::vector<double> gather2d(const Tensor& x, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
  std::vector<double> out;
  for (size_t k = 0; k < rows.size(); ++k) out.push_back(x.select(0, rows[k]).select(0, cols[k]).item<double>());
  return out;
}

}  // namespace

// ---- PyTorch placement cases ----

TEST(Indexing, AdvancedPlacementMatchesPyTorch) {
  Tensor x = fx("x");
  Tensor i01 = fx("i01", DType::i64), i13 = fx("i13", DType::i64), i02 = fx("i02", DType::i64),
         i12 = fx("i12", DType::i64);
  Tensor mask23 = fx("mask23", DType::b8), mask34 = fx("mask34", DType::b8);
  Tensor col = fx("col", DType::i64), row = fx("row", DType::i64);
  Tensor mask2 = tensor<int64_t>({1, 0}).to(DType::b8);
  struct Case {
    const char* name;
    Tensor got;
  };
  const Case cases[] = {
      {"adjacent", x.index({Slice(), i02, i13})},
      {"separated", x.index({i01, Slice(), i13})},
      {"separated_by_none", x.index({i01, None, i02})},
      {"int_then_tensor", x.index({0, Slice(), i12})},
      {"int_between", x.index({Slice(), i01, 1, i13})},
      {"mask_leading", x.index({mask23})},
      {"mask_middle", x.index({Slice(), mask34})},
      {"mask_and_tensor", x.index({mask2, Slice(), i13})},
      {"broadcast", x.index({col, Slice(), row})},
      {"negative", x.index({Ellipsis, ilist({-1, 0})})},
      {"ellipsis_none_int", x.index({Ellipsis, None, 1})},
      {"slice_step_none_tensor", x.index({Slice(), Slice(1, None, 2), None, ilist({0, 3})})},
      {"true", x.index({true})},
      {"neg_slice", x.index({-1, Slice(-2, None), Slice(None, None, 3)})},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(all_close(c.got, fx(std::string("index.") + c.name), 0, 0));
  }
  EXPECT_EQ(x.index({false}).sizes(), Shape({0, 2, 3, 4, 5}));
}

TEST(Indexing, NonContiguousAndI32Indices) {
  Tensor base = randn({5, 4}, DType::f64);
  Tensor xt = base.t();  // [4, 5], strides (1, 4)
  Tensor rows = tensor<int32_t>({3, 0, 3}), cols = tensor<int32_t>({1, 4, -1});
  Tensor got = xt.index({rows, cols});
  EXPECT_TRUE(all_close(got, {3}, gather2d(xt, {3, 0, 3}, {1, 4, 4}), 0, 0));
  EXPECT_TRUE(all_close(xt.contiguous().index({rows, cols}), got, 0, 0));
  // An expanded (stride-0) source.
  Tensor e = tensor<double>({1, 2, 3}).unsqueeze(0).expand({4, 3});
  EXPECT_TRUE(all_close(e.index({ilist({0, 3}), ilist({2, 0})}), {2}, {3, 1}, 0, 0));
}

TEST(Indexing, BasicIndicesAreViews) {
  Tensor x = arange(24, DType::f64).view({2, 3, 4});
  Tensor v = x.index({1, Slice(0, None, 2), None, Ellipsis});
  EXPECT_EQ(v.sizes(), Shape({2, 1, 4}));
  EXPECT_EQ(v.storage(), x.storage());
  v.fill_(-1);
  EXPECT_EQ(x.index({1, 2, 3}).item<double>(), -1);
  EXPECT_EQ(x.index({1, 1, 3}).item<double>(), 19);
  // x[i] is select(0, i); x[t] indexes dim 0.
  EXPECT_TRUE(all_close(x[0][1], {4}, {4, 5, 6, 7}, 0, 0));
  EXPECT_EQ(x[ilist({1, 0, 1})].sizes(), Shape({3, 3, 4}));
  EXPECT_TRUE(all_close(x[{0, 1}], x[0][1], 0, 0));
  // A 0-d integer tensor selects, a 0-d bool adds a dim.
  EXPECT_EQ(x.index({scalar_tensor(1, DType::i64)}).sizes(), Shape({3, 4}));
  EXPECT_EQ(x.index({scalar_tensor(true, DType::b8)}).sizes(), Shape({1, 2, 3, 4}));
}

TEST(Indexing, IndexPutMatchesPyTorch) {
  Tensor y = zeros({5, 3}, DType::f64);
  y.index_put_({fx("put.idx", DType::i64)}, fx("put.vals"), true);
  EXPECT_TRUE(all_close(y, fx("put.accumulate"), 1e-15, 0));
  Tensor z = zeros({2, 3, 4}, DType::f64);
  z.index_put_({fx("i01", DType::i64), Slice(), fx("i13", DType::i64)}, fx("put.v23"));
  EXPECT_TRUE(all_close(z, fx("put.separated"), 0, 0));
  Tensor w = fx("put.mask_before").clone();
  w.index_put_({fx("mask23", DType::b8)}, 7.0);
  EXPECT_TRUE(all_close(w, fx("put.mask_after"), 0, 0));
}

TEST(Indexing, IndexPutBasicScalarAndSelfOverlap) {
  Tensor x = zeros({3, 4}, DType::f32);
  x.index_put_({Slice(), Slice(1, 3)}, 2.5);
  x.index_put_({Slice(), 0}, tensor<float>({1, 2, 3}));
  x.index_put_({Slice(), 3}, tensor<float>({1, 1, 1}), true);
  EXPECT_TRUE(all_close(x, {3, 4}, {1, 2.5, 2.5, 1, 2, 2.5, 2.5, 1, 3, 2.5, 2.5, 1}, 0, 0));
  // x[[0, 1]] = x[[1, 0]] swaps rows: the values are read before any is written.
  Tensor s = arange(6, DType::f64).view({2, 3});
  s.index_put_({ilist({1, 0})}, s);
  EXPECT_TRUE(all_close(s, {2, 3}, {3, 4, 5, 0, 1, 2}, 0, 0));
  // Accumulate with repeated indices on a non-contiguous target, values broadcast.
  Tensor t = zeros({4, 3}, DType::f64).t();  // [3, 4]
  t.index_put_({Slice(), ilist({2, 0, 2})}, tensor<double>({1, 10, 100}), true);
  EXPECT_TRUE(all_close(t, {3, 4}, {10, 0, 101, 0, 10, 0, 101, 0, 10, 0, 101, 0}, 0, 0));
  // i32 accumulate (index_add's integer path).
  Tensor c = zeros({3}, DType::i32);
  c.index_put_({ilist({1, 1, 2, 1})}, ones({}, DType::i32), true);
  EXPECT_EQ(c.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 1}));
}

TEST(Indexing, IndexPutBumpsVersion) {
  Tensor x = zeros({3}, DType::f64);
  const uint32_t v0 = x.version();
  x.index_put_({ilist({1})}, 1.0);
  EXPECT_GT(x.version(), v0);
}

// ---- nonzero, masks ----

TEST(Indexing, NonzeroAndMaskedSelect) {
  Tensor x = tensor<float>({0, 1.5f, 0, -2, 0, 0, std::nanf(""), -0.0f}, {2, 4});
  Tensor nz = nonzero(x);
  EXPECT_EQ(nz.dtype(), DType::i64);
  EXPECT_EQ(nz.sizes(), Shape({3, 2}));
  EXPECT_EQ(nz.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 3, 1, 2}));  // NaN counts, -0 does not
  EXPECT_EQ(nonzero(x.t()).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 2, 1, 3, 0}));
  EXPECT_EQ(nonzero(zeros({0, 3})).sizes(), Shape({0, 2}));
  EXPECT_EQ(nonzero(scalar_tensor(2.0)).sizes(), Shape({1, 0}));
  Tensor ms = fx("ops.ms"), mm = fx("ops.mm", DType::b8);
  EXPECT_TRUE(all_close(masked_select(ms, mm), fx("ops.masked_select"), 0, 0));
  EXPECT_TRUE(all_close(ms.masked_select(ms > 0), ms.index({ms > 0}), 0, 0));
}

// ---- einsum ----

TEST(Indexing, EinsumMatchesPyTorch) {
  auto in = [](const char* n) { return fx(std::string("einsum.in.") + n); };
  Tensor a = in("a"), b = in("b"), m = in("m"), n = in("n"), u = in("u"), v = in("v");
  const double tol = 1e-12;
  EXPECT_TRUE(all_close(einsum("bij,bjk->bik", {a, b}), fx("einsum.bij_bjk"), tol, tol));
  EXPECT_TRUE(all_close(einsum("ij,jk", {m, n}), fx("einsum.ij_jk_implicit"), tol, tol));
  EXPECT_TRUE(all_close(einsum("i,j->ij", {u, v}), fx("einsum.outer"), tol, tol));
  EXPECT_TRUE(all_close(einsum("...ij,...jk->...ik", {in("e1"), in("e2")}), fx("einsum.ellipsis"), tol, tol));
  EXPECT_TRUE(all_close(einsum("ij->", {m}), fx("einsum.sum_all"), tol, tol));
  EXPECT_TRUE(all_close(einsum("bhqd,bhkd->bhqk", {in("q"), in("k")}), fx("einsum.attention"), tol, tol));
  EXPECT_TRUE(all_close(einsum("ba", {m}), fx("einsum.transpose_implicit"), 0, 0));
  EXPECT_TRUE(all_close(einsum("i, ij, jk -> k", {u, m, n}), fx("einsum.three"), tol, tol));
  EXPECT_TRUE(all_close(einsum("bij,bij->b", {a, a}), fx("einsum.batch_diag_free"), tol, tol));
  // A subscript repeated within an operand: diagonals and traces.
  Tensor sq = in("sq");
  EXPECT_TRUE(all_close(einsum("ii->i", {sq}), fx("einsum.diag"), 0, 0));
  EXPECT_TRUE(all_close(einsum("ii->", {sq}), fx("einsum.trace"), tol, tol));
  EXPECT_TRUE(all_close(einsum("ii", {sq}), fx("einsum.trace_implicit"), tol, tol));
  EXPECT_TRUE(all_close(einsum("bii->bi", {in("bsq")}), fx("einsum.batch_diag"), 0, 0));
  EXPECT_TRUE(all_close(einsum("ii,i->i", {sq, in("w4")}), fx("einsum.diag_times"), tol, tol));
  EXPECT_TRUE(all_close(einsum("iii->i", {in("cube")}), fx("einsum.cube_diag"), 0, 0));
  EXPECT_TRUE(all_close(einsum("iij->j", {in("iij")}), fx("einsum.iij"), tol, tol));
  EXPECT_TRUE(all_close(einsum("ij,jj->i", {sq, sq}), fx("einsum.ji_ii"), tol, tol));
  EXPECT_NE(test::message_of<ShapeError>([&] { einsum("ii->i", {m}); }).find("sizes 4 and 5: a diagonal needs them equal"),
            std::string::npos);
  // torch.diagonal: a view (writes reach the base), the diagonal last.
  Tensor x = fx("diagonal.x");
  EXPECT_TRUE(all_close(diagonal(x, 1, 0, 2), fx("diagonal.o1_d0_d2"), 0, 0));
  EXPECT_TRUE(all_close(x.diagonal(-1, 2, 0), fx("diagonal.om1_d2_d0"), 0, 0));
  EXPECT_EQ(diagonal(x, 9).sizes(), Shape({5, 0}));
  Tensor base = zeros({3, 3});
  base.diagonal().fill_(1);
  EXPECT_TRUE(all_close(base, eye(3), 0, 0));
  EXPECT_THROW(diagonal(x, 0, 1, -2), ValueError);
  EXPECT_THROW(diagonal(zeros({3}), 0), ShapeError);
}

// ---- small tensor ops ----

TEST(Indexing, RepeatTileOneHotDiagMeshgrid) {
  Tensor r = fx("ops.r");
  EXPECT_TRUE(all_close(r.repeat({2, 1, 2}), fx("ops.repeat"), 0, 0));
  EXPECT_TRUE(all_close(r.tile({2}), fx("ops.tile"), 0, 0));
  EXPECT_TRUE(all_close(r.tile({2, 1, 3}), fx("ops.tile3"), 0, 0));
  Tensor oh = one_hot(ilist({0, 3, 1}), 5);
  EXPECT_EQ(oh.dtype(), DType::i64);
  EXPECT_TRUE(all_close(oh, fx("ops.one_hot", DType::i64), 0, 0));
  EXPECT_TRUE(all_close(one_hot(ilist({1, 0, 2, 1}).view({2, 2})), fx("ops.one_hot_infer", DType::i64), 0, 0));
  Tensor dv = fx("ops.dv"), ms = fx("ops.ms");
  EXPECT_TRUE(all_close(diag(dv, 1), fx("ops.diag_up"), 0, 0));
  EXPECT_TRUE(all_close(diag(dv, -2), fx("ops.diag_down"), 0, 0));
  EXPECT_TRUE(all_close(ms.diag(-1), fx("ops.diag_of"), 0, 0));
  EXPECT_TRUE(all_close(ms.diag(2), fx("ops.diag_of2"), 0, 0));
  EXPECT_EQ(ms.diag(7).sizes(), Shape({0}));
  Tensor d = ms.diag();  // a copy, as in PyTorch
  d.fill_(0);
  EXPECT_NE(ms.index({0, 0}).item<double>(), 0);
  TensorList g = meshgrid({ilist({1, 2, 3}), ilist({4, 5})}, "xy");
  EXPECT_TRUE(all_close(g[0], fx("ops.meshgrid_xy0", DType::i64), 0, 0));
  EXPECT_TRUE(all_close(g[1], fx("ops.meshgrid_xy1", DType::i64), 0, 0));
  TensorList ij = meshgrid({ilist({1, 2, 3}), ilist({4, 5})});
  EXPECT_EQ(ij[0].sizes(), Shape({3, 2}));
  EXPECT_TRUE(all_close(ij[1], {3, 2}, {4, 5, 4, 5, 4, 5}, 0, 0));
  TensorList parts = r.unbind(1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(all_close(parts[2], r.select(1, 2), 0, 0));
  EXPECT_TRUE(all_close(eye(2, 3, DType::i32), {2, 3}, {1, 0, 0, 0, 1, 0}, 0, 0));
  EXPECT_EQ(eye(3).dtype(), DType::f32);
  EXPECT_TRUE(all_close(outer(tensor<double>({1, 2}), tensor<double>({3, 4, 5})), {2, 3}, {3, 4, 5, 6, 8, 10}, 0, 0));
  Tensor a = randn({3, 2, 4}, DType::f64), b = randn({3, 4, 5}, DType::f64);
  EXPECT_TRUE(all_close(bmm(a, b), matmul(a, b), 0, 0));
}

// ---- operators and conversions ----

// Python's `q, k, v = x.chunk(3, -1)`: structured bindings over a count known when compiling.
TEST(Indexing, StructuredBindingsOverChunkSplitUnbind) {
  const Tensor x = arange(24).to(DType::f64).reshape({2, 12});
  auto [q, k, v] = x.chunk<3>(-1);
  EXPECT_TRUE(all_close(k, x.narrow(1, 4, 4), 0, 0));
  EXPECT_TRUE(all_close(v, x.narrow(1, 8, 4), 0, 0));
  auto [r0, r1] = x.unbind<2>(0);
  EXPECT_TRUE(all_close(r1, x.select(0, 1), 0, 0));
  auto [a, b] = x.split<2>({5, 7}, 1);
  EXPECT_TRUE(all_close(b, x.narrow(1, 5, 7), 0, 0));
  auto [c, d, e] = x.split<3>(5, 1);  // 5, 5, 2
  EXPECT_TRUE(all_close(e, x.narrow(1, 10, 2), 0, 0));
  // PyTorch's chunk gives 2 pieces for 4 rows in 3 chunks: an error, not an undefined third.
  EXPECT_EQ(test::message_of<ShapeError>([] { zeros({4}).chunk<3>(); }),
            "[chunk] gives 2 tensors here, not the 3 being unpacked");
  EXPECT_THROW(x.unbind<3>(0), ShapeError);
  EXPECT_THROW(x.split<2>(5, 1), ShapeError);
}

TEST(Indexing, ComparisonLogicAndBitwiseOperators) {
  Tensor a = tensor<double>({-1, 0, 2, 3}), b = tensor<double>({-1, 1, 2, 0});
  EXPECT_EQ((a > 0).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ((a == b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ((a != b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ((a <= b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 0}));
  EXPECT_EQ((a >= 2).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ((0 < a).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ((2 == a).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 0}));
  Tensor p = a > 0, q = b > 0;
  EXPECT_EQ((p & q).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ((p | q).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ((p ^ q).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ((~p).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ((p & ~q).dtype(), DType::b8);
  EXPECT_EQ(logical_and(a, b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1, 0}));
  EXPECT_EQ(logical_or(a, b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(logical_xor(a, b).to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 1}));
  EXPECT_EQ(a.logical_not().to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 0}));
  Tensor i = tensor<int64_t>({12, -1, 5}), j = tensor<int64_t>({10, 6, 3});
  EXPECT_EQ((i & j).to_vector<int64_t>(), (std::vector<int64_t>{8, 6, 1}));
  EXPECT_EQ((i | j).to_vector<int64_t>(), (std::vector<int64_t>{14, -1, 7}));
  EXPECT_EQ((i ^ j).to_vector<int64_t>(), (std::vector<int64_t>{6, -7, 6}));
  EXPECT_EQ((~i).to_vector<int64_t>(), (std::vector<int64_t>{-13, 0, -6}));
  EXPECT_EQ((~tensor<uint8_t>({0, 5})).to_vector<uint8_t>(), (std::vector<uint8_t>{255, 250}));
  EXPECT_EQ((tensor<int32_t>({6}) & tensor<int32_t>({3})).dtype(), DType::i32);
  EXPECT_TRUE(test::message_of<DTypeError>([&] { (void)(a & b); }).starts_with("[bitwise_and]"));
  EXPECT_TRUE(test::message_of<DTypeError>([&] { (void)(~a); }).starts_with("[bitwise_not]"));
  // Handle identity stays is_same.
  Tensor alias = a;
  EXPECT_TRUE(alias.is_same(a));
}

TEST(Indexing, IntDimReductionsAndConversions) {
  Tensor x = arange(6, DType::f64).view({2, 3});
  EXPECT_TRUE(all_close(x.sum(1), x.sum({1}), 0, 0));
  EXPECT_TRUE(all_close(x.sum(1), {2}, {3, 12}, 0, 0));
  EXPECT_EQ(x.sum({}).dim(), 0);  // still all dims
  EXPECT_EQ(x.sum(0, true).sizes(), Shape({1, 3}));
  EXPECT_TRUE(all_close(x.mean(-1), {2}, {1, 4}, 0, 0));
  EXPECT_TRUE(all_close(x.var(1), x.var({1}), 0, 0));
  EXPECT_TRUE(all_close(x.std(0, 0), x.std({0}, 0), 0, 0));
  EXPECT_EQ(x.to_float().dtype(), DType::f32);
  EXPECT_EQ(x.to_double().dtype(), DType::f64);
  EXPECT_EQ(x.to_long().dtype(), DType::i64);
  EXPECT_EQ(x.to_int().dtype(), DType::i32);
  EXPECT_EQ(x.half().dtype(), DType::f16);
  EXPECT_EQ(x.bfloat16().dtype(), DType::bf16);
  EXPECT_EQ(x.to_bool().to(DType::i64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 1, 1, 1, 1}));
}

// ---- from_blob ----

TEST(Indexing, FromBlobIsZeroCopyAndDeletesOnce) {
  int deletes = 0;
  std::vector<float> data = {1, 2, 3, 4, 5, 6};
  {
    Tensor view;
    {
      Tensor t = from_blob(data.data(), {2, 3}, [&](void* p) {
        EXPECT_EQ(p, data.data());
        ++deletes;
      });
      EXPECT_EQ(t.dtype(), DType::f32);
      EXPECT_EQ(t.data_ptr(), data.data());
      t.mul_(2.0f);  // writes the user's memory
      EXPECT_EQ(data[5], 12.0f);
      view = t.select(1, 2);
    }
    EXPECT_EQ(deletes, 0);  // a view keeps the memory alive
    EXPECT_TRUE(all_close(view, {2}, {6, 12}, 0, 0));
  }
  EXPECT_EQ(deletes, 1);
  // Strides: a column-major view of the same memory, no deleter.
  Tensor cm = from_blob(data.data(), {3, 2}, Shape{1, 3}, DType::f32);
  EXPECT_TRUE(all_close(cm, {3, 2}, {2, 8, 4, 10, 6, 12}, 0, 0));
  std::vector<double> d = {1, 2};
  EXPECT_TRUE(from_blob(d.data(), {2}, TensorOptions(DType::f64).requires_grad()).requires_grad());
}

// ---- errors ----

TEST(Indexing, ErrorsNameTheOp) {
  Tensor x = zeros({3, 4});
  auto msg_index = [](auto&& f) { return test::message_of<IndexError>(f); };
  EXPECT_TRUE(msg_index([&] { x.index({ilist({0, 3})}); }).starts_with("[index] index 3 is out of range for dim 0 of size 3"))
      << msg_index([&] { x.index({ilist({0, 3})}); });
  EXPECT_TRUE(msg_index([&] { x.index({Slice(), ilist({-5})}); }).starts_with("[index] index -5"));
  EXPECT_TRUE(msg_index([&] { x.index({0, 1, 2}); }).starts_with("[index] too many indices"));
  EXPECT_TRUE(msg_index([&] { x.index({Ellipsis, 0, Ellipsis}); }).starts_with("[index] an index can only have a single ellipsis"));
  EXPECT_TRUE(msg_index([&] { x.index({zeros({4}, DType::b8)}); }).starts_with("[index] the shape of the mask"));
  EXPECT_TRUE(msg_index([&] { x.index_put_({ilist({7})}, 1.0); }).starts_with("[index_put_] index 7"));
  EXPECT_TRUE(test::message_of<DTypeError>([&] { x.index({zeros({2})}); }).starts_with("[index] tensors used as indices"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { x.index_put_({ilist({0, 1})}, zeros({3})); })
                  .starts_with("[index_put_] shape mismatch"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { x.index({ilist({0, 1}), ilist({0, 1, 2})}); }).starts_with("[index]"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { bmm(zeros({2, 3}), zeros({3, 2})); }).starts_with("[bmm] expects 3-D"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { one_hot(ilist({-1, 2})); }).starts_with("[one_hot] class values"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { one_hot(ilist({1, 4}), 3); }).starts_with("[one_hot] class value 4"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { einsum("ii->i", {zeros({2, 3})}); }).starts_with("[einsum]"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { einsum("ij,jk", {zeros({2, 2})}); }).starts_with("[einsum]"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { einsum("ij,jk", {zeros({2, 3}), zeros({2, 2})}); }).starts_with("[einsum]"));
  EXPECT_TRUE(test::message_of<ShapeError>([&] { x.repeat({2}); }).starts_with("[repeat]"));
  EXPECT_TRUE(test::message_of<DTypeError>([&] { masked_select(x, x); }).starts_with("[masked_select]"));
  EXPECT_TRUE(test::message_of<ValueError>([&] { meshgrid({ilist({1})}, "ji"); }).starts_with("[meshgrid]"));
}

// ---- CUDA against the CPU ----

TEST(IndexingCuda, IndexPutNonzeroMaskedSelectMatchCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda();
  Tensor x = randn({4, 5, 6}, DType::f32);
  Tensor i = ilist({3, 0, -1, 3}), j = ilist({1, 2, 0, 1});
  Tensor mask = x > 0.3;
  auto on = [&](const Tensor& t) { return t.to(dev); };
  EXPECT_TRUE(test::close_to_cpu(on(x).index({Slice(), i, j}), x.index({Slice(), i, j}), 0));
  EXPECT_TRUE(test::close_to_cpu(on(x).index({i, Slice(), j}), x.index({i, Slice(), j}), 0));
  EXPECT_TRUE(test::close_to_cpu(on(x).transpose(0, 2).index({i}), x.transpose(0, 2).index({i}), 0));
  EXPECT_TRUE(test::close_to_cpu(on(x).index({on(mask)}), x.index({mask}), 0));
  EXPECT_TRUE(test::close_to_cpu(nonzero(on(mask)), nonzero(mask), 0));
  EXPECT_TRUE(test::close_to_cpu(masked_select(on(x), on(mask)), masked_select(x, mask), 0));
  EXPECT_TRUE(test::close_to_cpu(on(x).index({Slice(), i, j}), x.index({Slice(), i, j}), 0));
  // Index tensors on the CPU for a CUDA x, as PyTorch allows.
  EXPECT_TRUE(test::close_to_cpu(on(x).index({i}), x.index({i}), 0));
  Tensor v = randn({4, 6}, DType::f32);
  Tensor a = zeros({4, 5, 6}), b = on(a);
  a.index_put_({i, j}, v, true);
  b.index_put_({on(i), on(j)}, on(v), true);
  EXPECT_TRUE(test::close_to_cpu(b, a, 1e-6));
  Tensor c = zeros({4, 5, 6}), d = on(c);
  c.index_put_({Slice(), j}, 3.0);
  d.index_put_({Slice(), on(j)}, 3.0);
  EXPECT_TRUE(test::close_to_cpu(d, c, 0));
  Tensor big = rand({1 << 20}) > 0.5;  // a scan over many blocks
  EXPECT_TRUE(test::close_to_cpu(nonzero(on(big)), nonzero(big), 0));
  // nonzero's edges: no elements, none nonzero, 0-d, and f16 where NaN counts and -0.0 not.
  const double nan = std::nan("");
  for (const Tensor& t : {zeros({0, 3}), zeros({2, 3}), zeros(Shape{}), ones(Shape{}),
                          tensor<double>({0.0, -0.0, nan, 1.0, 0.0}).to(DType::f16)})
    EXPECT_TRUE(test::close_to_cpu(nonzero(on(t)), nonzero(t), 0)) << str(t.sizes());
  // i32 indices on non-adjacent dims, broadcast [2, 1] with [3], one negative.
  Tensor i2 = ilist({2, 0}).reshape({2, 1}).to(DType::i32), j2 = ilist({4, -5, 1}).to(DType::i32);
  EXPECT_TRUE(test::close_to_cpu(on(x).index({on(i2), Slice(), on(j2)}), x.index({i2, Slice(), j2}), 0));
  EXPECT_TRUE(test::close_to_cpu(one_hot(on(ilist({2, 0, 1})), 4), one_hot(ilist({2, 0, 1}), 4), 0));
  EXPECT_TRUE(test::close_to_cpu(eye(3, 4, dev), eye(3, 4), 0));
  Tensor p = on(x) > 0, q = on(x) < 0.5;
  EXPECT_TRUE(test::close_to_cpu(p & ~q, (x > 0) & ~(x < 0.5), 0));
  EXPECT_TRUE(test::close_to_cpu(on(i) ^ on(j), i ^ j, 0));
}

TEST(IndexingCuda, OutOfRangeIndexRaisesAtSynchronization) {
  EMBER_SKIP_WITHOUT_CUDA();
  Tensor x = zeros({3, 4}, Device::cuda());
  const std::string msg = test::message_of<IndexError>([&] {
    Tensor y = x.index({ilist({0, 5}).cuda()});
    (void)y.sum().item<double>();
  });
  EXPECT_TRUE(msg.starts_with("[index] index 5 is out of range for dim 0 of size 3")) << msg;
}
