// scaled_dot_product_attention with attn_mask and dropout_p (Note [attention masks and
// dropout]) against the composite it replaces, built in f64 from ember ops: matmul, scale,
// where / add of the mask, softmax, the same dropout mask (ops::dropout_mask over
// [B, H, Tq, Tk] from the same generator state), matmul; gradients through autograd of the
// composite. Broadcast masks (key padding [B, 1, 1, Tk], [Tq, Tk], [1, H, 1, Tk]) of both
// kinds, non-contiguous q, k, v and masks, several 64-row blocks, gradcheck in f64, dropout
// statistics and reproducibility, fully masked rows, errors; on CUDA: the generic kernels
// (dropout, or any dtype) and the tensor-core kernels (f16/bf16 masks) against the CPU, and
// proof (the tensor-core path's profiler range) of which path ran: masks take the tensor-core
// path, dropout never does.
#include <cmath>
#include <limits>

#include <ember/ops/attention.h>
#include <ember/ops/index.h>
#include <ember/profiler.h>

#include "support/attention_check.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The composite: softmax(scale q k^T (+ mask)) (* dropout) v, in q's dtype. A bool mask keeps
// where true. `drop` is undefined or the bool keep-mask [B, H, Tq, Tk].
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                 const Tensor& drop = Tensor(), double p = 0) {
  Tensor s = q.matmul(k.transpose(2, 3)).mul(1.0 / std::sqrt(double(q.sizes()[3])));
  if (mask.defined()) {
    if (mask.dtype() == DType::b8) s = where(mask, s, -kInf);
    else s = s + mask.to(s.dtype());
  }
  Tensor pr = s.softmax(3);
  if (drop.defined()) pr = where(drop, pr.mul(1.0 / (1.0 - p)), 0.0);
  return pr.matmul(v);
}

// [B, H, T, D] view of a [B, T, H, D] buffer: non-contiguous, unit last stride.
Tensor heads(const Shape& bhtd, Generator& gen, DType dt = DType::f64) {
  return randn({bhtd[0], bhtd[2], bhtd[1], bhtd[3]}, dt, &gen).transpose(1, 2);
}

struct Grads {
  Tensor out, dq, dk, dv;
};

// Output and input gradients of `fn(q, k, v)` for the output gradient g.
template <class F>
Grads run(F&& fn, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g) {
  Tensor ql = q.detach().requires_grad_(true), kl = k.detach().requires_grad_(true),
         vl = v.detach().requires_grad_(true);
  Tensor out = fn(ql, kl, vl);
  (out * g).sum().backward();
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

void expect_close(const Grads& a, const Grads& b, double rtol, double atol) {
  EXPECT_TRUE(all_close(a.out, b.out, rtol, atol)) << "out";
  EXPECT_TRUE(all_close(a.dq, b.dq, rtol, atol)) << "dq";
  EXPECT_TRUE(all_close(a.dk, b.dk, rtol, atol)) << "dk";
  EXPECT_TRUE(all_close(a.dv, b.dv, rtol, atol)) << "dv";
}

// Keep-masks of every broadcast form, as the user would build them (no row fully masked).
struct MaskCase {
  const char* name;
  Tensor mask;
};

// `m` (bool, last dim Tk) with key 0 kept in every row.
Tensor keep_key0(const Tensor& m) {
  const int64_t Tk = m.sizes().back();
  return where(arange(Tk).eq(0), ones({}, DType::b8), m);
}

std::vector<MaskCase> masks_for(int64_t B, int64_t H, int64_t Tq, int64_t Tk, Generator& gen) {
  std::vector<MaskCase> out;
  // Key padding: batch b keeps its first len_b keys, as [B, 1, 1, Tk].
  std::vector<double> pad(size_t(B * Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < Tk; ++j) pad[size_t(b * Tk + j)] = j < Tk - 7 * b;
  out.push_back({"key padding bool [B,1,1,Tk]", tensor<double>(pad, {B, Tk}).gt(0.5).reshape({B, 1, 1, Tk})});
  // A random bool [Tq, Tk] read through a transposed (non-contiguous) view, key 0 always kept.
  const Tensor r = where(arange(Tk).eq(0).reshape({Tk, 1}), ones({}, DType::b8),
                        rand({Tk, Tq}, DType::f64, &gen).gt(0.4));
  out.push_back({"bool [Tq,Tk] transposed", r.transpose(0, 1)});
  // Additive f64 [Tq, Tk] with -inf holes (never in column 0).
  Tensor f = randn({Tq, Tk}, DType::f64, &gen);
  f = where(rand({Tq, Tk}, DType::f64, &gen).gt(0.8), -kInf, f);
  out.push_back({"float [Tq,Tk] with -inf", where(arange(Tk).eq(0), 0.0, f)});
  // Additive per-head bias [1, H, 1, Tk], an expanded view (stride 0 in the last dim too).
  out.push_back({"float [1,H,1,Tk] expanded",
                 randn({1, H, 1, 1}, DType::f64, &gen).expand({1, H, 1, Tk})});
  // Full [B, H, Tq, Tk] bool.
  out.push_back({"bool [B,H,Tq,Tk]",
                 keep_key0(rand({B, H, Tq, Tk}, DType::f64, &gen).gt(0.5))});
  return out;
}

TEST(AttentionMask, MatchesCompositeF64BroadcastAndStrided) {
  struct Geo {
    int64_t B, H, Tq, Tk, D;
  };
  for (Geo g : {Geo{2, 3, 5, 9, 4}, Geo{2, 2, 70, 67, 8}}) {
    Generator gen(41);
    const Tensor q = heads({g.B, g.H, g.Tq, g.D}, gen), k = heads({g.B, g.H, g.Tk, g.D}, gen),
                 v = heads({g.B, g.H, g.Tk, g.D}, gen);
    const Tensor gout = randn({g.B, g.H, g.Tq, g.D}, DType::f64, &gen);
    for (const MaskCase& m : masks_for(g.B, g.H, g.Tq, g.Tk, gen)) {
      SCOPED_TRACE(str(m.name, " Tq ", g.Tq, " Tk ", g.Tk));
      const Grads fused = run(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) {
            return scaled_dot_product_attention(a, b, c, m.mask);
          },
          q, k, v, gout);
      const Grads ref = run(
          [&](const Tensor& a, const Tensor& b, const Tensor& c) { return composite(a, b, c, m.mask); },
          q, k, v, gout);
      expect_close(fused, ref, 1e-10, 1e-12);
    }
  }
}

TEST(AttentionMask, F32InputsWithF32AndBoolMasks) {
  Generator gen(42);
  const int64_t B = 2, H = 2, T = 33, D = 16;
  const Tensor q = heads({B, H, T, D}, gen, DType::f32), k = heads({B, H, T, D}, gen, DType::f32),
               v = heads({B, H, T, D}, gen, DType::f32);
  const Tensor fmask = randn({T, T}, DType::f32, &gen);
  const Tensor bmask = keep_key0(rand({B, 1, 1, T}, DType::f64, &gen).gt(0.3));
  for (const Tensor& mask : {fmask, bmask}) {
    const Tensor got = scaled_dot_product_attention(q, k, v, mask);
    const Tensor ref = composite(q.to(DType::f64), k.to(DType::f64), v.to(DType::f64), mask);
    EXPECT_TRUE(all_close(got, ref, 1e-5, 1e-5));
  }
}

TEST(AttentionMask, GradcheckF64) {
  Generator gen(43);
  const Tensor q = randn({1, 2, 4, 3}, DType::f64, &gen).requires_grad_(true);
  const Tensor k = randn({1, 2, 5, 3}, DType::f64, &gen).requires_grad_(true);
  const Tensor v = randn({1, 2, 5, 3}, DType::f64, &gen).requires_grad_(true);
  const Tensor bmask = where(arange(5).eq(2), ones({}, DType::b8), rand({4, 5}, DType::f64, &gen).gt(0.5));
  const Tensor fmask = randn({1, 2, 1, 5}, DType::f64, &gen);
  for (const Tensor& mask : {bmask, fmask})
    EXPECT_TRUE(autograd::gradcheck(
        [&](const TensorList& in) { return scaled_dot_product_attention(in[0], in[1], in[2], mask); },
        {q, k, v}));
  // Dropout: every evaluation replays the same generator state, so the function is fixed.
  Generator& dg = default_generator(Device::cpu());
  const Generator::State s0 = dg.get_state();
  EXPECT_TRUE(autograd::gradcheck(
      [&](const TensorList& in) {
        dg.set_state(s0);
        return scaled_dot_product_attention(in[0], in[1], in[2], bmask, 0.3);
      },
      {q, k, v}));
}

// With q = 0 every probability is 1/Tk, and with v = the identity rows the output holds the
// dropout mask itself: out[i, j] = keep_ij / (Tk (1 - p)).
TEST(AttentionMask, DropoutStatisticsAndReproducibility) {
  const int64_t B = 2, H = 2, Tq = 64, Tk = 32;
  const double p = 0.3;
  const Tensor q = zeros({B, H, Tq, Tk}, DType::f64);
  const Tensor k = randn({B, H, Tk, Tk}, DType::f64);
  const Tensor v = arange(Tk).reshape({Tk, 1}).eq(arange(Tk).reshape({1, Tk})).to(DType::f64).expand({B, H, Tk, Tk});
  manual_seed(5);
  const Tensor a = scaled_dot_product_attention(q, k, v, Tensor(), p);
  const std::vector<double> vals = a.mul(double(Tk) * (1 - p)).contiguous().to_vector<double>();
  int64_t kept = 0;
  for (double x : vals) {
    ASSERT_TRUE(std::fabs(x) < 1e-9 || std::fabs(x - 1) < 1e-9) << x;
    kept += x > 0.5;
  }
  const double frac = double(kept) / double(vals.size());
  EXPECT_NEAR(frac, 1 - p, 0.025);  // 8192 draws: sigma 0.005
  manual_seed(5);
  const Tensor b = scaled_dot_product_attention(q, k, v, Tensor(), p);
  EXPECT_TRUE(all_close(a, b, 0, 0)) << "same seed, same mask";
  const Tensor c = scaled_dot_product_attention(q, k, v, Tensor(), p);
  EXPECT_FALSE(all_close(a, c, 0, 0)) << "the next call draws new counters";
}

// The backward regenerates the forward's mask: fused gradients equal the composite's with the
// mask ops::dropout_mask draws from the same generator state.
TEST(AttentionMask, DropoutBackwardMatchesCompositeWithTheSameMask) {
  Generator gen(44);
  const int64_t B = 2, H = 2, Tq = 70, Tk = 66, D = 8;
  const double p = 0.25;
  const Tensor q = heads({B, H, Tq, D}, gen), k = heads({B, H, Tk, D}, gen),
               v = heads({B, H, Tk, D}, gen);
  const Tensor gout = randn({B, H, Tq, D}, DType::f64, &gen);
  const Tensor mask = keep_key0(rand({B, 1, 1, Tk}, DType::f64, &gen).gt(0.2));
  for (const Tensor& m : {Tensor(), mask}) {
    SCOPED_TRACE(m.defined() ? "masked" : "unmasked");
    Generator& dg = default_generator(Device::cpu());
    const Generator::State s0 = dg.get_state();
    const Grads fused = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& c) {
          return scaled_dot_product_attention(a, b, c, m, p);
        },
        q, k, v, gout);
    EXPECT_EQ(dg.get_state().offset - s0.offset, ops::attention_dropout_counters(B, H, Tq, Tk));
    const Tensor keep = ops::dropout_mask({B, H, Tq, Tk}, Device::cpu(), s0, p);
    const Grads ref = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& c) { return composite(a, b, c, m, keep, p); },
        q, k, v, gout);
    expect_close(fused, ref, 1e-10, 1e-12);
  }
}

// A query row whose keys are all masked: output 0 and gradient 0 (not NaN), the other rows
// unaffected.
TEST(AttentionMask, FullyMaskedRowsGiveZerosAndZeroGrads) {
  Generator gen(45);
  const Tensor q = randn({1, 2, 3, 4}, DType::f64, &gen), k = randn({1, 2, 5, 4}, DType::f64, &gen),
               v = randn({1, 2, 5, 4}, DType::f64, &gen);
  std::vector<double> m(15, 1);
  for (int j = 0; j < 5; ++j) m[size_t(5 + j)] = 0;  // row 1 sees nothing
  const Tensor mask = tensor<double>(m, {3, 5}).gt(0.5);
  std::vector<double> fm(15, 0.0);
  for (int j = 0; j < 5; ++j) fm[size_t(5 + j)] = -kInf;
  const Tensor fmask = tensor<double>(fm, {3, 5});
  const Tensor gout = randn({1, 2, 3, 4}, DType::f64, &gen);
  for (const Tensor& mk : {mask, fmask}) {
    const Grads got = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& c) {
          return scaled_dot_product_attention(a, b, c, mk);
        },
        q, k, v, gout);
    EXPECT_TRUE(all_close(got.out.select(2, 1), zeros({1, 2, 4}, DType::f64), 0, 0));
    EXPECT_TRUE(all_close(got.dq.select(2, 1), zeros({1, 2, 4}, DType::f64), 0, 0));
    // Rows 0 and 2 as unmasked attention; dk, dv from those rows only.
    const Tensor rows = arange(0, 3, 2);
    const Grads ref = run(
        [&](const Tensor& a, const Tensor& b, const Tensor& c) { return composite(a, b, c, Tensor()); },
        q.index_select(2, rows), k, v, gout.index_select(2, rows));
    EXPECT_TRUE(all_close(got.out.index_select(2, rows), ref.out, 1e-12, 1e-13));
    EXPECT_TRUE(all_close(got.dk, ref.dk, 1e-12, 1e-13));
    EXPECT_TRUE(all_close(got.dv, ref.dv, 1e-12, 1e-13));
  }
}

// The kernel-level contract on the CPU, in every dtype and with rows long enough for Eigen's
// vectorized exp (whose exp(-inf) is a denormal, not 0): a fully masked row gives out = 0,
// lse = +inf, dq = 0 and nothing NaN. Before the first GPU run's fix the f32 CPU kernel gave
// the row the mean of V and lse = -inf (its backward then NaN), which only the CUDA test saw.
TEST(AttentionMask, FullyMaskedRowKernelContractOnTheCpu) {
  Generator gen(50);
  const int64_t B = 1, H = 2, Tq = 4, Tk = 40, D = 16;
  std::vector<double> keepv(size_t(Tq * Tk), 1.0);
  for (int64_t j = 0; j < Tk; ++j) keepv[size_t(1 * Tk + j)] = 0;  // row 1 sees nothing
  const Tensor keep = tensor<double>(keepv, {Tq, Tk}).gt(0.5);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor q = heads({B, H, Tq, D}, gen).to(dt), k = heads({B, H, Tk, D}, gen).to(dt),
                 v = heads({B, H, Tk, D}, gen).to(dt), g = heads({B, H, Tq, D}, gen).to(dt);
    const ops::AttentionExtras ex{keep, 0.0, {}};
    const ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, ex, false);
    const ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(g, q, k, v, f.out, f.lse, ex, false);
    for (double l : f.lse.select(2, 1).to_vector<double>()) EXPECT_EQ(l, kInf);
    EXPECT_TRUE(all_close(f.out.select(2, 1), zeros({B, H, D}, DType::f64), 0, 0));
    EXPECT_TRUE(all_close(b.dq.select(2, 1), zeros({B, H, D}, DType::f64), 0, 0));
    for (const Tensor& t : {f.out, f.lse, b.dq, b.dk, b.dv})
      for (double x : t.to_vector<double>()) ASSERT_FALSE(std::isnan(x));
  }
}

TEST(AttentionMask, OldSignatureAndErrors) {
  Generator gen(46);
  const Tensor q = randn({1, 2, 4, 8}, DType::f64, &gen), k = randn({1, 2, 4, 8}, DType::f64, &gen),
               v = randn({1, 2, 4, 8}, DType::f64, &gen);
  EXPECT_TRUE(all_close(scaled_dot_product_attention(q, k, v, true),
                        scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true), 0, 0));
  const Tensor bmask = ones({4, 4}, DType::b8);
  EXPECT_NE(message_of<ValueError>([&] { scaled_dot_product_attention(q, k, v, bmask, 0.0, true); })
                .find("[scaled_dot_product_attention] attn_mask and is_causal"),
            std::string::npos);
  EXPECT_NE(message_of<ShapeError>([&] {
              scaled_dot_product_attention(q, k, v, ones({3, 4}, DType::b8));
            }).find("does not broadcast to [1, 2, 4, 4]"),
            std::string::npos);
  EXPECT_NE(message_of<DTypeError>([&] {
              scaled_dot_product_attention(q, k, v, ones({4, 4}, DType::i64));
            }).find("[scaled_dot_product_attention] attn_mask must be bool"),
            std::string::npos);
  EXPECT_NE(message_of<DTypeError>([&] {
              scaled_dot_product_attention(q.to(DType::f32), k.to(DType::f32), v.to(DType::f32),
                                           zeros({4, 4}, DType::f64));
            }).find("attn_mask must be bool"),
            std::string::npos);
  EXPECT_NE(message_of<ValueError>([&] { scaled_dot_product_attention(q, k, v, bmask, 1.0); })
                .find("dropout_p must be in [0, 1)"),
            std::string::npos);
  // A floating mask that requires grad: the forward runs, its gradient is refused clearly.
  const Tensor fm = zeros({4, 4}, DType::f64).requires_grad_(true);
  const Tensor out = scaled_dot_product_attention(q, k, v, fm);
  EXPECT_NE(message_of<NotImplementedError>([&] { out.sum().backward(); })
                .find("gradient of a floating attn_mask is not implemented"),
            std::string::npos);
}

// ---- CUDA

// No element of `t` (any device) is NaN.
bool no_nan(const Tensor& t) {
  for (double x : t.to_vector<double>())
    if (std::isnan(x)) return false;
  return true;
}

// How many times the tensor-core path opened its profiler range while `fn` ran.
template <class F>
int64_t flash_ranges(F&& fn) {
  profiler::Profiler prof({.with_cuda = false});
  prof.start();
  fn();
  prof.stop();
  int64_t n = 0;
  for (const profiler::Event& e : prof.events())
    n += e.name == "flash_attention_fwd" || e.name == "flash_attention_bwd";
  return n;
}

// bf16, D = 64, aligned: the tensor-core path's case. It takes masks (bool, and floating ones
// after the front's conversion to f32), never dropout: the Philox draws of Note [attention
// masks and dropout] live in the generic kernels only, and the tensor-core kernels must not
// run and ignore them.
TEST(AttentionMaskCuda, MasksTakeTheTensorCorePathDropoutDoesNot) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator gen(47);
  const Device dev = Device::cuda(0);
  const int64_t B = 2, H = 2, T = 128, D = 64;
  const Tensor q = randn({B, H, T, D}, DType::f64, &gen).to(dev, DType::bf16);
  const Tensor k = randn({B, H, T, D}, DType::f64, &gen).to(dev, DType::bf16);
  const Tensor v = randn({B, H, T, D}, DType::f64, &gen).to(dev, DType::bf16);
  const Tensor g = randn({B, H, T, D}, DType::f64, &gen).to(dev, DType::bf16);
  auto fwd_bwd = [&](const ops::AttentionExtras& ex) {
    ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, ex, false);
    ops::scaled_dot_product_attention_backward(g, q, k, v, f.out, f.lse, ex, false);
    return f.out;
  };
  EXPECT_EQ(flash_ranges([&] { fwd_bwd({}); }), 2);
  const Tensor kp = ones({B, 1, 1, T}, TensorOptions(DType::b8).device(dev));
  const Tensor fm = randn({T, T}, DType::f64, &gen).to(dev, DType::bf16);
  EXPECT_EQ(flash_ranges([&] { fwd_bwd({.attn_mask = kp, .dropout_p = 0.0, .rng = {}}); }), 2);
  EXPECT_EQ(flash_ranges([&] { fwd_bwd({.attn_mask = fm, .dropout_p = 0.0, .rng = {}}); }), 2);
  EXPECT_EQ(flash_ranges([&] { fwd_bwd({.attn_mask = Tensor(), .dropout_p = 0.1, .rng = {1, 0}}); }), 0);
  EXPECT_EQ(flash_ranges([&] { fwd_bwd({.attn_mask = kp, .dropout_p = 0.1, .rng = {1, 0}}); }), 0);
}

// The tensor-core kernels with masks against the CPU in f64 on the same rounded values, within
// the FlashAttention error budgets of tests/support/attention_check.h: every form of masks_for
// (bool and floating, key padding, transposed, expanded) and a bool mask hiding row 1
// entirely and row 3's whole first 64-key tile (the forward's "nothing visible yet" guard;
// lse +inf and zero gradients on row 1), with Tq = 70 and Tk = 90: partial tiles on both
// sides, two key tiles.
TEST(AttentionMaskCuda, TensorCorePathMatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator gen(51);
  const Device dev = Device::cuda(0);
  const int64_t B = 2, H = 2, Tq = 70, Tk = 90;
  std::vector<MaskCase> cases = masks_for(B, H, Tq, Tk, gen);
  std::vector<double> keepv(size_t(Tq * Tk));
  const std::vector<double> coin = rand({Tq * Tk}, DType::f64, &gen).to_vector<double>();
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) {
      const size_t e = size_t(i * Tk + j);
      keepv[e] = i == 1 ? 0 : i == 3 ? (j >= 64 && coin[e] > 0.3) || j == 89 : (j == 0 || coin[e] > 0.5);
    }
  cases.push_back({"bool [Tq,Tk] hiding row 1 and row 3's first tile", tensor<double>(keepv, {Tq, Tk}).gt(0.5)});
  for (DType dt : {DType::bf16, DType::f16})
    for (int64_t D : {64, 128})
      for (const MaskCase& m : cases) {
        // The mask code is the same for both dtypes (only the 16-bit packing differs, which
        // the unmasked flash tests cover): the simulation runs bf16 only.
        if (cuda::is_simulated() && dt == DType::f16) continue;
        SCOPED_TRACE(str(dtype_name(dt), " D ", D, " ", m.name));
        // The rounded inputs in f64 on the CPU; the mask as the kernels read it (bool, or the
        // floating mask in f32, the front's conversion), the same values on both sides.
        const Tensor q = heads({B, H, Tq, D}, gen).to(dt).to(DType::f64);
        const Tensor k = heads({B, H, Tk, D}, gen).to(dt).to(DType::f64);
        const Tensor v = heads({B, H, Tk, D}, gen).to(dt).to(DType::f64);
        const Tensor g = heads({B, H, Tq, D}, gen).to(dt).to(DType::f64);
        const Tensor mask = m.mask.dtype() == DType::b8 ? m.mask : m.mask.to(DType::f32);
        const ops::AttentionExtras cpu{mask.dtype() == DType::b8 ? mask : mask.to(DType::f64), 0.0, {}};
        const ops::AttentionForward rf = ops::scaled_dot_product_attention_forward(q, k, v, cpu, false);
        const ops::AttentionBackward rb =
            ops::scaled_dot_product_attention_backward(g, q, k, v, rf.out, rf.lse, cpu, false);

        const ops::AttentionExtras gpu{mask.to(dev), 0.0, {}};
        const Tensor qd = q.to(dev, dt), kd = k.to(dev, dt), vd = v.to(dev, dt), gd = g.to(dev, dt);
        ops::AttentionForward gf;
        ops::AttentionBackward gb;
        EXPECT_EQ(flash_ranges([&] {
                    gf = ops::scaled_dot_product_attention_forward(qd, kd, vd, gpu, false);
                    gb = ops::scaled_dot_product_attention_backward(gd, qd, kd, vd, gf.out, gf.lse, gpu, false);
                  }),
                  2);
        const double budget = attention_budget(dt, std::max({Tq, Tk, D}));
        EXPECT_TRUE(within_budget(gf.out, rf.out, budget)) << "out";
        // lse: +inf exactly on the hidden rows, within its budget elsewhere.
        const Tensor hidden = rf.lse.isinf();
        const Tensor glse = gf.lse.to(Device::cpu(), DType::f64);
        EXPECT_TRUE(all_close(where(hidden, glse, kInf), full_like(glse, kInf), 0, 0)) << "lse of hidden rows";
        EXPECT_TRUE(within_budget(where(hidden, 0.0, glse), where(hidden, 0.0, rf.lse),
                                  attention_lse_budget(std::max({Tq, Tk, D}))))
            << "lse";
        const double bwd = budget + unit_roundoff(dt);
        const AttentionTermScales terms = attention_term_scales(q, k, v, g, false, cpu.attn_mask);
        EXPECT_TRUE(within_budget(gb.dq, rb.dq, bwd, std::sqrt(double(D)), terms.dq)) << "dq";
        EXPECT_TRUE(within_budget(gb.dk, rb.dk, bwd, std::sqrt(double(D)), terms.dk)) << "dk";
        EXPECT_TRUE(within_budget(gb.dv, rb.dv, bwd)) << "dv";
        EXPECT_TRUE(no_nan(gf.out) && no_nan(gb.dq) && no_nan(gb.dk) && no_nan(gb.dv)) << "NaN in a result";
      }
}

// The generic CUDA kernels with masks (every form) and dropout against the CPU on the same
// values and the same generator state (both devices draw the same mask).
TEST(AttentionMaskCuda, MatchesCpu) {
  EMBER_SKIP_WITHOUT_CUDA();
  Generator gen(48);
  const Device dev = Device::cuda(0);
  const int64_t B = 2, H = 2, Tq = 70, Tk = 67, D = 32;
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor q = heads({B, H, Tq, D}, gen).to(dt), k = heads({B, H, Tk, D}, gen).to(dt),
                 v = heads({B, H, Tk, D}, gen).to(dt), g = heads({B, H, Tq, D}, gen).to(dt);
    std::vector<MaskCase> cases = masks_for(B, H, Tq, Tk, gen);
    cases.push_back({"none (dropout only)", Tensor()});
    for (const MaskCase& m : cases) {
      for (double p : {0.0, 0.2}) {
        if (!m.mask.defined() && p == 0) continue;
        SCOPED_TRACE(str(dtype_name(dt), " ", m.name, " p ", p));
        Tensor mask = m.mask;
        if (mask.defined() && mask.dtype() != DType::b8 && dt != DType::f64) mask = mask.to(DType::f32);
        const ops::AttentionExtras cpu{mask, p, {7, 11}};
        const ops::AttentionExtras gpu{mask.defined() ? mask.to(dev) : Tensor(), p, {7, 11}};
        const ops::AttentionForward rf = ops::scaled_dot_product_attention_forward(q, k, v, cpu, false);
        const ops::AttentionBackward rb =
            ops::scaled_dot_product_attention_backward(g, q, k, v, rf.out, rf.lse, cpu, false);
        const Tensor qd = q.to(dev), kd = k.to(dev), vd = v.to(dev), gd = g.to(dev);
        const ops::AttentionForward cf = ops::scaled_dot_product_attention_forward(qd, kd, vd, gpu, false);
        const ops::AttentionBackward cb =
            ops::scaled_dot_product_attention_backward(gd, qd, kd, vd, cf.out, cf.lse, gpu, false);
        const double rtol = cuda_rtol(dt) * 4;
        EXPECT_TRUE(close_to_cpu(cf.out, rf.out, rtol)) << "out";
        EXPECT_TRUE(close_to_cpu(cb.dq, rb.dq, rtol)) << "dq";
        EXPECT_TRUE(close_to_cpu(cb.dk, rb.dk, rtol)) << "dk";
        EXPECT_TRUE(close_to_cpu(cb.dv, rb.dv, rtol)) << "dv";
      }
    }
  }
}

// A fully masked row on CUDA: zeros and zero gradients, as on the CPU.
TEST(AttentionMaskCuda, FullyMaskedRow) {
  EMBER_SKIP_WITHOUT_CUDA();
  const Device dev = Device::cuda(0);
  Generator gen(49);
  const Tensor q = randn({1, 1, 2, 8}, DType::f32, &gen).to(dev);
  const Tensor k = randn({1, 1, 3, 8}, DType::f32, &gen).to(dev);
  const Tensor v = randn({1, 1, 3, 8}, DType::f32, &gen).to(dev);
  const Tensor mask = tensor<double>({1, 1, 0, 0, 0, 0}, {2, 3}).gt(0.5).to(dev);
  const ops::AttentionExtras ex{mask, 0.0, {}};
  const ops::AttentionForward f = ops::scaled_dot_product_attention_forward(q, k, v, ex, false);
  const ops::AttentionBackward b = ops::scaled_dot_product_attention_backward(
      ones_like(q), q, k, v, f.out, f.lse, ex, false);
  EXPECT_TRUE(all_close(f.out.select(2, 1), zeros({1, 1, 8}), 0, 0));
  EXPECT_TRUE(all_close(b.dq.select(2, 1), zeros({1, 1, 8}), 0, 0));
  // The visible row is ordinary attention over keys 0 and 1.
  const Tensor ref = scaled_dot_product_attention(q.to(Device::cpu()).narrow(2, 0, 1),
                                                  k.to(Device::cpu()).narrow(2, 0, 2),
                                                  v.to(Device::cpu()).narrow(2, 0, 2));
  EXPECT_TRUE(all_close(f.out.narrow(2, 0, 1), ref, 1e-5, 1e-6));

  // Against the CPU, over more than one key tile (Tk = 40 > 32 lanes): row 1 hides every key,
  // row 3 every key of the first tile (the forward's "nothing visible yet" branch), the
  // others a random half (key 0 kept); bool and -inf float masks, with and without dropout.
  // lse must be +inf on row 1 and nothing anywhere NaN, forward or backward.
  const int64_t B = 2, H = 2, Tq = 5, Tk = 40, D = 16;
  std::vector<double> keepv(size_t(Tq * Tk));
  const std::vector<double> coin = rand({Tq * Tk}, DType::f64, &gen).to_vector<double>();
  for (int64_t i = 0; i < Tq; ++i)
    for (int64_t j = 0; j < Tk; ++j) {
      const size_t e = size_t(i * Tk + j);
      keepv[e] = i == 1 ? 0 : i == 3 ? (j >= 32) : (j == 0 || coin[e] > 0.5);
    }
  const Tensor keep = tensor<double>(keepv, {Tq, Tk}).gt(0.5);
  const Tensor ninf = where(keep, zeros({Tq, Tk}, DType::f64), -kInf);
  for (DType dt : {DType::f32, DType::bf16, DType::f64}) {
    const Tensor qc = heads({B, H, Tq, D}, gen).to(dt), kc = heads({B, H, Tk, D}, gen).to(dt),
                 vc = heads({B, H, Tk, D}, gen).to(dt), gc = heads({B, H, Tq, D}, gen).to(dt);
    for (const Tensor& mk : {keep, ninf.to(dt == DType::f64 ? DType::f64 : DType::f32)})
      for (double p : {0.0, 0.3}) {
        SCOPED_TRACE(str(dtype_name(dt), mk.dtype() == DType::b8 ? " bool" : " float", " p ", p));
        const ops::AttentionExtras cpu{mk, p, {5, 3}}, gpu{mk.to(dev), p, {5, 3}};
        const ops::AttentionForward rf = ops::scaled_dot_product_attention_forward(qc, kc, vc, cpu, false);
        const ops::AttentionBackward rb =
            ops::scaled_dot_product_attention_backward(gc, qc, kc, vc, rf.out, rf.lse, cpu, false);
        const Tensor qd = qc.to(dev), kd = kc.to(dev), vd = vc.to(dev), gd = gc.to(dev);
        const ops::AttentionForward cf = ops::scaled_dot_product_attention_forward(qd, kd, vd, gpu, false);
        const ops::AttentionBackward cb =
            ops::scaled_dot_product_attention_backward(gd, qd, kd, vd, cf.out, cf.lse, gpu, false);
        for (double l : cf.lse.select(2, 1).to_vector<double>()) EXPECT_EQ(l, kInf);
        EXPECT_TRUE(all_close(cf.out.select(2, 1), zeros({B, H, D}, DType::f64), 0, 0));
        EXPECT_TRUE(no_nan(cf.out) && no_nan(cf.lse) && no_nan(cb.dq) && no_nan(cb.dk) && no_nan(cb.dv));
        const double rtol = cuda_rtol(dt) * 4;
        EXPECT_TRUE(close_to_cpu(cf.out, rf.out, rtol)) << "out";
        EXPECT_TRUE(close_to_cpu(cf.lse, rf.lse, rtol)) << "lse";
        EXPECT_TRUE(close_to_cpu(cb.dq, rb.dq, rtol)) << "dq";
        EXPECT_TRUE(close_to_cpu(cb.dk, rb.dk, rtol)) << "dk";
        EXPECT_TRUE(close_to_cpu(cb.dv, rb.dv, rtol)) << "dv";
      }
  }
}

}  // namespace
}  // namespace ember::test
