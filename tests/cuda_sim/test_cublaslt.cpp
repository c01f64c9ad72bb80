// The simulation's cuBLASLt (core/cuda_sim/cublaslt.cpp) through the cuBLASLt API itself, as
// ember's ops/cuda/cublaslt.cu calls it, against an f64 reference written here: every type and
// transpose, leading dims beyond the rows, strided batches with a broadcast operand, alpha and
// beta with C apart from D, each epilogue ember uses (GELU and its derivative written out
// below), TF32 rounding, the rules the library enforces (shapes, types, epilogue contracts,
// alignment promises, attributes it does not know) and graph capture. Links no libcublasLt.
//
// Operands are multiples of 1/64 in [-2, 2], exact in every type: every product and sum is
// exact in f32 (and most need more bits than f16 or bf16 hold), so a result is the reference
// rounded once to D's type, compared exactly; only GELU's transcendental parts are compared
// with a tolerance.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

enum class Type { f32, f64, f16, bf16 };
constexpr Type kTypes[] = {Type::f32, Type::f64, Type::f16, Type::bf16};

const char* name(Type t) { return t == Type::f32 ? "f32" : t == Type::f64 ? "f64" : t == Type::f16 ? "f16" : "bf16"; }
cudaDataType cuda_type(Type t) {
  return t == Type::f32 ? CUDA_R_32F : t == Type::f64 ? CUDA_R_64F : t == Type::f16 ? CUDA_R_16F : CUDA_R_16BF;
}
size_t bytes_of(Type t) { return t == Type::f64 ? 8 : t == Type::f32 ? 4 : 2; }

double load(Type t, const unsigned char* base, int64_t i) {
  const unsigned char* p = base + size_t(i) * bytes_of(t);
  switch (t) {
    case Type::f32: { float v; std::memcpy(&v, p, 4); return v; }
    case Type::f64: { double v; std::memcpy(&v, p, 8); return v; }
    case Type::f16: { __half v; std::memcpy(&v, p, 2); return __half2float(v); }
    case Type::bf16: { __nv_bfloat16 v; std::memcpy(&v, p, 2); return __bfloat162float(v); }
  }
  return 0;
}
void put(Type t, unsigned char* base, int64_t i, double v) {
  unsigned char* p = base + size_t(i) * bytes_of(t);
  switch (t) {
    case Type::f32: { const float x = float(v); std::memcpy(p, &x, 4); break; }
    case Type::f64: std::memcpy(p, &v, 8); break;
    case Type::f16: { const __half x = __float2half_rn(float(v)); std::memcpy(p, &x, 2); break; }
    case Type::bf16: { const __nv_bfloat16 x = __float2bfloat16_rn(float(v)); std::memcpy(p, &x, 2); break; }
  }
}
// v stored as a `t`, read back (v is exact in f32 wherever this is used, so rounded once).
double round_to(Type t, double v) {
  unsigned char b[8];
  put(t, b, 0, v);
  return load(t, b, 0);
}
// A bound on the error of a transcendental result rounded to `t`, relative to max(1, |x|).
double tolerance(Type t) { return t == Type::f64 ? 1e-12 : t == Type::f32 ? 1e-5 : t == Type::f16 ? 2e-3 : 1.6e-2; }

// GELU's tanh form and its derivative, from their definitions.
double gelu(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1 + std::tanh(u));
}
double gelu_grad(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  const double du = std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}

// A column-major batched matrix on the host: element (i, j) of entry b at b * stride + i + j * ld.
struct Matrix {
  Type type = Type::f32;
  int64_t rows = 0, cols = 0, ld = 1, stride = 0;
  int32_t batch = 1;
  std::vector<unsigned char> bytes;

  Matrix() = default;
  Matrix(Type t, int64_t r, int64_t c, int64_t l, int32_t nb, int64_t s)
      : type(t), rows(r), cols(c), ld(l), stride(s), batch(nb), bytes(size_t(elements()) * bytes_of(t), 0xFF) {}
  int64_t elements() const { return (batch - 1) * stride + ld * cols; }
  int64_t index(int32_t b, int64_t i, int64_t j) const { return b * stride + i + j * ld; }
  double at(int32_t b, int64_t i, int64_t j) const { return load(type, bytes.data(), index(b, i, j)); }
  void set(int32_t b, int64_t i, int64_t j, double v) { put(type, bytes.data(), index(b, i, j), v); }
};

// Device memory from the simulated cudaMalloc: NaN bytes until written.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* p = nullptr;
};
void upload(void* dst, const std::vector<unsigned char>& src) {
  ASSERT_EQ(cudaMemcpyAsync(dst, src.data(), src.size(), cudaMemcpyHostToDevice, nullptr), cudaSuccess);
}
void download(std::vector<unsigned char>& dst, const void* src) {
  ASSERT_EQ(cudaMemcpyAsync(dst.data(), src, dst.size(), cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
}

// What ember's preference promises: the largest power of two (<= 256) dividing the address.
uint32_t alignment(const void* p) {
  const auto u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 1;
  while (a < 256 && u % (a * 2) == 0) a *= 2;
  return a;
}

struct Case {
  Type type = Type::f32;
  bool tf32 = false;  // f32 data: CUBLAS_COMPUTE_32F_FAST_TF32 instead of CUBLAS_COMPUTE_32F
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
  int64_t m = 13, n = 11, k = 9;
  int64_t ld_pad = 0;      // leading dim = rows + ld_pad, for every matrix
  int32_t batch = 1;
  int64_t stride_pad = 0;  // batch stride = ld * cols + stride_pad
  bool broadcast_a = false;  // A's batch stride 0
  double alpha = 1, beta = 0;
  bool c_is_d = true;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int64_t aux_ld = 16;
};

// One cuBLASLt GEMM set up as ember sets it up: operands chosen and uploaded, descriptors
// with the attributes ops/cuda/cublaslt.cu sets, the heuristic asked with the preference it
// passes, the matmul on a stream. Members are public so a test can bend one thing.
struct LtGemm {
  Case cs;
  cublasLtHandle_t handle = nullptr;
  Matrix a, b, c;  // what the test chose
  std::vector<double> bias;  // BIAS, GELU_AUX_BIAS
  Matrix aux;                // DGELU_BGRAD's input
  int64_t vec_len = 0;
  std::unique_ptr<DeviceBuffer> da, db, dc, dd, dvec, daux;
  const void *pa = nullptr, *pb = nullptr, *pc = nullptr;
  void *pd = nullptr, *pvec = nullptr, *paux = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr, ldd = nullptr;
  std::array<uint32_t, 4> promise{};  // A B C D; 0: the pointer's real alignment, as ember does
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  float alpha_f = 0, beta_f = 0;  // the scalars the last matmul pointed at
  double alpha_d = 0, beta_d = 0;

  explicit LtGemm(const Case& c_) : cs(c_) {
    EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    const Type t = cs.type;
    const bool ta = cs.ta != CUBLAS_OP_N, tb = cs.tb != CUBLAS_OP_N;
    auto make = [&](int64_t rows, int64_t cols, bool broadcast) {
      const int64_t ld = rows + cs.ld_pad;
      return Matrix(t, rows, cols, ld, cs.batch, broadcast || cs.batch == 1 ? 0 : ld * cols + cs.stride_pad);
    };
    a = make(ta ? cs.k : cs.m, ta ? cs.m : cs.k, cs.broadcast_a);
    b = make(tb ? cs.n : cs.k, tb ? cs.k : cs.n, false);
    c = make(cs.m, cs.n, false);
    std::mt19937 rng(7);
    // A multiple of 1/64 in [-range, range]: exact in every type for range <= 3.
    auto value = [&](int range) { return double(int(rng() % uint32_t(128 * range + 1)) - 64 * range) / 64; };
    for (Matrix* x : {&a, &b, &c})
      for (int32_t e = 0; e < x->batch; ++e)
        for (int64_t j = 0; j < x->cols; ++j)
          for (int64_t i = 0; i < x->rows; ++i) x->set(e, i, j, value(2));
    da = std::make_unique<DeviceBuffer>(a.bytes.size());
    db = std::make_unique<DeviceBuffer>(b.bytes.size());
    dd = std::make_unique<DeviceBuffer>(c.bytes.size());
    if (!cs.c_is_d) dc = std::make_unique<DeviceBuffer>(c.bytes.size());
    pa = da->p, pb = db->p, pd = dd->p, pc = cs.c_is_d ? dd->p : dc->p;

    const cublasLtEpilogue_t e = cs.epilogue;
    if (e != CUBLASLT_EPILOGUE_DEFAULT) {
      vec_len = e == CUBLASLT_EPILOGUE_BGRADB ? cs.n : cs.m;
      dvec = std::make_unique<DeviceBuffer>(size_t(vec_len) * bytes_of(t));
      pvec = dvec->p;
      if (e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS)
        for (int64_t i = 0; i < vec_len; ++i) bias.push_back(value(2));
    }
    if (e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
      aux = Matrix(t, cs.m, cs.n, cs.aux_ld, 1, 0);
      if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD)
        for (int64_t j = 0; j < cs.n; ++j)
          for (int64_t i = 0; i < cs.m; ++i) aux.set(0, i, j, value(3));
      daux = std::make_unique<DeviceBuffer>(aux.bytes.size());
      paux = daux->p;
    }
    upload_operands();
    describe();
  }
  ~LtGemm() {
    release_descriptors();
    cublasLtDestroy(handle);
  }

  void upload_operands() {
    upload(const_cast<void*>(pa), a.bytes);
    upload(const_cast<void*>(pb), b.bytes);
    // In place, D starts as C when C is read; otherwise D keeps its NaN poison.
    if (!cs.c_is_d) upload(const_cast<void*>(pc), c.bytes);
    else if (cs.beta != 0) upload(pd, c.bytes);
    if (!bias.empty()) {
      std::vector<unsigned char> v(size_t(vec_len) * bytes_of(cs.type));
      for (int64_t i = 0; i < vec_len; ++i) put(cs.type, v.data(), i, bias[size_t(i)]);
      upload(pvec, v);
    }
    if (cs.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD) upload(paux, aux.bytes);
  }

  template <class V>
  void set(cublasLtMatmulDescAttributes_t attr, const V& v) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v), CUBLAS_STATUS_SUCCESS) << attr;
  }
  cublasLtMatrixLayout_t layout(const Matrix& x) {
    cublasLtMatrixLayout_t l = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, cuda_type(x.type), uint64_t(x.rows), uint64_t(x.cols), x.ld),
              CUBLAS_STATUS_SUCCESS);
    if (cs.batch > 1) {
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &x.batch, sizeof x.batch),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &x.stride,
                                                 sizeof x.stride),
                CUBLAS_STATUS_SUCCESS);
    }
    return l;
  }
  void describe() {
    const bool f64 = cs.type == Type::f64;
    const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : cs.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, compute, f64 ? CUDA_R_64F : CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    set(CUBLASLT_MATMUL_DESC_TRANSA, cs.ta);
    set(CUBLASLT_MATMUL_DESC_TRANSB, cs.tb);
    if (cs.epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE, cs.epilogue);
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(pvec));
      set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_type(cs.type));
      if (paux) {
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<const void*>(paux));
        set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, cs.aux_ld);
      }
    }
    la = layout(a), lb = layout(b), lc = layout(c), ldd = layout(c);
  }
  void release_descriptors() {
    for (cublasLtMatrixLayout_t* l : {&la, &lb, &lc, &ldd}) {
      EXPECT_EQ(cublasLtMatrixLayoutDestroy(*l), CUBLAS_STATUS_SUCCESS);  // nullptr: nothing to do
      *l = nullptr;
    }
    EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
    desc = nullptr;
  }

  cublasStatus_t heuristic() {
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const uint64_t workspace = uint64_t(32) << 20;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                   sizeof workspace),
              CUBLAS_STATUS_SUCCESS);
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const void* ptrs[4] = {pa, pb, pc, pd};
    for (int i = 0; i < 4; ++i) {
      const uint32_t bytes = promise[size_t(i)] ? promise[size_t(i)] : alignment(ptrs[i]);
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &bytes, sizeof bytes), CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatmulHeuristicResult_t results[8] = {};
    found = -1;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, lc, ldd, pref, 8, results, &found);
    result = results[0];
    EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
    return st;
  }

  cublasStatus_t matmul(cudaStream_t stream = nullptr, bool with_algo = true) {
    alpha_f = float(cs.alpha), beta_f = float(cs.beta), alpha_d = cs.alpha, beta_d = cs.beta;
    const bool f64 = cs.type == Type::f64;
    const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
    const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
    return cublasLtMatmul(handle, desc, alpha, pa, la, pb, lb, beta, pc, lc, pd, ldd,
                          with_algo ? &result.algo : nullptr, nullptr, 0, stream);
  }
  // The heuristic, then the matmul, both expected to succeed.
  void run() {
    ASSERT_EQ(heuristic(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(found, 1);
    EXPECT_EQ(result.state, CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(result.workspaceSize, size_t(0));
    ASSERT_EQ(matmul(), CUBLAS_STATUS_SUCCESS);
  }

  Matrix d() const {
    Matrix out = c;
    download(out.bytes, pd);
    return out;
  }
  Matrix aux_out() const {
    Matrix out = aux;
    download(out.bytes, paux);
    return out;
  }
  std::vector<double> vec() const {
    std::vector<unsigned char> raw(size_t(vec_len) * bytes_of(cs.type));
    download(raw, pvec);
    std::vector<double> v(static_cast<size_t>(vec_len));
    for (int64_t i = 0; i < vec_len; ++i) v[size_t(i)] = load(cs.type, raw.data(), i);
    return v;
  }

  // The f64 reference: op(A) op(B) of batch entry e.
  double op_a(int32_t e, int64_t i, int64_t q) const { return cs.ta == CUBLAS_OP_N ? a.at(e, i, q) : a.at(e, q, i); }
  double op_b(int32_t e, int64_t q, int64_t j) const { return cs.tb == CUBLAS_OP_N ? b.at(e, q, j) : b.at(e, j, q); }
  double product(int32_t e, int64_t i, int64_t j) const {
    double s = 0;
    for (int64_t q = 0; q < cs.k; ++q) s += op_a(e, i, q) * op_b(e, q, j);
    return s;
  }
};

std::string where(const LtGemm& g, int32_t e, int64_t i, int64_t j) {
  return std::string(name(g.cs.type)) + " op " + std::to_string(g.cs.ta) + std::to_string(g.cs.tb) + " batch " +
         std::to_string(e) + " (" + std::to_string(i) + ", " + std::to_string(j) + ")";
}

// D's elements against `expected` (exact), and its padding rows untouched (still NaN).
template <class F>
void expect_d(const LtGemm& g, F expected) {
  const Matrix d = g.d();
  for (int32_t e = 0; e < g.cs.batch; ++e)
    for (int64_t j = 0; j < g.cs.n; ++j) {
      for (int64_t i = 0; i < g.cs.m; ++i)
        ASSERT_EQ(d.at(e, i, j), round_to(g.cs.type, expected(e, i, j))) << where(g, e, i, j);
      for (int64_t i = g.cs.m; i < d.ld; ++i) ASSERT_TRUE(std::isnan(d.at(e, i, j))) << "padding " << where(g, e, i, j);
    }
}

}  // namespace

// D = alpha op(A) op(B) + beta C for each type and each pair of transposes, leading dims past
// the rows, C and D apart (with different contents): the f64 reference rounded once to D's type.
TEST(SimCublasLt, ProductsMatchAnF64ReferenceForEveryTypeAndTranspose) {
  for (Type t : kTypes)
    for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T})
      for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
        LtGemm g({.type = t, .ta = ta, .tb = tb, .ld_pad = 3, .alpha = 0.5, .beta = -1.5, .c_is_d = false});
        g.run();
        expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return 0.5 * g.product(e, i, j) - 1.5 * g.c.at(e, i, j); });
      }
}

// beta == 0 never reads C (D, fresh device memory, is NaN); in place with beta == 1 it does.
TEST(SimCublasLt, CIsReadOnlyWhenBetaIsNonzero) {
  LtGemm zero({.ld_pad = 1, .alpha = 2, .beta = 0});
  zero.run();
  expect_d(zero, [&](int32_t e, int64_t i, int64_t j) { return 2 * zero.product(e, i, j); });
  LtGemm in_place({.type = Type::bf16, .ld_pad = 1, .beta = 1});
  in_place.run();
  expect_d(in_place, [&](int32_t e, int64_t i, int64_t j) { return in_place.product(e, i, j) + in_place.c.at(e, i, j); });
}

// Strided batches: each entry at its own offsets (gaps between entries), A broadcast (stride 0).
TEST(SimCublasLt, StridedBatchesWithABroadcastOperand) {
  for (Type t : {Type::f32, Type::bf16}) {
    LtGemm g({.type = t, .ta = CUBLAS_OP_T, .ld_pad = 2, .batch = 3, .stride_pad = 5, .broadcast_a = true,
              .beta = 1, .c_is_d = false});
    g.run();
    expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return g.product(e, i, j) + g.c.at(e, i, j); });
  }
}

// Each output is one accumulator of the compute type, summed over k in order: 2^24 + 1 - 2^24
// is 0 in f32 (the 1 is lost to rounding to even), 1 in f64; any other order or a wider
// accumulator gives 1 in f32 too. Five rows: outputs computed together and one alone.
TEST(SimCublasLt, EachOutputSumsOverKInOrderInTheComputeType) {
  for (Type t : {Type::f32, Type::bf16, Type::f64}) {
    LtGemm g({.type = t, .m = 5, .n = 2, .k = 3});
    const double big = std::ldexp(1.0, 24), row[3] = {big, 1, -big};
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t q = 0; q < 3; ++q) g.a.set(0, i, q, row[q]);
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t q = 0; q < 3; ++q) g.b.set(0, q, j, 1);
    g.upload_operands();
    g.run();
    const Matrix d = g.d();
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(d.at(0, i, j), t == Type::f64 ? 1 : 0) << where(g, 0, i, j);
  }
}

// CUBLAS_COMPUTE_32F_FAST_TF32 rounds A and B to 10 mantissa bits before multiplying, so a
// test that forgets to turn TF32 off fails here as on the card; CUBLAS_COMPUTE_32F keeps f32.
TEST(SimCublasLt, Tf32RoundsAAndBBeforeMultiplying) {
  const double u = std::ldexp(1.0, -11);  // half a TF32 ulp at 1
  // A (3 x 1) times B = [1]: 1 + u/2 rounds to 1 in any rounding mode; the ties 1 + u and
  // 1 + 3u go to the even neighbour (the simulation's choice; the card's mode at a tie is one of
  // the things only the card can tell).
  for (bool tf32 : {false, true}) {
    LtGemm g({.tf32 = tf32, .m = 3, .n = 1, .k = 1});
    const double in[3] = {1 + u / 2, 1 + u, 1 + 3 * u};
    for (int64_t i = 0; i < 3; ++i) g.a.set(0, i, 0, in[i]);
    g.b.set(0, 0, 0, 1);
    g.upload_operands();
    g.run();
    const double want[3] = {tf32 ? 1 : in[0], tf32 ? 1 : in[1], tf32 ? 1 + 4 * u : in[2]};
    const Matrix d = g.d();
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(d.at(0, i, 0), want[i]) << (tf32 ? "tf32 " : "f32 ") << i;
  }
  // B is rounded too.
  for (bool tf32 : {false, true}) {
    LtGemm g({.tf32 = tf32, .m = 1, .n = 1, .k = 1});
    g.a.set(0, 0, 0, 1);
    g.b.set(0, 0, 0, 1 + u / 2);
    g.upload_operands();
    g.run();
    EXPECT_EQ(g.d().at(0, 0, 0), tf32 ? 1 : 1 + u / 2);
  }
  // TF32 is an f32-only compute type.
  LtGemm f16({.type = Type::f16, .tf32 = true});
  EXPECT_EQ(f16.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(f16.found, 0);
  EXPECT_EQ(f16.matmul(nullptr, false), CUBLAS_STATUS_NOT_SUPPORTED);
}

// BIAS adds bias[row of D] (a vector of D's type, m long), in every type; a batch shares it.
TEST(SimCublasLt, BiasEpilogueAddsAVectorAlongTheRowsOfD) {
  for (Type t : kTypes) {
    LtGemm g({.type = t, .ld_pad = 2, .alpha = 0.5, .epilogue = CUBLASLT_EPILOGUE_BIAS});
    g.run();
    expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return 0.5 * g.product(e, i, j) + g.bias[size_t(i)]; });
  }
  LtGemm batched({.batch = 2, .epilogue = CUBLASLT_EPILOGUE_BIAS});
  batched.run();
  expect_d(batched, [&](int32_t e, int64_t i, int64_t j) { return batched.product(e, i, j) + batched.bias[size_t(i)]; });
}

// GELU_AUX_BIAS: aux = AB + bias (D's type, leading dim AUX_LD), D = gelu(aux), tanh form.
TEST(SimCublasLt, GeluAuxBiasWritesThePreActivation) {
  for (Type t : kTypes) {
    LtGemm g({.type = t, .epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, .aux_ld = 16});
    g.run();
    const Matrix d = g.d(), aux = g.aux_out();
    for (int64_t j = 0; j < g.cs.n; ++j) {
      for (int64_t i = 0; i < g.cs.m; ++i) {
        const double pre = g.product(0, i, j) + g.bias[size_t(i)];
        ASSERT_EQ(aux.at(0, i, j), round_to(t, pre)) << where(g, 0, i, j);
        const double want = gelu(pre);
        ASSERT_NEAR(d.at(0, i, j), want, tolerance(t) * std::max(1.0, std::fabs(want))) << where(g, 0, i, j);
      }
      for (int64_t i = g.cs.m; i < aux.ld; ++i) ASSERT_TRUE(std::isnan(aux.at(0, i, j))) << "aux padding";
    }
  }
}

// DGELU_BGRAD: D = AB * gelu'(aux), and the bias gradient (m long) = the sum of each row of D.
TEST(SimCublasLt, DgeluBgradScalesByTheDerivativeAndSumsTheRows) {
  for (Type t : kTypes) {
    LtGemm g({.type = t, .ta = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, .aux_ld = 24});
    g.run();
    const Matrix d = g.d();
    const std::vector<double> grad = g.vec();
    for (int64_t i = 0; i < g.cs.m; ++i) {
      double sum = 0, magnitude = 0;
      for (int64_t j = 0; j < g.cs.n; ++j) {
        const double want = g.product(0, i, j) * gelu_grad(g.aux.at(0, i, j));
        ASSERT_NEAR(d.at(0, i, j), want, tolerance(t) * std::max(1.0, std::fabs(want))) << where(g, 0, i, j);
        sum += want, magnitude += std::fabs(want);
      }
      EXPECT_NEAR(grad[size_t(i)], sum, tolerance(t) * std::max(1.0, magnitude)) << name(t) << " row " << i;
    }
  }
}

// BGRADA: bias gradient[i] = sum over k of op(A)(i, k) (m long); BGRADB: [j] = sum over k of
// op(B)(k, j) (n long). D is the plain product.
TEST(SimCublasLt, BgradAAndBgradBReduceTheirOperandOverK) {
  for (Type t : kTypes)
    for (cublasOperation_t op : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      LtGemm ga({.type = t, .ta = op, .ld_pad = 1, .epilogue = CUBLASLT_EPILOGUE_BGRADA});
      ga.run();
      expect_d(ga, [&](int32_t e, int64_t i, int64_t j) { return ga.product(e, i, j); });
      const std::vector<double> va = ga.vec();
      ASSERT_EQ(va.size(), size_t(ga.cs.m));
      for (int64_t i = 0; i < ga.cs.m; ++i) {
        double s = 0;
        for (int64_t q = 0; q < ga.cs.k; ++q) s += ga.op_a(0, i, q);
        EXPECT_EQ(va[size_t(i)], round_to(t, s)) << name(t) << " BGRADA " << i;
      }
      LtGemm gb({.type = t, .tb = op, .ld_pad = 1, .epilogue = CUBLASLT_EPILOGUE_BGRADB});
      gb.run();
      expect_d(gb, [&](int32_t e, int64_t i, int64_t j) { return gb.product(e, i, j); });
      const std::vector<double> vb = gb.vec();
      ASSERT_EQ(vb.size(), size_t(gb.cs.n));
      for (int64_t j = 0; j < gb.cs.n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < gb.cs.k; ++q) s += gb.op_b(0, q, j);
        EXPECT_EQ(vb[size_t(j)], round_to(t, s)) << name(t) << " BGRADB " << j;
      }
    }
}

// What the epilogues require, refused as the library refuses it (or, where ember never asks
// and the documentation is silent, as NOT_SUPPORTED).
TEST(SimCublasLt, EpilogueContractsAreEnforced) {
  {  // The vector is of D's type.
    LtGemm g({.type = Type::bf16, .epilogue = CUBLASLT_EPILOGUE_BIAS});
    g.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(g.found, 0);
  }
  for (int64_t aux_ld : {20, 8}) {  // AUX_LD: a multiple of 8 and >= m (13)
    LtGemm g({.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, .aux_ld = aux_ld});
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE) << aux_ld;
    EXPECT_EQ(g.matmul(nullptr, false), CUBLAS_STATUS_INVALID_VALUE) << aux_ld;
  }
  {  // A batched GELU would need AUX_BATCH_STRIDE, which ember never sets.
    LtGemm g({.batch = 2, .epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // cuBLASLt has no DGELU kernel for k == 1.
    LtGemm g({.k = 1, .epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD});
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // beta != 0 with a GELU epilogue, alpha != 1 with a bias gradient: refused when called.
    LtGemm g({.beta = 1, .epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS});
    ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.matmul(), CUBLAS_STATUS_NOT_SUPPORTED);
    LtGemm h({.alpha = 2, .epilogue = CUBLASLT_EPILOGUE_BGRADA});
    ASSERT_EQ(h.heuristic(), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(h.matmul(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // A vector the epilogue needs and lacks, or one it would never touch.
    LtGemm g({.epilogue = CUBLASLT_EPILOGUE_BIAS});
    g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(nullptr));
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
    LtGemm h({});
    h.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(h.pd));
    EXPECT_EQ(h.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
  }
}

// The layouts must agree with the operation's shapes, batch counts and types.
TEST(SimCublasLt, LayoutsMustAgreeWithTheOperation) {
  auto replace = [](cublasLtMatrixLayout_t& l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(l), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
  };
  {  // B's rows are not op(A)'s columns.
    LtGemm g({});
    replace(g.lb, CUDA_R_32F, uint64_t(g.cs.k + 1), uint64_t(g.cs.n), g.cs.k + 1);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(g.matmul(nullptr, false), CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // A transposed without its layout saying so.
    LtGemm g({});
    g.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // A leading dim below the rows.
    LtGemm g({});
    replace(g.lc, CUDA_R_32F, uint64_t(g.cs.m), uint64_t(g.cs.n), g.cs.m - 1);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // Batch counts that differ.
    LtGemm g({.batch = 2});
    const int32_t three = 3;
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(g.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &three, sizeof three),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // Mixed types, and a compute type for other data.
    LtGemm g({});
    replace(g.lc, CUDA_R_16F, uint64_t(g.cs.m), uint64_t(g.cs.n), g.cs.m);
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    LtGemm h({});
    ASSERT_EQ(cublasLtMatmulDescDestroy(h.desc), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulDescCreate(&h.desc, CUBLAS_COMPUTE_64F, CUDA_R_64F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(h.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
  }
}

// The heuristic's algorithm assumes what the preference promised about A-D and what it saw of
// the bias and aux pointers; a matmul whose pointers break that is refused.
TEST(SimCublasLt, AlignmentPromisesAreKept) {
  DeviceBuffer spare(4096);
  char* base = static_cast<char*>(spare.p);
  {
    LtGemm g({});
    g.promise = {16, 0, 0, 0};
    ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMemcpyAsync(base + 4, g.pa, g.a.bytes.size(), cudaMemcpyDeviceToDevice, nullptr), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(base + 2048 + 16, g.pa, g.a.bytes.size(), cudaMemcpyDeviceToDevice, nullptr),
              cudaSuccess);
    g.pa = base + 4;  // 4-byte aligned: below the 16 promised
    EXPECT_EQ(g.matmul(), CUBLAS_STATUS_INVALID_VALUE);
    g.pa = base + 2048 + 16;  // the promise holds
    ASSERT_EQ(g.matmul(), CUBLAS_STATUS_SUCCESS);
    expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return g.product(e, i, j); });
  }
  {  // A promise below an element's size leaves no algorithm.
    LtGemm g({});
    g.promise = {0, 2, 0, 0};
    EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(g.found, 0);
  }
  {  // Without an algorithm there is no promise, but an element off its natural alignment faults.
    LtGemm g({});
    g.pb = base + 2;
    EXPECT_EQ(g.matmul(nullptr, false), CUBLAS_STATUS_INVALID_VALUE);
  }
  {  // The bias pointer the heuristic saw (256-byte aligned), then one only 4-byte aligned.
    LtGemm g({.epilogue = CUBLASLT_EPILOGUE_BIAS});
    ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
    g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(base + 4));
    EXPECT_EQ(g.matmul(), CUBLAS_STATUS_INVALID_VALUE);
  }
}

// An algorithm serves the types and the epilogue it was chosen for.
TEST(SimCublasLt, AnAlgorithmServesTheProblemItWasChosenFor) {
  LtGemm g({});
  ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer bias(256);
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
  g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.p));
  EXPECT_EQ(g.matmul(), CUBLAS_STATUS_NOT_SUPPORTED);
  g.result.algo = cublasLtMatmulAlgo_t{};  // never initialized by a heuristic
  EXPECT_EQ(g.matmul(), CUBLAS_STATUS_INVALID_VALUE);
}

// Attributes and values ember does not use are refused, never ignored; malformed ones are
// invalid.
TEST(SimCublasLt, UnusedAttributesAndValuesAreRefused) {
  LtGemm g({});
  const int32_t host = CUBLASLT_POINTER_MODE_HOST;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, &host, sizeof host),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU, bogus = 12345;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &bogus, sizeof bogus),
            CUBLAS_STATUS_INVALID_VALUE);
  const int32_t conj = CUBLAS_OP_C, nine = 9;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &conj, sizeof conj),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &nine, sizeof nine),
            CUBLAS_STATUS_INVALID_VALUE);
  const int64_t wide = CUBLAS_OP_T;  // the attribute is an int32_t
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4), CUBLAS_STATUS_INVALID_VALUE);
  const int32_t int8 = CUDA_R_8I;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &int8, sizeof int8),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const int32_t row = CUBLASLT_ORDER_ROW, none = 0;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(g.la, CUBLASLT_MATRIX_LAYOUT_ORDER, &row, sizeof row),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(g.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &none, sizeof none),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t best_fit = CUBLASLT_SEARCH_BEST_FIT;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &best_fit, sizeof best_fit),
            CUBLAS_STATUS_NOT_SUPPORTED);
  const uint64_t sixteen = 16;  // the alignments are uint32_t
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &sixteen,
                                                 sizeof sixteen),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulDesc_t d = nullptr;
  EXPECT_EQ(cublasLtMatmulDescCreate(&d, cublasComputeType_t(12345), CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);
  // What was refused changed nothing: the GEMM still runs as described.
  g.run();
  expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return g.product(e, i, j); });
}

// Handles and arguments, the status strings and the version.
TEST(SimCublasLt, HandlesArgumentsStatusStringsAndVersion) {
  EXPECT_EQ(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  LtGemm g({});
  cublasLtHandle_t live = g.handle;
  g.handle = nullptr;
  EXPECT_EQ(g.heuristic(), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(g.matmul(nullptr, false), CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtHandle_t gone = nullptr;
  ASSERT_EQ(cublasLtCreate(&gone), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtDestroy(gone), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtDestroy(gone), CUBLAS_STATUS_NOT_INITIALIZED);
  g.handle = gone;
  EXPECT_EQ(g.matmul(nullptr, false), CUBLAS_STATUS_NOT_INITIALIZED);
  g.handle = live;

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t r{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.la, g.lb, g.lc, g.ldd, pref, 0, &r, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(g.handle, nullptr, g.la, g.lb, g.lc, g.ldd, pref, 1, &r, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  // The library's default promises (256 bytes) hold for cudaMalloc's pointers.
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(g.handle, g.desc, g.la, g.lb, g.lc, g.ldd, pref, 1, &r, &found),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
  const float one = 1;
  EXPECT_EQ(cublasLtMatmul(g.handle, g.desc, nullptr, g.pa, g.la, g.pb, g.lb, &one, g.pc, g.lc, g.pd, g.ldd, &r.algo,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmul(g.handle, g.desc, &one, g.pa, g.la, g.pb, g.lb, &one, g.pc, g.lc, nullptr, g.ldd, &r.algo,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);

  std::set<std::string> strings;
  for (cublasStatus_t s : {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
                           CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_MAPPING_ERROR,
                           CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_NOT_SUPPORTED,
                           CUBLAS_STATUS_LICENSE_ERROR})
    strings.insert(cublasLtGetStatusString(s));
  EXPECT_EQ(strings.size(), size_t(10));
  int major = 0, minor = -1;
  EXPECT_EQ(cublasLtGetProperty(MAJOR_VERSION, &major), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtGetProperty(MINOR_VERSION, &minor), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(major, CUBLAS_VER_MAJOR);
  EXPECT_EQ(minor, CUBLAS_VER_MINOR);
}

// On a capturing stream the matmul is recorded, not run; each replay runs it with the alpha of
// the call (pointer mode host reads it then), after its descriptors are gone.
TEST(SimCublasLt, CaptureRecordsTheMatmulForEachReplay) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  LtGemm g({.alpha = 0.5, .beta = 1, .epilogue = CUBLASLT_EPILOGUE_BIAS});
  ASSERT_EQ(g.heuristic(), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(g.matmul(s), CUBLAS_STATUS_SUCCESS);
  g.alpha_f = 100;  // too late: the call read 0.5
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  expect_d(g, [&](int32_t e, int64_t i, int64_t j) { return g.c.at(e, i, j); });  // not run
  g.release_descriptors();
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Twice D = 0.5 AB + D + bias, in place.
  expect_d(g, [&](int32_t e, int64_t i, int64_t j) {
    return g.c.at(e, i, j) + 2 * (0.5 * g.product(e, i, j) + g.bias[size_t(i)]);
  });
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// A product of a few hundred on general f32 data: within the f32 accumulation bound (k unit
// roundoffs of the sum of magnitudes) of the f64 reference.
TEST(SimCublasLt, LargerProductsStayWithinF32Error) {
  LtGemm g({.ta = CUBLAS_OP_T, .m = 200, .n = 150, .k = 120});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t j = 0; j < g.a.cols; ++j)
    for (int64_t i = 0; i < g.a.rows; ++i) g.a.set(0, i, j, u(rng));
  for (int64_t j = 0; j < g.b.cols; ++j)
    for (int64_t i = 0; i < g.b.rows; ++i) g.b.set(0, i, j, u(rng));
  g.upload_operands();
  g.run();
  const Matrix d = g.d();
  for (int64_t j = 0; j < g.cs.n; ++j)
    for (int64_t i = 0; i < g.cs.m; ++i) {
      double magnitude = 0;
      for (int64_t q = 0; q < g.cs.k; ++q) magnitude += std::fabs(g.op_a(0, i, q) * g.op_b(0, q, j));
      ASSERT_NEAR(d.at(0, i, j), g.product(0, i, j), double(g.cs.k) * std::ldexp(magnitude, -24)) << where(g, 0, i, j);
    }
}
