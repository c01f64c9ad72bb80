// The fused GEMM epilogues (ops::linear_gelu, ops::linear_dgelu_bgrad, ops::linear_weight_grad)
// and the fused GELU MLP (gelu_mlp) against the composite they replace, written here with
// plain matmuls, sums and the GELU derivative spelled out as elementwise ops. The CPU bodies
// run everywhere; the CUDA bodies (skipped without a GPU) compare every epilogue path with
// the CPU: shapes whose widths are multiples of 8 take the cuBLASLt epilogues, odd widths
// take the unfused fallback.
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "ember/ops/linalg.h"
#include "ember/ops/matmul_config.h"
#include "ember/profiler.h"
#include "support/test_support.h"

using namespace ember;

namespace {

using Dims = std::vector<int64_t>;

// gelu_tanh'(x) from its formula (independent of the gelu_tanh_backward functor).
Tensor dgelu_ref(const Tensor& x) {
  const double k = 0.79788456080286535588, c = 0.044715;
  Tensor t = tanh((x + x * x * x * c) * k);
  return (t + 1.0) * 0.5 + x * (1.0 - t * t) * (1.0 + x * x * (3 * c)) * (0.5 * k);
}

Tensor rows(const Tensor& t) { return t.reshape({-1, t.size(-1)}); }

struct MlpRef {
  Tensor y, pre, h, dx, dfw, dfb, dpw, dpb;
};

// The composite in f64 on the CPU: y = gelu(x fw^T + fb) pw^T + pb and its gradients for g.
MlpRef mlp_ref(const Tensor& x_, const Tensor& fw_, const Tensor& fb_, const Tensor& pw_, const Tensor& pb_,
               const Tensor& g_) {
  NoGradGuard no_grad;
  auto f64 = [](const Tensor& t) { return t.cpu().to(DType::f64); };
  const Tensor x = f64(x_), fw = f64(fw_), fb = f64(fb_), pw = f64(pw_), pb = f64(pb_), g = f64(g_);
  MlpRef r;
  r.pre = matmul(x, fw.t()) + fb;
  const double k = 0.79788456080286535588, c = 0.044715;
  r.h = r.pre * 0.5 * (tanh((r.pre + r.pre * r.pre * r.pre * c) * k) + 1.0);
  r.y = matmul(r.h, pw.t()) + pb;
  const Tensor dpre = matmul(g, pw) * dgelu_ref(r.pre);
  r.dx = matmul(dpre, fw);
  r.dfw = matmul(rows(dpre).t(), rows(x));
  r.dfb = rows(dpre).sum({0});
  r.dpw = matmul(rows(g).t(), rows(r.h));
  r.dpb = rows(g).sum({0});
  return r;
}

struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t, bool cuda) {
  switch (t) {
    case DType::f64: return {1e-10, 1e-10};
    // CUDA: exact f32 GEMMs (TF32 off), but the epilogue may evaluate tanh with the
    // hardware approximation (~2^-11 relative); GELU's form is checked apart (TanhNotErf).
    case DType::f32: return cuda ? Tol{2e-3, 2e-3} : Tol{1e-5, 1e-5};
    case DType::f16: return {1e-2, 1e-2};
    default: return {3e-2, 3e-2};  // bf16 keeps 8 bits; several roundings in a chain
  }
}

struct MlpCase {
  const char* name;
  Dims x;         // [..., C]
  int64_t hidden; // 4C in GPT-2
  bool transposed_x = false;  // x built as [T, B, C] and transposed to [B, T, C]
};

// Values of size ~1 in the pre-activation (GELU's curved part, where tanh and erf forms
// differ): scaled weights.
struct MlpInputs {
  Tensor x, fw, fb, pw, pb, g;
};
MlpInputs make_inputs(const MlpCase& c, uint64_t seed) {
  Generator gen(seed);
  const int64_t C = c.x.back();
  MlpInputs in;
  Dims xs = c.x;
  if (c.transposed_x) std::swap(xs[0], xs[1]);
  in.x = randn(Shape(xs), DType::f64, &gen);
  if (c.transposed_x) in.x = in.x.transpose(0, 1);
  in.fw = randn({c.hidden, C}, DType::f64, &gen) * (1.5 / std::sqrt(double(C)));
  in.fb = randn({c.hidden}, DType::f64, &gen) * 0.5;
  in.pw = randn({C, c.hidden}, DType::f64, &gen) * (1.0 / std::sqrt(double(c.hidden)));
  in.pb = randn({C}, DType::f64, &gen) * 0.5;
  Dims ys = c.x;
  in.g = randn(Shape(ys), DType::f64, &gen);
  return in;
}

// gelu_mlp on `dev` in `dt` (inputs rounded to dt first), forward and the five gradients,
// against the f64 composite of the same rounded inputs.
void check_mlp(const MlpCase& c, DType dt, const Device& dev) {
  SCOPED_TRACE(str(c.name, " ", dtype_name(dt), " ", dev.is_cuda() ? "cuda" : "cpu"));
  const MlpInputs in = make_inputs(c, 7);
  auto on = [&](const Tensor& t) {
    Tensor r = t.to(dt);
    return r.to(dev);
  };
  Tensor x = c.transposed_x ? on(in.x.transpose(0, 1).contiguous()).transpose(0, 1) : on(in.x);
  ASSERT_EQ(x.is_contiguous(), !c.transposed_x);
  Tensor fw = on(in.fw).requires_grad_(true), fb = on(in.fb).requires_grad_(true);
  Tensor pw = on(in.pw).requires_grad_(true), pb = on(in.pb).requires_grad_(true);
  x.requires_grad_(true);
  Tensor y = gelu_mlp(x, fw, fb, pw, pb);
  ASSERT_EQ(y.dtype(), dt);
  ASSERT_EQ(y.sizes(), Shape(c.x));
  Tensor g = on(in.g);
  TensorList grads = autograd::grad({y}, {x, fw, fb, pw, pb}, {g});
  MlpRef r = mlp_ref(x.detach(), fw.detach(), fb.detach(), pw.detach(), pb.detach(), g);
  const Tol t = tol_for(dt, dev.is_cuda());
  // In 16 bits the forward stores the activation h = gelu(pre) rounded, as PyTorch's composite
  // does: each element off by up to half an ulp of |h| (0.016 at h = 7.5 in bf16), and
  // dproj_w = g^T h sums that over every row, several times atol on the GPT-2 shape (the
  // first GPU run, on the CPU and CUDA alike). So dproj_w is checked against g^T times the
  // activation the forward stored (ops::linear_gelu, the same kernel), and that activation
  // against the f64 GELU below.
  Tensor h_stored;
  if (dt == DType::bf16 || dt == DType::f16) {
    NoGradGuard no_grad;
    h_stored = ops::linear_gelu(x.detach(), fw.detach(), fb.detach()).first;
    r.dpw = matmul(rows(g.cpu().to(DType::f64)).t(), rows(h_stored.cpu().to(DType::f64)));
  }
  // Parameter gradients sum over every row: in 16-bit their rounding errors grow with it.
  const double rows_n = double(x.numel() / x.size(-1));
  const double sum_scale = dt == DType::bf16 || dt == DType::f16 ? std::max(1.0, std::sqrt(rows_n) / 4) : 1.0;
  auto close = [&](const char* what, const Tensor& got, const Tensor& want, double scale) {
    EXPECT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(test::all_close(got.cpu().to(DType::f64), want, t.rtol, t.atol * scale)) << what;
  };
  close("y", y, r.y, 1);
  if (h_stored.defined()) close("h (stored activation)", h_stored, r.h, 1);
  close("dx", grads[0], r.dx, 1);
  close("dfc_w", grads[1], r.dfw, sum_scale);
  close("dfc_b", grads[2], r.dfb, sum_scale);
  close("dproj_w", grads[3], r.dpw, sum_scale);
  close("dproj_b", grads[4], r.dpb, sum_scale);
}

const std::vector<MlpCase>& cpu_cases() {
  static const std::vector<MlpCase> cases = {
      {"[B,T,C] 2x5x8, 32", {2, 5, 8}, 32},
      {"non-contiguous x [B,T,C]", {3, 4, 6}, 20, true},
      {"2-D x", {7, 5}, 12},
      {"1-D x", {6}, 10},
      {"more rows than a sum chunk", {2, 150, 4}, 9},  // 300 rows: partial sums combine
  };
  return cases;
}

}  // namespace

// ---- CPU: the fused twins equal the composite ----

TEST(FusedMlp, ForwardAndGradsMatchCompositeCpu) {
  for (DType dt : {DType::f32, DType::f64})
    for (const MlpCase& c : cpu_cases()) check_mlp(c, dt, Device::cpu());
}

TEST(FusedMlp, SixteenBitCpu) {
  for (DType dt : {DType::bf16, DType::f16}) check_mlp(cpu_cases()[0], dt, Device::cpu());
}

TEST(FusedMlp, LinearGeluKeepsThePreActivation) {
  Generator gen(3);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = randn({3, 4, 6}, dt, &gen), w = randn({10, 6}, dt, &gen), b = randn({10}, dt, &gen);
    auto [h, pre] = ops::linear_gelu(x, w, b);
    NoGradGuard ng;
    const Tensor pre_ref = matmul(x.to(DType::f64), w.to(DType::f64).t()) + b.to(DType::f64);
    const Tol t = tol_for(dt, false);
    EXPECT_TRUE(test::all_close(pre, pre_ref, t.rtol, t.atol));
    EXPECT_TRUE(test::all_close(h, gelu(pre_ref, true), t.rtol, t.atol));
  }
  // A strided bias (stride 2) and a transposed weight view.
  Tensor x = randn({5, 6}, DType::f64, &gen), wt = randn({6, 10}, DType::f64, &gen), b2 = randn({20}, DType::f64, &gen);
  auto [h, pre] = ops::linear_gelu(x, wt.t(), b2.slice(0, 0, 20, 2));
  NoGradGuard ng;
  EXPECT_TRUE(test::all_close(pre, matmul(x, wt) + b2.slice(0, 0, 20, 2), 1e-12, 1e-12));
}

TEST(FusedMlp, LinearDgeluBgradMatchesComposite) {
  Generator gen(4);
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor g = randn({2, 150, 5}, dt, &gen), w = randn({5, 9}, dt, &gen), pre = randn({2, 150, 9}, dt, &gen);
    auto [dpre, db] = ops::linear_dgelu_bgrad(g, w, pre);
    NoGradGuard ng;
    const Tensor ref = matmul(g.to(DType::f64), w.to(DType::f64)) * dgelu_ref(pre.to(DType::f64));
    const Tol t = tol_for(dt, false);
    EXPECT_TRUE(test::all_close(dpre, ref, t.rtol, t.atol));
    EXPECT_TRUE(test::all_close(db, rows(ref).sum({0}), t.rtol, t.atol * 20));
  }
  // A non-contiguous pre-activation (a transposed view) and no rows at all.
  Tensor g = randn({4, 3}, DType::f64, &gen), w = randn({3, 5}, DType::f64, &gen), pre_t = randn({5, 4}, DType::f64, &gen);
  auto [dpre, db] = ops::linear_dgelu_bgrad(g, w, pre_t.t());
  NoGradGuard ng;
  EXPECT_TRUE(test::all_close(dpre, matmul(g, w) * dgelu_ref(pre_t.t()), 1e-12, 1e-12));
  auto [e, eb] = ops::linear_dgelu_bgrad(randn({0, 3}, DType::f64), w, randn({0, 5}, DType::f64));
  EXPECT_EQ(e.sizes(), Shape({0, 5}));
  EXPECT_TRUE(test::all_close(eb, zeros({5}, DType::f64), 0, 0));
}

TEST(FusedMlp, LinearWeightGradMatchesComposite) {
  Generator gen(5);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tol t = tol_for(dt, false);
    Tensor g = randn({3, 70, 6}, dt, &gen), x = randn({3, 70, 11}, dt, &gen);
    auto [dw, db] = ops::linear_weight_grad(g, x, true);
    NoGradGuard ng;
    const Tensor g64 = rows(g.to(DType::f64)), x64 = rows(x.to(DType::f64));
    EXPECT_EQ(dw.dtype(), dt);
    EXPECT_TRUE(test::all_close(dw, matmul(g64.t(), x64), t.rtol, t.atol * 10));
    EXPECT_TRUE(test::all_close(db, g64.sum({0}), t.rtol, t.atol * 10));
    auto [dw2, none] = ops::linear_weight_grad(g, x, false);
    EXPECT_FALSE(none.defined());
    EXPECT_TRUE(test::all_close(dw2, dw, 0, 0));
  }
  // Non-contiguous grad (transposed leading dims), a 1-D pair, and no rows.
  Tensor gb = randn({4, 3, 6}, DType::f64, &gen), xb = randn({3, 4, 5}, DType::f64, &gen);
  auto [dw, db] = ops::linear_weight_grad(gb.transpose(0, 1), xb, true);
  NoGradGuard ng;
  const Tensor g2 = rows(gb.transpose(0, 1).contiguous()), x2 = rows(xb);
  EXPECT_TRUE(test::all_close(dw, matmul(g2.t(), x2), 1e-12, 1e-12));
  EXPECT_TRUE(test::all_close(db, g2.sum({0}), 1e-12, 1e-12));
  Tensor g1 = randn({6}, DType::f64, &gen), x1 = randn({5}, DType::f64, &gen);
  auto [dw1, db1] = ops::linear_weight_grad(g1, x1, true);
  EXPECT_TRUE(test::all_close(dw1, matmul(g1.reshape({6, 1}), x1.reshape({1, 5})), 1e-12, 1e-12));
  EXPECT_TRUE(test::all_close(db1, g1, 0, 0));
  auto [dw0, db0] = ops::linear_weight_grad(randn({0, 6}, DType::f64), randn({0, 5}, DType::f64), true);
  EXPECT_TRUE(test::all_close(dw0, zeros({6, 5}, DType::f64), 0, 0));
  EXPECT_TRUE(test::all_close(db0, zeros({6}, DType::f64), 0, 0));
}

TEST(FusedMlp, Errors) {
  Tensor x = randn({3, 4}), w = randn({5, 4}), b = randn({5});
  EXPECT_NE(test::message_of<ValueError>([&] { ops::linear_gelu(x, w, Tensor()); }).find("[linear_gelu]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] { ops::linear_gelu(x, randn({5, 3}), b); }).find("[linear_gelu]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] { ops::linear_weight_grad(randn({3, 5}), randn({2, 4}), true); })
                .find("[linear_weight_grad]"),
            std::string::npos);
  EXPECT_NE(test::message_of<ShapeError>([&] { ops::linear_dgelu_bgrad(randn({3, 5}), w, randn({3, 5})); })
                .find("[linear_dgelu_bgrad]"),
            std::string::npos);
  EXPECT_NE(test::message_of<DTypeError>([&] { ops::linear_weight_grad(randn({3, 5}), randn({3, 4}, DType::f64), true); })
                .find("[linear_weight_grad]"),
            std::string::npos);
}

// Autocast: linear's policy (both GEMMs in bf16), gradients back in each input's dtype.
TEST(FusedMlp, AutocastRunsInLowPrecision) {
  const MlpCase c{"autocast", {2, 3, 8}, 16};
  const MlpInputs in = make_inputs(c, 11);
  auto leaf = [](const Tensor& t) { return t.to(DType::f32).requires_grad_(true); };
  Tensor x = leaf(in.x), fw = leaf(in.fw), fb = leaf(in.fb), pw = leaf(in.pw), pb = leaf(in.pb);
  Tensor y, y_comp;
  {
    amp::autocast ac(Device::cpu(), DType::bf16);
    y = gelu_mlp(x, fw, fb, pw, pb);
    y_comp = linear(gelu(linear(x, fw, fb), true), pw, pb);
  }
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(test::all_close(y.to(DType::f32), y_comp.to(DType::f32), 2e-2, 2e-2));
  y.to(DType::f32).sum().backward();
  for (const Tensor& p : {x, fw, fb, pw, pb}) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().dtype(), DType::f32);
  }
  const MlpRef r = mlp_ref(x.detach(), fw.detach(), fb.detach(), pw.detach(), pb.detach(), ones_like(y).to(DType::f32));
  EXPECT_TRUE(test::all_close(fb.grad().to(DType::f64), r.dfb, 5e-2, 5e-2));
  EXPECT_TRUE(test::all_close(pw.grad().to(DType::f64), r.dpw, 5e-2, 5e-2));
}

// Without biases the op is the composite (the epilogues need both).
TEST(FusedMlp, WithoutBiasesIsTheComposite) {
  Generator gen(9);
  Tensor x = randn({4, 6}, DType::f64, &gen).requires_grad_(true), fw = randn({8, 6}, DType::f64, &gen);
  Tensor pw = randn({6, 8}, DType::f64, &gen);
  Tensor y = gelu_mlp(x, fw, Tensor(), pw, Tensor());
  NoGradGuard ng;
  EXPECT_TRUE(test::all_close(y, matmul(gelu(matmul(x, fw.t()), true), pw.t()), 1e-12, 1e-12));
}

// ---- CUDA: every epilogue path against the CPU (skipped without a GPU) ----

namespace {

const std::vector<MlpCase>& cuda_cases() {
  static const std::vector<MlpCase> cases = {
      {"GPT-like [4,64,768] x 3072 (epilogues)", {4, 64, 768}, 3072},
      {"aligned small [2,16,64] x 256 (epilogues)", {2, 16, 64}, 256},
      {"odd hidden 75 (aux ld not a multiple of 8: fallback)", {3, 7, 37}, 75},
      {"odd C 37, hidden 96 (epilogue with odd K)", {2, 9, 37}, 96},
      {"non-contiguous x", {5, 8, 64}, 256, true},
      {"2-D, one row", {1, 64}, 256},
  };
  return cases;
}

class FusedMlpCuda : public ::testing::TestWithParam<Device> {};

}  // namespace

TEST_P(FusedMlpCuda, GeluMlpMatchesCpuComposite) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);  // the f32 tolerance tells the tanh GELU from erf's
  for (DType dt : {DType::f32, DType::bf16, DType::f16})
    for (const MlpCase& c : cuda_cases()) check_mlp(c, dt, dev);
}

TEST_P(FusedMlpCuda, EpilogueOpsMatchCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  Generator gen(21);
  struct Shape3 {
    int64_t M, K, N;
  };
  // Multiples of 8 take the epilogues; odd N (aux ld) and odd everything take the fallback.
  for (Shape3 s : {Shape3{256, 64, 128}, Shape3{1024, 768, 3072}, Shape3{77, 37, 45}, Shape3{33, 40, 24}}) {
    for (DType dt : {DType::f32, DType::bf16, DType::f16}) {
      SCOPED_TRACE(str("M ", s.M, " K ", s.K, " N ", s.N, " ", dtype_name(dt)));
      const Tol t = tol_for(dt, true);
      auto r = [&](Dims d, double scale) { return (randn(Shape(d), DType::f32, &gen) * scale).to(dt); };
      const double ws = 1.0 / std::sqrt(double(s.K));
      Tensor x = r({s.M, s.K}, 1), w = r({s.N, s.K}, ws), b = r({s.N}, 0.5);
      auto [h, pre] = ops::linear_gelu(x.to(dev), w.to(dev), b.to(dev));
      auto [h_c, pre_c] = ops::linear_gelu(x, w, b);
      EXPECT_TRUE(test::all_close(pre.cpu(), pre_c, t.rtol, t.atol)) << "linear_gelu pre";
      EXPECT_TRUE(test::all_close(h.cpu(), h_c, t.rtol, t.atol)) << "linear_gelu out";

      Tensor g = r({s.M, s.K}, 1), w2 = r({s.K, s.N}, ws), p = r({s.M, s.N}, 1);
      auto [dpre, db] = ops::linear_dgelu_bgrad(g.to(dev), w2.to(dev), p.to(dev));
      auto [dpre_c, db_c] = ops::linear_dgelu_bgrad(g, w2, p);
      EXPECT_TRUE(test::all_close(dpre.cpu(), dpre_c, t.rtol, t.atol)) << "dgelu";
      // A sum of M terms: its error grows with M in 16-bit (f32 accumulation, one rounding).
      const double sum_tol = t.atol * std::sqrt(double(s.M)) * 2;
      EXPECT_TRUE(test::all_close(db.cpu(), db_c, t.rtol, sum_tol)) << "dgelu bias grad";

      Tensor gy = r({s.M, s.N}, 1), xx = r({s.M, s.K}, 1);
      auto [dw, dbb] = ops::linear_weight_grad(gy.to(dev), xx.to(dev), true);
      auto [dw_c, dbb_c] = ops::linear_weight_grad(gy, xx, true);
      const double mt = t.atol * std::sqrt(double(s.M)) * 2;
      EXPECT_TRUE(test::all_close(dw.cpu(), dw_c, t.rtol, mt)) << "weight grad";
      EXPECT_TRUE(test::all_close(dbb.cpu(), dbb_c, t.rtol, mt)) << "BGRADB bias grad";
    }
  }
}

// cuBLASLt's GELU must be the tanh form (GPT-2's), not erf's: the two differ by up to ~5e-4,
// about what an approximate tanh in the epilogue may cost, so a plain tolerance cannot tell
// them apart; which of the two the result is nearer to (summed squared distance) can.
TEST_P(FusedMlpCuda, EpilogueGeluIsTheTanhForm) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  Generator gen(23);
  Tensor x = randn({512, 64}, DType::f32, &gen), w = randn({256, 64}, DType::f32, &gen) * 0.3;
  Tensor b = randn({256}, DType::f32, &gen);
  auto [h, pre] = ops::linear_gelu(x.to(dev), w.to(dev), b.to(dev));
  NoGradGuard ng;
  const Tensor p = pre.cpu().to(DType::f64), hv = h.cpu().to(DType::f64);
  const double to_tanh = ((hv - gelu(p, true)) * (hv - gelu(p, true))).sum().item<double>();
  const double to_erf = ((hv - gelu(p, false)) * (hv - gelu(p, false))).sum().item<double>();
  EXPECT_LT(to_tanh, to_erf) << "tanh " << to_tanh << " erf " << to_erf;
  // The backward epilogue: its derivative must be the tanh form's too.
  Tensor g = randn({512, 32}, DType::f32, &gen), w2 = randn({32, 256}, DType::f32, &gen) * 0.2;
  auto [dpre, db] = ops::linear_dgelu_bgrad(g.to(dev), w2.to(dev), pre);
  const Tensor dh = matmul(g.to(DType::f64), w2.to(DType::f64));
  const Tensor d_tanh = dh * dgelu_ref(p);
  Tensor erf_slope;  // d/dp of erf's GELU, by autograd
  {
    AutoGradMode on(true);
    Tensor pl = p.detach().requires_grad_(true);
    erf_slope = autograd::grad({gelu(pl, false)}, {pl}, {ones_like(p)})[0];
  }
  const Tensor d_erf = dh * erf_slope;
  const Tensor dv = dpre.cpu().to(DType::f64);
  const double e_tanh = ((dv - d_tanh) * (dv - d_tanh)).sum().item<double>();
  const double e_erf = ((dv - d_erf) * (dv - d_erf)).sum().item<double>();
  EXPECT_LT(e_tanh, e_erf) << "tanh " << e_tanh << " erf " << e_erf;
}

// The epilogues and the unfused fallbacks give the same values, so the tests above pass
// whichever ran; the fallbacks open a named range (ops/cuda/linalg.cu), counted here. Aligned
// 16-bit problems (GPT-2's) must take the cuBLASLt epilogues, the configurations TE and apex
// use them in (TN GELU_AUX_BIAS, NN DGELU_BGRAD, NT BGRADB); an aux ld that is not a multiple
// of 8 must fall back.
TEST_P(FusedMlpCuda, EpiloguesRunWhereAligned) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  Generator gen(24);
  auto unfused = [](auto&& run) {
    profiler::Profiler prof({.with_cuda = false});
    prof.start();
    run();
    prof.stop();
    std::map<std::string, int64_t> n;
    for (const profiler::Event& e : prof.events()) ++n[e.name];
    return n;
  };
  struct Shape3 {
    int64_t M, K, N;
    bool aligned;
  };
  for (Shape3 s : {Shape3{256, 64, 128, true}, Shape3{1024, 768, 3072, true}, Shape3{64, 64, 45, false}}) {
    for (DType dt : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(str("M ", s.M, " K ", s.K, " N ", s.N, " ", dtype_name(dt)));
      auto r = [&](Dims d) { return randn(Shape(d), DType::f32, &gen).to(dt).to(dev); };
      Tensor x = r({s.M, s.K}), w = r({s.N, s.K}), b = r({s.N});
      Tensor g = r({s.M, s.K}), w2 = r({s.K, s.N}), p = r({s.M, s.N}), gy = r({s.M, s.N});
      auto n = unfused([&] {
        (void)ops::linear_gelu(x, w, b);
        (void)ops::linear_dgelu_bgrad(g, w2, p);
        if (s.aligned) (void)ops::linear_weight_grad(gy, x, true);
      });
      const int64_t want = s.aligned ? 0 : 1;
      EXPECT_EQ(n["gemm_bias_gelu_unfused"], want) << "GELU_AUX_BIAS";
      EXPECT_EQ(n["gemm_dgelu_bgrad_unfused"], want) << "DGELU_BGRAD";
      if (s.aligned) {
        EXPECT_EQ(n["gemm_bgrad_unfused"], 0) << "BGRADB";
      }
    }
  }
}

// The linear VJP's fused weight + bias gradient on the device against the CPU's.
TEST_P(FusedMlpCuda, LinearBackwardMatchesCpu) {
  const Device dev = GetParam();
  EMBER_SKIP_IF_NO_DEVICE(dev);
  cuda::AllowTF32Guard exact_f32(false);
  Generator gen(22);
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tol t = tol_for(dt, true);
    Tensor x = randn({4, 32, 64}, DType::f32, &gen).to(dt), w = randn({48, 64}, DType::f32, &gen).to(dt);
    Tensor b = randn({48}, DType::f32, &gen).to(dt), g = randn({4, 32, 48}, DType::f32, &gen).to(dt);
    TensorList got, want;
    for (const Device& d : {dev, Device::cpu()}) {
      Tensor wl = w.to(d).requires_grad_(true), bl = b.to(d).requires_grad_(true);
      Tensor y = linear(x.to(d), wl, bl);
      TensorList gr = autograd::grad({y}, {wl, bl}, {g.to(d)});
      (d.is_cuda() ? got : want) = TensorList{gr[0].cpu(), gr[1].cpu()};
    }
    EXPECT_TRUE(test::all_close(got[0], want[0], t.rtol, t.atol * 12));
    EXPECT_TRUE(test::all_close(got[1], want[1], t.rtol, t.atol * 12));
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, FusedMlpCuda, ::testing::ValuesIn(test::cuda_devices()), test::device_label);
