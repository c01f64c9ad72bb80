// Values of the indexing/joining family (cat, stack, split, chunk, index_select, gather,
// scatter_add, embedding, tril/triu, dropout) against naive host references, plus the
// errors they raise. Gradients are in tests/autograd/test_index_grad.cpp.
#include <omp.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "ember/ops/index.h"
#include "ember/profiler.h"
#include "support/test_support.h"

using namespace ember;

namespace {

// A tensor of shape `shape` holding 0, 1, 2, ... (times `scale`) in `dtype`.
Tensor iota(const Shape& shape, DType dtype = DType::f32, double scale = 1.0) {
  std::vector<double> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) * scale;
  return tensor(v, shape, TensorOptions(dtype));
}

// Row-major strides and flat index helpers for the host references.
std::vector<int64_t> strides_of(const Shape& s) { return contiguous_strides(s).vec(); }
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int64_t d = int64_t(s.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = i % s[size_t(d)];
    i /= s[size_t(d)];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  auto st = strides_of(s);
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
  return off;
}

// Sets the OpenMP thread count for a scope (results must not depend on it).
struct OmpThreads {
  int prev = omp_get_max_threads();
  explicit OmpThreads(int n) { omp_set_num_threads(n); }
  ~OmpThreads() { omp_set_num_threads(prev); }
};

// Runs `fn`, expecting ErrorType with every one of `parts` in its message.
template <class ErrorType>
void expect_error(const std::function<void()>& fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const ErrorType& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// Naive cat of host values along dim, shaped from the inputs' shapes.
Tensor naive_cat(const TensorList& ts, int64_t dim) {
  Shape out_shape = ts[0].sizes();
  out_shape[size_t(dim)] = 0;
  for (const Tensor& t : ts) out_shape[size_t(dim)] += t.sizes()[size_t(dim)];
  std::vector<double> out(size_t(out_shape.numel()));
  int64_t at = 0;
  for (const Tensor& t : ts) {
    auto v = t.to_vector<double>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      auto idx = unravel(i, t.sizes());
      idx[size_t(dim)] += at;
      out[size_t(ravel(idx, out_shape))] = v[size_t(i)];
    }
    at += t.sizes()[size_t(dim)];
  }
  return tensor(out, out_shape);
}

}  // namespace

// ---- cat / stack ----

TEST(Cat, MatchesNaiveAlongEveryDim) {
  Tensor a = iota({2, 3, 4}), b = iota({2, 3, 4}, DType::f32, -0.5);
  for (int64_t d = 0; d < 3; ++d) {
    Tensor c = iota({2, 3, 4}, DType::f32, 2.0).narrow(d, 0, d == 0 ? 1 : 2);  // a different size along d
    Tensor out = cat({a, b, c}, d);
    Shape expect = a.sizes();
    expect[size_t(d)] = a.sizes()[size_t(d)] + b.sizes()[size_t(d)] + c.sizes()[size_t(d)];
    EXPECT_EQ(out.sizes(), expect);
    EXPECT_TRUE(test::all_close(out, naive_cat({a, b, c}, d), 0, 0)) << "dim " << d;
    // Negative dims count from the end.
    EXPECT_TRUE(test::all_close(cat({a, b, c}, d - 3), out, 0, 0));
  }
}

TEST(Cat, NonContiguousInputs) {
  Tensor a = iota({4, 3}).t();                 // [3, 4], transposed
  Tensor b = iota({3, 8}, DType::f32, 0.25).slice(1, 0, 8, 2);  // [3, 4], strided
  Tensor c = iota({3, 2}, DType::f32, 10);
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  EXPECT_TRUE(test::all_close(cat({a, b}, 0), naive_cat({a.contiguous(), b.contiguous()}, 0), 0, 0));
  EXPECT_TRUE(test::all_close(cat({c, a, b}, 1),
                              naive_cat({c, a.contiguous(), b.contiguous()}, 1), 0, 0));
}

TEST(Cat, PromotesDtypes) {
  Tensor i = tensor<int32_t>({1, 2}, {2});
  Tensor l = tensor<int64_t>({3}, {1});
  Tensor f = tensor<float>({0.5f}, {1});
  Tensor d = tensor<double>({0.25}, {1});
  Tensor il = cat({i, l});
  EXPECT_EQ(il.dtype(), DType::i64);
  EXPECT_EQ(il.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  Tensor ilf = cat({i, l, f});
  EXPECT_EQ(ilf.dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(ilf, {1, 2, 3, 0.5}, 0, 0));
  EXPECT_EQ(cat({f, d}).dtype(), DType::f64);
  Tensor h = tensor<float>({1.5f, -2.0f}, {2}).to(DType::f16);
  Tensor hb = cat({h, h.to(DType::bf16)});
  EXPECT_EQ(hb.dtype(), DType::f32);
  EXPECT_TRUE(test::all_close(hb, {1.5, -2, 1.5, -2}, 0, 0));
  Tensor hh = cat({h, h});
  EXPECT_EQ(hh.dtype(), DType::f16);
  EXPECT_TRUE(test::all_close(hh, {1.5, -2, 1.5, -2}, 0, 0));
}

TEST(Cat, ManyInputsAndLargeParallelCopy) {
  TensorList parts;
  for (int k = 0; k < 50; ++k) parts.push_back(full({3, k % 4}, double(k)));
  Tensor out = cat(parts, 1);
  EXPECT_TRUE(test::all_close(out, naive_cat(parts, 1), 0, 0));
  // Above the parallel grain: one big contiguous piece and one strided piece.
  Tensor a = iota({300, 257}), b = iota({257, 300}, DType::f32, 3).t();
  EXPECT_TRUE(test::all_close(cat({a, b}, 0), naive_cat({a, b.contiguous()}, 0), 0, 0));
  EXPECT_TRUE(test::all_close(cat({b, a}, -1), naive_cat({b.contiguous(), a}, 1), 0, 0));
}

TEST(Cat, SkipsLegacyEmptyAndHandlesEmptyPieces) {
  Tensor a = iota({2, 3});
  Tensor e = empty({0});
  EXPECT_TRUE(test::all_close(cat({e, a, e}, 1), a, 0, 0));
  Tensor z = empty({2, 0});
  EXPECT_TRUE(test::all_close(cat({z, a, z}, 1), a, 0, 0));
  EXPECT_EQ(cat({e, e}).sizes(), Shape({0}));
}

TEST(Cat, Errors) {
  expect_error<ValueError>([] { cat({}); }, {"[cat]", "non-empty"});
  Tensor a = iota({2, 3}), b = iota({2, 4}), s = scalar_tensor(1.0);
  expect_error<ShapeError>([&] { cat({a, a, b}, 0); },
                           {"[cat]", "input 2", "[2, 4]", "input 0", "[2, 3]", "dim 1"});
  expect_error<ShapeError>([&] { cat({a, iota({2, 3, 1})}, 0); }, {"[cat]", "input 1", "dims"});
  expect_error<ShapeError>([&] { cat({a, s}); }, {"[cat]", "input 1", "zero-dimensional"});
  expect_error<IndexError>([&] { cat({a, a}, 2); }, {"[cat]", "dim 2"});
  expect_error<ValueError>([&] { cat({a, Tensor()}); }, {"[cat]", "input 1", "undefined"});
}

TEST(Stack, InsertsANewDim) {
  Tensor a = iota({2, 3}), b = iota({2, 3}, DType::f32, -1), c = iota({3, 2}).t();
  for (int64_t d = -3; d < 3; ++d) {
    Tensor out = stack({a, b, c}, d);
    const int64_t dd = d < 0 ? d + 3 : d;
    Shape expect{2, 3};
    expect.insert(size_t(dd), 3);
    ASSERT_EQ(out.sizes(), expect) << "dim " << d;
    TensorList parts{a.unsqueeze(dd).contiguous(), b.unsqueeze(dd).contiguous(),
                     c.contiguous().unsqueeze(dd).contiguous()};
    EXPECT_TRUE(test::all_close(out, naive_cat(parts, dd), 0, 0));
  }
  EXPECT_TRUE(test::all_close(stack({scalar_tensor(1.0), scalar_tensor(2.0)}), {1, 2}, 0, 0));
  expect_error<ShapeError>([&] { stack({a, a.t()}); }, {"[stack]", "input 1", "[3, 2]", "[2, 3]"});
  expect_error<IndexError>([&] { stack({a, b}, 3); }, {"[stack]"});
}

// ---- split / chunk ----

TEST(Split, BySizeGivesViews) {
  Tensor x = iota({7, 2});
  TensorList parts = split(x, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].sizes(), Shape({3, 2}));
  EXPECT_EQ(parts[2].sizes(), Shape({1, 2}));
  EXPECT_TRUE(test::all_close(parts[1], {3, 2}, {6, 7, 8, 9, 10, 11}, 0, 0));
  // Views share x's storage.
  EXPECT_EQ(parts[1].storage(), x.storage());
  EXPECT_EQ(parts[1].data_ptr(), static_cast<float*>(x.data_ptr()) + 6);
  // Along the last (negative) dim of a non-contiguous tensor.
  TensorList cols = split(x.t(), 4, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_TRUE(test::all_close(cols[1], {2, 3}, {8, 10, 12, 9, 11, 13}, 0, 0));
  // A split size larger than the dim gives one piece; an empty dim allows size 0.
  EXPECT_EQ(split(x, 10).size(), 1u);
  EXPECT_EQ(split(empty({0, 2}), 0).size(), 1u);
  expect_error<ValueError>([&] { split(x, 0); }, {"[split]", "size 7"});
  expect_error<ValueError>([&] { split(x, -1); }, {"[split]", "-1"});
}

TEST(Split, BySizes) {
  Tensor x = iota({2, 6});
  TensorList parts = split(x, std::vector<int64_t>{1, 0, 3, 2}, 1);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[1].sizes(), Shape({2, 0}));
  EXPECT_TRUE(test::all_close(parts[2], {2, 3}, {1, 2, 3, 7, 8, 9}, 0, 0));
  EXPECT_TRUE(test::all_close(parts[3], {2, 2}, {4, 5, 10, 11}, 0, 0));
  expect_error<ValueError>([&] { split(x, std::vector<int64_t>{2, 3}, 1); },
                           {"[split]", "[2, 3]", "sum to 5", "size 6"});
}

TEST(Chunk, MatchesPyTorch) {
  auto sizes_of = [](const TensorList& ts) {
    std::vector<int64_t> s;
    for (auto& t : ts) s.push_back(t.sizes()[0]);
    return s;
  };
  EXPECT_EQ(sizes_of(chunk(iota({6}), 3)), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sizes_of(chunk(iota({5}), 4)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes_of(chunk(iota({6}), 4)), (std::vector<int64_t>{2, 2, 2}));  // fewer than asked
  EXPECT_EQ(sizes_of(chunk(iota({2}), 5)), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(sizes_of(chunk(empty({0}), 3)), (std::vector<int64_t>{0, 0, 0}));
  TensorList c = chunk(iota({3, 5}), 2, -1);
  EXPECT_TRUE(test::all_close(c[1], {3, 2}, {3, 4, 8, 9, 13, 14}, 0, 0));
  expect_error<ValueError>([] { chunk(iota({4}), 0); }, {"[chunk]", "positive"});
}

// ---- index_select ----

namespace {
Tensor naive_index_select(const Tensor& x, int64_t dim, const std::vector<int64_t>& idx) {
  Shape os = x.sizes();
  os[size_t(dim)] = int64_t(idx.size());
  auto xv = x.contiguous().to_vector<double>();
  std::vector<double> out(size_t(os.numel()));
  for (int64_t i = 0; i < os.numel(); ++i) {
    auto p = unravel(i, os);
    p[size_t(dim)] = idx[size_t(p[size_t(dim)])];
    out[size_t(i)] = xv[size_t(ravel(p, x.sizes()))];
  }
  return tensor(out, os);
}
}  // namespace

TEST(IndexSelect, AllDimsBothIndexTypes) {
  Tensor x = iota({4, 5, 3});
  std::vector<int64_t> idx{2, 0, 2, 1};
  for (int64_t d = 0; d < 3; ++d) {
    for (DType it : {DType::i64, DType::i32}) {
      Tensor index = tensor(idx, {4}, TensorOptions(it));
      Tensor out = index_select(x, d, index);
      Shape es = x.sizes();
      es[size_t(d)] = 4;
      EXPECT_EQ(out.sizes(), es);
      EXPECT_TRUE(test::all_close(out, naive_index_select(x, d, idx), 0, 0)) << "dim " << d;
      EXPECT_TRUE(test::all_close(x.index_select(d - 3, index), out, 0, 0));
    }
  }
}

TEST(IndexSelect, NonContiguousAndScalarIndex) {
  Tensor x = iota({5, 4}).t();  // [4, 5]
  Tensor idx = tensor<int64_t>({4, 0, 4, 3, 1, 7}, {6}).slice(0, 0, 6, 2);  // {4, 4, 1}, strided
  ASSERT_FALSE(idx.is_contiguous());
  EXPECT_TRUE(test::all_close(index_select(x, 1, idx), naive_index_select(x, 1, {4, 4, 1}), 0, 0));
  Tensor s = scalar_tensor(2, DType::i64);
  Tensor out = index_select(x, 0, s);
  EXPECT_EQ(out.sizes(), Shape({1, 5}));
  EXPECT_TRUE(test::all_close(out, naive_index_select(x, 0, {2}), 0, 0));
  // Large enough to take the parallel path; f16 values copy bit-exactly.
  Tensor big = iota({1000, 70}, DType::f16, 0.01);
  std::vector<int64_t> bi;
  for (int i = 0; i < 900; ++i) bi.push_back((i * 37) % 1000);
  EXPECT_TRUE(test::all_close(index_select(big, 0, tensor(bi)), naive_index_select(big, 0, bi), 0, 0));
}

TEST(IndexSelect, Errors) {
  Tensor x = iota({3, 4});
  expect_error<IndexError>([&] { index_select(x, 0, tensor<int64_t>({0, 3})); },
                           {"[index_select]", "index 3", "dim 0", "size 3"});
  expect_error<IndexError>([&] { index_select(x, 1, tensor<int32_t>({-1})); },
                           {"[index_select]", "index -1"});
  expect_error<DTypeError>([&] { index_select(x, 0, tensor<float>({0})); },
                           {"[index_select]", "i64 or i32", "f32"});
  expect_error<ShapeError>([&] { index_select(x, 0, tensor<int64_t>({0, 1}, {1, 2})); },
                           {"[index_select]", "[1, 2]"});
  expect_error<IndexError>([&] { index_select(x, 2, tensor<int64_t>({0})); }, {"[index_select]", "dim 2"});
}

// ---- gather / scatter_add ----

namespace {
Tensor naive_gather(const Tensor& x, int64_t dim, const Tensor& index) {
  auto xv = x.contiguous().to_vector<double>();
  auto iv = index.contiguous().to_vector<int64_t>();
  std::vector<double> out(size_t(index.numel()));
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto p = unravel(i, index.sizes());
    p[size_t(dim)] = iv[size_t(i)];
    out[size_t(i)] = xv[size_t(ravel(p, x.sizes()))];
  }
  return tensor(out, index.sizes());
}
Tensor naive_scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  auto out = x.contiguous().to_vector<double>();
  auto iv = index.contiguous().to_vector<int64_t>();
  auto sv = src.contiguous().to_vector<double>();
  for (int64_t i = 0; i < index.numel(); ++i) {
    auto p = unravel(i, index.sizes());
    const double s = sv[size_t(ravel(p, src.sizes()))];
    p[size_t(dim)] = iv[size_t(i)];
    out[size_t(ravel(p, x.sizes()))] += s;
  }
  return tensor(out, x.sizes());
}
}  // namespace

TEST(Gather, MatchesNaive) {
  Tensor x = iota({3, 4, 5});
  for (int64_t d = 0; d < 3; ++d) {
    for (DType it : {DType::i64, DType::i32}) {
      Shape is{2, 3, 4};  // smaller than x in every dim
      Tensor index = randint(0, x.sizes()[size_t(d)], is, TensorOptions(it));
      Tensor out = gather(x, d, index);
      EXPECT_EQ(out.sizes(), is);
      EXPECT_TRUE(test::all_close(out, naive_gather(x, d, index), 0, 0)) << "dim " << d;
      EXPECT_TRUE(test::all_close(x.gather(d - 3, index), out, 0, 0));
    }
  }
  // Non-contiguous input and index; along the gathered dim the index may be longer than x.
  Tensor xt = iota({5, 3}).t();                                           // [3, 5]
  Tensor it = randint(0, 5, {8, 3}).t();                                  // [3, 8]
  EXPECT_TRUE(test::all_close(gather(xt, 1, it), naive_gather(xt, 1, it), 0, 0));
  // 0-d operands are accepted, as in PyTorch.
  Tensor s0 = scalar_tensor(5.0), i0 = scalar_tensor(0, DType::i64);
  EXPECT_EQ(gather(s0, 0, i0).dim(), 0);
  EXPECT_EQ(gather(s0, 0, i0).item<double>(), 5.0);
  EXPECT_EQ(scatter_add(s0, 0, i0, scalar_tensor(2.0)).item<double>(), 7.0);
  // Big enough for the parallel path.
  Tensor bx = iota({64, 1000}), bidx = randint(0, 1000, {64, 1500});
  EXPECT_TRUE(test::all_close(gather(bx, 1, bidx), naive_gather(bx, 1, bidx), 0, 0));
  // A single long line is cut into pieces across threads.
  Tensor lx = iota({5000}), lidx = randint(0, 5000, {100000});
  EXPECT_TRUE(test::all_close(gather(lx, 0, lidx), naive_gather(lx, 0, lidx), 0, 0));
  // An expanded (stride-0) index.
  Tensor eidx = randint(0, 64, {1, 1000}).expand({50, 1000});
  EXPECT_TRUE(test::all_close(gather(bx, 0, eidx), naive_gather(bx, 0, eidx), 0, 0));
}

TEST(Gather, Errors) {
  Tensor x = iota({3, 4});
  expect_error<IndexError>([&] { gather(x, 1, tensor<int64_t>({0, 4}, {1, 2})); },
                           {"[gather]", "index 4", "dim 1", "size 4"});
  expect_error<ShapeError>([&] { gather(x, 1, tensor<int64_t>({0, 1}, {2})); },
                           {"[gather]", "[2]", "[3, 4]", "dims"});
  expect_error<ShapeError>([&] { gather(x, 1, zeros({4, 1}, DType::i64)); },
                           {"[gather]", "[4, 1]", "larger", "dim 0"});
  expect_error<DTypeError>([&] { gather(x, 1, zeros({3, 1})); }, {"[gather]", "i64 or i32"});
}

TEST(ScatterAdd, AccumulatesRepeatedIndices) {
  Tensor x = iota({3, 4}, DType::f64, 0.5);
  Tensor index = tensor<int64_t>({0, 0, 3, 0, 1, 1, 1, 1, 2, 3, 3, 3}, {3, 4});
  Tensor src = iota({3, 4}, DType::f64, 1.5).add(1.0);
  std::vector<double> x_before = x.to_vector<double>();
  Tensor out = scatter_add(x, 1, index, src);
  EXPECT_TRUE(test::all_close(out, naive_scatter_add(x, 1, index, src), 0, 1e-12));
  EXPECT_EQ(x.to_vector<double>(), x_before);  // out of place
  // Row 1 sends everything to column 1: 0.5*5 + (7+8.5+10+11.5).
  EXPECT_DOUBLE_EQ(out.to_vector<double>()[5], 2.5 + 7 + 8.5 + 10 + 11.5);
  for (int64_t d = 0; d < 3; ++d) {
    Tensor y = iota({4, 3, 5}, DType::f32);
    Tensor idx = randint(0, y.sizes()[size_t(d)], {3, 2, 4}, DType::i32);
    // src [3, 4, 5]: larger than the index and non-contiguous.
    Tensor s = iota({5, 4, 3}, DType::f32, -0.25).permute({2, 1, 0});
    EXPECT_TRUE(test::all_close(scatter_add(y, d, idx, s), naive_scatter_add(y, d, idx, s), 1e-6, 1e-5))
        << "dim " << d;
  }
  // Deterministic and correct on the parallel path with heavy collisions.
  Tensor big = zeros({200, 8}, DType::f64);
  Tensor bidx = randint(0, 8, {200, 600});
  Tensor bsrc = randn({200, 600}, DType::f64);
  Tensor r1 = scatter_add(big, 1, bidx, bsrc);
  EXPECT_TRUE(test::all_close(r1, naive_scatter_add(big, 1, bidx, bsrc), 1e-12, 1e-12));
  Tensor r2;
  {
    OmpThreads one(1);
    r2 = scatter_add(big, 1, bidx, bsrc);
  }
  EXPECT_EQ(r1.to_vector<double>(), r2.to_vector<double>());
}

TEST(ScatterAdd, Errors) {
  Tensor x = zeros({2, 3});
  Tensor idx = tensor<int64_t>({0, 5}, {1, 2});
  expect_error<IndexError>([&] { scatter_add(x, 1, idx, ones({1, 2})); }, {"[scatter_add]", "index 5", "size 3"});
  expect_error<DTypeError>([&] { scatter_add(x, 1, zeros({1, 2}, DType::i64), ones({1, 2}, DType::f64)); },
                           {"[scatter_add]", "f64", "f32"});
  expect_error<ShapeError>([&] { scatter_add(x, 1, zeros({1, 2}, DType::i64), ones({1, 1})); },
                           {"[scatter_add]", "source", "[1, 1]"});
  expect_error<DTypeError>([&] { scatter_add(zeros({2}, DType::b8), 0, zeros({1}, DType::i64), zeros({1}, DType::b8)); },
                           {"[scatter_add]", "bool"});
}

// ---- embedding ----

TEST(Embedding, LooksUpRows) {
  Tensor w = iota({5, 3}, DType::f32, 0.5);
  Tensor idx = tensor<int64_t>({4, 0, 4, 2, 1, 1}, {2, 3});
  for (DType it : {DType::i64, DType::i32}) {
    Tensor out = embedding(w, idx.to(it));
    EXPECT_EQ(out.sizes(), Shape({2, 3, 3}));
    std::vector<double> expect;
    for (int64_t r : {4, 0, 4, 2, 1, 1})
      for (int64_t c = 0; c < 3; ++c) expect.push_back(0.5 * double(r * 3 + c));
    EXPECT_TRUE(test::all_close(out, {2, 3, 3}, expect, 0, 0));
  }
  // Non-contiguous indices and weight; a 0-d index gives [D].
  Tensor wt = iota({3, 5}).t();
  EXPECT_TRUE(test::all_close(embedding(wt, idx.t()), naive_index_select(wt, 0, {4, 2, 0, 1, 4, 1}).reshape({3, 2, 3}), 0, 0));
  EXPECT_EQ(embedding(w, scalar_tensor(3, DType::i64)).sizes(), Shape({3}));
}

TEST(Embedding, Errors) {
  Tensor w = zeros({5, 3});
  expect_error<IndexError>([&] { embedding(w, tensor<int64_t>({1, 5})); }, {"[embedding]", "index 5", "size 5"});
  expect_error<DTypeError>([&] { embedding(w, tensor<float>({1})); }, {"[embedding]", "indices", "f32"});
  expect_error<ShapeError>([&] { embedding(zeros({5}), tensor<int64_t>({1})); }, {"[embedding]", "2-D", "[5]"});
}

TEST(Embedding, BackwardAccumulatesDeterministically) {
  // The ops-level backward: repeated rows sum; identical with 1 and many threads.
  Tensor idx = randint(0, 50, {4000});
  Tensor g = randn({4000, 96}, DType::f32);
  Tensor r1 = ops::embedding_backward(g, idx, 50);
  auto iv = idx.to_vector<int64_t>();
  auto gv = g.to_vector<double>();
  std::vector<double> ref(50 * 96, 0.0);
  for (size_t i = 0; i < iv.size(); ++i)
    for (size_t c = 0; c < 96; ++c) ref[size_t(iv[i]) * 96 + c] += gv[i * 96 + c];
  EXPECT_TRUE(test::all_close(r1, {50, 96}, ref, 1e-4, 1e-4));
  Tensor r2;
  {
    OmpThreads one(1);
    r2 = ops::embedding_backward(g, idx, 50);
  }
  EXPECT_EQ(r1.to_vector<float>(), r2.to_vector<float>());
}

// ---- tril / triu ----

TEST(Tri, BatchedWithDiagonals) {
  Tensor x = iota({2, 3, 4}, DType::f64).add(1.0);
  auto xv = x.to_vector<double>();
  for (int64_t k : {-5, -2, -1, 0, 1, 2, 5}) {
    std::vector<double> lo(xv.size()), up(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      const int64_t r = int64_t(i / 4) % 3, c = int64_t(i % 4);
      lo[i] = c - r <= k ? xv[i] : 0;
      up[i] = c - r >= k ? xv[i] : 0;
    }
    EXPECT_TRUE(test::all_close(tril(x, k), {2, 3, 4}, lo, 0, 0)) << "k " << k;
    EXPECT_TRUE(test::all_close(triu(x, k), {2, 3, 4}, up, 0, 0)) << "k " << k;
    EXPECT_TRUE(test::all_close(x.tril(k).add(x.triu(k + 1)), x, 0, 0));
  }
  // Non-contiguous (transposed batch) and integer dtype.
  Tensor y = iota({4, 3, 2}, DType::i64).permute({2, 1, 0});  // [2, 3, 4]
  EXPECT_TRUE(test::all_close(tril(y, 1), tril(y.contiguous(), 1), 0, 0));
  EXPECT_EQ(triu(y).dtype(), DType::i64);
  EXPECT_TRUE(test::all_close(triu(tensor<float>({1, 2, 3, 4}, {2, 2})), {2, 2}, {1, 2, 0, 4}, 0, 0));
  expect_error<ShapeError>([] { tril(iota({3})); }, {"[tril]", "2 dims", "[3]"});
  expect_error<ShapeError>([] { triu(scalar_tensor(1.0)); }, {"[triu]", "2 dims"});
}

// ---- dropout ----

TEST(Dropout, StatisticsAndExactScaling) {
  const int64_t n = 100000;
  const double p = 0.3;
  Tensor x = rand({n}).add(0.5);  // no zeros in x
  manual_seed(1234);
  Tensor y = dropout(x, p);
  auto xv = x.to_vector<float>(), yv = y.to_vector<float>();
  const float scale = float(1.0 / (1.0 - p));
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (yv[size_t(i)] == 0.0f) ++zeros;
    else ASSERT_EQ(yv[size_t(i)], xv[size_t(i)] * scale) << "element " << i;
  }
  // Binomial std of the fraction is sqrt(p (1-p) / n) ~ 0.0015; allow ~7 of them.
  EXPECT_NEAR(double(zeros) / double(n), p, 0.01);
}

TEST(Dropout, ReproducibleFromTheSeed) {
  Tensor x = ones({1000}, DType::f64);
  manual_seed(7);
  auto a = dropout(x, 0.5).to_vector<double>();
  auto a2 = dropout(x, 0.5).to_vector<double>();  // the generator moved on: a new mask
  manual_seed(7);
  auto b = dropout(x, 0.5).to_vector<double>();
  manual_seed(8);
  auto c = dropout(x, 0.5).to_vector<double>();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(a, a2);
  // Independent of the thread count (large enough for the parallel path).
  Tensor big = ones({200000});
  manual_seed(9);
  auto m1 = dropout(big, 0.2).to_vector<float>();
  std::vector<float> m2;
  {
    OmpThreads one(1);
    manual_seed(9);
    m2 = dropout(big, 0.2).to_vector<float>();
  }
  EXPECT_EQ(m1, m2);
}

TEST(Dropout, FollowsThePhiloxLayout) {
  // Note [dropout Philox layout]: element i keeps iff uniform(word i % 4 of counter
  // offset + i / 4) >= p, and the generator advances by (n + 3) / 4 counters.
  const int64_t n = 10;
  const double p = 0.5;
  manual_seed(42);
  Generator::State s = default_generator().get_state();
  auto y = dropout(ones({n}, DType::f64), p).to_vector<double>();
  EXPECT_EQ(default_generator().get_state().offset, s.offset + uint64_t(n + 3) / 4);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t w[4];
    Philox::draw(s.seed, s.offset + uint64_t(i / 4), w);
    const bool keep = double(Philox::uniform(w[i % 4])) >= p;
    EXPECT_EQ(y[size_t(i)], keep ? 2.0 : 0.0) << "element " << i;
  }
}

TEST(Dropout, IdentityCasesAndErrors) {
  Tensor x = randn({4, 5}).t();  // non-contiguous
  EXPECT_TRUE(dropout(x, 0.5, /*training=*/false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
  // A non-contiguous input keeps its logical order: the mask is over row-major positions.
  manual_seed(3);
  Tensor y = dropout(x, 0.5);
  manual_seed(3);
  Tensor z = dropout(x.contiguous(), 0.5);
  EXPECT_TRUE(test::all_close(y, z, 0, 0));
  expect_error<ValueError>([&] { dropout(x, 1.0); }, {"[dropout]", "[0, 1)", "1"});
  expect_error<ValueError>([&] { dropout(x, -0.1); }, {"[dropout]", "-0.1"});
  expect_error<DTypeError>([&] { dropout(zeros({3}, DType::i64), 0.5); }, {"[dropout]", "floating", "i64"});
  // bf16 keeps its dtype and scales in float.
  Tensor h = ones({64}, DType::bf16);
  manual_seed(5);
  auto hv = dropout(h, 0.5).to_vector<double>();
  for (double v : hv) EXPECT_TRUE(v == 0.0 || v == 2.0) << v;
}

// ---- CUDA matches the CPU (instantiated for CUDA only: it skips without a GPU) ----

class IndexDevices : public ::testing::TestWithParam<Device> {};

TEST_P(IndexDevices, MatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor x = randn({4, 6, 5});
  Tensor idx = randint(0, 6, {4, 3, 5});
  Tensor sel = tensor<int64_t>({5, 0, 5, 2});
  Tensor src = randn({4, 3, 5});
  std::vector<std::pair<const char*, std::function<Tensor(const Tensor&, const Tensor&, const Tensor&, const Tensor&)>>> cases = {
      {"cat", [](auto& a, auto&, auto&, auto&) { return cat({a, a.narrow(1, 0, 2)}, 1); }},
      {"stack", [](auto& a, auto&, auto&, auto&) { return stack({a, a}, -1); }},
      {"index_select", [](auto& a, auto&, auto& s, auto&) { return index_select(a, 1, s); }},
      {"gather", [](auto& a, auto& i, auto&, auto&) { return gather(a, 1, i); }},
      {"scatter_add", [](auto& a, auto& i, auto&, auto& s) { return scatter_add(a, 1, i, s); }},
      {"embedding", [](auto& a, auto&, auto& s, auto&) { return embedding(a.select(0, 0), s); }},
      {"tril", [](auto& a, auto&, auto&, auto&) { return tril(a, -1); }},
      {"triu", [](auto& a, auto&, auto&, auto&) { return triu(a, 2); }},
  };
  for (auto& [name, fn] : cases) {
    Tensor expect = fn(x, idx, sel, src);
    Tensor got = fn(x.to(dev), idx.to(dev), sel.to(dev), src.to(dev));
    EXPECT_EQ(got.device(), dev) << name;
    EXPECT_TRUE(test::all_close(got.cpu(), expect, 1e-6, 1e-6)) << name;
  }
  // The dropout mask follows one Philox layout on every device.
  manual_seed(11);
  Tensor d_cpu = dropout(ones({1001}), 0.4);
  manual_seed(11);
  Tensor d_dev = dropout(ones({1001}, dev), 0.4);
  EXPECT_TRUE(test::all_close(d_dev.cpu(), d_cpu, 0, 0));
}

// The CUDA driver against the CPU one, op by op, on fresh random inputs in every dtype the
// op takes, with odd shapes and non-contiguous operands. Ops that only move elements must
// match exactly; so must the accumulating ops in f32/f64 (the CUDA order is the CPU's).
namespace {
const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i64, DType::i32, DType::u8,  DType::b8};

Tensor random_of(const Shape& shape, DType dtype) {
  if (dtype == DType::b8) return randint(0, 2, shape).to(dtype);
  if (is_integral(dtype)) return randint(0, 200, shape).to(dtype);
  return randn(shape).to(dtype);
}

// Runs fn on the CPU and on dev, expecting identical values (CUDA tests only).
::testing::AssertionResult same_on(Device dev, const std::function<Tensor(Device)>& fn) {
  Tensor expect = fn(Device::cpu());
  Tensor got = fn(dev);
  if (got.device() != dev) return ::testing::AssertionFailure() << "the result is not on the device";
  return test::all_close(got.cpu(), expect, 0, 0);
}
}  // namespace

TEST_P(IndexDevices, CatEveryDTypeLayoutAndManyPieces) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor a = random_of({3, 5, 7}, dt), b = random_of({3, 2, 7}, dt), c = random_of({7, 5, 3}, dt);
    for (int64_t d = 0; d < 3; ++d) {
      Shape sb = a.sizes();
      sb[size_t(d)] = 2;
      Tensor bb = random_of(sb, dt);
      EXPECT_TRUE(same_on(dev, [&](Device v) { return cat({a.to(v), bb.to(v), a.to(v)}, d); })) << "dim " << d;
    }
    // A non-contiguous piece (strided copy path) between contiguous ones (table path).
    EXPECT_TRUE(same_on(dev, [&](Device v) { return cat({a.to(v), c.to(v).permute({2, 1, 0}).narrow(1, 0, 3), b.to(v)}, 1); }));
    EXPECT_TRUE(same_on(dev, [&](Device v) { return cat({c.to(v).permute({2, 1, 0}), a.to(v)}, 2); }));
  }
  // Mixed dtypes promote and convert; legacy [0] inputs are skipped.
  Tensor h = random_of({2, 3}, DType::f16), i = random_of({2, 1}, DType::i32), f = random_of({2, 5}, DType::f32);
  EXPECT_TRUE(same_on(dev, [&](Device v) { return cat({h.to(v), i.to(v), empty({0}, v), f.to(v)}, 1); }));
  // More pieces than one launch table holds (64), of odd byte widths (unit sizes 1..16).
  TensorList many;
  for (int k = 0; k < 150; ++k) many.push_back(random_of({5, 1 + k % 9, 3}, DType::f16));
  EXPECT_TRUE(same_on(dev, [&](Device v) {
    TensorList m;
    for (const Tensor& t : many) m.push_back(t.to(v));
    return cat(m, 1);
  }));
  // A large copy (many blocks, grid-stride loops).
  Tensor big = randn({3, 100000});
  EXPECT_TRUE(same_on(dev, [&](Device v) { return cat({big.to(v), big.to(v).narrow(1, 1, 77777)}, 1); }));
}

TEST_P(IndexDevices, IndexSelectAndEmbeddingEveryDType) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_of({4, 7, 5}, dt);
    for (DType it : {DType::i64, DType::i32}) {
      Tensor idx = randint(0, 7, {11}).to(it);
      for (int64_t d = 0; d < 3; ++d) {
        Tensor id = randint(0, x.sizes()[size_t(d)], {9}).to(it);
        EXPECT_TRUE(same_on(dev, [&](Device v) { return index_select(x.to(v), d, id.to(v)); })) << "dim " << d;
      }
      // Non-contiguous source and index, 0-d index.
      EXPECT_TRUE(same_on(dev, [&](Device v) { return index_select(x.to(v).transpose(0, 2), 1, idx.to(v).slice(0, 0, 11, 2)); }));
      EXPECT_TRUE(same_on(dev, [&](Device v) { return index_select(x.to(v), 1, scalar_tensor(6, it).to(v)); }));
      EXPECT_TRUE(same_on(dev, [&](Device v) { return embedding(x.to(v).select(0, 1), idx.to(v).view({1, 11})); }));
    }
  }
  // Embedding rows of a typical width: 16-byte units.
  Tensor w = randn({1000, 96}).to(DType::bf16);
  Tensor tok = randint(0, 1000, {8, 33});
  EXPECT_TRUE(same_on(dev, [&](Device v) { return embedding(w.to(v), tok.to(v)); }));
}

TEST_P(IndexDevices, IndexAddAndEmbeddingBackwardAreDeterministic) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  // Heavily repeated indices: f32/f64 add in the CPU's order, so the sums are bit-identical;
  // f16/bf16 sum in f32 and round once on CUDA (the CPU rounds after every add).
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::i32}) {
    SCOPED_TRACE(dtype_name(dt));
    for (int64_t d = 0; d < 3; ++d) {
      Shape ss{3, 4, 5};
      ss[size_t(d)] = 40;
      Tensor src = random_of(ss, dt);
      Tensor idx = randint(0, 6, {40});
      Shape os{3, 4, 5};
      os[size_t(d)] = 6;
      Tensor expect = ops::index_add_into_zeros(src, d, idx, os);
      Tensor got = ops::index_add_into_zeros(src.to(dev), d, idx.to(dev), os);
      const bool exact = dt != DType::f16 && dt != DType::bf16;
      const double tol = dt == DType::f16 ? 1e-2 : 6e-2;  // ~40/6 adds of N(0, 1) per element
      EXPECT_TRUE(test::all_close(got.cpu(), expect, exact ? 0 : tol, exact ? 0 : tol)) << "dim " << d;
      Tensor again = ops::index_add_into_zeros(src.to(dev), d, idx.to(dev), os);
      EXPECT_EQ(got.cpu().to_vector<double>(), again.cpu().to_vector<double>()) << "dim " << d;
    }
  }
  // Embedding backward at a realistic size, i32 indices with a hot row (1280+ uses, more than
  // one chunk of Note [ordered index sums]): twice bit-identical; the rows with at most 256
  // uses equal the CPU's bit for bit, the hot row (summed in chunks) the f64 sum within f32
  // rounding.
  Tensor tok = randint(0, 500, {64, 65});
  tok.narrow(1, 0, 20).fill_(7);
  Tensor g = randn({64, 65, 128});
  for (DType it : {DType::i64, DType::i32}) {
    Tensor expect = ops::embedding_backward(g, tok.to(it), 500);
    Tensor r1 = ops::embedding_backward(g.to(dev), tok.to(it).to(dev), 500);
    Tensor r2 = ops::embedding_backward(g.to(dev), tok.to(it).to(dev), 500);
    EXPECT_EQ(r1.cpu().to_vector<float>(), r2.cpu().to_vector<float>());
    EXPECT_TRUE(test::all_close(r1.cpu().narrow(0, 0, 7), expect.narrow(0, 0, 7), 0, 0));
    EXPECT_TRUE(test::all_close(r1.cpu().narrow(0, 8, 492), expect.narrow(0, 8, 492), 0, 0));
    Tensor hot64 = ops::embedding_backward(g.to(DType::f64), tok.to(it), 500).select(0, 7);
    EXPECT_TRUE(test::all_close(r1.cpu().select(0, 7), hot64, 1e-5, 1e-4));
  }
}

// Note [ordered index sums] where the runs are long: a 1-d scatter_add of 200000 sources into
// 3 bins and an embedding backward where half the tokens are one padding id. Against f64 sums,
// and bit-identical from run to run.
TEST_P(IndexDevices, LongRunsAreSummedInChunksDeterministically) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Tensor src = randn({200000});
  Tensor idx = randint(0, 3, {200000});
  Tensor base = randn({3});
  Tensor ref = scatter_add(base.to(DType::f64), 0, idx, src.to(DType::f64));
  Tensor a = scatter_add(base.to(dev), 0, idx.to(dev), src.to(dev));
  Tensor b = scatter_add(base.to(dev), 0, idx.to(dev), src.to(dev));
  EXPECT_EQ(a.cpu().to_vector<float>(), b.cpu().to_vector<float>());
  EXPECT_TRUE(test::all_close(a.cpu(), ref, 1e-5, 2e-3));  // |sum| ~ 260, 66667 terms each
  Tensor tok = randint(0, 1000, {16, 256});
  tok.narrow(1, 128, 128).fill_(0);  // padding: 2048 + uses of token 0
  Tensor g = randn({16, 256, 64});
  Tensor ref_e = ops::embedding_backward(g.to(DType::f64), tok, 1000);
  Tensor e1 = ops::embedding_backward(g.to(dev), tok.to(dev), 1000);
  Tensor e2 = ops::embedding_backward(g.to(dev), tok.to(dev), 1000);
  EXPECT_EQ(e1.cpu().to_vector<float>(), e2.cpu().to_vector<float>());
  EXPECT_TRUE(test::all_close(e1.cpu(), ref_e, 1e-5, 1e-4));
  // More than kChunk bad indices (a long run of the sentinel key, summed and dropped) mixed
  // into long runs of good ones: reported at the next synchronization, never added.
  Tensor mixed = randint(0, 3, {200000});
  mixed.narrow(0, 1000, 700).fill_(5);
  Tensor got_mixed;
  const std::string msg =
      test::message_of<IndexError>([&] { got_mixed = scatter_add(base.to(dev), 0, mixed.to(dev), src.to(dev)); (void)got_mixed.cpu(); });
  EXPECT_NE(msg.find("[scatter_add] index 5 is out of range"), std::string::npos) << msg;
  Tensor bad = mixed.ge(3);  // the reference adds 0 in place of each bad source
  Tensor ref_mixed = scatter_add(base.to(DType::f64), 0, mixed.masked_fill(bad, 0), src.to(DType::f64).masked_fill(bad, 0.0));
  EXPECT_TRUE(test::all_close(got_mixed.cpu(), ref_mixed, 1e-5, 2e-3));
  // 16-bit: partials in f32, rounded once.
  Tensor eh = ops::embedding_backward(g.to(DType::bf16).to(dev), tok.to(dev), 1000);
  EXPECT_TRUE(test::all_close(eh.cpu(), ops::embedding_backward(g.to(DType::bf16).to(DType::f64), tok, 1000), 8e-3, 8e-3));
}

TEST_P(IndexDevices, GatherAndScatterAddEveryDType) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_of({5, 6, 7}, dt);
    for (int64_t d = 0; d < 3; ++d) {
      Shape is{4, 5, 6};
      Tensor idx = randint(0, x.sizes()[size_t(d)], is);
      EXPECT_TRUE(same_on(dev, [&](Device v) { return gather(x.to(v), d, idx.to(v)); })) << "dim " << d;
      // Non-contiguous index (a transposed view) and i32.
      Tensor it = randint(0, x.sizes()[size_t(d)], {6, 5, 5}).to(DType::i32);
      EXPECT_TRUE(same_on(dev, [&](Device v) { return gather(x.to(v), d, it.to(v).permute({2, 1, 0})); })) << "dim " << d;
      if (dt == DType::b8) continue;
      // scatter_add adds in the CPU's order with the CPU's rounding: exact in every dtype.
      Tensor src = random_of({4, 6, 6}, dt).transpose(1, 2);  // non-contiguous, [4, 6, 6]
      Tensor sidx = randint(0, x.sizes()[size_t(d)], {4, 5, 6});
      EXPECT_TRUE(same_on(dev, [&](Device v) { return scatter_add(x.to(v), d, sidx.to(v), src.to(v)); })) << "dim " << d;
    }
  }
  // Long lines into a short dim: about 1250 sources per element, summed in chunks (Note
  // [ordered index sums]): the f64 sum within f32 rounding, the same bits on every run.
  Tensor x = randn({3, 4}), src = randn({3, 5000});
  Tensor idx = randint(0, 4, {3, 5000});
  Tensor got = scatter_add(x.to(dev), 1, idx.to(dev), src.to(dev)).cpu();
  EXPECT_TRUE(test::all_close(got, scatter_add(x.to(DType::f64), 1, idx, src.to(DType::f64)), 1e-5, 1e-4));
  EXPECT_EQ(got.to_vector<float>(), scatter_add(x.to(dev), 1, idx.to(dev), src.to(dev)).cpu().to_vector<float>());
}

TEST_P(IndexDevices, TrilTriuEveryDType) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = random_of({3, 5, 7}, dt);
    for (int64_t k : {-9, -2, 0, 1, 3, 9}) {
      EXPECT_TRUE(same_on(dev, [&](Device v) { return tril(x.to(v), k); })) << k;
      EXPECT_TRUE(same_on(dev, [&](Device v) { return triu(x.to(v), k); })) << k;
      EXPECT_TRUE(same_on(dev, [&](Device v) { return triu(x.to(v).permute({2, 0, 1}), k); })) << k;
    }
  }
}

TEST_P(IndexDevices, DropoutMaskIsBitIdenticalToTheCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  // Sizes around the 4-per-counter packing, a large one, several seeds, offsets and p.
  for (int64_t n : {1, 3, 4, 5, 7, 1001, (1 << 20) + 3}) {
    for (uint64_t seed : {0ull, 42ull, 0xdeadbeefcafeull}) {
      for (double p : {0.1, 0.5, 0.9}) {
        const Generator::State s{seed, seed * 7 + uint64_t(n)};
        Tensor cpu = ops::dropout_mask({n}, Device::cpu(), s, p);
        Tensor got = ops::dropout_mask({n}, dev, s, p);
        ASSERT_EQ(got.cpu().to_vector<uint8_t>(), cpu.to_vector<uint8_t>()) << "n " << n << " seed " << seed << " p " << p;
      }
    }
  }
  // A multi-dim mask follows row-major positions.
  const Generator::State s{5, 3};
  EXPECT_EQ(ops::dropout_mask({3, 7, 5}, dev, s, 0.3).cpu().to_vector<uint8_t>(),
            ops::dropout_mask({3, 7, 5}, Device::cpu(), s, 0.3).to_vector<uint8_t>());
  // masked_scale: every floating dtype, non-contiguous x, exact.
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor x = randn({6, 9}).to(dt).t();
    Tensor m = ops::dropout_mask({9, 6}, Device::cpu(), s, 0.5);
    EXPECT_TRUE(same_on(dev, [&](Device v) { return ops::masked_scale(x.to(v), m.to(v), 1.0 / 0.7); })) << dtype_name(dt);
  }
  // The user-facing dropout: same seed, same result on both devices.
  Tensor x = randn({33, 17});
  manual_seed(21);
  Tensor expect = dropout(x, 0.25);
  manual_seed(21);
  EXPECT_TRUE(test::all_close(dropout(x.to(dev), 0.25).cpu(), expect, 0, 0));
}

INSTANTIATE_TEST_SUITE_P(Cuda, IndexDevices, ::testing::ValuesIn(test::cuda_devices()),
                         test::device_label);

// ---- every device: errors (each device against the same expected messages) ----

class IndexErrors : public ::testing::TestWithParam<Device> {};

TEST_P(IndexErrors, OutOfRangeIndicesThrowOnEveryDevice) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  // On the CPU the op throws; on CUDA the kernel records the fault and the next host
  // synchronization (here the .cpu() of the result) raises it, with the same message (Note
  // [deferred device checks]).
  Tensor x = randn({4, 5}).to(dev);
  Tensor bad = tensor<int64_t>({1, 5, 2}).to(dev);
  expect_error<IndexError>([&] { index_select(x, 1, bad).cpu(); }, {"[index_select]", "index 5", "size 5"});
  expect_error<IndexError>([&] { index_select(x, 0, tensor<int32_t>({-1}).to(dev)).cpu(); }, {"[index_select]", "index -1"});
  expect_error<IndexError>([&] { embedding(x, bad).cpu(); }, {"[embedding]", "index 5", "size 4"});
  expect_error<IndexError>([&] { ops::embedding_backward(randn({3, 5}).to(dev), bad, 4).cpu(); }, {"[embedding]", "index 5"});
  expect_error<IndexError>([&] { ops::index_add_into_zeros(randn({4, 3}).to(dev), 1, bad, {4, 5}).cpu(); },
                           {"[index_add]", "index 5", "size 5"});
  expect_error<IndexError>([&] { gather(x, 1, tensor<int64_t>({0, 9}, {1, 2}).to(dev)).cpu(); }, {"[gather]", "index 9", "size 5"});
  expect_error<IndexError>([&] { scatter_add(x, 0, tensor<int64_t>({0, 4}, {1, 2}).to(dev), randn({1, 2}).to(dev)).cpu(); },
                           {"[scatter_add]", "index 4", "size 4"});
  // The device is still usable afterwards, and nothing is raised twice.
  EXPECT_TRUE(test::all_close(index_select(x, 1, tensor<int64_t>({4}).to(dev)).cpu(), x.cpu().narrow(1, 4, 1), 0, 0));
  // A bad index is skipped, never added: the good sources of the same op still land.
  Tensor src = tensor<double>({1, 2, 4}, {3, 1}).to(dev);
  Tensor mixed = tensor<int64_t>({0, 7, 0}).to(dev);
  Tensor sums;
  expect_error<IndexError>([&] { sums = ops::index_add_into_zeros(src, 0, mixed, {2, 1}); (void)sums.cpu(); },
                           {"[index_add]", "index 7"});
  if (dev.is_cuda()) {
    EXPECT_TRUE(test::all_close(sums.cpu(), Shape{2, 1}, {5, 0}, 0, 0));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, IndexErrors, ::testing::ValuesIn(test::test_devices()), test::device_label);

// Note [deferred device checks] on the device: the op does not wait, the next synchronization
// raises the op's IndexError once, synchronous-check mode raises at the op, and a fault
// recorded inside a captured graph is raised after its replay.
TEST(DeferredChecks, RaisedAtTheNextSynchronizationNamingTheOp) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  ASSERT_FALSE(cuda::sync_checks()) << "run without EMBER_CUDA_SYNC_CHECKS";
  Tensor w = randn({10, 8}).to(dev);
  Tensor bad = tensor<int64_t>({3, 12, 1}).to(dev);
  Tensor y;
  EXPECT_NO_THROW(y = embedding(w, bad));  // recorded, not raised: the host did not wait
  Tensor other = (w * 2).sum();            // unrelated work is queued normally
  const std::string msg = test::message_of<IndexError>([&] { (void)other.item<double>(); });
  EXPECT_NE(msg.find("[embedding] index 12 is out of range"), std::string::npos) << msg;
  EXPECT_NO_THROW(cuda::synchronize()) << "a fault is raised once";
  EXPECT_NEAR(other.item<double>(), (w.cpu() * 2).sum().item<double>(), 1e-3);
  // Cross-entropy names the first bad position, as the CPU does.
  Tensor logits = randn({4, 3}).to(dev);
  Tensor t = tensor<int64_t>({0, 5, 2, -3}).to(dev);
  Tensor loss;
  EXPECT_NO_THROW(loss = cross_entropy(logits, t));
  const std::string ce = test::message_of<IndexError>([&] { (void)loss.item<double>(); });
  const std::string cpu_ce = test::message_of<IndexError>([&] { cross_entropy(logits.cpu(), t.cpu()); });
  EXPECT_EQ(ce, cpu_ce);
  // Library code that synchronizes for itself (the profiler's clock anchor) leaves the fault
  // for the user's next synchronization instead of swallowing it.
  EXPECT_NO_THROW(y = embedding(w, bad));
  {
    profiler::Profiler p;
    p.start();
    Tensor z = w * 3;
    p.stop();
  }
  const std::string later = test::message_of<IndexError>([&] { cuda::synchronize(); });
  EXPECT_NE(later.find("[embedding] index 12"), std::string::npos) << later;
  // Synchronous mode: raised by the op itself.
  cuda::set_sync_checks(true);
  const std::string at_op = test::message_of<IndexError>([&] { embedding(w, bad); });
  cuda::set_sync_checks(false);
  EXPECT_NE(at_op.find("[embedding] index 12"), std::string::npos) << at_op;
  // Inside a graph: recorded at every replay, raised at the synchronization after it.
  Tensor idx = tensor<int64_t>({1, 2}).to(dev);
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g);
    y = embedding(w, idx);
  }
  g.replay();
  EXPECT_NO_THROW(cuda::synchronize());
  idx.copy_(tensor<int64_t>({1, 99}));
  g.replay();
  const std::string replayed = test::message_of<IndexError>([&] { cuda::synchronize(); });
  EXPECT_NE(replayed.find("[embedding] index 99"), std::string::npos) << replayed;
}
